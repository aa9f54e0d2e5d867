// NodeReporter's thread against the stand-in API server (FakeApiServer:
// the real HTTPS, token and strategic-merge patch of a Node's status, Events
// created in "default"): the condition patched only when it changes, a
// restart that patches nothing already right, a condition changed by someone
// else set back, failed calls retried, and the Events' rate limit. Every
// wait is for a condition.
#include <gtest/gtest.h>

#include <chrono>

#include "kubernetes/fake_apiserver.h"
#include "kubernetes/node_reporter.h"
#include "support/metrics_util.h"
#include "support/test_util.h"

namespace xpu::kubernetes {
namespace {

using Json = nlohmann::json;
using xpu::testing::MetricValue;
using xpu::testing::WaitFor;

store::ActiveFault Fault(const std::string& code, int level, const std::string& level_name) {
  store::ActiveFault f;
  f.code = code;
  f.name = "n" + code;
  f.level = level;
  f.level_name = level_name;
  return f;
}

class NodeReporterLiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(api_.url().empty()) << xpu::testing::ReadFile(dir_.File("api.err"));
    api_.Control("POST", "node", R"({"metadata":{"name":"node-a","uid":"u-1"}})");
    std::vector<store::DeviceInfo> devices(2);
    devices[0].minor = 0;
    devices[1].minor = 1;
    devices[1].bus_id = "0000:3b:00.0";
    registry_.SetXdmDevices(devices);
    SetFaults({});
    k_.node_name = "node-a";
    k_.token_file = dir_.File("token");
    k_.ca_file = dir_.File("ca.crt");
    k_.node_interval = std::chrono::milliseconds(100);
    o_.condition = o_.events = true;
    o_.sources.hal = true;
    o_.event_burst = 5;
    o_.event_refill = std::chrono::hours(1);  // no refill within the test
  }
  void SetFaults(std::vector<store::ActiveFault> on_1) {
    std::vector<store::HalDeviceView> hal(2);
    hal[0].minor = 0;
    hal[1].minor = 1;
    hal[1].faults = std::move(on_1);
    registry_.SetHalDevices(hal);
  }
  void Raise(const store::ActiveFault& f) {
    registry_.raises().Add({"hal", "1", "U1", "0000:3b:00.0", f, std::chrono::system_clock::now()});
  }
  std::unique_ptr<NodeReporter> Make() {
    return std::make_unique<NodeReporter>(k_, o_, api_.url(), &registry_, &metrics_);
  }
  Json Patches() { return api_.Recorded("patches"); }
  Json Events() { return api_.Recorded("events"); }
  size_t NodeReads() {
    size_t n = 0;
    for (const Json& p : api_.Recorded("requests")) n += p == "/api/v1/nodes/node-a";
    return n;
  }
  Json Condition(const Json& patch) { return patch["status"]["conditions"][0]; }
  double Metric(const std::string& name, const std::string& result = "") {
    if (result.empty()) return MetricValue(metrics_, name);
    return MetricValue(metrics_, name, {{"result", result}});
  }

  xpu::testing::TempDir dir_;
  FakeApiServer api_{dir_};
  store::DeviceRegistry registry_;
  prometheus::Registry metrics_;
  KubernetesOptions k_;
  NodeReporter::Options o_;
};

TEST_F(NodeReporterLiveTest, PatchesTheConditionOnlyWhenItChanges) {
  auto reporter = Make();
  reporter->Start();
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(Condition(Patches()[0])["status"], "True");
  EXPECT_EQ(Condition(Patches()[0])["type"], "XpuDevicesHealthy");
  EXPECT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_node_condition_synced") == 1; }));
  // Reads of the Node go on; with nothing changed, no patch.
  const size_t reads = NodeReads();
  ASSERT_TRUE(WaitFor([&] { return NodeReads() >= reads + 3; }, std::chrono::seconds(10)));
  EXPECT_EQ(Patches().size(), 1u);

  SetFaults({Fault("0x80CB8001", 6, "isolate_card"), Fault("0x80E01801", 2, "restart_job")});
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 2; }, std::chrono::seconds(10)));
  Json c = Condition(Patches()[1]);
  EXPECT_EQ(c["status"], "False");
  EXPECT_EQ(c["reason"], "IsolateCard");
  EXPECT_EQ(c["message"],
            "1 device(s) need card-level action: xpu 1 (0000:3b:00.0): 0x80CB8001 n0x80CB8001 "
            "[isolate_card, hal]");
  // A lesser fault going away changes nothing the condition says: no patch.
  SetFaults({Fault("0x80CB8001", 6, "isolate_card")});
  const size_t reads2 = NodeReads();
  ASSERT_TRUE(WaitFor([&] { return NodeReads() >= reads2 + 3; }, std::chrono::seconds(10)));
  EXPECT_EQ(Patches().size(), 2u);

  // A restart finds the Node right and patches nothing.
  reporter->Stop();
  reporter = Make();
  reporter->Start();
  const size_t reads3 = NodeReads();
  ASSERT_TRUE(WaitFor([&] { return NodeReads() >= reads3 + 3; }, std::chrono::seconds(10)));
  EXPECT_EQ(Patches().size(), 2u);

  // Someone else sets it True: set back, as a new transition.
  api_.Control("POST", "node",
               R"({"metadata":{"name":"node-a","uid":"u-1"},"status":{"conditions":[
                   {"type":"XpuDevicesHealthy","status":"True","reason":"Manual",
                    "message":"set by hand","lastTransitionTime":"2026-01-01T00:00:00Z"}]}})");
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 3; }, std::chrono::seconds(10)));
  EXPECT_EQ(Condition(Patches()[2])["status"], "False");
  EXPECT_EQ(Condition(Patches()[2])["message"], c["message"]);
  EXPECT_NE(Condition(Patches()[2])["lastTransitionTime"], "2026-01-01T00:00:00Z");

  // A refused patch is counted and retried; the condition is out of sync
  // until it is taken.
  api_.Control("POST", "auth", R"({"status":403,"methods":["PATCH"]})");
  SetFaults({});
  ASSERT_TRUE(
      WaitFor([&] { return Metric("xpu_kubernetes_node_condition_patches_total", "error") >= 1; },
              std::chrono::seconds(10)));
  EXPECT_EQ(Metric("xpu_kubernetes_node_condition_synced"), 0);
  api_.Control("POST", "auth", R"({"status":200})");
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 4; }, std::chrono::seconds(40)));
  EXPECT_EQ(Condition(Patches()[3])["status"], "True");
  EXPECT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_node_condition_synced") == 1; }));
  EXPECT_EQ(Metric("xpu_kubernetes_node_condition_patches_total", "ok"), 4);

  const auto t0 = std::chrono::steady_clock::now();
  reporter->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// Until every backend that runs has published once, the condition waits:
