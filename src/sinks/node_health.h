#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "store/faults.h"
#include "store/ports.h"
#include "store/views.h"

// What the Node says of its devices' health (docs/kubernetes.md, "Device
// health on the Node"): the condition derived from the fault views, the
// patch that sets it, the Node's own copy of it, and the Events that tell
// of each raise. Pure functions and one small value class; NodeReporter does
// the talking.
namespace xpu::sinks {

// The Node condition's type. True: no device has an active fault at
// store::kUnhealthyFaultLevel (restart_card) or worse.
inline constexpr const char* kConditionType = "XpuDevicesHealthy";
// A condition's message and an Event's message are cut to this (the API
// server's own limit on an event's note is 1 KiB).
inline constexpr size_t kMaxMessageBytes = 1024;
// The Events' rate limit, a token bucket over all of them: kEventBurst at
// once, then one per kEventRefill. A raise beyond it gets no Event (it is
// counted, and still on the page and in the condition).
inline constexpr int kEventBurst = 10;
inline constexpr std::chrono::seconds kEventRefill{30};
// Events that were allowed but not yet accepted (the API server down):
// beyond this many, the oldest is dropped (counted).
inline constexpr size_t kMaxQueuedEvents = 64;
// A raise of the same code on the same device from the same source within
// this long of the last one that got an Event gets none (counted): a
// repeating driver line must not use up the budget of other faults.
inline constexpr std::chrono::minutes kEventRepeatWindow{10};

// Which health sources run, by registry name ("sysfs", "pci", "kmsg",
// "nvml"): the reporter waits for each to have published once.
using FaultSources = std::set<std::string>;

// Whether every health source that runs has published since a start (or
// says it cannot see), or `limit` has passed since it: until then, what the
// sources that have read show is no evidence of a recovery (a card healthy
// to pci while --hal=auto still looks for NVML). Once settled, it stays so.
// Not thread-safe: its owner's threads, one at a time (Begin before the
// thread that asks runs).
class SettleWait {
 public:
  using Clock = std::chrono::steady_clock;
  SettleWait(FaultSources sources, std::chrono::milliseconds limit)
      : sources_(std::move(sources)), limit_(limit) {}
  // From here on a source's publish counts.
  void Begin(const store::HealthViewPort& registry, Clock::time_point now);
  bool Settled(const store::HealthViewPort& registry, Clock::time_point now);

 private:
  FaultSources sources_;
  std::chrono::milliseconds limit_;
  Clock::time_point started_;
  store::FaultViewsSet at_start_;
  bool settled_ = false;
};

struct NodeCondition {
  std::string status;  // "True", "False", "Unknown"
  std::string reason;  // CamelCase, as Kubernetes reasons are
  std::string message;
  bool operator==(const NodeCondition&) const = default;
};

// A ladder level's name as a reason: "isolate_card" -> "IsolateCard".
std::string ReasonOf(std::string_view level_name);

// The condition the health sources' views give (docs/hal.md, "The health
// model"; docs/kubernetes.md), in this order:
// - False when a source that sees (store::Sight::kSeeing) shows, on any card
//   of the inventory it covers, an active fault at restart_card or worse
//   (read this sample, or kept from the last read of a card it could not
//   read now), or says the card itself is unhealthy (its own health bit,
//   reason DeviceUnhealthy): reason the worst level's, message those
//   faults, worst first ("xpu 3 (0000:3b:00.0): 0x10DE004F Xid 79 ...
//   [isolate_card, kmsg]"; a card not named by a minor is "PCI device
//   0000:3b:00.0"), cut to kMaxMessageBytes with how many more. A blind
//   neighbour does not hide it.
// - Unknown when no source runs (NoFaultSource), when a source is blind,
//   stale or has not looked yet (reason "<Source>Blind", "...Stale",
//   "...NotReady", the first by name; the message names each), when no
//   inventory is known (`inventory_known`: neither XDM's list nor a source
//   that names cards has spoken, or, while --xdm.devices chooses minors,
//   none that names them; DeviceListUnknown), when a card a source covers
//   is not seen by it (DeviceNotSeen), or when a card of the inventory is
//   covered by no source at all (an XDM card without an address while only
//   pci and kmsg run; DeviceNotCovered).
// - True otherwise: every card of the inventory is covered, every source
//   sees every card it covers, and none shows a card-level fault.
// A pure function: the same views give the same text (it is compared to
// decide whether to patch), whatever their order.
NodeCondition ConditionOf(const store::HealthPicture& health);
// The same over `views` alone: the inventory is the cards they list.
NodeCondition ConditionOf(const std::vector<store::SourceView>& views, bool inventory_known);

// How bad a condition says the node is: 0 for True (and for Unknown
// because a card is not seen or not covered, DeviceNotSeen or
// DeviceNotCovered: a view lags a list that changed by one sample, so these
// wait the hold, and are patched once they have held), 1 for any other
// Unknown, else the
// level of its reason (3 for a reason not on the ladder). A change to a worse
// condition is patched at once; any other waits until it has held
// (NodeReporter::Options::recover_hold), so a flapping fault cannot patch
// the Node over and over.
int SeverityOf(const NodeCondition& c);

// The strategic merge patch that takes the condition off the Node (a
// reload that switches it off: no one would keep it true).
std::string ConditionRemovalPatch();

// The strategic-merge patch of the Node's status that sets the condition
// (conditions merge by type: the others are left alone).
std::string ConditionPatch(const NodeCondition& c, std::string_view heartbeat,
                           std::string_view transition);

// What the exporter reads of its Node: its uid (the Events' involvedObject)
// and its copy of the condition, with the time that copy last changed status.
struct NodeFacts {
  std::string uid;
  std::optional<NodeCondition> condition;
  std::string transition;  // its lastTransitionTime, as written
};
// From a Node object (JSON), keeping only those fields (kubernetes::ParseKeeping).
// InvalidArgument when it is no Node.
Status ParseNodeFacts(std::string_view text, NodeFacts* out);

// The core/v1 Event, in the "default" namespace as the kubelet's Node
// events are, that tells of `raise` on `node` (uid `node_uid`; the name
// when unknown): named from the raise (the same raise, the same name), type Warning, reason the
// level's (ReasonOf), source xpu-exporter on the node, the message naming device, code, meaning,
// source and action.
std::string EventBody(const store::FaultRaise& raise, const std::string& node,
                      const std::string& node_uid);

// The Events' token bucket (kEventBurst, kEventRefill). Not thread-safe:
// the reporter's thread.
class EventLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  EventLimiter(int burst, Clock::duration refill) : burst_(burst), refill_(refill) {}
  // Takes a token if there is one at `now` (times never go back).
  bool Allow(Clock::time_point now);

 private:
  int burst_;
  Clock::duration refill_;
  std::optional<Clock::time_point> since_;  // tokens_ counted up to here
  int tokens_ = 0;
};

}  // namespace xpu::sinks
