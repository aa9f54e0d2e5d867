// DeviceTainter's threads against the stand-in API server (FakeApiServer:
// the real HTTPS and token, discovery of each resource.k8s.io version, this
// node's ResourceSlices listed and watched, DeviceTaintRules created,
// updated with their resourceVersion, deleted with a precondition and
// listed by label, and injected faults): one rule per faulted card, for
// that device only, removed after the hold, kept while blind, written at
// most twice under a flapping fault, adopted after a restart, never
// touching another agent's rule. Every wait is for a condition.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "kubernetes/fake_apiserver.h"
#include "kubernetes/pod_watcher.h"
#include "sinks/device_tainter.h"
#include "store/device_registry.h"
#include "support/metrics_util.h"
#include "support/test_util.h"

namespace xpu::sinks {
namespace {

using Json = nlohmann::json;
using kubernetes::FakeApiServer;
using xpu::testing::MetricValue;
using xpu::testing::WaitFor;

constexpr int kCards = 8;

std::string CardBus(int i) {
  char bus[16];
  std::snprintf(bus, sizeof bus, "0000:%02x:00.0", 0x18 + i * 0x10);
  return bus;
}

store::ActiveFault TaintFault(const std::string& code, int level, const std::string& level_name) {
  store::ActiveFault f;
  f.code = code;
  f.name = "n" + code;
  f.level = level;
  f.level_name = level_name;
  return f;
}
const store::ActiveFault kXid79 = TaintFault("0x10DE004F", 6, "isolate_card");
const store::ActiveFault kReset = TaintFault("0x80CB8001", 4, "reset_card");
const store::ActiveFault kRestart = TaintFault("0x80CB8002", 3, "restart_card");

class DeviceTainterLiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(api_.url().empty()) << xpu::testing::ReadFile(dir_.File("api.err"));
    std::vector<store::DeviceInfo> devices(kCards);
    for (int i = 0; i < kCards; ++i) {
      devices[i].minor = i;
      devices[i].bus_id = CardBus(i);
      devices[i].uuid = "GPU-" + std::to_string(i);
    }
    registry_.SetXdmDevices(devices);
    registry_.OpenSource(store::kSourceSysfs, std::chrono::hours(1));
    faults_.resize(kCards);
    Publish();
    k_.node_name = "node-a";
    k_.token_file = dir_.File("token");
    k_.ca_file = dir_.File("ca.crt");
    k_.node_interval = std::chrono::seconds(1);
    o_.hold = std::chrono::seconds(1);
    o_.tick = std::chrono::milliseconds(100);
    o_.retry_first = std::chrono::milliseconds(100);
    o_.request_timeout = std::chrono::seconds(1);
    o_.rediscover = std::chrono::milliseconds(300);
    ASSERT_TRUE(kubelet::DraRule::Make({}, {"{uuid}", "xpu-{minor}"}, &dra_).ok());
  }
  void Publish() {
    store::DeviceViews sysfs;
    sysfs.devices.resize(kCards);
    for (int i = 0; i < kCards; ++i) {
      sysfs.devices[i].minor = i;
      sysfs.devices[i].healthy = true;
      sysfs.devices[i].faults = faults_[i];
    }
    registry_.SetDeviceViews(store::kSourceSysfs, sysfs);
  }
  void SetFault(int card, std::vector<store::ActiveFault> faults) {
    faults_[card] = std::move(faults);
    Publish();
  }
  // The node's slice: one device per card, named gpu-N, with its address.
  static Json SliceOf(const std::string& name, int first, int last, int generation = 1,
                      int count = 1, const std::string& node = "node-a") {
    Json devices = Json::array();
    for (int i = first; i <= last; ++i)
      devices.push_back({{"name", "gpu-" + std::to_string(i)},
                         {"attributes",
                          {{"resource.kubernetes.io/pciBusID", {{"string", CardBus(i)}}},
                           {"uuid", {{"string", "GPU-" + std::to_string(i)}}}}}});
    return {{"apiVersion", "resource.k8s.io/v1"},
            {"kind", "ResourceSlice"},
            {"metadata", {{"name", name}}},
            {"spec",
             {{"driver", "gpu.example.com"},
              {"nodeName", node},
              {"pool", {{"name", node}, {"generation", generation}, {"resourceSliceCount", count}}},
              {"devices", devices}}}};
  }
  void AddSlice(const Json& slice) { api_.Control("POST", "slice", slice.dump()); }
  // The slice's next generation: gpu-3 names another address now, and card
  // 3 is named gpu-3b.
  static Json Card3Renamed() {
    Json slice = SliceOf("node-a-gpus", 0, kCards - 1, 2);
    slice["spec"]["devices"][3]["attributes"]["resource.kubernetes.io/pciBusID"]["string"] =
        "0000:ff:00.0";
    slice["spec"]["devices"][3]["attributes"]["uuid"]["string"] = "GPU-elsewhere";
    slice["spec"]["devices"].push_back(
        {{"name", "gpu-3b"},
         {"attributes", {{"resource.kubernetes.io/pciBusID", {{"string", CardBus(3)}}}}}});
    return slice;
  }
  std::unique_ptr<DeviceTainter> Make() {
    return std::make_unique<DeviceTainter>(k_, o_, dra_, api_.url(), &registry_, metrics_now_);
  }
  // The node's slice, a tainter started on it, and card 3 faulted until its
  // rule is written; null if that did not come within 10 s.
  std::unique_ptr<DeviceTainter> StartedWithCard3Taken() {
    AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
    auto t = Make();
    t->Start();
    SetFault(3, {kXid79});
    if (!WaitFor([&] { return StateOf(*t, 3) == "written"; }, std::chrono::seconds(10)))
      return nullptr;
    return t;
  }
  // NVML opened, every card healthy in its view.
  store::DeviceViews OpenNvml() {
    registry_.OpenSource("nvml", std::chrono::hours(1));
    store::DeviceViews nvml;
    nvml.devices.resize(kCards);
    for (int i = 0; i < kCards; ++i) {
      nvml.devices[i].minor = i;
      nvml.devices[i].healthy = true;
    }
    return nvml;
  }
  Json Rules() { return api_.Recorded("rules"); }
  // The requests for this node's ResourceSlices whose path has `part`.
  int SliceRequests(const std::string& part) {
    int n = 0;
    for (const Json& r : api_.Recorded("requests")) {
      const std::string path = r.get<std::string>();
      n += path.find("resourceslices") != std::string::npos && path.find(part) != std::string::npos;
    }
    return n;
  }
  Json Writes() { return api_.Recorded("rulewrites"); }
  // Every watch of the slices answered 200 with `body`: the watches asked
  // for in ten of a started tainter's rounds (100 ms each) from its first.
  // The backoff (100 ms, then doubling) allows a handful; a watch resumed at
  // once after such an answer was asked for 24 times (each answer of the
  // stand-in takes it tens of milliseconds).
  // -1: no watch was asked for, or the rounds did not come, within 20 s.
  int WatchesInTenRoundsAnswered(const std::string& body) {
    AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
    api_.Control("POST", "fault",
                 Json{{"prefix", "/apis/resource.k8s.io/"},
                      {"path_contains", "watch=true"},
                      {"method", "GET"},
                      {"status", 200},
                      {"times", 1000000},
                      {"body", body}}
                     .dump());
    auto t = Make();
    t->Start();
    if (!WaitFor([&] { return SliceRequests("watch=true") >= 1; }, std::chrono::seconds(20)) ||
        !Rounds(*t, 10))
      return -1;
    return SliceRequests("watch=true");
  }
  // Another agent's rule on gpu-5 ("ops-gpu-5", no labels of ours).
  void AddOpsRule() {
    api_.Control("POST", "rule",
                 Json{{"apiVersion", "resource.k8s.io/v1beta2"},
                      {"kind", "DeviceTaintRule"},
                      {"metadata", {{"name", "ops-gpu-5"}}},
                      {"spec",
                       {{"deviceSelector", {{"device", "gpu-5"}}},
                        {"taint", {{"key", "ops/broken"}, {"effect", "NoSchedule"}}}}}}
                     .dump());
  }
  // A rule of ours on the server, as a run before this one wrote it:
  // `device` tainted isolate_card, standing for the card at `bus`.
  void AddOurs(const std::string& device, const std::string& bus,
               const std::string& driver = "gpu.example.com") {
    Rule r;
    r.device = {driver, "node-a", device};
    r.name = RuleName("node-a", r.device);
    r.value = "isolate_card";
    r.effect = "NoSchedule";
    r.bus_id = bus;
    api_.Control("POST", "rule", RuleBody("v1beta2", "node-a", r));
  }
  // The rule of ours that selects gpu-N, or null.
  Json RuleFor(int card) {
    for (const Json& r : Rules())
      if (r["spec"]["deviceSelector"]["device"] == "gpu-" + std::to_string(card) &&
          r["metadata"].contains("labels") &&
          r["metadata"]["labels"].value("app.kubernetes.io/managed-by", "") == "xpu-exporter")
        return r;
    return nullptr;
  }
  const DeviceTainter::CardReport* Card(const DeviceTainter::Report& r, int card) {
    for (const auto& c : r.cards)
      if (c.bus_id == CardBus(card)) return &c;
    return nullptr;
  }
  std::string StateOf(DeviceTainter& t, int card) {
    const DeviceTainter::Report r = t.report();
    const auto* c = Card(r, card);
    return c ? c->state : "?";
  }
  // Waits for `n` more rounds of `t`: what a round would have done is done.
  bool Rounds(DeviceTainter& t, uint64_t n) {
    const uint64_t from = t.report().rounds;
    return WaitFor([&] { return t.report().rounds >= from + n; }, std::chrono::seconds(20));
  }
  uint64_t HoldRounds() const { return static_cast<uint64_t>(o_.hold / o_.tick) + 3; }
  double Writes(const std::string& op, const std::string& result) {
    return MetricValue(*metrics_now_, "xpu_kubernetes_device_taint_writes_total",
                       {{"op", op}, {"result", result}});
  }

