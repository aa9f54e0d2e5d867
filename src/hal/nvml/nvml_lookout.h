#pragma once

#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>

#include "common/part.h"
#include "common/worker.h"
#include "hal/fault_catalog.h"
#include "hal/nvml/nvml_sampler.h"
#include "store/exemplars.h"
#include "store/ports.h"

namespace xpu::hal {

// --hal=auto's nvml backend (docs/hal.md, "nvml"): looks for NVIDIA's
// library in the background until it loads, initialises and lists a card,
// then runs the NvmlSampler it was built to run. A driver that loads after
// the exporter (a driver container on a booting node; nvmlInit taking
// seconds without the persistence daemon) is picked up: probed once an
// interval for the first minute, then backing off to once in 30 s. One
// probe at a time, on a thread of its own: a library that hangs holds that
// thread only, never the samplers or the scrape. Until found, the registry
// says "looking" (/status) and nothing is judged or published (a node
// without NVIDIA cards shows no nvml families). A reload's new lookout
// takes over a sampler that ran (its reader, library and event listener
// too): found, never closed, blind when the library stops answering.
//
// Owns its probe state and, once found, the sampler. Start()/Stop()/
// TakeOver()/Withdraw() from the owning thread; its thread builds and
// starts the sampler, which the owning thread touches only after Stop.
class NvmlLookout : public Part {
 public:
  // What the sampler is built with, once found.
  struct Build {
    NvmlSampler::Options options;
    std::shared_ptr<const FaultCatalog> catalog;
    store::HealthSourcePort* registry = nullptr;
    prometheus::Registry* self_metrics = nullptr;
    store::ExemplarStore* exemplars = nullptr;
    prometheus::Registry* fault_metrics = nullptr;
  };
  explicit NvmlLookout(Build build);
  ~NvmlLookout() override;
  NvmlLookout(const NvmlLookout&) = delete;
  NvmlLookout& operator=(const NvmlLookout&) = delete;

  void Start() override;
  void Stop() override;
  // An NvmlSampler, or a lookout that had found one: found at once, and
  // the sampler takes over from the old one.
  void TakeOver(Part& old) override;
  void Withdraw() override;
  // The sampler once it runs, else this. Any thread.
  Part* Working() override;
  // The sampler, once found (null before). The owning thread, after Stop.
  NvmlSampler* sampler() const { return sampler_.get(); }

  // The first minute: a probe each interval; then each probe waits twice
  // as long as the last, at most kMaxProbeGap.
  static constexpr std::chrono::seconds kEagerFor{60};
  static constexpr std::chrono::seconds kMaxProbeGap{30};
  // What a probe in flight answers; one per library in the process.
  struct Probe;

 private:
  void Loop();
  void Found();  // builds and starts the sampler (the lookout's thread, or Start)

  Build build_;
  std::shared_ptr<Probe> probe_;  // shared with the probe's thread, which may outlive this
  std::unique_ptr<NvmlSampler> sampler_;
  std::atomic<NvmlSampler*> running_{nullptr};  // sampler_ once started, for Working()
  Worker worker_;
};

}  // namespace xpu::hal
