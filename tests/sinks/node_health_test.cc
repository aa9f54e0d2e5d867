// The Node condition and Events as values: what ConditionOf makes of the
// fault views, the patch and Event bodies, the Node's copy read back, and
// the Events' token bucket in virtual time.
#include "sinks/node_health.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/duration.h"

namespace xpu::sinks {
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

using store::Sight;
using store::SourceView;

// A card as a source's view shows it: keyed by its address (or its minor),
// read this sample, healthy by its own word.
SourceView::Device Dev(int32_t minor, const std::string& bus,
                       std::vector<store::ActiveFault> faults = {}) {
  return {bus.empty() ? "minor/" + std::to_string(minor) : bus,
          minor,
          bus,
          true,
          true,
          std::move(faults)};
}

// A source that sees, with `devices`; kmsg's addresses name no card.
SourceView View(const std::string& source, std::vector<SourceView::Device> devices = {},
                Sight sight = Sight::kSeeing) {
  SourceView v;
  v.source = source;
  v.sight = sight;
  v.why = sight == Sight::kBlind ? "cannot open it" : "";
  v.needs_inventory = source == "kmsg";
  v.devices = std::move(devices);
  return v;
}

// Every device of Devices(), with no fault.
std::vector<SourceView::Device> All() {
  std::vector<SourceView::Device> d;
  for (const store::DeviceInfo& i : Devices()) d.push_back(Dev(i.minor, i.bus_id));
  return d;
}

TEST(NodeConditionTest, TrueWithoutCardFaultsFalseWithThemUnknownWithoutSources) {
  std::vector<SourceView> views = {View("sysfs", All()), View("pci", All()), View("kmsg", All())};
  views[0].devices[1].faults = {Fault("0x80E01801", 2, "restart_job")};  // below restart_card
  NodeCondition c = ConditionOf(views, true);
  EXPECT_EQ(c.status, "True");
  EXPECT_EQ(c.reason, "NoCardFaults");
  EXPECT_EQ(c.message, "no active fault at restart_card or worse (sources: kmsg, pci, sysfs)");

  views[0].devices[1].faults.push_back(Fault("0x80E18400", 4, "reset_card"));
  views[2].devices[2].faults = {Fault("0x10DE004F", 6, "isolate_card")};
  c = ConditionOf(views, true);
  EXPECT_EQ(c.status, "False");
  EXPECT_EQ(c.reason, "IsolateCard");  // the worst level's
  // Worst first; the lesser fault is not named; addresses from the views.
  EXPECT_EQ(c.message,
            "2 device(s) need card-level action: xpu 2 (0000:02:00.0): 0x10DE004F "
            "fault_10DE004F [isolate_card, kmsg]; xpu 1 (0000:01:00.0): 0x80E18400 "
            "fault_80E18400 [reset_card, sysfs]");
  // The same views in another order give the same text (it decides patches).
  std::reverse(views.begin(), views.end());
  EXPECT_EQ(ConditionOf(views, true), c);

  c = ConditionOf({}, true);
  EXPECT_EQ(c.status, "Unknown");
  EXPECT_EQ(c.reason, "NoFaultSource");
  // No inventory known: the kernel log's silence is no health, nor are the
  // other sources' (minors chosen, and none named: they may list no chosen
  // card); a sysfs fault (keyed by minor, no join needed) still says False.
  c = ConditionOf({View("sysfs"), View("pci"), View("kmsg")}, false);
  EXPECT_EQ(c.status, "Unknown");
  EXPECT_EQ(c.reason, "DeviceListUnknown");
  c = ConditionOf({View("pci")}, false);
  EXPECT_EQ(c.status, "Unknown");
  EXPECT_EQ(c.reason, "DeviceListUnknown");
  EXPECT_EQ(c.message,
            "no inventory of the cards yet: neither XDM's list nor a source that names cards by "
            "minor has named the ones chosen (--xdm.devices)");
  std::vector<SourceView::Device> sick = All();
  sick[0].faults = {Fault("0x80E18400", 4, "reset_card")};
  EXPECT_EQ(ConditionOf({View("sysfs", sick), View("kmsg")}, false).status, "False");
  EXPECT_EQ(ConditionOf({View("kmsg", All())}, true).message,
            "no active fault at restart_card or worse (sources: kmsg)");
}

// The issue that made this model: the kernel log cannot be read, or the
// sysfs tree went with a crashed driver, and the card had a reset_card
// fault. Neither may read True; a source that sees still says False.
TEST(NodeConditionTest, ABlindOrStaleSourceIsNeverTrueAndHidesNoFault) {
  for (Sight sight : {Sight::kBlind, Sight::kStale, Sight::kNotYet}) {
    const NodeCondition c = ConditionOf({View("kmsg", All(), sight)}, true);
    EXPECT_EQ(c.status, "Unknown") << store::SightName(sight);
    EXPECT_EQ(c.reason.rfind("Kmsg", 0), 0u) << c.reason;
  }
  std::vector<SourceView::Device> sick = All();
  sick[1].faults = {Fault("0x80E18400", 4, "reset_card")};
  // The blind source's own last faults are no evidence: Unknown, not True.
  NodeCondition c = ConditionOf({View("sysfs", sick, Sight::kBlind)}, true);
  EXPECT_EQ(c.status, "Unknown");
  EXPECT_EQ(c.reason, "SysfsBlind");
  EXPECT_EQ(c.message, "device health is not known: sysfs cannot see (cannot open it)");
  // A blind neighbour does not hide a fault a seeing source shows.
  c = ConditionOf({View("kmsg", All(), Sight::kBlind), View("sysfs", sick)}, true);
  EXPECT_EQ(c.status, "False");
  EXPECT_EQ(c.reason, "ResetCard");
  // A card a source covers and did not see: Unknown.
  std::vector<SourceView::Device> two = All();
  two.back().seen = false;
  two.back().healthy.reset();
  c = ConditionOf({View("pci", two), View("sysfs", All())}, true);
  EXPECT_EQ(c.status, "Unknown");
  EXPECT_EQ(c.reason, "DeviceNotSeen");
  EXPECT_EQ(c.message,
            "1 device(s) are not seen by every source that covers them: pci does not see xpu 2 "
            "(0000:02:00.0)");
}

// A card of the inventory that no source lists (an XDM card without an
// address while only pci and kmsg run): Unknown, after every other Unknown
// and never over a fault; listed by any source, even one that did not read
// it, it is covered.
TEST(NodeConditionTest, ACardNoSourceCoversIsUnknown) {
  store::HealthPicture h{{View("pci", All()), View("kmsg", All())}, {}, true};
  for (const store::DeviceInfo& d : Devices()) {
    store::InventoryDevice card;
    card.key = card.bus_id = d.bus_id;
    card.minor = d.minor;
    h.inventory.push_back(card);
  }
  EXPECT_EQ(ConditionOf(h).status, "True");
  store::InventoryDevice bare;
  bare.key = "minor/7";
  bare.minor = 7;
  h.inventory.push_back(bare);
  bare.key = "uuid/GPU-1";
  bare.minor = -1;
  bare.uuid = "GPU-1";
  h.inventory.push_back(bare);
  NodeCondition c = ConditionOf(h);
  EXPECT_EQ(c.status, "Unknown");
  EXPECT_EQ(c.reason, "DeviceNotCovered");
  EXPECT_EQ(c.message,
            "2 device(s) are covered by no health source that runs: xpu 7; device uuid/GPU-1");
  EXPECT_EQ(SeverityOf(c), 0) << "a view lags a list by one sample, as DeviceNotSeen";
  // Not seen by a source that covers it comes first; a fault, before both.
  h.views[0].devices[0].seen = false;
  EXPECT_EQ(ConditionOf(h).reason, "DeviceNotSeen");
  h.views[1].devices[1].faults = {Fault("0x10DE004F", 6, "isolate_card")};
  EXPECT_EQ(ConditionOf(h).status, "False");
  // The uncovered card listed by a source that could not read it: covered.
  h.views[1].devices[1].faults.clear();
  h.views[0].devices[0].seen = true;
  h.views[0].devices.push_back(Dev(7, ""));
  h.views[0].devices.back().seen = false;
  h.views[0].devices.push_back({"uuid/GPU-1", -1, "", true, true, {}});
  EXPECT_EQ(ConditionOf(h).reason, "DeviceNotSeen");
  h.views[0].devices[3].seen = true;
  EXPECT_EQ(ConditionOf(h).status, "True");
}

// A read that fails keeps the faults last read: the card is not seen, but
// its card-level fault still says False (a failed read is no recovery).
// The card's own health bit counts: unhealthy with no fault code is False.
TEST(NodeConditionTest, AFailedReadKeepsFalseAndAnUnhealthyBitIsFalse) {
  std::vector<SourceView::Device> d = All();
  d[1].faults = {Fault("0x80E18400", 4, "reset_card")};
  d[1].seen = false;
  d[1].healthy.reset();
  NodeCondition c = ConditionOf({View("sysfs", d)}, true);
  EXPECT_EQ(c.status, "False");
  EXPECT_EQ(c.reason, "ResetCard");
  d = All();
  d[2].healthy = false;
  c = ConditionOf({View("sysfs", d)}, true);
  EXPECT_EQ(c.status, "False");
  EXPECT_EQ(c.reason, "DeviceUnhealthy");
  EXPECT_EQ(c.message,
            "1 device(s) need card-level action: xpu 2 (0000:02:00.0): reports itself unhealthy "
            "[unhealthy, sysfs]");
  EXPECT_EQ(SeverityOf(c), store::kUnhealthyFaultLevel);
  // A fault of the same level is named first.
  d[0].faults = {Fault("0x80000003", 3, "restart_card")};
  c = ConditionOf({View("sysfs", d)}, true);
  EXPECT_EQ(c.reason, "RestartCard");
}

// A card no layer names by a minor (XDM down, a card only the bus shows) is
// judged all the same, named by its address.
TEST(NodeConditionTest, AFaultOnACardNoLayerNamesCounts) {
  std::vector<SourceView::Device> d = All();
  d.push_back(Dev(-1, "0000:99:00.0", {Fault("0x10DE004F", 6, "isolate_card")}));
  const NodeCondition c = ConditionOf({View("kmsg", d)}, true);
  EXPECT_EQ(c.status, "False");
  EXPECT_EQ(c.message,
            "1 device(s) need card-level action: PCI device 0000:99:00.0: 0x10DE004F "
            "fault_10DE004F [isolate_card, kmsg]");
}

// Every combination for up to four sources and two cards, against the rules
// table of docs/hal.md ("The Node condition") written out plainly, not
// ConditionOf's code: each source seeing, blind, stale or not yet (four
// sources: the first three); each card with no fault, one below card level
// or one at it (shown by the source of its index), its own health bit good
// or bad (by that source), named by a minor or only by its address, and, at
// the next source, read this sample, covered and not read (a failed read:
// the faults last read kept) or not covered at all (with one source: by none); an inventory known
// or not.
TEST(NodeConditionTest, EveryCombinationOfSightsFaultsAndCoverageFollowsTheRules) {
  // One thread, pure logic, 427,680 combinations: ThreadSanitizer has
  // nothing to judge here and at -O0 takes minutes (the plain build walks
  // it all). Under AddressSanitizer one combination in seven (kStride),
  // spread evenly over every dimension (a prime stride): the memory checks
  // see each code path the walk takes, the plain build checks every answer.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
  GTEST_SKIP() << "single-threaded exhaustive walk: run by the plain build (ASan: a part)";
#endif
#if __has_feature(address_sanitizer)
#define XPU_NODE_CONDITION_STRIDE 7
#endif
#endif
#ifdef XPU_NODE_CONDITION_STRIDE
  constexpr size_t kStride = XPU_NODE_CONDITION_STRIDE;
#else
  constexpr size_t kStride = 1;
#endif
  constexpr int kCards = 2, kStates = 36;  // 3 faults x 2 bits x 2 names x 3 at the next source
  size_t combination = 0;
  const char* names[] = {"sysfs", "pci", "kmsg", "nvml"};
  const Sight sights[] = {Sight::kSeeing, Sight::kBlind, Sight::kStale, Sight::kNotYet};
  size_t walked = 0;
  for (int n = 1; n <= 4; ++n) {
    const int kinds = n == 4 ? 3 : 4;
    int source_combos = 1;
    for (int i = 0; i < n; ++i) source_combos *= kinds;
    for (int sc = 0; sc < source_combos; ++sc) {
      for (int dc = 0; dc < kStates * kStates * 2; ++dc) {
        if (combination++ % kStride != 0) continue;
        const bool known = dc % 2 == 0;
        std::vector<SourceView> views;
        for (int i = 0, x = sc; i < n; ++i, x /= kinds)
          views.push_back(View(names[i], {}, sights[x % kinds]));
        // The rules table, row by row.
        bool faulted = false;     // 1. a card-level fault or a bad health bit, seen by a seer
        bool not_seeing = false;  // 2. a source blind, stale or not yet
        const bool no_inventory = !known;  // 3. no inventory known
        bool unseen = false;               // 4. a covered card not read this sample
        bool uncovered = false;            // 5. a card of the inventory no source lists
        for (int i = 0; i < n; ++i) not_seeing |= views[i].sight != Sight::kSeeing;
        store::HealthPicture health;
        health.inventory_known = known;
        for (int d = 0, x = dc / 2; d < kCards; ++d, x /= kStates) {
          const int y = x % kStates;
          const int fault = y % 3, bad_bit = (y / 3) % 2, unnamed = (y / 6) % 2, at_next = y / 12;
          const int shower = d % n;      // the source that shows its fault and bit
          const int next = (d + 1) % n;  // the source that may not read or cover it
          const std::string bus = "0000:0" + std::to_string(d) + ":00.0";
          store::InventoryDevice card;
          card.key = card.bus_id = bus;
          card.minor = unnamed ? -1 : d;
          health.inventory.push_back(card);
          if (n == 1 && at_next == 2) uncovered = true;  // its one source does not list it
          for (int i = 0; i < n; ++i) {
            if (i == next && at_next == 2) continue;  // not covered
            SourceView::Device dev = Dev(unnamed ? -1 : d, bus);
            if (i == shower && fault == 1) dev.faults = {Fault("0x00000001", 2, "restart_job")};
            if (i == shower && fault == 2) dev.faults = {Fault("0x00000002", 4, "reset_card")};
            if (i == shower && bad_bit) dev.healthy = false;
            if (i == next && at_next == 1) {  // covered, its read failed: faults kept
              dev.seen = false;
              dev.healthy.reset();
            }
            views[i].devices.push_back(dev);
          }
          const bool shown = !(shower == next && at_next == 2);
          const bool read = !(shower == next && at_next != 0);
          if (views[shower].sight == Sight::kSeeing && ((fault == 2 && shown) || (bad_bit && read)))
            faulted = true;
          if (at_next == 1) unseen = true;
        }
        health.views = views;
        const NodeCondition c = ConditionOf(health);
        const bool unknown = not_seeing || no_inventory || unseen || uncovered;
        const std::string want = faulted ? "False" : unknown ? "Unknown" : "True";
        ++walked;
        if (c.status != want) {
          ADD_FAILURE() << n << " sources, combo " << sc << "/" << dc << ": " << c.status << " ("
                        << c.reason << ": " << c.message << "), want " << want;
          return;
        }
        if (unknown) {
          ASSERT_NE(c.status, "True");  // never True where anything could not be seen
        }
      }
    }
  }
  const size_t all = (4u + 16u + 64u + 81u) * kStates * kStates * 2u;
  EXPECT_EQ(combination, all);
  EXPECT_EQ(walked, (all + kStride - 1) / kStride);
}

// Many faults: the message stays within the limit and says how many more.
TEST(NodeConditionTest, ALongListIsCutAndCounted) {
  std::vector<SourceView::Device> many;
  for (int i = 0; i < 500; ++i) many.push_back(Dev(i, "", {Fault("0x80E18400", 4, "reset_card")}));
  std::vector<SourceView> views = {View("sysfs", many)};
  const NodeCondition c = ConditionOf(views, true);
  EXPECT_LE(c.message.size(), kMaxMessageBytes);
  EXPECT_EQ(c.message.rfind("500 device(s) need card-level action: xpu 0: 0x80E18400", 0), 0u)
      << c.message;
  const size_t more = c.message.find("; and ");
  ASSERT_NE(more, std::string::npos);
  const size_t named = static_cast<size_t>(std::count(c.message.begin(), c.message.end(), '['));
  EXPECT_EQ(c.message.substr(more), "; and " + std::to_string(500 - named) + " more");
  // One huge name is cut at a character boundary.
  views[0].devices.resize(1);
  std::string& name = views[0].devices[0].faults[0].name;
  name = std::string(601, 'a');
  for (int i = 0; i < 300; ++i) name += "\xC3\xA9";  // é
  const NodeCondition cut = ConditionOf(views, true);
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
  // Unknown ranks above True: True to Unknown is patched at once, the way
  // back waits its hold.
  EXPECT_EQ(SeverityOf({"Unknown", "NoFaultSource", ""}), 1);
  EXPECT_EQ(SeverityOf({"Unknown", "KmsgBlind", ""}), 1);
  EXPECT_EQ(SeverityOf({"Unknown", "DeviceNotSeen", ""}), 0);  // held: a view lags a new list
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
}  // namespace xpu::sinks