  xpu::testing::TempDir dir_;
  FakeApiServer api_{dir_};
  store::DeviceRegistry registry_;
  std::vector<std::vector<store::ActiveFault>> faults_;
  prometheus::Registry metrics_, restarted_;
  prometheus::Registry* metrics_now_ = &metrics_;
  kubernetes::KubernetesOptions k_;
  DeviceTainter::Options o_;
  kubelet::DraRule dra_;
};

TEST_F(DeviceTainterLiveTest, AnXid79TaintsThatDeviceOnlyUntilItHasHeldHealthy) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  ASSERT_TRUE(WaitFor([&] { return t->report().slices == 1; }, std::chrono::seconds(10)));
  ASSERT_TRUE(Rounds(*t, 2));
  EXPECT_TRUE(Writes().empty()) << Writes().dump();  // healthy cards: nothing
  // Every card's mapping is on /status.
  const DeviceTainter::Report before = t->report();
  EXPECT_EQ(before.rule_version, "v1beta2");
  EXPECT_EQ(before.slice_version, "v1");
  for (int i = 0; i < kCards; ++i) {
    const auto* c = Card(before, i);
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->device.has_value()) << c->unmapped;
    EXPECT_EQ(c->device->device, "gpu-" + std::to_string(i));
    EXPECT_EQ(c->device->pool, "node-a");
  }

  SetFault(3, {kXid79});
  ASSERT_TRUE(Rounds(*t, 2));  // within two rounds of the raise
  Json rules = Rules();
  ASSERT_EQ(rules.size(), 1u) << rules.dump();
  const Json& r = rules[0];
  EXPECT_EQ(r["apiVersion"], "resource.k8s.io/v1beta2");
  EXPECT_EQ(r["spec"]["deviceSelector"],
            (Json{{"driver", "gpu.example.com"}, {"pool", "node-a"}, {"device", "gpu-3"}}));
  EXPECT_EQ(r["spec"]["taint"]["key"], "xpu-exporter.io/card-fault");
  EXPECT_EQ(r["spec"]["taint"]["value"], "isolate_card");
  EXPECT_EQ(r["spec"]["taint"]["effect"], "NoSchedule");
  EXPECT_EQ(r["metadata"]["labels"]["xpu-exporter.io/node"], "node-a");
  EXPECT_EQ(r["metadata"]["annotations"]["xpu-exporter.io/bus-id"], CardBus(3));
  EXPECT_EQ(StateOf(*t, 3), "written");
  EXPECT_EQ(MetricValue(metrics_, "xpu_kubernetes_device_taint_state",
                        {{"bus_id", CardBus(3)}, {"state", "written"}}),
            1);

  // Healthy again: the rule stays for the hold, then goes.
  SetFault(3, {});
  ASSERT_TRUE(WaitFor([&] {
    const auto rep = t->report();
    const auto* c = Card(rep, 3);
    return c && c->why.find("healthy") != std::string::npos;
  }));
  EXPECT_EQ(Rules().size(), 1u);
  ASSERT_TRUE(WaitFor([&] { return Rules().empty(); }, std::chrono::seconds(10)));
  const Json writes = Writes();
  ASSERT_EQ(writes.size(), 2u) << writes.dump();
  EXPECT_EQ(writes[0][0], "POST");
  EXPECT_EQ(writes[1][0], "DELETE");
  EXPECT_EQ(Writes("create", "ok"), 1);
  EXPECT_EQ(Writes("delete", "ok"), 1);
  EXPECT_TRUE(WaitFor([&] { return StateOf(*t, 3).empty(); }));
  EXPECT_TRUE(WaitFor([&] {
    return MetricValue(metrics_, "xpu_kubernetes_device_taint_state",
                       {{"bus_id", CardBus(3)}, {"state", "written"}}) == 0;
  }));

  const auto t0 = std::chrono::steady_clock::now();
  t->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// A rule's write the API server throttles (429 with Retry-After, as API
// Priority and Fairness answers) is tried again no sooner than it said,
// not after the backoff's 0.1 s. Before, Retry-After was not read.
TEST_F(DeviceTainterLiveTest, AThrottledWriteIsTriedAgainWhenTheServerSaid) {
  api_.Control("POST", "fault",
               R"({"prefix": "/apis/resource.k8s.io/", "method": "POST", "status": 429,
                   "times": 1, "headers": {"Retry-After": "2"}})");
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  SetFault(3, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return StateOf(*t, 3) == "written"; }, std::chrono::seconds(15)));
  std::vector<double> posts;
  for (const Json& at : api_.Recorded("times"))
    if (at[1].get<std::string>().rfind("POST /apis/resource.k8s.io/", 0) == 0)
      posts.push_back(at[0].get<double>());
  ASSERT_EQ(posts.size(), 2u);
  EXPECT_GE(posts[1] - posts[0], 1.9) << "tried again before the server's Retry-After";
  t->Stop();
}

