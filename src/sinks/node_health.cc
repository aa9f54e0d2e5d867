#include "sinks/node_health.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "common/duration.h"
#include "common/label.h"
#include "kubernetes/pod_watcher.h"
#include "sinks/device_taints.h"

namespace xpu::sinks {

void SettleWait::Begin(const store::HealthViewPort& registry, Clock::time_point now) {
  started_ = now;
  at_start_ = registry.fault_views_set();
  settled_ = false;
}

bool SettleWait::Settled(const store::HealthViewPort& registry, Clock::time_point now) {
  if (settled_) return true;
  if (now - started_ >= limit_) return settled_ = true;
  // Views published since the start (a reload may have switched a backend
  // on whose last view, from before, is gone): the registry joins each to
  // the inventory as it is now, so one is enough. A source that says it
  // cannot see has spoken too: it is Unknown's reason.
  const store::FaultViewsSet set = registry.fault_views_set();
  std::map<std::string, store::Sight> sight;
  for (const store::SourceView& v : registry.SourceViews()) sight[v.source] = v.sight;
  for (const std::string& source : sources_) {
    auto it = sight.find(source);
    const bool blind = it != sight.end() && it->second == store::Sight::kBlind;
    if (set.of(source) < at_start_.of(source) + 1 && !blind) return false;
  }
  return settled_ = true;
}
namespace {

using Json = nlohmann::json;

// One fault worth naming in the condition's message.
struct Named {
  int level = 0;
  bool bit = false;  // the card's own health bit, not a fault: after faults of its level
  std::string key;   // the card's (the inventory's)
  int32_t minor = 0;
  std::string source, code, level_name, text;
  bool operator<(const Named& o) const {
    return std::tie(o.level, bit, minor, key, source, code) <
           std::tie(level, o.bit, o.minor, o.key, o.source, o.code);
  }
};

// A card as the messages name it: "xpu 3 (0000:3b:00.0)"; one no layer
// names by a minor by its address, "PCI device 0000:3b:00.0" (or, without
// one, by the inventory's key: "device uuid/GPU-...").
std::string CardName(const std::string& minor, const std::string& bus_id, const std::string& key) {
  if (!minor.empty()) return "xpu " + minor + (bus_id.empty() ? "" : " (" + bus_id + ")");
  return !bus_id.empty() || key.empty() ? "PCI device " + bus_id : "device " + key;
}
std::string CardName(int32_t minor, const std::string& bus_id, const std::string& key) {
  return CardName(minor >= 0 ? std::to_string(minor) : std::string(), bus_id, key);
}

template <typename Minor>
std::string Describe(const Minor& minor, const std::string& bus_id, const store::ActiveFault& f,
                     const std::string& source, const std::string& key = "") {
  return CardName(minor, bus_id, key) + ": " + f.code + " " + f.name + " [" + f.level_name + ", " +
         source + "]";
}

// Valid UTF-8 (what the Node will read back), cut to kMaxMessageBytes at a
// character boundary.
std::string Cut(std::string s) {
  const bool longer = s.size() > kMaxMessageBytes;
  SanitizeLabelValue(&s, longer ? kMaxMessageBytes - 3 : kMaxMessageBytes);
  return longer ? s + "..." : s;
}

bool KeptNodePath(const std::string& path) {
  static const char* const kKept[] = {"metadata.uid", "metadata.name", "kind", "status.conditions"};
  for (const char* k : kKept)
    if (kubernetes::OnPathTo(path, k, /*whole=*/true)) return true;
  return false;
}

}  // namespace

int SeverityOf(const NodeCondition& c) {
  // A card newly in the inventory is missing from a source's view until its
  // next sample: that Unknown waits its hold like a recovery, so a
  // one-interval lag is never patched. Any other Unknown is worse than
  // True: a blind source never holds True.
  if (c.status == "Unknown")
    return c.reason == "DeviceNotSeen" || c.reason == "DeviceNotCovered" ? 0 : 1;
  if (c.status != "False") return 0;
  static const char* const kLadder[] = {"RestartCard", "ResetCard", "IsolateAfterJob",
                                        "IsolateCard"};
  for (int i = 0; i < 4; ++i)
    if (c.reason == kLadder[i]) return store::kUnhealthyFaultLevel + i;
  return store::kUnhealthyFaultLevel;  // False for a reason not ours: the least of them
}

std::string ReasonOf(std::string_view level_name) {
  std::string out;
  bool upper = true;
  for (char c : level_name) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out;
}

namespace {

// What a source that cannot see says of itself, for the Unknown message.
std::string NotSeeing(const store::SourceView& v) {
  switch (v.sight) {
    case store::Sight::kBlind:
      return v.source + " cannot see (" + v.why + ")";
    case store::Sight::kStale:
      return v.source + " has no fresh view (its sampler stopped answering)";
    default:
      return v.source + " has not looked yet";
  }
}

std::string ReasonOfSight(const store::SourceView& v) {
  const char* what = v.sight == store::Sight::kBlind   ? "Blind"
                     : v.sight == store::Sight::kStale ? "Stale"
                                                       : "NotReady";
  return ReasonOf(v.source) + what;
}

// The condition's message for the faults `named` (sorted, worst first):
// as many as fit kMaxMessageBytes, and how many more.
std::string FaultsMessage(const std::vector<Named>& named) {
  std::map<std::string, bool> sick;
  for (const Named& n : named) sick[n.key] = true;
  std::string message = std::to_string(sick.size()) + " device(s) need card-level action: ";
  size_t shown = 0;
  for (const Named& n : named) {
    const std::string rest =
        "; and " + std::to_string(named.size() - shown) + " more";  // if this one does not fit
    const std::string next = (shown == 0 ? "" : "; ") + n.text;
    if (message.size() + next.size() + rest.size() > kMaxMessageBytes && shown > 0) {
      message += rest;
      break;
    }
    message += next;
    ++shown;
  }
  return message;
}

// 5. Every card of the inventory is covered by some source (all see, by
// now): one none lists has nothing to say it is healthy.
std::optional<NodeCondition> NotCovered(const std::vector<store::SourceView>& views,
                                        const std::vector<store::InventoryDevice>& inventory) {
  std::set<std::string> covered;
  for (const store::SourceView& v : views)
    for (const store::SourceView::Device& d : v.devices) covered.insert(d.key);
  std::string uncovered;
  size_t bare = 0;
  for (const store::InventoryDevice& d : inventory) {
    if (covered.count(d.key) != 0) continue;
    if (++bare <= 8)
      uncovered += (uncovered.empty() ? "" : "; ") + CardName(d.minor, d.bus_id, d.key);
  }
  if (bare == 0) return std::nullopt;
  return NodeCondition{"Unknown", "DeviceNotCovered",
                       Cut(std::to_string(bare) +
                           " device(s) are covered by no health source that runs: " + uncovered +
                           (bare > 8 ? "; ..." : ""))};
}

}  // namespace

NodeCondition ConditionOf(const std::vector<store::SourceView>& views, bool inventory_known) {
  store::HealthPicture health{views, {}, inventory_known};
  std::set<std::string> keys;
  for (const store::SourceView& v : views)
    for (const store::SourceView::Device& d : v.devices)
      if (keys.insert(d.key).second) {
        store::InventoryDevice card;
        card.key = d.key;
        card.bus_id = d.bus_id;
        card.minor = d.minor;
        health.inventory.push_back(std::move(card));
      }
  return ConditionOf(health);
}

NodeCondition ConditionOf(const store::HealthPicture& health) {
  const std::vector<store::SourceView>& views = health.views;
  if (views.empty())
    return {"Unknown", "NoFaultSource",
            "no HAL backend reads the devices' faults (--hal): their health is not known here"};
  std::vector<const store::SourceView*> sorted;
  sorted.reserve(views.size());
  for (const store::SourceView& v : views) sorted.push_back(&v);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto* a, const auto* b) { return a->source < b->source; });
  // 1. A card-level fault, or a card that says it is unhealthy, that a
  // source which sees shows: False, whatever its neighbours cannot see. A
  // card it could not read this sample keeps the faults last read (a failed
  // read is no recovery). A blind or stale source's faults are no evidence
  // either way.
  std::vector<Named> named;
  for (const store::SourceView* v : sorted) {
    if (v->sight != store::Sight::kSeeing) continue;
    for (const store::SourceView::Device& d : v->devices) {
      bool faulted = false;
      for (const store::ActiveFault& f : d.faults) {
        if (f.level < store::kUnhealthyFaultLevel) continue;
        faulted = true;
        named.push_back({f.level, false, d.key, d.minor, v->source, f.code, f.level_name,
                         Describe(d.minor, d.bus_id, f, v->source, d.key)});
      }
      if (!faulted && d.healthy == false) {
        store::ActiveFault bit;
        bit.name = "reports itself unhealthy";
        bit.level_name = "unhealthy";
        std::string text = Describe(d.minor, d.bus_id, bit, v->source, d.key);
        text.replace(text.find(":  "), 3, ": ");
        named.push_back({store::kUnhealthyFaultLevel, true, d.key, d.minor, v->source, "",
                         "device_unhealthy", std::move(text)});
      }
    }
  }
  if (!named.empty()) {
    std::sort(named.begin(), named.end());
    return {"False", ReasonOf(named.front().level_name), Cut(FaultsMessage(named))};
  }
  // 2. A source that cannot see: nothing can be said of health.
  std::string blind;
  std::string reason;
  for (const store::SourceView* v : sorted) {
    if (v->sight == store::Sight::kSeeing) continue;
    if (reason.empty()) reason = ReasonOfSight(*v);
    blind += (blind.empty() ? "" : "; ") + NotSeeing(*v);
  }
  if (!reason.empty()) return {"Unknown", reason, Cut("device health is not known: " + blind)};
  // 3. Without an inventory the cards judged may not be all there are (and
  // the kernel log's addresses name none): silence is no health.
  std::string joins;
  for (const store::SourceView* v : sorted)
    if (v->needs_inventory) joins += (joins.empty() ? "" : ", ") + v->source;
  if (!health.inventory_known)
    return {"Unknown", "DeviceListUnknown",
            !joins.empty()
                ? "no inventory of the cards yet (neither XDM's list nor a source that finds "
                  "cards): " +
                      joins + " cannot join what it sees to devices"
                : "no inventory of the cards yet: neither XDM's list nor a source that names "
                  "cards by minor has named the ones chosen (--xdm.devices)"};
  // 4. Every source must see every card it covers.
  std::string unseen;
  size_t missing = 0;           // (source, card) pairs
  std::set<std::string> cards;  // the cards among them
  for (const store::SourceView* v : sorted) {
    for (const store::SourceView::Device& d : v->devices) {
      if (d.seen) continue;
      cards.insert(d.key);
      if (++missing <= 8)
        unseen += (unseen.empty() ? "" : "; ") + v->source + " does not see " +
                  CardName(d.minor, d.bus_id, d.key);
    }
  }
  if (missing > 0)
    return {"Unknown", "DeviceNotSeen",
            Cut(std::to_string(cards.size()) +
                " device(s) are not seen by every source that covers them: " + unseen +
                (missing > 8 ? "; ..." : ""))};
  if (std::optional<NodeCondition> c = NotCovered(views, health.inventory)) return *c;
  std::string names;
  for (const store::SourceView* v : sorted) names += (names.empty() ? "" : ", ") + v->source;
  return {"True", "NoCardFaults",
          "no active fault at restart_card or worse (sources: " + names + ")"};
}

