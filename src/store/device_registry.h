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

namespace xpu::store {

// One topology level of section 3.4, flattened for labels.
struct TopologyLevel {
  int level = 0;
  std::string name;
  std::string group;  // topoN: "4" or "0,1" or an identifier such as "asw-001"
  std::string peers;  // "0,1,2,3"; empty when absent
  bool operator==(const TopologyLevel&) const = default;
};

// Everything the exporter knows about one device from ListAndWatch and
// ListGpuInfo. Strings are already sanitised for use as label values.
struct DeviceInfo {
  int32_t minor = 0;
  std::string uuid;
  std::string model;
  std::string health;  // as XDM reports it: "Healthy", "Unhealthy"
  uint64_t total_memory_mib = 0;
  std::string driver_version;
  std::string firmware_version;
  std::string bus_id;
  std::string serial;
  int32_t numa_node = -1;
  bool mig_capable = false;
  std::vector<TopologyLevel> topology;
  std::string topology_error;  // non-empty when the topology JSON was unusable
  bool operator==(const DeviceInfo&) const = default;
};

// DeviceInfo's fields as the page shows them, in xpu_device_info's label
// order after "minor": the one list the registry writes the family from and
// the decoder repairs (`text`: the field is text from the daemon, repaired
// to a valid label value; null for one the exporter formats itself).
struct DeviceInfoLabel {
  const char* name;
  std::string DeviceInfo::*text;
  std::string (*format)(const DeviceInfo&);
};
inline const DeviceInfoLabel kDeviceInfoLabels[] = {
    {"uuid", &DeviceInfo::uuid, [](const DeviceInfo& d) { return d.uuid; }},
    {"model", &DeviceInfo::model, [](const DeviceInfo& d) { return d.model; }},
    {"driver_version", &DeviceInfo::driver_version,
     [](const DeviceInfo& d) { return d.driver_version; }},
    {"firmware_version", &DeviceInfo::firmware_version,
     [](const DeviceInfo& d) { return d.firmware_version; }},
    {"bus_id", &DeviceInfo::bus_id, [](const DeviceInfo& d) { return d.bus_id; }},
    {"serial", &DeviceInfo::serial, [](const DeviceInfo& d) { return d.serial; }},
    {"numa_node", nullptr,
     [](const DeviceInfo& d) { return d.numa_node >= 0 ? std::to_string(d.numa_node) : ""; }},
    {"mig_capable", nullptr,
     [](const DeviceInfo& d) { return std::string(d.mig_capable ? "true" : "false"); }},
    {"memory_mib", nullptr, [](const DeviceInfo& d) { return std::to_string(d.total_memory_mib); }},
};

// One device as the HAL sampled it.
struct HalDeviceView {
  int32_t minor = 0;
  std::string uuid;
  std::optional<bool> healthy;  // nullopt: health could not be read
  std::vector<ActiveFault> faults;
  // false: the fault codes could not be read this sample (`faults` are the
  // last ones read): the device is not seen (no health, and the Node
  // condition counts it unseen).
  bool faults_read = true;
  bool operator==(const HalDeviceView&) const = default;
};

// xpu_device_fault_events_total's help, for both of its writers (the HAL's
// FaultEvents counters, the kmsg view's counts written here).
inline constexpr const char* kFaultEventsHelp =
    "Fault raises on a device, by code, catalog level and source: for hal a code seen active "
    "after not being active, for kmsg a fault record in the kernel's log.";

// The kernel log's view of one of XDM's devices (the kmsg backend, which
// joins the records' PCI addresses to XDM's bus_id): the codes active now,
// and how many fault records each code had since the oldest record the
// kernel still holds. A device the log says nothing of has none of either.
struct KmsgDeviceView {
  std::string bus_id;  // canonical, "0000:3b:00.0"
  int32_t minor = 0;
  std::string uuid;
  std::vector<ActiveFault> faults;
  struct Events {
    std::string code;
    std::string level_name;
    uint64_t count = 0;
    bool operator==(const Events&) const = default;
  };
  std::vector<Events> events;
  bool operator==(const KmsgDeviceView&) const = default;
};

// A container that the kubelet reports holding a device: through the device
// plugin (resource set) or a DRA claim (claim, driver, pool, device set).
struct PodAssignment {
  std::string uuid;  // the device, as XDM names it
  std::string pod;
  std::string namespace_;
  std::string container;
  std::string resource;  // the extended resource, e.g. "example.com/ppu"
  std::string claim;     // DRA: the ResourceClaim (in the pod's namespace)
  std::string driver;    // DRA: the claim's driver, pool and device names
  std::string pool;
  std::string device;
  bool operator==(const PodAssignment&) const = default;
  auto operator<=>(const PodAssignment&) const = default;
};

// What the API server says of a pod on this node: the allowlisted labels,
// as exported label names ("label_team") and sanitized values.
struct PodMetadata {
  std::string namespace_, pod;
  std::vector<std::pair<std::string, std::string>> labels;
  bool operator==(const PodMetadata&) const = default;
};

// A container's share of a shared device, as HAMi's scheduler granted it.
struct ContainerQuota {
  std::string uuid, namespace_, pod, container;
  int64_t memory_bytes = 0;  // 0: none given
  double core_ratio = 0;     // of the device's cores; 0: none given
  bool operator==(const ContainerQuota&) const = default;
};

// A device as HAMi's device plugin registered it for sharing.
struct DeviceShare {
  std::string uuid, type;
  int64_t split_count = 0;
  int64_t memory_bytes = 0;
  double core_ratio = 0;
  bool healthy = false;
  bool operator==(const DeviceShare&) const = default;
};

// One PCI function as the `pci` HAL backend last read it (docs/hal.md), joined
// to XDM's device by bus_id when XDM lists it.
struct PciDeviceView {
  std::string bus_id;  // canonical PCI address, "0000:3b:00.0"
  std::string minor;   // XDM's minor and uuid when joined, else empty
  std::string uuid;
  bool present = true;  // false: gone from the bus since it was last seen
  std::string driver;   // bound driver; empty when unbound
  std::string power_state;
  std::optional<double> current_link_speed, max_link_speed;  // transfers/s
  std::optional<int> current_link_width, max_link_width;
  // The upstream port's maxima (the slot), when the tree shows the port.
  std::string port;
  std::optional<double> port_max_link_speed;
  std::optional<int> port_max_link_width;
  // What both ends support: the lower of the device's and the port's maxima
  // (the device's alone when the port is unknown).
  std::optional<double> capable_link_speed() const;
  std::optional<int> capable_link_width() const;
  // Consecutive samples, this one included, whose width was below what both
  // ends support (and not 0): a narrow link is a fault only when it lasts.
  uint32_t narrow_samples = 0;
  struct Aer {
    std::string severity, type;
    uint64_t count = 0;
    bool operator==(const Aer&) const = default;
  };
  std::vector<Aer> aer;
  struct Sensor {
    std::string kind, sensor;  // temperature|power|energy, name
    double value = 0;
    bool operator==(const Sensor&) const = default;
  };
  std::vector<Sensor> hwmon;
  uint64_t resets_observed = 0;     // gone or unbound, then back
  std::vector<ActiveFault> faults;  // derived from the above (docs/hal.md)
  bool operator==(const PciDeviceView&) const = default;
};

// The node's devices as XDM last described them and as the HAL last sampled
// them, exposed as xpu_device_info, xpu_device_topology_info,
// xpu_device_health{source="xdm"|"hal"}, xpu_device_fault_active and
// xpu_device_fault_level. Thread-safe: the upstream client and the HAL
// sampler write, scrapes and /status read.
class DeviceRegistry : public prometheus::Collectable {
 public:
  // Only these minors are kept from every source (--xdm.devices); empty:
  // every device. May change at any time (a reload): every view is
  // re-filtered at once; devices added back come from the XDM list at once
  // and from the HAL and PCI at their next sample.
  void SetDeviceFilter(std::set<int32_t> minors);