// a kernel log still being read must not make the Node look healthy.
TEST_F(NodeReporterLiveTest, TheConditionWaitsForTheBackendsToSpeak) {
  o_.sources.kmsg = true;
  o_.settle_limit = std::chrono::hours(1);
  auto reporter = Make();
  reporter->Start();
  const size_t reads = NodeReads();
  ASSERT_TRUE(WaitFor([&] { return NodeReads() >= reads + 3; }, std::chrono::seconds(10)));
  EXPECT_EQ(Patches().size(), 0u);
  std::vector<store::KmsgDeviceView> kmsg(1);
  kmsg[0].minor = 1;
  kmsg[0].bus_id = "0000:3b:00.0";
  kmsg[0].faults = {Fault("0x10DE004F", 6, "isolate_card")};
  registry_.SetKmsgDevices(kmsg);  // one view might have been built before XDM's list came
  ASSERT_TRUE(WaitFor([&] { return NodeReads() >= reads + 6; }, std::chrono::seconds(10)));
  EXPECT_EQ(Patches().size(), 0u);
  registry_.SetKmsgDevices(kmsg);
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(Condition(Patches()[0])["status"], "False");
  EXPECT_NE(Condition(Patches()[0])["message"].get<std::string>().find("[isolate_card, kmsg]"),
            std::string::npos);
  reporter->Stop();
}

TEST_F(NodeReporterLiveTest, PostsOneEventPerCardRaiseRetriedAndRateLimited) {
  o_.condition = false;
  auto reporter = Make();
  Raise(Fault("0x80CB8001", 6, "isolate_card"));  // before Start: not this reporter's
  reporter->SeedCursor(registry_.raises().end());
  reporter->Start();
  Raise(Fault("0x80E18400", 4, "reset_card"));
  Raise(Fault("0x80E01801", 2, "restart_job"));  // below restart_card: no Event
  ASSERT_TRUE(WaitFor([&] { return Events().size() == 1; }, std::chrono::seconds(10)));
  Json e = Events()[0];
  EXPECT_EQ(e["reason"], "ResetCard");
  EXPECT_EQ(e["involvedObject"]["uid"], "u-1");  // read from the Node
  EXPECT_EQ(e["involvedObject"]["name"], "node-a");
  EXPECT_NE(e["message"].get<std::string>().find("0x80E18400"), std::string::npos);
  EXPECT_EQ(Patches().size(), 0u) << "the condition was not asked for";

  // Refused for a while: retried, then sent.
  api_.Control("POST", "auth", R"({"status":403,"methods":["POST"]})");
  Raise(Fault("0x80E18400", 4, "reset_card"));
  ASSERT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_events_total", "error") >= 1; },
                      std::chrono::seconds(10)));
  api_.Control("POST", "auth", R"({"status":200})");
  ASSERT_TRUE(WaitFor([&] { return Events().size() == 2; }, std::chrono::seconds(40)));

  // A storm: the burst's rest (5 - 2) goes out, the others are counted.
  for (int i = 0; i < 6; ++i) Raise(Fault("0x80E18400", 4, "reset_card"));
  ASSERT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_events_total", "suppressed") == 3; },
                      std::chrono::seconds(10)));
  ASSERT_TRUE(WaitFor([&] { return Events().size() == 5; }, std::chrono::seconds(10)));
  EXPECT_EQ(Metric("xpu_kubernetes_events_total", "sent"), 5);
  EXPECT_EQ(Metric("xpu_kubernetes_events_total", "dropped"), 0);
  reporter->Stop();
}

}  // namespace
}  // namespace xpu::kubernetes