TEST_F(DeviceTainterLiveTest, AFlappingFaultWritesTheRuleAtMostTwicePerHold) {
  o_.hold = std::chrono::seconds(3);
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  ASSERT_TRUE(WaitFor([&] { return t->report().slices == 1; }, std::chrono::seconds(10)));
  for (int i = 0; i < 20; ++i) {
    SetFault(5, {kReset});
    ASSERT_TRUE(WaitFor([&] { return StateOf(*t, 5) == "written"; }, std::chrono::seconds(10)));
    SetFault(5, {});
    ASSERT_TRUE(WaitFor([&] {
      const auto rep = t->report();
      const auto* c = Card(rep, 5);
      return c && c->why.find("healthy") != std::string::npos;
    }));
  }
  EXPECT_EQ(Writes().size(), 1u) << Writes().dump();
  ASSERT_TRUE(WaitFor([&] { return Rules().empty(); }, std::chrono::seconds(10)));
  EXPECT_EQ(Writes().size(), 2u) << Writes().dump();
}

// A fault and a recovery while no device names the card (its slice gone,
// the pool incomplete meanwhile) restart the hold: the rule goes a hold
// after the last recovery, not the first. Before, the hold started at the
// first recovery ran on through the gap, and the rule went at once when the
// slice came back.
TEST_F(DeviceTainterLiveTest, AFaultWhileNoDeviceNamesTheCardRestartsItsHold) {
  o_.hold = std::chrono::seconds(3);
  auto t = StartedWithCard3Taken();
  ASSERT_TRUE(t);
  SetFault(3, {});  // the hold starts
  ASSERT_TRUE(WaitFor([&] {
    const auto rep = t->report();
    const auto* c = Card(rep, 3);
    return c && c->why.find("healthy") != std::string::npos;
  }));
  // gpu-3 leaves the slices; its pool waits for a second slice.
  Json without = SliceOf("node-a-gpus", 0, kCards - 1, 2, 2);
  without["spec"]["devices"].erase(3);
  AddSlice(without);
  ASSERT_TRUE(WaitFor([&] {
    const auto rep = t->report();
    const auto* c = Card(rep, 3);
    return c && !c->device;
  }));
  SetFault(3, {kXid79});
  ASSERT_TRUE(Rounds(*t, 2));
  SetFault(3, {});
  ASSERT_TRUE(Rounds(*t, HoldRounds()));  // the first hold is long over
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1, 3, 1));
  ASSERT_TRUE(WaitFor([&] {
    const auto rep = t->report();
    const auto* c = Card(rep, 3);
    return c && c->device;
  }));
  ASSERT_TRUE(Rounds(*t, 2));
  EXPECT_FALSE(RuleFor(3).is_null()) << "held from the last recovery";
  EXPECT_TRUE(WaitFor([&] { return RuleFor(3).is_null(); }, std::chrono::seconds(10)));
}

// A rule that stopped being stale (its card faulted while its device was
// gone) starts its stale hold again once stale again: it outlives another
// hold. Before, the first stale time was kept, and the rule went at once.
TEST_F(DeviceTainterLiveTest, AStaleHoldStartsAgainAfterTheRuleWasNotStale) {
  o_.hold = std::chrono::seconds(3);
  auto t = StartedWithCard3Taken();
  ASSERT_TRUE(t);
  // gpu-3 leaves the slices while card 3 is healthy: the rule is stale.
  SetFault(3, {});
  Json without = SliceOf("node-a-gpus", 0, kCards - 1, 2, 1);
  without["spec"]["devices"].erase(3);
  AddSlice(without);
  auto stale = [&] {
    const auto rep = t->report();
    return std::find(rep.stale.begin(), rep.stale.end(), RuleFor(3)["metadata"]["name"]) !=
           rep.stale.end();
  };
  ASSERT_TRUE(WaitFor(stale));
  // Faulted for less than the hold: not stale; then healthy: stale again.
  SetFault(3, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return !stale(); }));
  ASSERT_TRUE(Rounds(*t, HoldRounds()));
  SetFault(3, {});
  ASSERT_TRUE(WaitFor(stale));
  ASSERT_TRUE(Rounds(*t, 2));
  EXPECT_FALSE(RuleFor(3).is_null()) << "a stale hold from when it was stale again";
  EXPECT_TRUE(WaitFor([&] { return RuleFor(3).is_null(); }, std::chrono::seconds(10)));
}

TEST_F(DeviceTainterLiveTest, WorseIsWrittenAtOnceBetterAfterTheHoldAndEvictionWhereAsked) {
  o_.evict_level = 6;  // isolate_card evicts
  o_.hold = std::chrono::seconds(2);
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  SetFault(1, {kRestart});
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(1).is_null(); }, std::chrono::seconds(10)));
  EXPECT_EQ(RuleFor(1)["spec"]["taint"]["effect"], "NoSchedule");
  EXPECT_EQ(RuleFor(1)["spec"]["taint"]["value"], "restart_card");
  SetFault(1, {kXid79});
  ASSERT_TRUE(Rounds(*t, 2));  // worse: at once
  EXPECT_EQ(RuleFor(1)["spec"]["taint"]["value"], "isolate_card");
  EXPECT_EQ(RuleFor(1)["spec"]["taint"]["effect"], "NoExecute");
  SetFault(1, {kReset});
  ASSERT_TRUE(Rounds(*t, 3));  // better: not before the hold
  EXPECT_EQ(RuleFor(1)["spec"]["taint"]["value"], "isolate_card");
  ASSERT_TRUE(WaitFor([&] { return RuleFor(1)["spec"]["taint"]["value"] == "reset_card"; },
                      std::chrono::seconds(10)));
  EXPECT_EQ(RuleFor(1)["spec"]["taint"]["effect"], "NoSchedule");
  const Json writes = Writes();
  ASSERT_EQ(writes.size(), 3u) << writes.dump();
  EXPECT_EQ(writes[1][0], "PUT");
  EXPECT_EQ(writes[2][0], "PUT");
}

TEST_F(DeviceTainterLiveTest, OnlyV1alpha3ServesTheRules) {
  api_.Control("POST", "served", R"({"v1":["resourceslices"],"v1alpha3":["devicetaintrules"]})");
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  SetFault(2, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(2).is_null(); }, std::chrono::seconds(10)));
  EXPECT_EQ(RuleFor(2)["apiVersion"], "resource.k8s.io/v1alpha3");
  EXPECT_EQ(RuleFor(2)["spec"]["taint"]["effect"], "NoSchedule");
  EXPECT_EQ(t->report().rule_version, "v1alpha3");
  EXPECT_EQ(Rules().size(), 1u);
}

