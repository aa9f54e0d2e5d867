#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "common/part.h"
#include "common/worker.h"
#include "hal/fault_catalog.h"
#include "hal/fault_events.h"
#include "hal/pci/pci.h"
#include "hal/source_sampler.h"
#include "store/ports.h"

namespace xpu::hal {

// The PCI layer's own fault codes (entries of src/hal/fault_codes.yaml):
// what the kernel's files say is wrong with a device, as fault codes that
// flow like the driver's into xpu_device_fault_active, health and alerts.
inline constexpr const char* kFaultLinkDowntrained =
    "0xFC000001";                                              // narrower than both ends, lasting
inline constexpr const char* kFaultLinkDown = "0xFC000002";    // width 0, or speed unknown
inline constexpr const char* kFaultAerFatal = "0xFC000003";    // fatal AER errors counted
inline constexpr const char* kFaultDeviceLost = "0xFC000004";  // gone from the bus
inline constexpr const char* kFaultDriverUnbound = "0xFC000005";     // present, no driver
inline constexpr const char* kFaultUnexpectedD3cold = "0xFC000006";  // D3cold with a driver bound
// A link narrower than both ends support is a fault once it has been so for
// this many consecutive samples: a retrain in progress is not.
inline constexpr uint32_t kNarrowSamplesForFault = 3;

// The codes active for one device, sorted. An unbound driver is a fault only
// for a function that was bound at a scan (it lost its driver); one never
// bound since the exporter started is judged by the caller (a card a layer
// names: a driver that did not load; else a function left unbound on
// purpose, no fault). The link rule (docs/hal.md): a
// width below what both ends support (capable_link_width), for
// kNarrowSamplesForFault samples, is pcie_link_downtrained; a speed below
// it alone is not a fault (cards lower their link speed when idle), and is
// left to the alert rules with the capability exported.
std::vector<std::string> DerivePciFaults(const store::PciDeviceView& v);

// Turns successive scans into what the registry exports: each card by its
// address (the registry names it), cards that left the bus kept as absent, and resets
// observed (present and bound, then gone or unbound, then back). Pure state
// machine, fed by PciSampler; one thread.
class PciTracker {
 public:
  // Remembers at most `max_tracked` devices: those that left are dropped
  // first, so a tree whose addresses keep changing cannot grow it.
  explicit PciTracker(size_t max_tracked = kMaxPciDevices) : max_tracked_(max_tracked) {}

  std::vector<store::PciDeviceView> Update(const std::vector<PciDevice>& scan);
  // Forgets the cards `filter` does not look for (a reload that changed it:
  // one no longer looked for is not a lost card); the rest go on.
  void Retain(const PciFilter& filter);
  // The addresses where the last Update found another function than the
  // one tracked there (a card replaced): tracked afresh.
  const std::set<std::string>& replaced() const { return replaced_; }

 private:
  struct Track {
    bool up = false;          // present and bound at the last scan
    bool bound_once = false;  // present and bound at a scan
    bool lost = false;        // was up, then gone or unbound
    uint64_t resets = 0;
    uint32_t narrow = 0;                  // consecutive scans with a narrow link
    uint32_t class_code = 0, vendor = 0;  // as last scanned
    uint32_t device = 0;                  // as last read (0: never read)
    store::PciDeviceView last;
  };
  // Whether `d` may be the function `t` last saw: the same vendor and class,
  // and the same device id where this scan read one.
  static bool SameFunction(const Track& t, const PciDevice& d);
  size_t max_tracked_;
  std::map<std::string, Track> tracks_;  // by bus_id
  std::set<std::string> replaced_;       // of the last Update
};

// Scans the PCI tree every `interval` on its own thread (the `pci` backend
// of --hal) and publishes to the DeviceRegistry. Start()/Stop() from the
// owning thread; SampleOnce() for tests, not beside a running sampler.
// `fault_metrics` (default: `self_metrics`) takes the fault families both
// HAL backends share (FaultEvents): xpu_device_fault_events_total and
// xpu_hal_unknown_fault_codes_total.
class PciSampler : public SourceSampler {
 public:
  // Every `interval` a scan of what can raise a fault; every
  // `gauge_interval` (when longer) a whole one (PciScanDepth).
  PciSampler(PciScanner scanner, std::shared_ptr<const FaultCatalog> catalog,
             std::chrono::milliseconds interval, std::chrono::milliseconds gauge_interval,
             store::HealthSourcePort* registry, prometheus::Registry* self_metrics,
             store::ExemplarStore* exemplars = nullptr,
             prometheus::Registry* fault_metrics = nullptr);
  ~PciSampler() override { Stop(); }
  PciSampler(const PciSampler&) = delete;
  PciSampler& operator=(const PciSampler&) = delete;

  // Active faults, handed from a stopped sampler to its replacement (a
  // reload) before that one starts.
  FaultEvents::State fault_state() const { return faults_.state(); }
  void SeedFaultState(FaultEvents::State state) { faults_.Seed(std::move(state)); }
  // What the tracker has seen (resets counted, narrow links counted over
  // samples), handed over the same way, so that a reload neither clears a
  // lasting narrow-link fault nor restarts the reset counts.
  PciTracker tracker_state() const { return tracker_; }
  void SeedTracker(PciTracker tracker) { tracker_ = std::move(tracker); }

  // Part: the active faults and the tracker of the sampler it replaces.
  void TakeOver(Part& old) override;
  // One scan; false if the tree could not be read.
  bool SampleOnce();
  // What it was built with. Any thread, while the sampler lives.
  const PciScanner& scanner() const { return scanner_; }
  const std::shared_ptr<const FaultCatalog>& fault_catalog() const { return faults_.catalog(); }

 private:
  void Tick() override { SampleOnce(); }
  // A scan of faults only takes the slow facts of its last whole scan while
  // that is fresh (cadence_). Sampler thread.
  // After a whole scan: keeps it (a slow fact that failed to read keeps the
  // last whole scan's value). After a fault scan: fills each device's slow
  // facts from the last whole scan; false when a device has none there (a
  // card new, or replaced, since): the caller scans whole at once.
  bool KeepOrFill(bool whole, std::chrono::steady_clock::time_point now,
                  std::vector<PciDevice>* scan);

  const PciScanner scanner_;
  GaugeCadence cadence_;               // sampler-thread state
  std::vector<PciDevice> last_whole_;  // sampler-thread state
  PciScanCache scan_cache_;            // sampler-thread state
  prometheus::Counter& file_errors_;
  PciTracker tracker_;  // sampler-thread state
  FaultEvents faults_;  // sampler-thread state
  LogOnce logged_;
};

}  // namespace xpu::hal
