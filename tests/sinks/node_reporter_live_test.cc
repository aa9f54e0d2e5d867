// NodeReporter's thread against the stand-in API server (FakeApiServer:
// the real HTTPS, token and strategic-merge patch of a Node's status, Events
// created in "default"): the condition patched only when it changes, a
// restart that patches nothing already right, a condition changed by someone
// else set back, failed calls retried, and the Events' rate limit. Every
// wait is for a condition.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "kubernetes/fake_apiserver.h"
#include "sinks/node_reporter.h"
#include "store/device_registry.h"
#include "support/metrics_util.h"
#include "support/test_util.h"

namespace xpu::sinks {
namespace {

using Json = nlohmann::json;
using kubernetes::FakeApiServer;
using kubernetes::KubernetesOptions;
using xpu::testing::MetricValue;
using xpu::testing::WaitFor;

store::ActiveFault NamedFault(const std::string& code, int level, const std::string& level_name) {
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
    // The cards Raise() names beside them (raises are told for cards of the
    // inventory only).
    for (int32_t minor : {2, 10, 11, 12, 13, 14, 15}) {
      devices.emplace_back();
      devices.back().minor = minor;
      devices.back().bus_id = BusOf(std::to_string(minor));
    }
    registry_.SetXdmDevices(devices);
    // No sampler republishes here: views stay fresh for the test's length.
    registry_.OpenSource(store::kSourceSysfs, std::chrono::hours(1));
    SetFaults({});
    k_.node_name = "node-a";
    k_.token_file = dir_.File("token");
    k_.ca_file = dir_.File("ca.crt");
    k_.node_interval = std::chrono::milliseconds(100);
    o_.condition = o_.events = true;
    o_.sources = {"sysfs"};
    o_.event_burst = 5;
    o_.event_refill = std::chrono::hours(1);  // no refill within the test
    o_.recover_hold = std::chrono::seconds(1);
    // Rounds of 0.2 s, not 1 s (node_interval stays shorter: each round
    // reads the Node), and refused calls retried after 0.1 s, 0.2 s, ...,
    // not 1 s, 2 s, ...: the schedule is Backoff's (its own test); here only
    // that a refused call is retried.
    o_.tick = std::chrono::milliseconds(200);
    o_.retry_first = std::chrono::milliseconds(100);
  }
  // The sysfs view, as its sampler publishes it (a reporter waits for one
  // published after it started): every card XDM lists (a card no source
  // covers is Unknown), the faults on xpu 1.
  void SetFaults(std::vector<store::ActiveFault> on_1) {
    on_1_ = std::move(on_1);
    Publish();
  }
  void Publish() {
    store::DeviceViews sysfs;
    for (int32_t minor : {0, 1, 2, 10, 11, 12, 13, 14, 15}) {
      sysfs.devices.emplace_back();
      sysfs.devices.back().minor = minor;
      sysfs.devices.back().healthy = true;
    }
    sysfs.devices[1].faults = on_1_;
    registry_.SetDeviceViews(store::kSourceSysfs, sysfs);
  }
  std::vector<store::ActiveFault> on_1_;
  static std::string BusOf(const std::string& minor) {
    if (minor == "1") return "0000:3b:00.0";
    char bus[16];
    std::snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x50 + std::stoi(minor));
    return bus;
  }
  void Raise(const store::ActiveFault& f, const std::string& minor = "1") {
    registry_.raises().Add(
        {"sysfs", minor, "U" + minor, BusOf(minor), f, std::chrono::system_clock::now()});
  }
  std::unique_ptr<NodeReporter> Make() {
    return std::make_unique<NodeReporter>(k_, o_, api_.url(), &registry_, metrics_now_);
  }
  Json Patches() { return api_.Recorded("patches"); }
  Json Events() { return api_.Recorded("events"); }
  size_t NodeReads() {  // one a round of the reporter (node_interval is shorter than a round)
    size_t n = 0;
    for (const Json& p : api_.Recorded("agents"))
      n += p[0] == "xpu-exporter/node-health" && p[1] == "/api/v1/nodes/node-a";
    return n;
  }
  // Rounds enough for a change held for recover_hold to have been patched:
  // a "no patch" seen after them is one a wrong hold could not hide.
  size_t HoldRounds() const { return static_cast<size_t>(o_.recover_hold / o_.tick) + 2; }
  Json Condition(const Json& patch) { return patch["status"]["conditions"][0]; }
  double Metric(const std::string& name, const std::string& result = "") {
    if (result.empty()) return MetricValue(*metrics_now_, name);
    return MetricValue(*metrics_now_, name, {{"result", result}});
  }

