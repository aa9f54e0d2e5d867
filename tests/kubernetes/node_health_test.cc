// The Node condition and Events as values: what ConditionOf makes of the
// fault views, the patch and Event bodies, the Node's copy read back, and
// the Events' token bucket in virtual time.
#include "kubernetes/node_health.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/duration.h"

namespace xpu::kubernetes {
namespace {

using Json = nlohmann::json;

store::ActiveFault Fault(const std::string& code, int level, const std::string& level_name) {
  store::ActiveFault f;
  f.code = code;
  f.name = "fault_" + code.substr(2);
  f.level = level;
  f.level_name = level_name;
  return f;
}

std::vector<store::DeviceInfo> Devices() {
  std::vector<store::DeviceInfo> d(3);
  for (int i = 0; i < 3; ++i) {
    d[i].minor = i;
    d[i].bus_id = "0000:0" + std::to_string(i) + ":00.0";
  }
  return d;
}

const FaultSources kAll{true, true, true};

TEST(NodeConditionTest, TrueWithoutCardFaultsFalseWithThemUnknownWithoutSources) {
  std::vector<store::HalDeviceView> hal(2);
  hal[0].minor = 0;
  hal[1].minor = 1;
  hal[1].faults = {Fault("0x80E01801", 2, "restart_job")};  // below restart_card
  NodeCondition c = ConditionOf(kAll, true, Devices(), hal, {});
  EXPECT_EQ(c.status, "True");
  EXPECT_EQ(c.reason, "NoCardFaults");
  EXPECT_EQ(c.message, "no active fault at restart_card or worse (sources: sysfs, pci, kmsg)");

  hal[1].faults.push_back(Fault("0x80E18400", 4, "reset_card"));
  std::vector<store::KmsgDeviceView> kmsg(1);
  kmsg[0].minor = 2;
  kmsg[0].bus_id = "0000:02:00.0";
  kmsg[0].faults = {Fault("0x10DE004F", 6, "isolate_card")};
  c = ConditionOf(kAll, true, Devices(), hal, kmsg);
  EXPECT_EQ(c.status, "False");
  EXPECT_EQ(c.reason, "IsolateCard");  // the worst level's
  // Worst first; the lesser fault is not named; addresses from XDM's list.
  EXPECT_EQ(c.message,
            "2 device(s) need card-level action: xpu 2 (0000:02:00.0): 0x10DE004F "
            "fault_10DE004F [isolate_card, kmsg]; xpu 1 (0000:01:00.0): 0x80E18400 "
            "fault_80E18400 [reset_card, hal]");
  // The same views in another order give the same text (it decides patches).
  std::reverse(hal.begin(), hal.end());
  EXPECT_EQ(ConditionOf(kAll, true, Devices(), hal, kmsg), c);

  c = ConditionOf(FaultSources{}, true, Devices(), {}, {});
  EXPECT_EQ(c.status, "Unknown");
  EXPECT_EQ(c.reason, "NoFaultSource");
  // XDM's list not known: the kernel log's silence is no health; a sysfs
  // fault (keyed by minor, no join needed) still says False.
  c = ConditionOf(kAll, false, {}, {}, {});
  EXPECT_EQ(c.status, "Unknown");
  EXPECT_EQ(c.reason, "DeviceListUnknown");
  EXPECT_EQ(ConditionOf({true, false, false}, false, {}, {}, {}).status, "True");
  EXPECT_EQ(ConditionOf(kAll, false, {}, hal, {}).status, "False");
  EXPECT_EQ(ConditionOf({false, false, true}, true, Devices(), {}, {}).message,
            "no active fault at restart_card or worse (sources: kmsg)");
}

// Many faults: the message stays within the limit and says how many more.
TEST(NodeConditionTest, ALongListIsCutAndCounted) {
  std::vector<store::HalDeviceView> hal(500);
  for (int i = 0; i < 500; ++i) {
    hal[i].minor = i;
    hal[i].faults = {Fault("0x80E18400", 4, "reset_card")};
  }
  const NodeCondition c = ConditionOf(kAll, true, {}, hal, {});
  EXPECT_LE(c.message.size(), kMaxMessageBytes);
  EXPECT_EQ(c.message.rfind("500 device(s) need card-level action: xpu 0: 0x80E18400", 0), 0u)
      << c.message;
  const size_t more = c.message.find("; and ");
  ASSERT_NE(more, std::string::npos);
  const size_t named = static_cast<size_t>(std::count(c.message.begin(), c.message.end(), '['));
  EXPECT_EQ(c.message.substr(more), "; and " + std::to_string(500 - named) + " more");
  // One huge name is cut at a character boundary.
  hal.resize(1);
  hal[0].faults[0].name = std::string(601, 'a');
  for (int i = 0; i < 300; ++i) hal[0].faults[0].name += "\xC3\xA9";  // é
  const NodeCondition cut = ConditionOf(kAll, true, {}, hal, {});
  EXPECT_LE(cut.message.size(), kMaxMessageBytes);
  EXPECT_EQ(cut.message.substr(cut.message.size() - 5), "\xC3\xA9...");
  EXPECT_NO_THROW(Json(cut.message).dump()) << "cut inside a character";
}

TEST(NodeConditionTest, ReasonsAreTheLevelsInCamelCaseAndRankAsTheLadder) {
  EXPECT_EQ(ReasonOf("isolate_after_job"), "IsolateAfterJob");
  EXPECT_EQ(ReasonOf("restart_card"), "RestartCard");
  EXPECT_EQ(ReasonOf(""), "");
  const char* ladder[] = {"restart_card", "reset_card", "isolate_after_job", "isolate_card"};
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(SeverityOf({"False", ReasonOf(ladder[i]), ""}), 3 + i) << ladder[i];
  EXPECT_EQ(SeverityOf({"True", "NoCardFaults", ""}), 0);
  EXPECT_EQ(SeverityOf({"Unknown", "NoFaultSource", ""}), 0);
  EXPECT_EQ(SeverityOf({"False", "SetByHand", ""}), 3);
}

TEST(NodeConditionTest, PatchSetsOnlyThisConditionAndTheNodeReadsBack) {
  const NodeCondition c{"False", "ResetCard", "1 device(s) need card-level action: \"x\""};
  const Json patch = Json::parse(ConditionPatch(c, "2026-12-01T21:00:00Z", "2026-12-01T20:00:00Z"));
  EXPECT_EQ(patch, Json::parse(R"({"status":{"conditions":[{"type":"XpuDevicesHealthy",
      "status":"False","reason":"ResetCard",
      "message":"1 device(s) need card-level action: \"x\"",
      "lastHeartbeatTime":"2026-12-01T21:00:00Z","lastTransitionTime":"2026-12-01T20:00:00Z"}]}})"));
  Json node = {{"kind", "Node"},
               {"metadata", {{"name", "node-a"}, {"uid", "u-1"}, {"labels", {{"a", "b"}}}}},
               {"status",
                {{"images", Json::array({{{"names", {"big"}}}})},
                 {"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
  NodeFacts f;
  ASSERT_TRUE(ParseNodeFacts(node.dump(), &f).ok());
  EXPECT_EQ(f.uid, "u-1");
  EXPECT_FALSE(f.condition.has_value());
  node["status"]["conditions"].push_back(patch["status"]["conditions"][0]);
  ASSERT_TRUE(ParseNodeFacts(node.dump(), &f).ok());
  ASSERT_TRUE(f.condition.has_value());
  EXPECT_EQ(*f.condition, c);
  EXPECT_EQ(f.transition, "2026-12-01T20:00:00Z");
  // Not a Node: refused, nothing kept.
  for (const char* bad : {"", "[1]", "{\"kind\":\"Pod\",\"metadata\":{}}", "{\"kind\":\"Node\"}"}) {
    NodeFacts out;
    out.uid = "kept";
    EXPECT_FALSE(ParseNodeFacts(bad, &out).ok()) << bad;
    EXPECT_EQ(out.uid, "kept") << bad;
  }
  // A Node with fields of the wrong types, or a uid too long to be one:
  // what is usable is kept.
  for (const char* odd : {"{\"metadata\":{\"uid\":1},\"status\":{\"conditions\":{}}}",
                          "{\"metadata\":{},\"status\":{\"conditions\":[1,{\"type\":2}]}}"}) {
    NodeFacts out;
    ASSERT_TRUE(ParseNodeFacts(odd, &out).ok()) << odd;
    EXPECT_TRUE(out.uid.empty() && !out.condition) << odd;
  }
  NodeFacts long_uid;
  ASSERT_TRUE(
      ParseNodeFacts("{\"metadata\":{\"uid\":\"" + std::string(200, 'u') + "\"}}", &long_uid).ok());
  EXPECT_TRUE(long_uid.uid.empty());
  EXPECT_EQ(Rfc3339(std::chrono::system_clock::time_point(std::chrono::seconds(1796160738))),
            "2026-12-01T21:32:18Z");
}

TEST(NodeEventTest, AnEventNamesTheNodeTheDeviceTheCodeAndTheAction) {
  store::FaultRaise r;
  r.source = "kmsg";
  r.minor = "3";
  r.uuid = "GPU-1";
  r.bus_id = "0000:3b:00.0";
  r.fault = Fault("0x10DE004F", 6, "isolate_card");
  r.fault.description = "the GPU can no longer be reached";
  r.fault.action = "Take the card out of service.";
  r.at = std::chrono::system_clock::time_point(std::chrono::seconds(1796160738));
  const Json e = Json::parse(EventBody(r, "node-a", "u-1"));
  EXPECT_EQ(e["kind"], "Event");
  EXPECT_EQ(e["metadata"]["namespace"], "default");
  // Named from the raise: the same raise (a retry) gets the same name, another one another.
  const std::string name = e["metadata"]["name"];
  EXPECT_EQ(name.rfind("node-a.xpu-", 0), 0u) << name;
  EXPECT_EQ(name.size(), std::string("node-a.xpu-").size() + 16);
  EXPECT_EQ(Json::parse(EventBody(r, "node-a", "u-1"))["metadata"]["name"], name);
  store::FaultRaise later = r;
  later.at += std::chrono::seconds(1);
  EXPECT_NE(Json::parse(EventBody(later, "node-a", "u-1"))["metadata"]["name"], name);
  EXPECT_EQ(e["involvedObject"],
            Json::parse(R"({"apiVersion":"v1","kind":"Node","name":"node-a","uid":"u-1"})"));
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_EQ(e["reason"], "IsolateCard");
  EXPECT_EQ(e["message"],
            "xpu 3 (0000:3b:00.0): 0x10DE004F fault_10DE004F [isolate_card, kmsg] on GPU-1. the "
            "GPU can no longer be reached Action: Take the card out of service.");
  EXPECT_EQ(e["firstTimestamp"], "2026-12-01T21:32:18Z");
  EXPECT_EQ(e["source"]["host"], "node-a");
  EXPECT_EQ(e["count"], 1);
  // Without the uid (no read of the Node worked yet), the name stands in,
  // as the kubelet's own Node events do.
  EXPECT_EQ(Json::parse(EventBody(r, "node-a", ""))["involvedObject"]["uid"], "node-a");
  // A device only the pci backend sees is named by its address.
  store::FaultRaise pci_only = r;
  pci_only.minor = pci_only.uuid = "";
  EXPECT_EQ(Json::parse(EventBody(pci_only, "node-a", "u-1"))["message"].get<std::string>().rfind(
                "PCI device 0000:3b:00.0: 0x10DE004F", 0),
            0u);
  r.fault.action = std::string(5000, 'x');
  EXPECT_LE(
      Json::parse(EventBody(r, std::string(300, 'n'), ""))["message"].get<std::string>().size(),
      kMaxMessageBytes);
  EXPECT_LE(Json::parse(EventBody(r, std::string(300, 'n'), ""))["metadata"]["name"]
                .get<std::string>()
                .size(),
            253u);
}

TEST(EventLimiterTest, ABurstThenOnePerRefill) {
  using Clock = EventLimiter::Clock;
  EventLimiter l(3, std::chrono::seconds(30));
  const Clock::time_point t0{std::chrono::hours(1)};
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(l.Allow(t0)) << i;
  EXPECT_FALSE(l.Allow(t0));
  EXPECT_FALSE(l.Allow(t0 + std::chrono::seconds(29)));
  EXPECT_TRUE(l.Allow(t0 + std::chrono::seconds(30)));
  EXPECT_FALSE(l.Allow(t0 + std::chrono::seconds(31)));
  EXPECT_TRUE(l.Allow(t0 + std::chrono::seconds(60)));
  // A long quiet time refills the burst, no more.
  const Clock::time_point later = t0 + std::chrono::hours(5);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(l.Allow(later)) << i;
  EXPECT_FALSE(l.Allow(later));
}

}  // namespace
}  // namespace xpu::kubernetes