  // Replaces the device list. Returns false if nothing changed.
  bool SetXdmDevices(std::vector<DeviceInfo> devices);
  // Called with the new list, under the registry's lock, whenever
  // SetXdmDevices changes it: how derived views (the MetricStore's device
  // labels) stay in step with the one list. Set before any writer starts.
  using DevicesListener = std::function<void(const std::vector<DeviceInfo>&)>;
  void OnXdmDevicesChanged(DevicesListener listener);
  // Writes the pci backend's own families from its views (hal::PciFamilies:
  // that code lives with the sampler). Collect calls it under the registry's
  // lock, so a page's PCI families and the faults and health derived from
  // the same views are one sample. Without one, no PCI family is written.
  using PciFamilyWriter =
      std::function<std::vector<prometheus::MetricFamily>(const std::vector<PciDeviceView>&)>;
  void SetPciFamilyWriter(PciFamilyWriter writer);
  std::vector<DeviceInfo> Devices() const;
  // Whether XDM is alive (ListAndWatch open, data fresh). While it is not,
  // xpu_device_health{source="xdm"} is withdrawn: a dead daemon's last word
  // on health is not current truth. True until first set.
  void SetXdmLive(bool live);
  // The health sources (docs/hal.md, "The health model"): "sysfs" (the
  // HAL's views), "pci" and "kmsg". A sampler opens its source when it is
  // built (nothing seen yet: kNotYet), then with each sample either sets
  // its view (it sees) or says it is blind (the view it had ages). One rule
  // for every source: a blind source's per-device health series are
  // withdrawn at once, and a view older than kStaleIntervals of the
  // source's interval is withdrawn whole (health, faults, its families).
  // Opening an open source keeps its view (a reload's new sampler goes on);
  // closing drops it. A view set on a source never opened opens it with
  // a one-second interval.
  static constexpr const char* kSysfs = "sysfs";
  static constexpr const char* kPci = "pci";
  static constexpr const char* kKmsg = "kmsg";
  void OpenSource(const std::string& source, std::chrono::milliseconds interval);
  void SetSourceBlind(const std::string& source, std::string why);
  void CloseSource(const std::string& source);
  // Each open source's view now, by name: what the Node condition judges.
  std::vector<SourceView> SourceViews() const;
  // The clock that ages views (tests); steady_clock::now by default.
  using Clock = std::function<std::chrono::steady_clock::time_point()>;
  void SetClock(Clock clock);