// The version the slices were read in is no longer served (a cluster
// upgraded under the exporter): discovery runs again and the slices are
// read in the version served now, so a fault is tainted. Before, the slice
// lists failed with 404 until a restart, and every fault stayed pending.
TEST_F(DeviceTainterLiveTest, TheSlicesVersionGoneIsDiscoveredAgain) {
  o_.rediscover = std::chrono::minutes(1);  // not the periodic rediscovery
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  ASSERT_TRUE(WaitFor([&] { return t->report().slices == 1; }, std::chrono::seconds(10)));
  ASSERT_EQ(t->report().slice_version, "v1");
  // The slices' version gone, the rules' still served (their list works).
  api_.Control("POST", "served", R"({"v1":[],"v1beta2":["resourceslices","devicetaintrules"]})");
  api_.Control("POST", "break", "{}");
  SetFault(2, {kXid79});
  EXPECT_TRUE(WaitFor([&] { return !RuleFor(2).is_null(); }, std::chrono::seconds(10)))
      << t->report().slice_error;
  ASSERT_TRUE(Rounds(*t, 2));
  EXPECT_EQ(t->report().slice_version, "v1beta2");
}

TEST_F(DeviceTainterLiveTest, EffectNoneWhereTheVersionHasIt) {
  o_.effect = "None";
  api_.Control("POST", "served", R"({"v1":["resourceslices"],"v1alpha3":["devicetaintrules"]})");
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  SetFault(2, {kXid79});
  // v1alpha3 has no None: refused here, nothing written.
  ASSERT_TRUE(WaitFor([&] { return StateOf(*t, 2) == "refused"; }, std::chrono::seconds(10)));
  EXPECT_TRUE(Writes().empty());
  t->Stop();
  api_.Control("POST", "served", R"({"v1":["resourceslices"],"v1beta2":["devicetaintrules"]})");
  t = Make();
  t->Start();
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(2).is_null(); }, std::chrono::seconds(10)));
  EXPECT_EQ(RuleFor(2)["spec"]["taint"]["effect"], "None");
}

TEST_F(DeviceTainterLiveTest, WithoutTheRuleApiNothingIsWrittenAndTheReportSaysWhy) {
  api_.Control("POST", "served", R"({"v1":["resourceslices"],"v1beta2":["resourceslices"]})");
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  SetFault(4, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return StateOf(*t, 4) == "no_api"; }, std::chrono::seconds(10)));
  EXPECT_NE(t->report().api.find("no version of resource.k8s.io serves DeviceTaintRules"),
            std::string::npos)
      << t->report().api;
  EXPECT_EQ(MetricValue(metrics_, "xpu_kubernetes_device_taint_state",
                        {{"bus_id", CardBus(4)}, {"state", "no_api"}}),
            1);
  ASSERT_TRUE(Rounds(*t, 5));  // discovery asked again meanwhile
  EXPECT_TRUE(Writes().empty());
  // The API turned on (an upgrade): found again, and the rule written.
  api_.Control("POST", "served", R"({"v1":["resourceslices"],"v1beta2":["devicetaintrules"]})");
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(4).is_null(); }, std::chrono::seconds(10)));
}

// A reload that switches the taints off (Stop, then Withdraw) deletes the
// rules it wrote, and no one else's: they stayed, and a card repaired since
// kept its taint for good. A plain stop (an exporter that restarts) keeps
// them, as the test above shows.
TEST_F(DeviceTainterLiveTest, SwitchedOffItDeletesItsRulesAndNoOneElses) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  SetFault(2, {kXid79});
  SetFault(5, {kXid79});
  AddOpsRule();  // another agent's, on card 5
  auto t = Make();
  t->Start();
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(2).is_null() && !RuleFor(5).is_null(); },
                      std::chrono::seconds(10)));
  t->Stop();
  EXPECT_EQ(Rules().size(), 3u) << "a stop keeps them";
  // A rule of ours it did not take in (a create that ended as it stopped).
  Rule late;
  late.name = RuleName("node-a", {"gpu.example.com", "node-a", "gpu-6"});
  late.device = {"gpu.example.com", "node-a", "gpu-6"};
  late.value = "isolate_card";
  late.effect = "NoSchedule";
  late.bus_id = "0000:06:00.0";
  api_.Control("POST", "rule", RuleBody("v1beta2", "node-a", late));
  t->Withdraw();
  const Json left = Rules();
  ASSERT_EQ(left.size(), 1u) << left.dump();
  EXPECT_EQ(left[0]["metadata"]["name"], "ops-gpu-5");
  t->Withdraw();                                      // listed again: nothing left to delete
  EXPECT_EQ(Writes().size(), 5u) << Writes().dump();  // two creates, three deletes
}

// Switched off while the API server fails a delete (a 503 from a server
// restarting) and answers another 409 (changed since read): each is tried
// again within the switch's budget, the second after the rules are listed
// again.
// Before, one failed try left the rule, and its taint on the device, with
// no one to take it off.
TEST_F(DeviceTainterLiveTest, SwitchedOffItTriesAFailedDeleteAgain) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  SetFault(2, {kXid79});
  SetFault(5, {kXid79});
  auto t = Make();
  t->Start();
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(2).is_null() && !RuleFor(5).is_null(); },
                      std::chrono::seconds(10)));
  t->Stop();
  api_.Control("POST", "fault",
               R"({"prefix": "/apis/resource.k8s.io/", "method": "DELETE", "status": 503,
                   "times": 1})");
  api_.Control("POST", "fault",
               R"({"prefix": "/apis/resource.k8s.io/", "method": "DELETE", "status": 409,
                   "times": 1})");
  t->Withdraw();
  EXPECT_TRUE(Rules().empty()) << Rules().dump();
}

// A rule of ours made as the threads stopped (a create whose answer the
// stop cut off) is deleted when the taints are switched off, though the
// tainter knew of none. Before, a tainter holding no rule returned at once
// and left it.
TEST_F(DeviceTainterLiveTest, SwitchedOffItDeletesARuleItDidNotKnowItHad) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  ASSERT_TRUE(WaitFor([&] { return t->report().slices == 1; }, std::chrono::seconds(10)));
  ASSERT_TRUE(Rounds(*t, 2));  // listed: none of ours
  t->Stop();
  AddOurs("gpu-4", CardBus(4));
  ASSERT_EQ(Rules().size(), 1u);
  t->Withdraw();
  EXPECT_TRUE(Rules().empty()) << Rules().dump();
}

// A delete the server applied whose answer was lost (a 504), then the
// card's fault back within the write backoff: the rule is made again within
// a few rounds. Before, the tainter still held it as written, and the card
// went untainted until the next list (a node interval, here 30 s).
TEST_F(DeviceTainterLiveTest, AFaultBackAfterADeleteWhoseAnswerWasLostIsTaintedAgain) {
  k_.node_interval = std::chrono::seconds(30);
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  SetFault(3, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(3).is_null(); }, std::chrono::seconds(10)));
  api_.Control("POST", "fault",
               R"({"prefix": "/apis/resource.k8s.io/", "method": "DELETE", "status": 504,
                   "committed": true, "times": 1})");
  SetFault(3, {});
  ASSERT_TRUE(WaitFor([&] { return RuleFor(3).is_null(); }, std::chrono::seconds(10)));
  SetFault(3, {kXid79});
  EXPECT_TRUE(WaitFor([&] { return !RuleFor(3).is_null(); }, std::chrono::seconds(5)))
      << "the card's rule was held as written after its delete";
}