  xpu::testing::TempDir dir_;
  FakeApiServer api_{dir_};
  store::DeviceRegistry registry_;
  prometheus::Registry metrics_, restarted_;
  prometheus::Registry* metrics_now_ = &metrics_;  // the running reporter's
  KubernetesOptions k_;
  NodeReporter::Options o_;
};

TEST_F(NodeReporterLiveTest, PatchesTheConditionOnlyWhenItChanges) {
  auto reporter = Make();
  reporter->Start();
  Publish();
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(Condition(Patches()[0])["status"], "True");
  EXPECT_EQ(Condition(Patches()[0])["type"], "XpuDevicesHealthy");
  EXPECT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_node_condition_synced") == 1; }));
  // Reads of the Node go on; with nothing changed, no patch.
  const size_t reads = NodeReads();
  ASSERT_TRUE(
      WaitFor([&] { return NodeReads() >= reads + HoldRounds(); }, std::chrono::seconds(10)));
  EXPECT_EQ(Patches().size(), 1u);

  SetFaults(
      {NamedFault("0x80CB8001", 6, "isolate_card"), NamedFault("0x80E01801", 2, "restart_job")});
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 2; }, std::chrono::seconds(10)));
  Json c = Condition(Patches()[1]);
  EXPECT_EQ(c["status"], "False");
  EXPECT_EQ(c["reason"], "IsolateCard");
  EXPECT_EQ(c["message"],
            "1 device(s) need card-level action: xpu 1 (0000:3b:00.0): 0x80CB8001 n0x80CB8001 "
            "[isolate_card, sysfs]");
  // A lesser fault going away changes nothing the condition says: no patch.
  SetFaults({NamedFault("0x80CB8001", 6, "isolate_card")});
  const size_t reads2 = NodeReads();
  ASSERT_TRUE(
      WaitFor([&] { return NodeReads() >= reads2 + HoldRounds(); }, std::chrono::seconds(10)));
  EXPECT_EQ(Patches().size(), 2u);

  // A restart finds the Node right and patches nothing (once it has a
  // view: it looks, as the synced gauge says).
  reporter->Stop();
  metrics_now_ = &restarted_;  // its own metrics, as a new process has
  reporter = Make();
  reporter->Start();
  Publish();
  ASSERT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_node_condition_synced") == 1; },
                      std::chrono::seconds(10)));
  const size_t reads3 = NodeReads();
  ASSERT_TRUE(
      WaitFor([&] { return NodeReads() >= reads3 + HoldRounds(); }, std::chrono::seconds(10)));
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
  EXPECT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_node_condition_synced") == 0; }));
  api_.Control("POST", "auth", R"({"status":200})");
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 4; }, std::chrono::seconds(40)));
  EXPECT_EQ(Condition(Patches()[3])["status"], "True");
  EXPECT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_node_condition_synced") == 1; }));
  EXPECT_EQ(Metric("xpu_kubernetes_node_condition_patches_total", "ok"), 2);  // since the restart

  const auto t0 = std::chrono::steady_clock::now();
  reporter->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// The types of the conditions the Node carries now.
std::vector<std::string> ConditionTypes(const Json& node) {
  std::vector<std::string> types;
  if (node.contains("status") && node["status"].contains("conditions"))
    for (const Json& c : node["status"]["conditions"]) types.push_back(c.value("type", ""));
  return types;
}

