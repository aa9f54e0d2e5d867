#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "store/faults.h"
#include "store/ports.h"
#include "store/views.h"

namespace xpu::store {

// The node's devices as XDM last described them and as the HAL last sampled
// them, exposed as xpu_device_info, xpu_device_topology_info,
// xpu_device_health{source="xdm"|"hal"}, xpu_device_fault_active and
// xpu_device_fault_level. Thread-safe: the upstream client and the HAL
// sampler write, scrapes and /status read.
class DeviceRegistry : public prometheus::Collectable,
                       public DeviceListPort,
                       public HealthSourcePort,
                       public PodPort,
                       public HealthViewPort {
 public:
  // Only these minors are kept from every source (--xdm.devices); empty:
  // every device. May change at any time (a reload): every view is
  // re-filtered at once; devices added back come from the XDM list at once
  // and from the HAL and PCI at their next sample.
  void SetDeviceFilter(std::set<int32_t> minors);
  // Called with the new list, under the registry's lock, whenever
  // SetXdmDevices changes it: how derived views (the MetricStore's device
  // labels) stay in step with the one list. Set before any writer starts.
  using DevicesListener = std::function<void(const std::vector<DeviceInfo>&)>;
  void OnXdmDevicesChanged(DevicesListener listener);
  // The clock that ages views (tests); steady_clock::now by default.
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  void SetClock(Clock clock);

  // DeviceListPort (XDM's client).
  bool SetXdmDevices(std::vector<DeviceInfo> devices) override;
  void SetXdmLive(bool live) override;

  // HealthSourcePort (the HAL backends; store/ports.h says the rule).
  std::vector<DeviceInfo> Devices() const override;
  std::vector<PodAssignment> PodAssignments() const override;
  void OpenSource(const std::string& source, std::chrono::milliseconds interval) override;
  void SetSourceBlind(const std::string& source, std::string why) override;
  void CloseSource(const std::string& source) override;
  // Written as xpu_device_health{source="hal"}, xpu_device_fault_*{source="hal"}.
  void SetHalDevices(std::vector<HalDeviceView> devices) override;
  // Written as the pci backend's own families (docs/hal.md: presence,
  // driver, link, AER, hwmon, resets; store/pci_families.h) and its faults,
  // both from the one view under the registry's lock, so a page's PCI
  // families and the faults derived from them are one sample.
  void SetPciDevices(std::vector<PciDeviceView> devices) override;
  // xpu_device_fault_*{source="kmsg"} and xpu_device_health{source="kmsg"}.
  void SetKmsgDevices(std::optional<std::vector<KmsgDeviceView>> devices) override;
  void SetDeviceViews(const std::string& source, DeviceViews views) override;
  FaultRaises& raises() override { return raises_; }

  // PodPort (the kubelet, the API server's watch; docs/kubernetes.md).
  // The HAL's fresh views as exported: the sysfs backend's devices, plus
  // the pci backend's derived faults on the devices it joined to a minor (a
  // device only the pci backend sees counts as healthy but for its faults),
  // with health following the worst active fault (kUnhealthyFaultLevel).
  // A stale view adds nothing.
  std::vector<HalDeviceView> HalDevices() const override;
  // Empty while the view is stale.
  std::vector<PciDeviceView> PciDevices() const override;
  void SetPodAssignments(std::vector<PodAssignment> pods) override;
  void SetPodMetadata(std::vector<PodMetadata> pods) override;
  void SetContainerQuotas(std::vector<ContainerQuota> quotas) override;
  void SetDeviceShares(std::vector<DeviceShare> shares) override;

  // HealthViewPort (the Node reporter).
  // Each open source's view now, by name: what the Node condition judges.
  std::vector<SourceView> SourceViews() const override;
  using FaultViewsSet = store::FaultViewsSet;
  FaultViewsSet fault_views_set() const override;
  const FaultRaises& raises() const override { return raises_; }

  // The kmsg view, empty while it is stale (/status).
  std::vector<KmsgDeviceView> KmsgDevices() const;
  // The devices of each DeviceViews source that sees now (neither blind nor
  // stale), by source name, without their families.
  std::map<std::string, std::vector<DeviceView>> SeenDeviceViews() const;

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  mutable Mutex mu_;
  std::vector<DeviceInfo> devices_ XPU_GUARDED_BY(mu_);  // sorted by minor
  bool known_ XPU_GUARDED_BY(mu_) = false;
  bool xdm_live_ XPU_GUARDED_BY(mu_) = true;
  std::vector<HalDeviceView> hal_ XPU_GUARDED_BY(mu_);
  std::vector<PodAssignment> pods_ XPU_GUARDED_BY(mu_);
  std::vector<PciDeviceView> pci_ XPU_GUARDED_BY(mu_);
  std::vector<KmsgDeviceView> kmsg_ XPU_GUARDED_BY(mu_);
  std::map<std::string, DeviceViews> views_ XPU_GUARDED_BY(mu_);  // SetDeviceViews, by source
  // What each open health source last said of itself.
  struct SourceState {
    std::chrono::milliseconds interval{1000};
    bool blind = false;
    std::string why;                                               // while blind
    std::optional<std::chrono::steady_clock::time_point> seen_at;  // the last view
  };
  std::map<std::string, SourceState> sources_ XPU_GUARDED_BY(mu_);
  Clock clock_ XPU_GUARDED_BY(mu_);
  std::chrono::steady_clock::time_point NowLocked() const XPU_REQUIRES(mu_);
  // The source's sight now; kNotYet for one not open.
  Sight SightLocked(const std::string& source) const XPU_REQUIRES(mu_);
  // Whether its last view is evidence: open, set, and not stale.
  bool FreshLocked(const std::string& source) const XPU_REQUIRES(mu_);
  // A view arrived: the source sees, as of now.
  void SeenLocked(const std::string& source) XPU_REQUIRES(mu_);
  FaultViewsSet views_set_ XPU_GUARDED_BY(mu_);
  FaultRaises raises_;  // its own lock; not part of the registry's state
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<std::string, std::string>>>
      pod_labels_ XPU_GUARDED_BY(mu_);  // (namespace, pod) -> labels
  struct PodByUid {
    std::string namespace_, pod;
    std::map<std::string, std::string> containers;  // runtime id -> name
  };
  // Every pod that claims each PodMetadata::uid (more than one only when a
  // pod carries another's mirror annotation).
  std::map<std::string, std::vector<PodByUid>> pod_uids_ XPU_GUARDED_BY(mu_);
  std::vector<ContainerQuota> quotas_ XPU_GUARDED_BY(mu_);
  std::vector<DeviceShare> shares_ XPU_GUARDED_BY(mu_);
  std::string MinorOfLocked(const std::string& uuid) const XPU_REQUIRES(mu_);
  std::vector<HalDeviceView> MergedHalLocked() const XPU_REQUIRES(mu_);
  // Collect's families, each group written by one helper under mu_ and
  // put out in Collect's order.
  struct Families;
  void WriteIdentityLocked(Families* f) const XPU_REQUIRES(mu_);
  void WriteFaultsLocked(Families* f) const XPU_REQUIRES(mu_);
  void WriteKmsgLocked(Families* f) const XPU_REQUIRES(mu_);
  void WritePodsLocked(Families* f) const XPU_REQUIRES(mu_);
  void WriteContainerMemoryLocked(Families* f, const std::string& minor, const DeviceView& d,
                                  const std::string& source) const XPU_REQUIRES(mu_);
  void WriteSharesLocked(Families* f) const XPU_REQUIRES(mu_);
  void WriteSourcesLocked(Families* f) const XPU_REQUIRES(mu_);
  // The DeviceViews sources' health and faults; their families into `out`.
  void WriteViewsLocked(Families* f, std::vector<prometheus::MetricFamily>* out) const
      XPU_REQUIRES(mu_);
  DevicesListener listener_;                             // set before writers start
  std::set<int32_t> filter_ XPU_GUARDED_BY(mu_);         // empty: every device
  std::vector<DeviceInfo> xdm_raw_ XPU_GUARDED_BY(mu_);  // the list before filtering
  // devices_ from xdm_raw_ and filter_; calls the listener if it changed.
  bool RefilterLocked() XPU_REQUIRES(mu_);
};

}  // namespace xpu::store
