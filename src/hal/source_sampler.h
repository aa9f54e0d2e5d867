#pragma once

#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "common/part.h"
#include "common/worker.h"
#include "store/faults.h"
#include "store/ports.h"

namespace xpu::hal {

// The skeleton every health source's sampler shares (docs/hal.md, "The
// health model"): it opens its source in the registry when it starts and
// closes it when switched off, runs one thread, and keeps its up gauge and
// the registry's sight in step (Seeing, Blind). A backend derives from it
// and writes what is its own: what it reads, its view, its fault events.
//
// Start()/Stop()/Withdraw() from the owning thread (Part); up() and
// interval() from any thread; the rest from the sampler's thread. A derived
// class calls Stop() in its own destructor: the thread calls its overrides.
// When a source reads its slow facts (docs/hal.md, "Cadences"): a whole
// read is due every `gauge` (every read when that is no longer than the
// interval); what the last whole read gave stays evidence while younger
// than kStaleIntervals of `gauge`. Shared by the pci and nvml samplers; the
// sampler thread's.
class GaugeCadence {
 public:
  using Clock = std::chrono::steady_clock;
  GaugeCadence(std::chrono::milliseconds interval, std::chrono::milliseconds gauge)
      : interval_(interval), gauge_(gauge) {}
  bool WholeDue(Clock::time_point now) const {
    return gauge_ <= interval_ ||
           ((!last_ || now - *last_ >= gauge_) && (!tried_ || now - *tried_ >= gauge_));
  }
  void ReadWhole(Clock::time_point now) { last_ = now; }
  // A whole read asked for that may not answer in time: the next whole one
  // is due a cadence later, and the reads between read the faults alone (a
  // whole read slower than the deadline must not leave every read whole,
  // and late, for good).
  void Tried(Clock::time_point now) { tried_ = now; }
  bool Fresh(Clock::time_point now) const {
    return last_ && now - *last_ <= store::kStaleIntervals * gauge_;
  }
  // A reload's: when the replaced sampler last read whole.
  void TakeLast(const GaugeCadence& old) { last_ = old.last_; }

 private:
  const std::chrono::milliseconds interval_, gauge_;
  std::optional<Clock::time_point> last_, tried_;
};

class SourceSampler : public Part {
 public:
  struct Spec {
    const char* source;  // store::kSource*: its name in the registry
    // Its up gauge in the part's self-metrics, first of its families.
    const char* up_name;
    const char* up_help;
    std::map<std::string, std::string> up_labels;
  };
  // Throws std::invalid_argument for an interval that is not positive.
  SourceSampler(const Spec& spec, std::chrono::milliseconds interval,
                store::HealthSourcePort* registry, prometheus::Registry* self_metrics);
  SourceSampler(const SourceSampler&) = delete;
  SourceSampler& operator=(const SourceSampler&) = delete;

  // Opens the source (here, not when built: a reload that fails after
  // building the parts leaves the registry as it was), then the thread.
  void Start() override;
  void Stop() override { worker_.Stop(); }
  // Its view off the registry: the source is closed.
  void Withdraw() override;
  // Whether the last sample could see.
  bool up() const { return up_.load(); }
  // Whether a sample saw, here or in a sampler this one took over from.
  bool ever_seen() const { return ever_seen_.load(); }
  std::chrono::milliseconds interval() const { return interval_; }

 protected:
  // The thread's body. By default Tick() once an interval, on the grid
  // every periodic loop shares (NextTick, common/worker.h): a fixed rate
  // that neither bursts after falling behind nor runs back to back (a
  // quarter interval's rest at least); a source that reads a stream
  // (the kernel log) runs its own loop over worker().
  virtual void Run();
  virtual void Tick() {}
  // The sample saw: up 1 (its view goes to the registry with it).
  void Seeing();
  // The sample could not see: up 0, and the registry withdraws the source's
  // health at once and the rest of its view once stale.
  void Blind(const std::string& why);
  store::HealthSourcePort* registry() const { return registry_; }
  // TakeOver's: the sampler replaced had seen.
  void SeenBefore(bool seen) { ever_seen_.store(ever_seen_.load() || seen); }
  Worker& worker() { return worker_; }

 private:
  const char* const source_;
  const std::chrono::milliseconds interval_;
  store::HealthSourcePort* const registry_;
  prometheus::Gauge& up_gauge_;
  std::atomic<bool> up_{false};
  std::atomic<bool> ever_seen_{false};
  Worker worker_;
};

}  // namespace xpu::hal