// A reload that switches the condition off takes it off the Node, and no
// other condition: left there, a False condition would outlive the fault
// it told of, with no one to set it True again. Switched off whole
// (Withdraw), or only the condition while Events stay on (TakeOver).
TEST_F(NodeReporterLiveTest, SwitchedOffItsConditionIsTakenOffTheNode) {
  api_.Control("POST", "node",
               R"({"metadata":{"name":"node-a","uid":"u-1"},
                   "status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady",
                   "message":"ok","lastTransitionTime":"2026-01-01T00:00:00Z"}]}})");
  SetFaults({NamedFault("0x10DE004F", 6, "isolate_card")});
  for (const bool whole : {true, false}) {
    auto reporter = Make();
    reporter->Start();
    Publish();
    ASSERT_TRUE(WaitFor([&] { return ConditionTypes(api_.Recorded("node")).size() == 2; },
                        std::chrono::seconds(10)));
    reporter->Stop();
    if (whole) {
      reporter->Withdraw();
    } else {
      NodeReporter::Options events_only = o_;
      events_only.condition = false;
      auto next =
          std::make_unique<NodeReporter>(k_, events_only, api_.url(), &registry_, &restarted_);
      next->TakeOver(*reporter);
    }
    EXPECT_EQ(ConditionTypes(api_.Recorded("node")), std::vector<std::string>{"Ready"});
  }
  // An exporter that stops leaves it, for its restart.
  auto reporter = Make();
  reporter->Start();
  Publish();
  ASSERT_TRUE(WaitFor([&] { return ConditionTypes(api_.Recorded("node")).size() == 2; },
                      std::chrono::seconds(10)));
  reporter->Stop();
  EXPECT_EQ(ConditionTypes(api_.Recorded("node")).size(), 2u);
}

// A switched-off condition whose removal fails at first (a 503 from a
// server restarting, twice) is taken off the Node by a later try within the
// switch's budget. Before, one failed try left it there for good, with no
// one to keep it (only a "remove it by hand" in the log).
TEST_F(NodeReporterLiveTest, ASwitchedOffConditionsFailedRemovalIsTriedAgain) {
  SetFaults({NamedFault("0x10DE004F", 6, "isolate_card")});
  auto reporter = Make();
  reporter->Start();
  Publish();
  ASSERT_TRUE(WaitFor([&] { return ConditionTypes(api_.Recorded("node")).size() == 1; },
                      std::chrono::seconds(10)));
  reporter->Stop();
  api_.Control("POST", "fault",
               R"({"prefix": "/api/v1/nodes/", "method": "PATCH", "status": 503, "times": 2})");
  reporter->Withdraw();
  EXPECT_TRUE(ConditionTypes(api_.Recorded("node")).empty()) << api_.Recorded("node").dump();
}

// Until every backend that runs has published since the reporter started,
// the condition waits: a kernel log still being read must not make the Node
// look healthy. One view is enough: the registry joins each to the
// inventory as it is now (before the one lane, the kmsg view joined XDM's
// list itself and was waited for twice).
TEST_F(NodeReporterLiveTest, TheConditionWaitsForTheBackendsToSpeak) {
  o_.sources.insert("kmsg");
  o_.settle_limit = std::chrono::hours(1);
  store::DeviceInfo xdm;
  xdm.minor = 1;
  xdm.bus_id = "0000:3b:00.0";
  registry_.SetXdmDevices({xdm});
  registry_.OpenSource(store::kSourceKmsg, std::chrono::hours(1));
  store::DeviceViews kmsg;
  kmsg.coverage = store::Coverage::kAddressedSilent;
  kmsg.devices.resize(1);
  kmsg.devices[0].bus_id = "0000:3b:00.0";
  kmsg.devices[0].healthy = true;
  kmsg.devices[0].faults = {NamedFault("0x10DE004F", 6, "isolate_card")};
  registry_.SetDeviceViews(store::kSourceKmsg, kmsg);  // before the start: an old view
  auto reporter = Make();
  reporter->Start();
  Publish();
  const size_t reads = NodeReads();
  ASSERT_TRUE(WaitFor([&] { return NodeReads() >= reads + 3; }, std::chrono::seconds(10)));
  EXPECT_EQ(Patches().size(), 0u);
  registry_.SetDeviceViews(store::kSourceKmsg, kmsg);
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(Condition(Patches()[0])["status"], "False");
  EXPECT_NE(Condition(Patches()[0])["message"].get<std::string>().find(
                "xpu 1 (0000:3b:00.0): 0x10DE004F"),
            std::string::npos)
      << Condition(Patches()[0])["message"];
  reporter->Stop();
}