// A card whose fault only NVML saw, NVML blind since (its health unknown),
// and the card renamed by a new generation of its slice: the taint goes to
// the device that names the card now. Before, the old device's rule went as
// stale after the hold and none was made: unknown health took the card's
// taint away.
TEST_F(DeviceTainterLiveTest, AnUnknownCardRenamedKeepsItsTaintOnItsNewDevice) {
  o_.sources = {store::kSourceSysfs, "nvml"};
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  store::DeviceViews nvml = OpenNvml();
  nvml.devices[3].faults = {kXid79};
  registry_.SetDeviceViews("nvml", nvml);
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(3).is_null(); }, std::chrono::seconds(10)));
  registry_.SetSourceBlind("nvml", "NVML does not answer");
  AddSlice(Card3Renamed());
  ASSERT_TRUE(WaitFor([&] { return t->report().slices == 1 && Rounds(*t, 1); }));
  ASSERT_TRUE(Rounds(*t, HoldRounds() * 2));
  bool on_3b = false;
  for (const Json& r : Rules())
    on_3b = on_3b || (r["spec"]["deviceSelector"]["device"] == "gpu-3b" &&
                      r["spec"]["taint"]["value"] == "isolate_card");
  EXPECT_TRUE(on_3b) << "card 3 lost its taint while its health is unknown: " << Rules().dump();
  EXPECT_EQ(StateOf(*t, 3), "written");
}

// The same, the carried taint's write refused (a policy denies gpu-3b's
// rule): the old device's rule stays, as nothing else taints the card.
TEST_F(DeviceTainterLiveTest, AnUnknownCardsOldRuleStaysWhileItsNewOneIsRefused) {
  o_.sources = {store::kSourceSysfs, "nvml"};
  api_.Control("POST", "fault", R"({"body_contains":"gpu-3b","status":403,"times":1000000})");
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  store::DeviceViews nvml = OpenNvml();
  nvml.devices[3].faults = {kXid79};
  registry_.SetDeviceViews("nvml", nvml);
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(3).is_null(); }, std::chrono::seconds(10)));
  registry_.SetSourceBlind("nvml", "NVML does not answer");
  AddSlice(Card3Renamed());
  ASSERT_TRUE(WaitFor([&] { return StateOf(*t, 3) == "refused"; }, std::chrono::seconds(10)));
  ASSERT_TRUE(Rounds(*t, HoldRounds() * 2));
  EXPECT_FALSE(RuleFor(3).is_null()) << "the card's only taint went as stale";
}

TEST_F(DeviceTainterLiveTest, ARestartAdoptsItsRulesDeletesStaleOnesAndLeavesOthersAlone) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  // A first run taints cards 2 and 5.
  SetFault(2, {kXid79});
  SetFault(5, {kXid79});
  auto t = Make();
  t->Start();
  ASSERT_TRUE(WaitFor([&] { return Rules().size() == 2; }, std::chrono::seconds(10)));
  t->Stop();
  // Meanwhile card 5 recovers; another agent taints card 5 its own way, and
  // holds the name our rule for card 6 would take.
  SetFault(5, {});
  const std::string ours6 = RuleName("node-a", {"gpu.example.com", "node-a", "gpu-6"});
  AddOpsRule();  // another agent's, on card 5
  api_.Control("POST", "rule",
               Json{{"apiVersion", "resource.k8s.io/v1beta2"},
                    {"kind", "DeviceTaintRule"},
                    {"metadata", {{"name", ours6}, {"labels", {{"team", "ops"}}}}},
                    {"spec",
                     {{"deviceSelector", {{"device", "gpu-6"}}},
                      {"taint", {{"key", "ops/held"}, {"effect", "NoSchedule"}}}}}}
                   .dump());
  const Json others = Rules();
  SetFault(6, {kXid79});
  metrics_now_ = &restarted_;
  t = Make();
  t->Start();
  // Card 2's rule is adopted (no write), card 5's deleted after the hold,
  // card 6's name is held by a rule not ours: refused, left alone.
  ASSERT_TRUE(WaitFor([&] { return RuleFor(5).is_null(); }, std::chrono::seconds(10)));
  ASSERT_TRUE(WaitFor([&] { return StateOf(*t, 6) == "refused"; }, std::chrono::seconds(10)));
  ASSERT_TRUE(Rounds(*t, HoldRounds()));
  EXPECT_FALSE(RuleFor(2).is_null());
  EXPECT_EQ(StateOf(*t, 2), "written");
  const Json writes = Writes();
  ASSERT_EQ(writes.size(), 3u) << writes.dump();  // two creates, one delete; no update
  EXPECT_EQ(writes[2][0], "DELETE");
  for (const Json& o : others) {
    const std::string name = o["metadata"]["name"];
    if (name != "ops-gpu-5" && name != ours6) continue;
    bool same = false;
    for (const Json& now : Rules()) same = same || now == o;
    EXPECT_TRUE(same) << name << " was changed or deleted";
  }
  EXPECT_GE(Writes("create", "refused"), 1);
  EXPECT_NE(Card(t->report(), 6)->why.find("did not make"), std::string::npos);
}

TEST_F(DeviceTainterLiveTest, ABlindSourceLeavesTheRuleInPlace) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  SetFault(0, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(0).is_null(); }, std::chrono::seconds(10)));
  // The source goes blind and its view no longer shows the fault: no
  // evidence of recovery.
  faults_[0].clear();
  registry_.SetSourceBlind(store::kSourceSysfs, "cannot read /sys");
  ASSERT_TRUE(WaitFor([&] {
    const auto rep = t->report();
    const auto* c = Card(rep, 0);
    return c && c->why.find("unknown") != std::string::npos;
  }));
  ASSERT_TRUE(Rounds(*t, HoldRounds()));
  EXPECT_FALSE(RuleFor(0).is_null());
  EXPECT_EQ(Writes().size(), 1u);
  // Seeing again, healthy: deleted after the hold.
  Publish();
  ASSERT_TRUE(WaitFor([&] { return RuleFor(0).is_null(); }, std::chrono::seconds(10)));
}

TEST_F(DeviceTainterLiveTest, ABlindSourceWeakensNoTaint) {
  o_.evict_level = 6;
  registry_.OpenSource("nvml", std::chrono::hours(1));
  auto nvml = [&](std::vector<store::ActiveFault> on_1) {
    store::DeviceViews v;
    v.devices.resize(kCards);
    for (int i = 0; i < kCards; ++i) {
      v.devices[i].minor = i;
      v.devices[i].healthy = true;
    }
    v.devices[1].faults = std::move(on_1);
    registry_.SetDeviceViews("nvml", v);
  };
  nvml({kXid79});
  SetFault(1, {kReset});
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(1).is_null(); }, std::chrono::seconds(10)));
  EXPECT_EQ(RuleFor(1)["spec"]["taint"]["effect"], "NoExecute");
  // NVML goes blind: what it saw is no evidence, but neither is its
  // silence a recovery: the worse taint stays past the hold.
  registry_.SetSourceBlind("nvml", "NVML_ERROR_DRIVER_NOT_LOADED");
  ASSERT_TRUE(WaitFor([&] {
    const auto rep = t->report();
    const auto* c = Card(rep, 1);
    return c && c->why.find("not wholly known") != std::string::npos;
  }));
  ASSERT_TRUE(Rounds(*t, HoldRounds()));
  EXPECT_EQ(RuleFor(1)["spec"]["taint"]["value"], "isolate_card");
  EXPECT_EQ(RuleFor(1)["spec"]["taint"]["effect"], "NoExecute");
  EXPECT_EQ(Writes().size(), 1u) << Writes().dump();
  // Seeing again, and only the reset: weakened after the hold.
  nvml({});
  ASSERT_TRUE(WaitFor([&] { return RuleFor(1)["spec"]["taint"]["value"] == "reset_card"; },
                      std::chrono::seconds(10)));
}