  // Replaces the sysfs backend's view (sorted by minor): it sees.
  void SetHalDevices(std::vector<HalDeviceView> devices);
  // The HAL's fresh views as exported: the sysfs backend's devices, plus
  // the pci backend's derived faults on the devices it joined to a minor (a
  // device only the pci backend sees counts as healthy but for its faults),
  // with health following the worst active fault (kUnhealthyFaultLevel).
  // A stale view adds nothing.
  std::vector<HalDeviceView> HalDevices() const;
  // Replaces the PCI backend's view (sorted by bus_id): it sees.
  void SetPciDevices(std::vector<PciDeviceView> devices);
  // Empty while the view is stale.
  std::vector<PciDeviceView> PciDevices() const;
  // Replaces the kmsg backend's view (one entry per device it joined):
  // xpu_device_fault_*{source="kmsg"} and xpu_device_health{source="kmsg"}.
  // nullopt: the backend off (CloseSource).
  void SetKmsgDevices(std::optional<std::vector<KmsgDeviceView>> devices);
  // Empty while the view is stale.
  std::vector<KmsgDeviceView> KmsgDevices() const;
  // How often each fault view has been set since the registry was made (the
  // kmsg one with a view, not nullopt): a reader of the node's health
  // (kubernetes::NodeReporter) waits for the backends that run to have
  // spoken before it says anything. The pci and kmsg views join their
  // devices to XDM's list, so they count only once that list is known; the
  // second such view was certainly built from it.
  struct FaultViewsSet {
    uint64_t hal = 0, pci = 0, kmsg = 0;
    bool devices_known = false;  // XDM's list has come
  };
  FaultViewsSet fault_views_set() const;
  // The raises the backends saw happen (not the ones found at start), for
  // readers that act on each. Any thread.
  FaultRaises& raises() const { return raises_; }
  // Replaces the kubelet's view of which containers hold which devices.
  void SetPodAssignments(std::vector<PodAssignment> pods);
  std::vector<PodAssignment> PodAssignments() const;
  // The API server's view (docs/kubernetes.md): pod labels for
  // xpu_device_pod_info, HAMi's grants (xpu_container_*_limit_*) and
  // registered shares (xpu_device_split_count...). Each replaces the last.
  void SetPodMetadata(std::vector<PodMetadata> pods);
  void SetContainerQuotas(std::vector<ContainerQuota> quotas);
  void SetDeviceShares(std::vector<DeviceShare> shares);

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
  mutable FaultRaises raises_;  // its own lock; not part of the registry's state
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<std::string, std::string>>>
      pod_labels_ XPU_GUARDED_BY(mu_);  // (namespace, pod) -> labels
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
  void WriteSharesLocked(Families* f) const XPU_REQUIRES(mu_);
  void WriteSourcesLocked(Families* f) const XPU_REQUIRES(mu_);
  DevicesListener listener_;  // set before writers start
  PciFamilyWriter pci_writer_ XPU_GUARDED_BY(mu_);
  std::set<int32_t> filter_ XPU_GUARDED_BY(mu_);         // empty: every device
  std::vector<DeviceInfo> xdm_raw_ XPU_GUARDED_BY(mu_);  // the list before filtering
  // devices_ from xdm_raw_ and filter_; calls the listener if it changed.
  bool RefilterLocked() XPU_REQUIRES(mu_);
};

}  // namespace xpu::store