// A card XDM lists without an address while only the bus and the kernel log
// run: neither can cover it (the bus lists functions by address, the log's
// addresses name no card without one), so nothing says it is healthy; the
// condition said True over it. Named by an address the bus lists, it is
// covered, and True once that has held.
TEST_F(NodeReporterLiveTest, ACardNoRunningSourceCoversIsNotHealthy) {
  o_.sources = {"pci", "kmsg"};
  registry_.CloseSource(store::kSourceSysfs);
  registry_.OpenSource(store::kSourcePci, std::chrono::hours(1));
  registry_.OpenSource(store::kSourceKmsg, std::chrono::hours(1));
  std::vector<store::DeviceInfo> xdm = registry_.Devices();  // minor 0 has no address
  std::vector<store::PciDeviceView> bus;
  for (const store::DeviceInfo& d : xdm) {
    if (d.bus_id.empty()) continue;
    bus.emplace_back();
    bus.back().bus_id = d.bus_id;
    bus.back().vendor = "0x10de";
    bus.back().driver = "nvidia";
  }
  store::DeviceViews kmsg;
  kmsg.coverage = store::Coverage::kAddressedSilent;
  auto publish = [&] {
    registry_.SetPciDevices(bus);
    registry_.SetDeviceViews(store::kSourceKmsg, kmsg);
  };
  auto reporter = Make();
  reporter->Start();
  publish();
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 1; }, std::chrono::seconds(10)));
  const Json c = Condition(Patches()[0]);
  EXPECT_EQ(c["status"], "Unknown") << c;
  EXPECT_EQ(c["reason"], "DeviceNotCovered") << c;
  EXPECT_EQ(c["message"], "1 device(s) are covered by no health source that runs: xpu 0") << c;
  // Its address on the bus: covered.
  xdm[0].bus_id = "0000:3a:00.0";
  registry_.SetXdmDevices(xdm);
  bus.emplace_back();
  bus.back().bus_id = "0000:3a:00.0";
  bus.back().vendor = "0x10de";
  bus.back().driver = "nvidia";
  publish();
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 2; }, std::chrono::seconds(10)));
  EXPECT_EQ(Condition(Patches()[1])["status"], "True") << Condition(Patches()[1]);
  reporter->Stop();
}

// A source that publishes DeviceViews (the nvml backend) is waited for as the others are: until a
// view published after the reporter started; then its fault is the condition's.
TEST_F(NodeReporterLiveTest, TheConditionWaitsForADeviceViewsSourceToSpeak) {
  o_.sources.insert("nvml");
  o_.settle_limit = std::chrono::hours(1);
  registry_.OpenSource("nvml", std::chrono::hours(1));
  store::DeviceViews v;
  v.devices.resize(1);
  v.devices[0].uuid = "U1";
  v.devices[0].bus_id = "0000:3b:00.0";
  v.devices[0].healthy = true;
  v.devices[0].faults = {NamedFault("0xFC010001", 6, "isolate_card")};
  registry_.SetDeviceViews("nvml", v);  // before the start: an old view
  auto reporter = Make();
  reporter->Start();
  Publish();
  const size_t reads = NodeReads();
  ASSERT_TRUE(WaitFor([&] { return NodeReads() >= reads + 3; }, std::chrono::seconds(10)));
  EXPECT_EQ(Patches().size(), 0u);
  registry_.SetDeviceViews("nvml", v);
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(Condition(Patches()[0])["status"], "False");
  EXPECT_NE(Condition(Patches()[0])["message"].get<std::string>().find("[isolate_card, nvml]"),
            std::string::npos)
      << Condition(Patches()[0])["message"];
  reporter->Stop();
}