TEST_F(DeviceTainterLiveTest, ARuleTheServerRefusesHoldsBackNoOther) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  // A policy that refuses gpu-0's rule, for good.
  api_.Control("POST", "fault", R"({"method":"POST","body_contains":"\"gpu-0\"","status":403,
                                    "times":100000})");
  auto t = Make();
  t->Start();
  SetFault(0, {kXid79});
  SetFault(5, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(5).is_null(); }, std::chrono::seconds(10)));
  // Refused, and said so every round through its backoff, not only when
  // it is tried.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(Rounds(*t, 1));
    EXPECT_EQ(StateOf(*t, 0), "refused");
    EXPECT_NE(Card(t->report(), 0)->why.find("403"), std::string::npos);
  }
  SetFault(6, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(6).is_null(); }, std::chrono::seconds(10)));
}

TEST_F(DeviceTainterLiveTest, ARuleIsStaleOnlyWhenItsDeviceLeftTheSlices) {
  // gpu-6's address and uuid are no card's, and no template names it: card
  // 6 maps to nothing, but gpu-6 is still a device.
  Json slice = SliceOf("node-a-gpus", 0, kCards - 1);
  slice["spec"]["devices"][6]["attributes"]["resource.kubernetes.io/pciBusID"]["string"] =
      "0000:ff:00.0";
  slice["spec"]["devices"][6]["attributes"]["uuid"]["string"] = "GPU-elsewhere";
  AddSlice(slice);
  const std::string no_card = "0000:ee:00.0";
  AddOurs("gpu-6", no_card);
  AddOurs("gpu-9", no_card);                       // a device the slices do not have
  AddOurs("gpu-8", CardBus(2));                    // nor this one; it stands for card 2, faulted
  AddOurs("gpu-7", no_card, "other.example.com");  // a driver with no slice here now
  SetFault(2, {kXid79});
  auto t = Make();
  t->Start();
  ASSERT_TRUE(WaitFor([&] { return RuleFor(9).is_null(); }, std::chrono::seconds(10)));
  ASSERT_TRUE(Rounds(*t, HoldRounds()));
  EXPECT_FALSE(RuleFor(6).is_null());
  EXPECT_FALSE(RuleFor(8).is_null());
  EXPECT_FALSE(RuleFor(7).is_null());
  // Card 2 recovers: its own rule and the one that stood for it go.
  SetFault(2, {});
  ASSERT_TRUE(WaitFor([&] { return RuleFor(8).is_null() && RuleFor(2).is_null(); },
                      std::chrono::seconds(10)));
  EXPECT_FALSE(RuleFor(6).is_null());
}

// A rule whose device is still listed but no longer names its card (the
// driver gave gpu-3 another address; a reload's device-name rule would do
// the same): kept while the card it stands for is faulted, deleted once
// that card has held healthy. It used to stay for good: nothing deleted a
// rule whose device was still in the slices.
TEST_F(DeviceTainterLiveTest, ARuleWhoseDeviceNoLongerNamesItsCardGoesOnceThatCardIsHealthy) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  SetFault(3, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(3).is_null(); }, std::chrono::seconds(10)));
  Json slice = SliceOf("node-a-gpus", 0, kCards - 1, 2);
  slice["spec"]["devices"][3]["attributes"]["resource.kubernetes.io/pciBusID"]["string"] =
      "0000:ff:00.0";
  slice["spec"]["devices"][3]["attributes"]["uuid"]["string"] = "GPU-elsewhere";
  AddSlice(slice);
  ASSERT_TRUE(WaitFor([&] { return StateOf(*t, 3) == "unmapped"; }, std::chrono::seconds(10)));
  ASSERT_TRUE(Rounds(*t, HoldRounds()));
  EXPECT_FALSE(RuleFor(3).is_null()) << "deleted while its card is faulted";
  SetFault(3, {});
  ASSERT_TRUE(WaitFor([&] { return RuleFor(3).is_null(); }, std::chrono::seconds(10)));
  EXPECT_EQ(Writes("delete", "ok"), 1);
  EXPECT_TRUE(Rules().empty()) << Rules().dump();
}

// A card that a new device names now (gpu-3 renamed gpu-3b): its rule is
// written for gpu-3b, and the old one, which selects a device that no
// longer is this card, is deleted after the hold, faulted or not.
TEST_F(DeviceTainterLiveTest, ARuleOfADeviceThatIsNoLongerItsCardIsReplacedNotKept) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  auto t = Make();
  t->Start();
  SetFault(3, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(3).is_null(); }, std::chrono::seconds(10)));
  AddSlice(Card3Renamed());
  auto rule_on = [&](const std::string& device) {
    for (const Json& r : Rules())
      if (r["spec"]["deviceSelector"]["device"] == device) return true;
    return false;
  };
  ASSERT_TRUE(WaitFor([&] { return rule_on("gpu-3b"); }, std::chrono::seconds(10)));
  ASSERT_TRUE(WaitFor([&] { return RuleFor(3).is_null(); }, std::chrono::seconds(10)));
  ASSERT_TRUE(Rounds(*t, 2));
  EXPECT_EQ(Rules().size(), 1u) << Rules().dump();
  EXPECT_EQ(StateOf(*t, 3), "written");
}

// A rule adopted at start (or kept over a reload) for a fault only NVML
// sees, while NVML has not read yet (--hal=auto still looking for its
// library): the sources that have read show the card healthy, which is no
// evidence of a recovery. Nothing is deleted or weakened until every
// running source has published once; it used to be deleted after the hold.
TEST_F(DeviceTainterLiveTest, NoRuleIsDeletedBeforeEveryRunningSourceHasRead) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  AddOurs("gpu-1", CardBus(1));
  o_.sources = {store::kSourceSysfs, "nvml"};
  auto t = Make();
  t->Start();
  Publish();  // sysfs reads (healthy), NVML not yet
  ASSERT_TRUE(Rounds(*t, HoldRounds() * 2));
  EXPECT_FALSE(RuleFor(1).is_null()) << "deleted before NVML had read";
  EXPECT_EQ(StateOf(*t, 1), "written");
  EXPECT_NE(Card(t->report(), 1)->why.find("not every source has read"), std::string::npos)
      << Card(t->report(), 1)->why;
  // NVML reads, and sees the fault: kept as it is.
  store::DeviceViews nvml = OpenNvml();
  nvml.devices[1].faults = {kXid79};
  registry_.SetDeviceViews("nvml", nvml);
  ASSERT_TRUE(Rounds(*t, HoldRounds()));
  EXPECT_FALSE(RuleFor(1).is_null());
  EXPECT_TRUE(Writes().empty()) << Writes().dump();
  // Then healthy: deleted after the hold.
  nvml.devices[1].faults.clear();
  registry_.SetDeviceViews("nvml", nvml);
  ASSERT_TRUE(WaitFor([&] { return RuleFor(1).is_null(); }, std::chrono::seconds(10)));
}

