#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "common/mutex.h"
#include "common/part.h"
#include "common/worker.h"
#include "hal/fault_catalog.h"
#include "hal/fault_events.h"
#include "hal/hal.h"
#include "hal/source_sampler.h"
#include "store/ports.h"

namespace xpu::hal {

// Samples a HalBackend on its own thread every `interval`, independent of the
// XDM connection, and publishes health and active faults (with their catalog
// entries) to the DeviceRegistry. Counts fault raises, read errors and unknown
// codes in `self_metrics`. A read error affects one device only and is logged
// once until that device reads cleanly again.
// Start()/Stop() from the owning thread; SampleOnce() for tests, not
// concurrently with a running sampler.
// `fault_metrics` (default: `self_metrics`): as PciSampler's.
class HalSampler : public SourceSampler {
 public:
  HalSampler(std::unique_ptr<HalBackend> backend, std::shared_ptr<const FaultCatalog> catalog,
             std::chrono::milliseconds interval, store::HealthSourcePort* registry,
             prometheus::Registry* self_metrics, store::ExemplarStore* exemplars = nullptr,
             prometheus::Registry* fault_metrics = nullptr);
  ~HalSampler() override;
  HalSampler(const HalSampler&) = delete;
  HalSampler& operator=(const HalSampler&) = delete;

  // Active faults, handed from a stopped sampler to its replacement (a
  // reload) before that one starts.
  FaultEvents::State fault_state() const { return faults_.state(); }
  void SeedFaultState(FaultEvents::State state) { faults_.Seed(std::move(state)); }

  // Part: the active faults of the sampler it replaces.
  void TakeOver(Part& old) override;
  void SampleOnce();

  std::string backend_name() const { return backend_->name(); }
  // What it was built with. Any thread, while the sampler lives.
  std::string backend_root() const { return backend_->root(); }
  const std::shared_ptr<const FaultCatalog>& fault_catalog() const { return faults_.catalog(); }
  // Time of the last sample that enumerated devices successfully.
  std::optional<std::chrono::steady_clock::time_point> last_success() const;

 private:
  void Tick() override { SampleOnce(); }
  void Warn(const std::string& key, const std::string& message);

  std::unique_ptr<HalBackend> backend_;
  prometheus::Gauge& duration_;
  prometheus::Family<prometheus::Counter>& read_errors_;
  FaultEvents faults_;  // sampler-thread state
  // Sampler-thread state: each minor's card at its last sample, so that the
  // faults kept over a failed read are that card's (ids_ keeps them by
  // minor).
  std::map<int32_t, HalDeviceId> named_;

  // Sampler-thread state.
  LogOnce logged_;  // problems logged, until they clear

  mutable Mutex mu_;
  std::optional<std::chrono::steady_clock::time_point> last_success_ XPU_GUARDED_BY(mu_);
};

}  // namespace xpu::hal