// A fault that comes and goes every round: False at once, then no patch
// until the Node has been healthy for recover_hold (seven rounds and a half:
// each healthy spell of the flapping lasts about one, and the flapping
// twenty, longer than the hold, so a hold that did not start again at each
// spell would show).
TEST_F(NodeReporterLiveTest, AFlappingFaultDoesNotPatchTheNodeOverAndOver) {
  o_.recover_hold = std::chrono::milliseconds(1500);
  const std::vector<store::ActiveFault> bad = {NamedFault("0x80E18400", 4, "reset_card")};
  SetFaults(bad);
  auto reporter = Make();
  reporter->Start();
  Publish();
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(Condition(Patches()[0])["status"], "False");
  // One change a round (a read of the Node starts each), for twenty rounds.
  for (int i = 0; i < 20; ++i) {
    const size_t reads = NodeReads();
    SetFaults(i % 2 == 0 ? std::vector<store::ActiveFault>{} : bad);
    ASSERT_TRUE(WaitFor([&] { return NodeReads() > reads; }, std::chrono::seconds(10)));
  }
  EXPECT_EQ(Patches().size(), 1u);
  // Healthy for good: True once it has held.
  SetFaults({});
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 2; }, std::chrono::seconds(20)));
  EXPECT_EQ(Condition(Patches()[1])["status"], "True");
  // Worse again: at once (within a round or two, well inside the hold).
  const size_t reads = NodeReads();
  SetFaults(bad);
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 3; }, std::chrono::seconds(10)));
  EXPECT_LE(NodeReads(), reads + 5) << "a worse condition waited for the hold";
  reporter->Stop();
}

// Views that keep changing, never back to what the Node says and never
// worse: patched once they have differed from the Node for the hold, not
// held for as long as they change.
TEST_F(NodeReporterLiveTest, AChangeThatKeepsChangingIsNotHeldForEver) {
  o_.recover_hold = std::chrono::seconds(1);  // five rounds
  SetFaults({NamedFault("0x80E18400", 4, "reset_card")});
  auto reporter = Make();
  reporter->Start();
  Publish();
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(Condition(Patches()[0])["reason"], "ResetCard");
  // True, then False for a lesser card fault, and again: neither is worse
  // than ResetCard, nor what the Node says.
  for (int i = 0; i < 30 && Patches().size() == 1; ++i) {
    const size_t reads = NodeReads();
    SetFaults(i % 2 == 0
                  ? std::vector<store::ActiveFault>{}
                  : std::vector<store::ActiveFault>{NamedFault("0x80E01802", 3, "restart_card")});
    ASSERT_TRUE(WaitFor([&] { return NodeReads() > reads; }, std::chrono::seconds(10)));
  }
  ASSERT_GE(Patches().size(), 2u) << "held for as long as the views changed";
  EXPECT_NE(Condition(Patches()[1])["reason"], "ResetCard");
  reporter->Stop();
}

// A read of the Node refused at start: no patch until one works (its copy,
// and the time it last changed, are not known before).
TEST_F(NodeReporterLiveTest, NoPatchBeforeTheNodeHasBeenRead) {
  api_.Control("POST", "node",
               R"json({"metadata":{"name":"node-a","uid":"u-1"},"status":{"conditions":[
                   {"type":"XpuDevicesHealthy","status":"True","reason":"NoCardFaults",
                    "message":"no active fault at restart_card or worse (sources: sysfs)",
                    "lastTransitionTime":"2026-01-01T00:00:00Z"}]}})json");
  api_.Control("POST", "auth", R"({"status":403,"methods":["GET"]})");
  auto reporter = Make();
  reporter->Start();
  Publish();
  const size_t reads = NodeReads();  // refused reads are recorded too
  ASSERT_TRUE(WaitFor([&] { return NodeReads() >= reads + 3; }, std::chrono::seconds(15)));
  EXPECT_EQ(Patches().size(), 0u);
  api_.Control("POST", "auth", R"({"status":200})");
  // The Node is right: synced, and still nothing patched.
  ASSERT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_node_condition_synced") == 1; },
                      std::chrono::seconds(40)));
  EXPECT_EQ(Patches().size(), 0u);
  reporter->Stop();
}