// A reload hands the holds over, and a stale rule's starts again once every
// source has read, as a card's does. Before, the stale hold ran on through
// the new tainter's wait for its sources, and the rule went at once after it.
TEST_F(DeviceTainterLiveTest, AStaleHoldHandedOverByAReloadStartsOnceTheSourcesHaveRead) {
  o_.hold = std::chrono::seconds(2);
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  AddOurs("gpu-9", "0000:ee:00.0");  // a device the slices do not have: stale
  auto old = Make();
  old->Start();
  ASSERT_TRUE(WaitFor([&] { return !old->report().stale.empty(); }));
  old->Stop();
  o_.sources = {store::kSourceSysfs, "nvml"};  // the reload adds NVML, not read yet
  auto t = Make();
  t->TakeOver(*old);
  t->Start();
  Publish();                              // sysfs reads, NVML not yet
  ASSERT_TRUE(Rounds(*t, HoldRounds()));  // longer than the hold
  ASSERT_FALSE(RuleFor(9).is_null()) << "nothing deleted before every source has read";
  store::DeviceViews nvml = OpenNvml();
  registry_.SetDeviceViews("nvml", nvml);
  ASSERT_TRUE(WaitFor([&] { return !t->report().stale.empty(); }));
  ASSERT_TRUE(Rounds(*t, 2));
  EXPECT_FALSE(RuleFor(9).is_null()) << "its hold starts once the sources have read";
  EXPECT_TRUE(WaitFor([&] { return RuleFor(9).is_null(); }, std::chrono::seconds(10)));
}

// A source that never reads holds no rule for ever: after the settle limit
// the sources that have read decide.
TEST_F(DeviceTainterLiveTest, ASourceThatNeverReadsHoldsRulesOnlyForTheSettleLimit) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  AddOurs("gpu-1", CardBus(1));
  o_.sources = {store::kSourceSysfs, "nvml"};
  o_.settle_limit = std::chrono::seconds(2);
  const auto start = std::chrono::steady_clock::now();
  auto t = Make();
  t->Start();
  ASSERT_TRUE(WaitFor([&] { return RuleFor(1).is_null(); }, std::chrono::seconds(10)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, o_.settle_limit);
}

TEST_F(DeviceTainterLiveTest, ACardNoSliceNamesGetsNoRuleAndTheReportSaysWhy) {
  // Devices plugins only: no slice at all.
  auto t = Make();
  t->Start();
  SetFault(7, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return StateOf(*t, 7) == "unmapped"; }, std::chrono::seconds(10)));
  EXPECT_NE(Card(t->report(), 7)->why.find("no ResourceSlice of this node"), std::string::npos)
      << Card(t->report(), 7)->why;
  // A slice that names cards 0-6 only (the watch brings it).
  AddSlice(SliceOf("node-a-gpus", 0, 6));
  ASSERT_TRUE(WaitFor([&] { return t->report().slices == 1; }, std::chrono::seconds(10)));
  ASSERT_TRUE(Rounds(*t, 2));
  EXPECT_EQ(StateOf(*t, 7), "unmapped");
  EXPECT_NE(Card(t->report(), 7)->why.find("names it"), std::string::npos);
  EXPECT_EQ(MetricValue(metrics_, "xpu_kubernetes_device_taint_state",
                        {{"bus_id", CardBus(7)}, {"state", "unmapped"}}),
            1);
  // Another node's slice that names it changes nothing.
  AddSlice(SliceOf("node-b-gpus", 7, 7, 1, 1, "node-b"));
  ASSERT_TRUE(Rounds(*t, 3));
  EXPECT_TRUE(Writes().empty());
  // A new generation of the pool that names it: written.
  AddSlice(SliceOf("node-a-gpus-2", 0, 7, 2));
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(7).is_null(); }, std::chrono::seconds(10)));
  EXPECT_EQ(Rules().size(), 1u);
}

// A watch of the slices that answers 200 with lines that are no watch
// event (a proxy's page, a Status object) and ends at once has watched
// nothing: it waits its backoff as a failed one does, and is not resumed
// at once, again and again, against the API server.
TEST_F(DeviceTainterLiveTest, AWatchThatSendsNoEventWaitsItsBackoff) {
  const int watches =
      WatchesInTenRoundsAnswered("<html>upstream connect error</html>\n{\"kind\":\"Status\"}\n");
  EXPECT_GE(watches, 1);
  EXPECT_LE(watches, 8);
}

// A watch that sends an ERROR event other than 410 (a server's internal
// error, not an expired version) after an event has watched, but failed:
// it waits its backoff before the list and watch are asked again, and is
// not resumed at once, again and again. The bookmark before it is an
// event, so it is the ERROR alone that holds it back.
TEST_F(DeviceTainterLiveTest, AWatchErrorEventWaitsItsBackoff) {
  const Json bookmark = {{"type", "BOOKMARK"},
                         {"object",
                          {{"kind", "ResourceSlice"},
                           {"apiVersion", "resource.k8s.io/v1"},
                           {"metadata", {{"resourceVersion", "5"}}}}}};
  const Json error = {{"type", "ERROR"},
                      {"object",
                       {{"kind", "Status"},
                        {"apiVersion", "v1"},
                        {"status", "Failure"},
                        {"reason", "InternalError"},
                        {"code", 500}}}};
  const int watches = WatchesInTenRoundsAnswered(bookmark.dump() + "\n" + error.dump() + "\n");
  EXPECT_GE(watches, 1);
  EXPECT_LE(watches, 8);
}

// A watch that sends an event and closes at once (a bookmark, then the end:
// a broken server or a proxy) was resumed at once, again and again, as fast
// as the server answered: a watch that ends within a second of its start
// now waits its backoff, whatever it sent.
TEST_F(DeviceTainterLiveTest, AWatchThatClosesAtOnceAfterAnEventWaitsItsBackoff) {
  const Json bookmark = {{"type", "BOOKMARK"},
                         {"object",
                          {{"kind", "ResourceSlice"},
                           {"apiVersion", "resource.k8s.io/v1"},
                           {"metadata", {{"resourceVersion", "5"}}}}}};
  const int watches = WatchesInTenRoundsAnswered(bookmark.dump() + "\n");
  EXPECT_GE(watches, 1);
  EXPECT_LE(watches, 8);
}

// A watch answered 410 at once (a server that keeps no version) was listed
// again and watched at once, again and again: it waits its backoff too.
TEST_F(DeviceTainterLiveTest, AWatchGoneAtOnceWaitsItsBackoff) {
  const Json gone = {{"type", "ERROR"},
                     {"object",
                      {{"kind", "Status"},
                       {"apiVersion", "v1"},
                       {"status", "Failure"},
                       {"reason", "Expired"},
                       {"code", 410}}}};
  const int watches = WatchesInTenRoundsAnswered(gone.dump() + "\n");
  EXPECT_GE(watches, 1);
  EXPECT_LE(watches, 8);
}