std::string ConditionRemovalPatch() {
  const Json cond = {{"type", kConditionType}, {"$patch", "delete"}};
  return Json{{"status", {{"conditions", Json::array({cond})}}}}.dump();
}

std::string ConditionPatch(const NodeCondition& c, std::string_view heartbeat,
                           std::string_view transition) {
  Json cond = {{"type", kConditionType},
               {"status", c.status},
               {"reason", c.reason},
               {"message", c.message},
               {"lastHeartbeatTime", heartbeat},
               {"lastTransitionTime", transition}};
  return Json{{"status", {{"conditions", Json::array({cond})}}}}.dump(
      -1, ' ', false, Json::error_handler_t::replace);
}

Status ParseNodeFacts(std::string_view text, NodeFacts* out) {
  const Json node = kubernetes::ParseKeeping(text, KeptNodePath);
  const std::string* kind = StringIn(node, "kind");
  if (!node.is_object() || (kind != nullptr && *kind != "Node") || !node.contains("metadata"))
    return Status::InvalidArgument("not a Node object");
  NodeFacts f;
  // A uid is a UUID; anything longer is not one to name in Events.
  if (const std::string* uid = StringIn(node["metadata"], "uid"); uid && uid->size() <= 128)
    f.uid = *uid;
  if (node.contains("status") && node["status"].is_object() &&
      node["status"].contains("conditions") && node["status"]["conditions"].is_array()) {
    for (const Json& c : node["status"]["conditions"]) {
      const std::string* type = StringIn(c, "type");
      if (type == nullptr || *type != kConditionType) continue;
      NodeCondition nc;
      for (auto [key, to] : {std::pair{"status", &nc.status},
                             {"reason", &nc.reason},
                             {"message", &nc.message},
                             {"lastTransitionTime", &f.transition}})
        if (const std::string* v = StringIn(c, key)) *to = *v;
      f.condition = std::move(nc);
    }
  }
  *out = std::move(f);
  return Status::Ok();
}

