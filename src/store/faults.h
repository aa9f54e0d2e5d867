#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"

namespace xpu::store {

// One active fault as the HAL sees it, with its catalog entry.
struct ActiveFault {
  std::string code;
  std::string name;
  int level = 0;           // position on the ladder (docs/hal.md)
  std::string level_name;  // "reset_card"...
  std::string description;
  std::string action;
  bool known = true;
  bool operator==(const ActiveFault&) const = default;
};

// A device with an active fault at this level or above (restart_card) is
// unhealthy from the HAL's side, as the Ascend device plugin derives health
// from its fault levels: card-level action is needed.
inline constexpr int kUnhealthyFaultLevel = 3;

// The worst level among `faults` (0 if none).
int WorstLevel(const std::vector<ActiveFault>& faults);
// One source's health of one card, the one rule for /metrics, /status and
// the landing page: what the source judged (nullopt: it could not judge),
// made unhealthy by an active fault at kUnhealthyFaultLevel or above, even
// where the rest could not be judged (a fault seen is seen).
std::optional<bool> HealthWithFaults(std::optional<bool> judged,
                                     const std::vector<ActiveFault>& faults);

// Adds `fault` to `faults` unless a fault of its code is there: one card's
// faults from several devices or addresses of one source, each code once.
void AddFault(std::vector<ActiveFault>* faults, ActiveFault fault);

// The worse of two readings of one card's health: unhealthy over unknown
// over healthy (two devices of one source that name one card).
inline std::optional<bool> WorseHealth(std::optional<bool> a, std::optional<bool> b) {
  if (a == false || b == false) return false;
  if (!a || !b) return std::nullopt;
  return true;
}

// Whether a health source can see now (docs/hal.md, "The health model").
enum class Sight {
  kSeeing,  // its last try read the hardware, and its view is fresh
  kBlind,   // its last try could not read (the tree gone, the log not readable)
  kStale,   // its last view is older than kStaleIntervals of its interval
  kNotYet,  // no view yet since it started
};
// "seeing", "blind", "stale", "not_yet".
const char* SightName(Sight s);
// A view older than this many of its source's intervals is no evidence.
inline constexpr int kStaleIntervals = 3;

// One health source's view as the Node condition judges it: whether it can
// see, why not, and every card of the inventory it covers (store/views.h,
// Coverage), with what it says of each.
struct SourceView {
  std::string source;  // "sysfs", "pci", "kmsg", "nvml"
  Sight sight = Sight::kNotYet;
  std::string why;  // when blind: what it could not do
  // Its devices are addresses that name no card by themselves (kmsg): with
  // no inventory known yet it covers nothing.
  bool needs_inventory = false;
  struct Device {
    std::string key;     // the inventory's
    int32_t minor = -1;  // -1: not named by a minor
    std::string bus_id;
    // What it read of the card's own health this sample (its health bit;
    // nullopt: it could not), even where the card is not seen.
    std::optional<bool> healthy;
    // false: a card it covers that it could not read this sample (or does
    // not list): its faults are the last ones read.
    bool seen = true;
    std::vector<ActiveFault> faults;
    bool operator==(const Device&) const = default;
  };
  std::vector<Device> devices;  // every card it covers, by inventory order
  bool operator==(const SourceView&) const = default;
};

// One fault raise as it happened: a code that became active on a device
// while the exporter watched (not one found active at a backend's first
// sample, nor a record replayed from the kernel's ring at start).
struct FaultRaise {
  std::string source;  // the source that raised it: "sysfs", "pci", "kmsg", "nvml"
  std::string minor;   // the card's minor and uuid, empty while no layer names it
  std::string uuid;
  std::string bus_id;  // the PCI address, when the source knows it
  ActiveFault fault;
  std::chrono::system_clock::time_point at;
  bool operator==(const FaultRaise&) const = default;
};

// The last kCapacity raises, for readers that act on each (the Node's
// Events: sinks::NodeReporter), each with a cursor of its own, so that
// a reader rebuilt by a reload goes on where its predecessor stopped or at
// the newest. A reader that falls more than kCapacity behind is told how
// many it lost. Thread-safe: the samplers add, readers read.
class FaultRaises {
 public:
  static constexpr size_t kCapacity = 256;

  void Add(FaultRaise raise);
  // The cursor just past the newest raise: a new reader's start.
  uint64_t end() const;
  // The raises after `*cursor`, oldest first; moves `*cursor` past them.
  // `*lost` (may be null): how many after it were overwritten unread.
  std::vector<FaultRaise> Since(uint64_t* cursor, uint64_t* lost = nullptr) const;

 private:
  mutable Mutex mu_;
  std::deque<FaultRaise> ring_ XPU_GUARDED_BY(mu_);  // the newest kCapacity
  uint64_t next_ XPU_GUARDED_BY(mu_) = 0;            // the cursor after the newest
};

}  // namespace xpu::store