// The rules' version taken away under a running tainter (a cluster
// upgraded from v1beta2 to v1): the rule list's 404 sends it to discovery
// at once, and it writes to the version served now, never to the one gone.
TEST_F(DeviceTainterLiveTest, ARuleVersionTakenAwayIsFoundAgainAndNothingWrittenToTheOld) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  SetFault(2, {kXid79});
  auto t = Make();
  t->Start();
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(2).is_null(); }, std::chrono::seconds(10)));
  // The round that wrote it stores its report as it ends.
  ASSERT_TRUE(WaitFor([&] { return t->report().rule_version == "v1beta2"; }));
  api_.Control("POST", "served", R"({"v1":["resourceslices","devicetaintrules"]})");
  // The old version's rule list answered 404 (the list is asked every node
  // interval, 1 s): only then is card 3 faulted.
  const size_t asked = api_.Recorded("requests").size();
  auto old_list_refused = [&] {
    const Json requests = api_.Recorded("requests");
    for (size_t i = asked; i < requests.size(); ++i) {
      const std::string path = requests[i].get<std::string>();
      if (path.rfind("/apis/resource.k8s.io/v1beta2/devicetaintrules?", 0) == 0) return true;
    }
    return false;
  };
  ASSERT_TRUE(WaitFor(old_list_refused, std::chrono::seconds(10)));
  SetFault(3, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(3).is_null(); }, std::chrono::seconds(10)))
      << t->report().api;
  EXPECT_EQ(RuleFor(3)["apiVersion"], "resource.k8s.io/v1");
  EXPECT_TRUE(WaitFor([&] { return t->report().rule_version == "v1"; }))
      << t->report().rule_version;
  const Json requests = api_.Recorded("requests");
  for (size_t i = asked; i < requests.size(); ++i) {
    const std::string r = requests[i].get<std::string>();
    EXPECT_FALSE(r.find("/v1beta2/devicetaintrules") != std::string::npos && r[0] != '/')
        << "a write to the version gone: " << r;
  }
}

// A rebuild for another node (--kubernetes.node-name changed by a reload)
// takes nothing the old tainter knew of the server: while the new node's
// rule list fails, it holds no rule of the old node as its own, so it
// deletes none of them as stale (its device is in no slice of the new
// node's, and its card reads healthy now).
TEST_F(DeviceTainterLiveTest, ARebuildForAnotherNodeTakesNoRuleOfTheOldNode) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  AddSlice(SliceOf("node-b-gpus", 0, kCards - 1, 1, 1, "node-b"));
  SetFault(2, {kXid79});
  auto old = Make();
  old->Start();
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(2).is_null(); }, std::chrono::seconds(10)));
  old->Stop();
  SetFault(2, {});
  api_.Control("POST", "fault",
               R"({"prefix":"/apis/resource.k8s.io/v1beta2/devicetaintrules?","method":"GET",
                   "status":500,"times":1000000})");
  k_.node_name = "node-b";
  auto t = Make();
  t->TakeOver(*old);
  t->Start();
  // The hold (1 s) several times over: a rule held as stale is deleted
  // after one.
  ASSERT_TRUE(Rounds(*t, 3 * HoldRounds()));
  EXPECT_FALSE(RuleFor(2).is_null()) << "the old node's rule was deleted";
  EXPECT_EQ(Writes().size(), 1u) << Writes().dump();
}

// What the tainter keeps by a rule's name (a hold's start, a refusal and
// its backoff, the last error) is let go once no card stands for that name
// and no rule holds it: a device renamed again and again (a driver that
// names its devices anew at each restart), its rule refused each time by a
// policy, leaves nothing behind of the names it had.
TEST_F(DeviceTainterLiveTest, WhatIsKeptByNameGoesWithTheName) {
  api_.Control("POST", "fault", R"({"body_contains":"gpu-4","status":403,"times":1000000})");
  SetFault(4, {kXid79});
  auto t = Make();
  t->Start();
  for (int round = 0; round < 10; ++round) {
    Json slice = SliceOf("node-a-gpus", 0, kCards - 1, round + 1);
    const std::string name = "gpu-4-r" + std::to_string(round);
    slice["spec"]["devices"][4]["name"] = name;
    AddSlice(slice);
    ASSERT_TRUE(WaitFor(
        [&] {
          const DeviceTainter::Report r = t->report();
          const auto* c = Card(r, 4);
          return c != nullptr && c->device && c->device->device == name && c->state == "refused";
        },
        std::chrono::seconds(10)))
        << name;
  }
  ASSERT_TRUE(Rounds(*t, 2));
  EXPECT_GE(Writes("create", "refused"), 10);
  // The current name's hold and refusal; nothing of the nine before.
  EXPECT_LE(t->report().names_kept, 3u);
  EXPECT_TRUE(Rules().empty());
}

// A slice list whose every page hands out a `continue` (a server bug, a
// proxy replaying a page) ends after kMaxListPages pages as a failure,
// said, and is retried after its backoff: it did not ask for pages without
// end.
TEST_F(DeviceTainterLiveTest, AListThatNeverEndsIsCutAtItsPageLimit) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  api_.Control("POST", "fault",
               R"({"prefix":"/apis/resource.k8s.io/","path_contains":"limit=","method":"GET",
                   "status":200,"times":1000000,
                   "body":"{\"kind\":\"ResourceSliceList\",\"items\":[],\"metadata\":{\"continue\":\"again\",\"resourceVersion\":\"7\"}}"})");
  auto lists = [&] { return SliceRequests("limit="); };
  auto t = Make();
  t->Start();
  ASSERT_TRUE(
      WaitFor([&] { return t->report().slice_error.find("did not end") != std::string::npos; },
              std::chrono::seconds(30)))
      << t->report().slice_error << "; " << lists() << " pages asked for";
  EXPECT_GE(lists(), kubernetes::kMaxListPages);
  EXPECT_LE(lists(), 3 * kubernetes::kMaxListPages);  // a list or two more, after the backoff
}

TEST_F(DeviceTainterLiveTest, ApiFaultsAreRetriedAndRefusalsSaid) {
  AddSlice(SliceOf("node-a-gpus", 0, kCards - 1));
  // A 500, then a hang longer than the request timeout, on the create.
  api_.Control("POST", "fault",
               R"({"prefix":"/apis/resource.k8s.io/v1beta2/devicetaintrules","method":"POST",
                   "status":500,"times":1})");
  api_.Control("POST", "fault",
               R"({"prefix":"/apis/resource.k8s.io/v1beta2/devicetaintrules","method":"POST",
                   "status":500,"hang":2,"times":1})");
  auto t = Make();
  t->Start();
  SetFault(3, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(3).is_null(); }, std::chrono::seconds(20)));
  EXPECT_EQ(Writes("create", "error"), 2);
  EXPECT_EQ(Writes("create", "ok"), 1);
  // Forbidden: refused, said, retried until RBAC allows it.
  api_.Control("POST", "auth", R"({"status":403,"methods":["POST"]})");
  SetFault(4, {kXid79});
  ASSERT_TRUE(WaitFor([&] { return StateOf(*t, 4) == "refused"; }, std::chrono::seconds(10)));
  EXPECT_NE(Card(t->report(), 4)->why.find("RBAC must allow"), std::string::npos);
  EXPECT_GE(Writes("create", "refused"), 1);
  api_.Control("POST", "auth", R"({"status":200})");
  ASSERT_TRUE(WaitFor([&] { return !RuleFor(4).is_null(); }, std::chrono::seconds(20)));
  // A conflict on an update (someone changed it): listed again, then done.
  api_.Control("POST", "fault",
               R"({"prefix":"/apis/resource.k8s.io/v1beta2/devicetaintrules/","method":"PUT",
                   "status":409,"times":1})");
  SetFault(3, {kReset});  // better: after the hold
  ASSERT_TRUE(WaitFor([&] { return RuleFor(3)["spec"]["taint"]["value"] == "reset_card"; },
                      std::chrono::seconds(20)));
  EXPECT_GE(Writes("update", "error"), 1);
  const auto t0 = std::chrono::steady_clock::now();
  t->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

}  // namespace
}  // namespace xpu::sinks