std::string EventBody(const store::FaultRaise& raise, const std::string& node,
                      const std::string& node_uid) {
  const std::string when = Rfc3339(raise.at);
  std::string message = Describe(raise.minor, raise.bus_id, raise.fault, raise.source) +
                        (raise.uuid.empty() ? "" : " on " + raise.uuid) +
                        (raise.fault.description.empty() ? "" : ". " + raise.fault.description) +
                        (raise.fault.action.empty() ? "" : " Action: " + raise.fault.action);
  // A name of its own, the same for the same raise: a post retried after an
  // answer that was lost is refused (409), not a second Event. Node names
  // are DNS subdomains of at most 253 bytes: 200 of them, a dot, "xpu-"
  // and 16 hex digits fit.
  uint64_t h = 1469598103934665603ULL;  // FNV-1a over what tells raises apart
  const std::string key = raise.source + '\0' + raise.minor + '\0' + raise.bus_id + '\0' +
                          raise.fault.code + '\0' +
                          std::to_string(raise.at.time_since_epoch().count());
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ULL;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  std::string name = node.substr(0, 200);
  // A label ends in a letter or digit.
  while (!name.empty() && (name.back() == '.' || name.back() == '-')) name.pop_back();
  name += ".xpu-" + std::string(hex);
  Json e = {{"apiVersion", "v1"},
            {"kind", "Event"},
            {"metadata", {{"name", name}, {"namespace", "default"}}},
            {"involvedObject",
             {{"apiVersion", "v1"},
              {"kind", "Node"},
              {"name", node},
              {"uid", node_uid.empty() ? node : node_uid}}},
            {"type", "Warning"},
            {"reason", ReasonOf(raise.fault.level_name)},
            {"message", Cut(std::move(message))},
            {"source", {{"component", "xpu-exporter"}, {"host", node}}},
            {"reportingComponent", "xpu-exporter"},
            {"reportingInstance", node},
            {"firstTimestamp", when},
            {"lastTimestamp", when},
            {"count", 1}};
  return e.dump(-1, ' ', false, Json::error_handler_t::replace);
}

bool EventLimiter::Allow(Clock::time_point now) {
  if (!since_) {
    since_ = now;
    tokens_ = burst_;
  }
  if (now > *since_ && refill_.count() > 0) {
    const auto earned = (now - *since_) / refill_;
    if (earned > 0) {
      tokens_ = static_cast<int>(std::min<int64_t>(burst_, tokens_ + earned));
      *since_ += earned * refill_;
      if (tokens_ == burst_) since_ = now;  // a full bucket earns nothing more
    }
  }
  if (tokens_ == 0) return false;
  --tokens_;
  return true;
}

}  // namespace xpu::sinks
