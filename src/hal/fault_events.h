#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/worker.h"
#include "hal/fault_catalog.h"
#include "store/exemplars.h"
#include "store/ports.h"

namespace xpu::hal {

// A catalog entry as the registry's views carry an active fault.
store::ActiveFault ActiveFaultOf(const FaultInfo& info);

// What every backend does with a raise it counts: leaves on its
// xpu_device_fault_events_total series an exemplar naming the pod that
// holds the device now (the first container by name), if any holds it
// (OpenMetrics; docs/http-api.md), and, when `live` (it happened while the
// exporter watched), adds it to the registry's raises (the Node's Events):
// the one write a backend makes besides its view, hence a registry it may
// write. Shared by FaultEvents and the kmsg backend. Any thread.
void NoteRaise(store::HealthSourcePort* registry, store::ExemplarStore* exemplars,
               store::FaultRaise raise, bool live);

// What every HAL backend does with the fault codes it finds on a device,
// sample after sample: looks them up in the fault catalog, counts each raise
// (a code active now and not at the previous sample) in
// xpu_device_fault_events_total and, for codes the catalog lacks,
// xpu_hal_unknown_fault_codes_total, and logs raises and clears. One
// definition of those families for the sysfs and pci backends.
// Used from one sampler thread.
class FaultEvents {
 public:
  // With `registry` (may be null), each live raise is added to its raises
  // and, with `exemplars` too, leaves an exemplar on its
  // xpu_device_fault_events_total series: the pod that held the device then
  // (OpenMetrics; docs/http-api.md).
  // `source` names the backend on its series and raises ("sysfs", "pci",
  // "nvml").
  FaultEvents(std::shared_ptr<const FaultCatalog> catalog, prometheus::Registry* self_metrics,
              std::string source, store::HealthSourcePort* registry = nullptr,
              store::ExemplarStore* exemplars = nullptr);

  // The catalog entries of `codes`, now active on the device known as `key`
  // (a minor, a bus_id), labelled `minor` and `uuid`, at PCI address
  // `bus_id` (may be empty); `name` names it in logs. Raises at the first
  // sample (unless seeded) were there before the exporter looked: counted,
  // but not live (store::FaultRaise).
  std::vector<store::ActiveFault> Update(const std::string& key, const std::string& name,
                                         const std::string& minor, const std::string& uuid,
                                         const std::string& bus_id,
                                         const std::set<std::string>& codes);
  // The codes active on `key` at the previous sample.
  std::set<std::string> Previous(const std::string& key) const;
  // Ends a sample: devices not updated in it are forgotten.
  void EndSample();

  // The codes active per device at the last sample; seeding a new sampler's
  // FaultEvents with its predecessor's (a reload) keeps faults that stay
  // active from counting as raised again.
  using State = std::map<std::string, std::set<std::string>>;
  const State& state() const { return active_; }
  void Seed(State state) {
    active_ = std::move(state);
    live_ = true;
  }
  const std::shared_ptr<const FaultCatalog>& catalog() const { return catalog_; }

 private:
  const std::shared_ptr<const FaultCatalog> catalog_;
  const std::string source_;
  store::HealthSourcePort* const registry_;
  store::ExemplarStore* const exemplars_;
  prometheus::Family<prometheus::Counter>& events_;
  prometheus::Counter& unknown_codes_;
  LogLimiter log_limit_;  // raises and clears of a flapping code: a line a minute
  std::map<std::string, std::set<std::string>> active_;  // previous sample
  std::map<std::string, std::set<std::string>> now_;     // this sample so far
  bool live_ = false;  // a sample ended, or a predecessor's state was seeded
};

}  // namespace xpu::hal