// A fault on the Node at a restart, the Node's reads refused for a while
// and the cards flapping meanwhile: the recovery hold counts from the first
// read that shows the Node's copy, not from when the views first differed
// from a copy nobody knew. Before, a flap while the Node could not be read
// never broke the hold, and True was patched at the first read that worked.
TEST_F(NodeReporterLiveTest, TheRecoveryHoldCountsFromTheFirstReadOfTheNode) {
  o_.recover_hold = std::chrono::milliseconds(1600);  // eight rounds
  api_.Control("POST", "node",
               R"json({"metadata":{"name":"node-a","uid":"u-1"},"status":{"conditions":[
                   {"type":"XpuDevicesHealthy","status":"False","reason":"ResetCard",
                    "message":"a card fault","lastTransitionTime":"2026-01-01T00:00:00Z"}]}})json");
  api_.Control("POST", "auth", R"({"status":403,"methods":["GET"]})");
  const std::vector<store::ActiveFault> bad = {NamedFault("0x80E18400", 4, "reset_card")};
  SetFaults({});
  auto reporter = Make();
  reporter->Start();
  Publish();
  // The cards flap while the Node cannot be read (its reads backing off),
  // for longer than the hold.
  for (int i = 0; i < 6; ++i) {
    const size_t reads = NodeReads();
    SetFaults(i % 2 == 0 ? bad : std::vector<store::ActiveFault>{});
    ASSERT_TRUE(WaitFor([&] { return NodeReads() > reads; }, std::chrono::seconds(10)));
  }
  SetFaults({});
  const size_t refused = NodeReads();
  api_.Control("POST", "auth", R"({"status":200})");
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 1; }, std::chrono::seconds(20)));
  EXPECT_EQ(Condition(Patches()[0])["status"], "True");
  EXPECT_GE(NodeReads(), refused + 6)
      << "True patched before the hold, counted from the first read";
  reporter->Stop();
}

// A patch the API server applied but whose answer was lost (a timeout, a
// proxy's 5xx): the retry keeps the transition time the applied one wrote.
// Before, the retry wrote the time of the retry, and the Node's
// lastTransitionTime moved with no change of status.
TEST_F(NodeReporterLiveTest, ARetriedPatchWhoseAnswerWasLostKeepsItsTransitionTime) {
  k_.node_interval = std::chrono::hours(1);  // the retry comes before the Node is read again
  api_.Control("POST", "fault",
               R"({"prefix": "/api/v1/nodes/", "method": "PATCH", "status": 504, "hang": 1.5,
                   "committed": true, "times": 1})");
  SetFaults({NamedFault("0x80E18400", 4, "reset_card")});
  auto reporter = Make();
  reporter->Start();
  Publish();
  ASSERT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_node_condition_synced") == 1; },
                      std::chrono::seconds(20)));
  const std::vector<Json> patches = Patches();
  ASSERT_GE(patches.size(), 1u);
  const std::string first = Condition(patches[0])["lastTransitionTime"];
  for (const Json& p : patches) {
    EXPECT_EQ(Condition(p)["status"], "False");
    EXPECT_EQ(Condition(p)["lastTransitionTime"], first) << "moved by a retry: " << p.dump();
  }
  reporter->Stop();
}

// A patch the API server throttles (429 with Retry-After, as API Priority
// and Fairness answers) is retried no sooner than the server said, and an
// Event post likewise: the backoff's 0.1 s would have asked again at once.
// Before, Retry-After was not read.
TEST_F(NodeReporterLiveTest, AThrottledCallIsRetriedWhenTheServerSaid) {
  api_.Control("POST", "fault",
               R"({"prefix": "/api/v1/nodes/", "method": "PATCH", "status": 429, "times": 1,
                   "headers": {"Retry-After": "2"}})");
  api_.Control("POST", "fault",
               R"({"prefix": "/api/v1/namespaces/default/events", "method": "POST",
                   "status": 429, "times": 1, "headers": {"Retry-After": "2"}})");
  SetFaults({NamedFault("0x80E18400", 4, "reset_card")});
  auto reporter = Make();
  reporter->Start();
  Publish();
  Raise(NamedFault("0x80E18400", 4, "reset_card"), "1");
  auto times = [&](const std::string& request) {
    std::vector<double> at;
    for (const Json& t : api_.Recorded("times"))
      if (t[1].get<std::string>().rfind(request, 0) == 0) at.push_back(t[0].get<double>());
    return at;
  };
  ASSERT_TRUE(WaitFor(
      [&] {
        return times("PATCH /api/v1/nodes/").size() >= 2 &&
               times("POST /api/v1/namespaces/default/events").size() >= 2;
      },
      std::chrono::seconds(20)));
  for (const std::string request :
       {"PATCH /api/v1/nodes/", "POST /api/v1/namespaces/default/events"}) {
    const std::vector<double> at = times(request);
    EXPECT_GE(at[1] - at[0], 1.9) << request << ": asked again before the server's Retry-After";
  }
  ASSERT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_node_condition_synced") == 1; },
                      std::chrono::seconds(10)));
  reporter->Stop();
}

