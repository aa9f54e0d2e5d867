#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <map>
#include <string>

#include "common/worker.h"
#include "hal/pci.h"
#include "store/device_registry.h"

namespace xpu::hal {

// Turns successive scans into what the registry exports: each device joined
// to XDM's by bus_id, devices that left the bus kept as absent, and resets
// observed (present and bound, then gone or unbound, then back). Pure state
// machine, fed by PciSampler; one thread.
class PciTracker {
 public:
  // `xdm` is XDM's device list, for the join.
  std::vector<store::PciDeviceView> Update(const std::vector<PciDevice>& scan,
                                           const std::vector<store::DeviceInfo>& xdm);

 private:
  struct Track {
    bool up = false;    // present and bound at the last scan
    bool lost = false;  // was up, then gone or unbound
    uint64_t resets = 0;
    store::PciDeviceView last;
  };
  std::map<std::string, Track> tracks_;  // by bus_id
};

// Scans the PCI tree every `interval` on its own thread (the `pci` backend
// of --hal) and publishes to the DeviceRegistry. Start()/Stop() from the
// owning thread; SampleOnce() for tests, not beside a running sampler.
class PciSampler {
 public:
  PciSampler(PciScanner scanner, std::chrono::milliseconds interval,
             store::DeviceRegistry* registry, prometheus::Registry* self_metrics);
  ~PciSampler() { Stop(); }
  PciSampler(const PciSampler&) = delete;
  PciSampler& operator=(const PciSampler&) = delete;

  void Start();
  void Stop() { worker_.Stop(); }
  // One scan; false if the tree could not be read.
  bool SampleOnce();

 private:
  const PciScanner scanner_;
  const std::chrono::milliseconds interval_;
  store::DeviceRegistry* const registry_;
  prometheus::Gauge& up_;
  prometheus::Counter& file_errors_;
  PciTracker tracker_;  // sampler-thread state
  LogOnce logged_;
  Worker worker_;
};

}  // namespace xpu::hal
