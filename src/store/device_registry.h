#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/metric_family.h"
#include "common/mutex.h"
#include "store/faults.h"
#include "store/ports.h"
#include "store/views.h"

namespace xpu::store {

// The node's devices and every health source's view of them. The inventory
// (Inventory()) is the one join: every card the pci source finds on the bus
// (keyed by its canonical address), every device XDM lists, and every device
// a source that names cards publishes (the sysfs tree's, NVML's), each found
// by its bus address, else its minor, else its uuid, and named by whoever
// knows its minor, uuid and model. No layer's absence removes a card.
// Every source publishes the same view (DeviceViews: one lane), keyed by
// what it knows of each card; the registry joins it to the inventory and
// writes xpu_device_health{source}, xpu_device_fault_active{source},
// xpu_device_fault_level{source} (labels minor, uuid, bus_id), and
// xpu_device_info, xpu_device_topology_info from XDM's list.
// Thread-safe: the upstream client and the samplers write, scrapes, /status
// and the sinks read.
class DeviceRegistry : public FamilyLender,
                       public DeviceListPort,
                       public HealthSourcePort,
                       public PodPort,
                       public HealthViewPort {
 public:
  // Only the devices with these minors are kept from every source
  // (--xdm.devices): a card no layer names by a minor is left out while a
  // subset is chosen. Empty: every device. May change at any time (a
  // reload): every view is re-filtered at once.
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
  // Whether XDM's word on health is current (SetXdmLive): /status shows it
  // only then, as the health series does. Any thread.
  bool XdmLive() const;

  // HealthSourcePort (the HAL backends; store/ports.h says the rule).
  std::vector<DeviceInfo> Devices() const override;
  std::vector<InventoryDevice> Inventory() const override;
  std::vector<PodAssignment> PodAssignments() const override;
  void OpenSource(const std::string& source, std::chrono::milliseconds interval) override;
  void SetSourceBlind(const std::string& source, std::string why) override;
  void CloseSource(const std::string& source) override;
  void SetLooking(const std::string& source, std::string why) override;
  // The pci source: its own families (docs/hal.md: presence, driver, link,
  // AER, hwmon, resets; store/pci_families.h) and, derived under the same
  // lock, its view in the one lane (every card by address), so a page's
  // PCI families and the faults derived from them are one sample. Its
  // functions are the inventory's first cards.
  void SetPciDevices(std::vector<PciDeviceView> devices,
                     std::vector<std::string> absent = {}) override;
  void SetDeviceViews(const std::string& source, DeviceViews views) override;
  FaultRaises& raises() override { return raises_; }

  // PodPort (the kubelet, the API server's watch; docs/kubernetes.md).
  // The pci source's fresh view, each function named from the inventory.
  std::vector<PciDeviceView> PciDevices() const override;
  void SetPodAssignments(std::vector<PodAssignment> pods) override;
  void SetPodMetadata(std::vector<PodMetadata> pods) override;
  void SetContainerQuotas(std::vector<ContainerQuota> quotas) override;
  void SetDeviceShares(std::vector<DeviceShare> shares) override;

  // HealthViewPort (the Node reporter).
  // Each open source's view now, by name, over the cards it covers: what
  // the Node condition judges.
  std::vector<SourceView> SourceViews() const override;
  // The views, the inventory they are judged on, and whether it is known,
  // from one join.
  HealthPicture Health() const override;
  FaultViewsSet fault_views_set() const override;
  const FaultRaises& raises() const override { return raises_; }

  // The devices of each source that sees now (neither blind nor stale), by
  // source name, each named from the inventory (minor, uuid, bus_id), the
  // cards a silent source covers without a word included (/status).
  std::map<std::string, std::vector<DeviceView>> SeenDeviceViews() const;
  // The sources that see now, by name (/-/ready).
  std::vector<std::string> SeeingSources() const;
  // Each open source's sight now, why it cannot see, and its view's age
  // (/status: one answer for every source, from the one rule).
  struct SourceStatus {
    std::string source;
    Sight sight = Sight::kNotYet;
    std::string why;
    std::optional<std::chrono::steady_clock::duration> view_age;  // none before the first
  };
  std::vector<SourceStatus> SourceStatuses() const;
  // The sources looked for and not found yet (SetLooking), with why not.
  std::map<std::string, std::string> Looking() const;

  std::vector<prometheus::MetricFamily> Collect() const override;
  // FamilyLender: the sources' own families (NVML's) lent, not copied.
  std::vector<prometheus::MetricFamily> CollectLending(Lent* lent) const override;

 private:
  mutable Mutex mu_;
  std::vector<DeviceInfo> devices_ XPU_GUARDED_BY(mu_);             // sorted by minor
  std::map<std::string, std::string> looking_ XPU_GUARDED_BY(mu_);  // source -> why not yet
  bool known_ XPU_GUARDED_BY(mu_) = false;
  bool xdm_live_ XPU_GUARDED_BY(mu_) = true;
  std::vector<PodAssignment> pods_ XPU_GUARDED_BY(mu_);
  std::vector<PciDeviceView> pci_ XPU_GUARDED_BY(mu_);            // the pci source's own view
  std::vector<std::string> pci_absent_ XPU_GUARDED_BY(mu_);       // XDM's, not on the bus
  std::map<std::string, DeviceViews> views_ XPU_GUARDED_BY(mu_);  // every source's, by name
  // The vendors of the cards each source has listed since it opened: a tree
  // that lost its last card still answers for them (Coverage::kListedAndKin).
  mutable std::map<std::string, std::set<std::string>> kin_ XPU_GUARDED_BY(mu_);
  // Each source's own families (DeviceViews::families, moved here when set),
  // filtered by filter_; lent to the page as they are (CollectLending).
  std::map<std::string, std::shared_ptr<const std::vector<prometheus::MetricFamily>>> families_
      XPU_GUARDED_BY(mu_);
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
  // Whether `views` is what the source's last view was: nothing to join again.
  bool SameViewsLocked(const std::string& source, const DeviceViews& views) const XPU_REQUIRES(mu_);
  FaultViewsSet views_set_ XPU_GUARDED_BY(mu_);
  FaultRaises raises_;  // its own lock; not part of the registry's state

  // The inventory now (filtered), and each fresh source's devices joined to
  // it: `at[i]` is the inventory index of views.devices[i], or npos.
  struct Joined;
  const Joined& JoinLocked() const XPU_REQUIRES(mu_);
  // Adds to `kin` the vendors of the cards `source` lists in join `j`.
  static void NoteKin(const Joined& j, const std::string& source, std::set<std::string>* kin);
  // Notes (kin_) the vendors of the cards `source`'s view lists as it is
  // joined now, before it is replaced.
  void NoteKinLocked(const std::string& source) XPU_REQUIRES(mu_);
  std::vector<SourceView> SourceViewsLocked(const Joined& j) const XPU_REQUIRES(mu_);
  bool InventoryKnownLocked() const XPU_REQUIRES(mu_);
  // The last join and what it was made from: made again only when a setter
  // changed its inputs (gen_) or a source's freshness changed (a bit per
  // source, in sources_' order).
  uint64_t gen_ XPU_GUARDED_BY(mu_) = 0;
  mutable std::shared_ptr<const Joined> joined_ XPU_GUARDED_BY(mu_);
  mutable uint64_t joined_gen_ XPU_GUARDED_BY(mu_) = 0;
  mutable uint64_t joined_fresh_ XPU_GUARDED_BY(mu_) = 0;
  // The pci source's families of the join above (PciFamilies, in page
  // order), lent to each scrape until the join is made again.
  mutable std::shared_ptr<const std::vector<prometheus::MetricFamily>> pci_families_
      XPU_GUARDED_BY(mu_);
  mutable uint64_t pci_families_gen_ XPU_GUARDED_BY(mu_) = 0;
  mutable uint64_t pci_families_fresh_ XPU_GUARDED_BY(mu_) = 0;

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
  std::string MinorOfLocked(const Joined& j, const std::string& uuid) const XPU_REQUIRES(mu_);
  // Collect's families, each group written by one helper under mu_ and
  // put out in Collect's order.
  struct Families;
  void WriteIdentityLocked(const Joined& j, Families* f) const XPU_REQUIRES(mu_);
  void WritePodsLocked(const Joined& j, Families* f) const XPU_REQUIRES(mu_);
  void WriteContainerMemoryLocked(Families* f, const InventoryDevice& card, const DeviceView& d,
                                  const std::string& source) const XPU_REQUIRES(mu_);
  void WriteSharesLocked(const Joined& j, Families* f) const XPU_REQUIRES(mu_);
  void WriteSourcesLocked(Families* f) const XPU_REQUIRES(mu_);
  // Every source's health and faults; their families into `lent`.
  void WriteViewsLocked(const Joined& j, Families* f, Lent* lent) const XPU_REQUIRES(mu_);
  DevicesListener listener_;                             // set before writers start
  std::set<int32_t> filter_ XPU_GUARDED_BY(mu_);         // empty: every device
  std::vector<DeviceInfo> xdm_raw_ XPU_GUARDED_BY(mu_);  // the list before filtering
  // devices_ from xdm_raw_ and filter_; calls the listener if it changed.
  bool RefilterLocked() XPU_REQUIRES(mu_);
};

}  // namespace xpu::store