// An Event post that hangs (the Events endpoint throttled while the Node's
// answers) does not hold a worse condition back for the post's whole
// timeout: a post is given what is left of the round's budget for Events.
// Before, each post could take 30 s while the worse patch waited behind it.
TEST_F(NodeReporterLiveTest, AWorseConditionDoesNotWaitForAnEventPostThatHangs) {
  api_.Control("POST", "fault",
               R"({"prefix": "/api/v1/namespaces/default/events", "method": "POST",
                   "hang": 25, "status": 500, "times": 3})");
  SetFaults({NamedFault("0x80E01802", 3, "restart_card")});
  auto reporter = Make();
  reporter->Start();
  Publish();
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 1; }, std::chrono::seconds(10)));
  Raise(NamedFault("0x80E01802", 3, "restart_card"), "1");
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const Json& r : api_.Recorded("requests"))
          if (r == "POST /api/v1/namespaces/default/events") return true;
        return false;
      },
      std::chrono::seconds(10)));
  SetFaults({NamedFault("0x80E18400", 4, "reset_card")});
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 2; }, std::chrono::seconds(15)))
      << "the worse condition waited for the post that hangs";
  EXPECT_EQ(Condition(Patches()[1])["reason"], "ResetCard");
  reporter->Stop();
}

// The Node can be patched but never read (RBAC without get, a Node that
// does not parse): once reads are given up on, a fault is patched, and so is
// its recovery once it has held. (A hold that counted only from a read of
// the Node would have kept the Node False for good.)
TEST_F(NodeReporterLiveTest, ARecoveryIsPatchedWhenTheNodeIsNeverRead) {
  o_.settle_limit = std::chrono::seconds(1);
  api_.Control("POST", "auth", R"({"status":403,"methods":["GET"]})");
  SetFaults({NamedFault("0x80E18400", 4, "reset_card")});
  auto reporter = Make();
  reporter->Start();
  Publish();
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 1; }, std::chrono::seconds(20)));
  EXPECT_EQ(Condition(Patches()[0])["status"], "False");
  SetFaults({});
  ASSERT_TRUE(WaitFor([&] { return Patches().size() == 2; }, std::chrono::seconds(20)))
      << "the recovery was never patched";
  EXPECT_EQ(Condition(Patches()[1])["status"], "True");
  reporter->Stop();
}

// A card no layer names yet gets its Event all the same, named by its
// address; the same raise once the daemon names it (minor 3) is the same
// card's repeat: no second Event.
TEST_F(NodeReporterLiveTest, ACardNamedLateIsOneCardForItsEvents) {
  o_.condition = false;
  // The card only the bus shows (no daemon names it yet).
  registry_.OpenSource(store::kSourcePci, std::chrono::hours(1));
  store::PciDeviceView card;
  card.bus_id = "0000:99:00.0";
  registry_.SetPciDevices({card});
  auto reporter = Make();
  reporter->Start();
  const store::ActiveFault xid79 = NamedFault("0x10DE004F", 6, "isolate_card");
  registry_.raises().Add({"kmsg", "", "", "0000:99:00.0", xid79, std::chrono::system_clock::now()});
  ASSERT_TRUE(WaitFor([&] { return Events().size() == 1; }, std::chrono::seconds(10)));
  EXPECT_NE(Events()[0]["message"].get<std::string>().find("PCI device 0000:99:00.0: 0x10DE004F"),
            std::string::npos)
      << Events()[0]["message"];
  store::DeviceInfo named;
  named.minor = 3;
  named.uuid = "U3";
  named.bus_id = "0000:99:00.0";
  std::vector<store::DeviceInfo> devices = registry_.Devices();
  devices.push_back(named);
  registry_.SetXdmDevices(devices);
  registry_.raises().Add(
      {"kmsg", "3", "U3", "0000:99:00.0", xid79, std::chrono::system_clock::now()});
  // A raise on an address that is no card of the inventory (a NIC) is none.
  registry_.raises().Add({"kmsg", "", "", "0000:aa:00.0", xid79, std::chrono::system_clock::now()});
  ASSERT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_events_total", "suppressed") >= 1; },
                      std::chrono::seconds(10)));
  EXPECT_EQ(Events().size(), 1u);
  reporter->Stop();
}

TEST_F(NodeReporterLiveTest, PostsOneEventPerCardRaiseRetriedDeduplicatedAndRateLimited) {
  o_.condition = false;
  Raise(NamedFault("0x80CB8001", 6, "isolate_card"));  // before it was made: not its own
  auto reporter = Make();
  reporter->Start();
  Raise(NamedFault("0x80E18400", 4, "reset_card"), "1");
  Raise(NamedFault("0x80E01801", 2, "restart_job"), "2");  // below restart_card: no Event
  ASSERT_TRUE(WaitFor([&] { return Events().size() == 1; }, std::chrono::seconds(10)));
  Json e = Events()[0];
  EXPECT_EQ(e["reason"], "ResetCard");
  EXPECT_EQ(e["involvedObject"]["uid"], "u-1");  // read from the Node
  EXPECT_EQ(e["involvedObject"]["name"], "node-a");
  EXPECT_NE(e["message"].get<std::string>().find("xpu 1 (0000:3b:00.0): 0x80E18400"),
            std::string::npos);
  EXPECT_EQ(Patches().size(), 0u) << "the condition was not asked for";
  EXPECT_EQ(Metric("xpu_kubernetes_node_condition_synced"), -1)  // -1: no such series
      << "no condition: no gauge to alert on";

  // Refused for a while, and the reporter rebuilt meanwhile (a reload):
  // the new one takes over the queued Event and sends it.
  api_.Control("POST", "auth", R"({"status":403,"methods":["POST"]})");
  Raise(NamedFault("0x80E18400", 4, "reset_card"), "2");
  ASSERT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_events_total", "error") >= 1; },
                      std::chrono::seconds(10)));
  reporter->Stop();
  NodeReporter::Handover h = reporter->handover();
  EXPECT_EQ(h.queued.size(), 1u);
  reporter = Make();
  reporter->Seed(std::move(h));
  reporter->Start();
  api_.Control("POST", "auth", R"({"status":200})");
  ASSERT_TRUE(WaitFor([&] { return Events().size() == 2; }, std::chrono::seconds(40)));
  EXPECT_NE(Events()[1]["message"].get<std::string>().find("xpu 2 "), std::string::npos);

  // The same code on the same device again, within the window: no Event.
  Raise(NamedFault("0x80E18400", 4, "reset_card"), "1");
  ASSERT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_events_total", "suppressed") == 1; },
                      std::chrono::seconds(10)));
  // A storm over six devices: the burst's rest (5 - 2) goes out, the
  // others are counted.
  for (int i = 10; i < 16; ++i) Raise(NamedFault("0x80E18400", 4, "reset_card"), std::to_string(i));
  ASSERT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_events_total", "suppressed") == 4; },
                      std::chrono::seconds(10)));
  ASSERT_TRUE(WaitFor([&] { return Events().size() == 5; }, std::chrono::seconds(10)));
  // The API server has the fifth before the reporter has its answer and
  // counts it (CI, ASan under load: 4 a moment after the fifth arrived).
  EXPECT_TRUE(WaitFor([&] { return Metric("xpu_kubernetes_events_total", "sent") == 5; },
                      std::chrono::seconds(10)))
      << Metric("xpu_kubernetes_events_total", "sent");
  EXPECT_EQ(Events().size(), 5u) << "no sixth went out";
  EXPECT_EQ(Metric("xpu_kubernetes_events_total", "dropped"), 0);
  reporter->Stop();
}

}  // namespace
}  // namespace xpu::sinks
