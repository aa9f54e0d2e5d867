#pragma once

// The facts each source publishes about the node's devices, as plain values:
// XDM's device list, each health source's view, and what the kubelet and the
// API server say of the pods that hold them. The registry joins them
// (store/device_registry.h); the sources and sinks see them through the
// ports they use (store/ports.h).

#include <prometheus/metric_family.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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

// xpu_device_fault_events_total's help, for both of its writers (the
// backends' FaultEvents counters, the counts a view carries written here).
inline constexpr const char* kFaultEventsHelp =
    "Fault raises on a device, by code, catalog level and source: for sysfs, pci and nvml a "
    "code seen active after not being active, for kmsg a fault record in the kernel's log.";

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
  // What a process's cgroup names: metadata.uid, or a static pod's mirror's
  // kubernetes.io/config.mirror (the uid the kubelet runs it by).
  std::string uid;
  // Each container's runtime id (status.*containerStatuses, without the
  // "containerd://") and its name.
  std::vector<std::pair<std::string, std::string>> containers;
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

// One PCI function as the `pci` HAL backend last read it (docs/hal.md): a
// card of the inventory, keyed by its address. The registry names it (minor,
// uuid) from the inventory's join when it writes or hands it out.
struct PciDeviceView {
  std::string bus_id;  // canonical PCI address, "0000:3b:00.0"
  std::string minor;   // the inventory's minor and uuid for it, else empty
  std::string uuid;
  std::string vendor;   // "0x10de"
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
  uint64_t aer_fatal_unattributed = 0;  // PciDevice's: a fatal error the lines do not tell
  struct Sensor {
    std::string kind, sensor;  // temperature|power|energy, name
    double value = 0;
    bool operator==(const Sensor&) const = default;
  };
  std::vector<Sensor> hwmon;
  uint64_t resets_observed = 0;     // gone or unbound, then back
  bool bound_before = false;        // bound to a driver at a scan since the exporter started
  std::vector<ActiveFault> faults;  // derived from the above (docs/hal.md)
  // false: a fact read every scan is there and could not be read (PciDevice::
  // unread): the rest is the last scan's, `faults` the last ones derived (a
  // failed read is no recovery and no fault), and the card counts as not seen.
  bool seen = true;
  bool operator==(const PciDeviceView&) const = default;
};

// The health sources' names (docs/hal.md, "The health model").
inline constexpr const char* kSourceSysfs = "sysfs";
inline constexpr const char* kSourcePci = "pci";
inline constexpr const char* kSourceKmsg = "kmsg";

// How often each source's view has been set since the registry was made, by
// source: a reader of the node's health (sinks::NodeReporter) waits for the
// backends that run to have spoken before it says anything.
struct FaultViewsSet {
  std::map<std::string, uint64_t> views;
  bool devices_known = false;  // XDM's list has come
  // As HealthPicture::inventory_known.
  bool inventory_known = false;
  uint64_t of(const std::string& source) const {
    auto it = views.find(source);
    return it == views.end() ? 0 : it->second;
  }
};

// Device memory one container's processes hold on a device, as the source
// found its processes (the nvml backend) and their cgroups named them: the
// registry joins the pod uid to the pods the API server gives.
struct ContainerMemory {
  std::string pod_uid;       // as metadata.uid
  std::string container_id;  // the runtime's id
  uint64_t bytes = 0;
  bool operator==(const ContainerMemory&) const = default;
  auto operator<=>(const ContainerMemory&) const = default;
};

// One device in a health source's view: the one lane every source (sysfs,
// pci, kmsg, nvml, any new backend) publishes through. A source names the
// device by what it knows of it (a bus address, a minor, a uuid: any it has);
// the registry joins it to the inventory (DeviceRegistry::Inventory) and
// writes xpu_device_health{source}, xpu_device_fault_*{source}.
struct DeviceView {
  int32_t minor = -1;           // -1: the source does not know it
  std::string uuid;             // may be empty
  std::string bus_id;           // canonical, "0000:3b:00.0"; may be empty
  std::string model;            // as the source names the card (NVML's name); may be empty
  std::optional<bool> healthy;  // nullopt: health could not be read this sample
  std::vector<ActiveFault> faults;
  // false: the device could not be read this sample: `faults` are the last
  // ones read (a failed read is no recovery), and its health is not known.
  bool seen = true;
  std::vector<ContainerMemory> containers;  // sorted; empty unless the source reads processes
  // Fault records the source counted itself (kmsg), by code: written as
  // xpu_device_fault_events_total. A source that counts with FaultEvents has none.
  struct Events {
    std::string code;
    std::string level_name;
    uint64_t count = 0;
    bool operator==(const Events&) const = default;
  };
  std::vector<Events> events;
  bool operator==(const DeviceView&) const = default;
};

// Which cards of the inventory a source answers for: "not seen" counts only
// inside it (docs/hal.md, "The health model").
enum class Coverage {
  // The devices it lists (the pci source's functions, lost ones too), and
  // every card of the inventory from `DeviceViews::vendor` bound to
  // `DeviceViews::driver` or to none (NVML: NVIDIA's cards, not one passed
  // through to a VM by vfio-pci).
  kListed,
  // The devices it lists, and every card of the vendors of those (the bus
  // tells), or, while no vendor is known, every card XDM lists: a driver's
  // tree (sysfs) shows every card of its kind, and one gone from it is not
  // seen.
  kListedAndKin,
  // Every card with a bus address: one it does not list is seen, with no
  // fault (the kernel's log says nothing of a healthy card). Its devices
  // are addresses of any function, so they name no card themselves: they
  // count only for cards the inventory has.
  kAddressedSilent,
};

// A source's whole view: its devices, its coverage, and the families only it
// writes, each sample of a device labelled "minor" as the device's view is
// (empty while not named). The registry writes the families with the view's
// health and faults, under one lock, while the view is fresh.
struct DeviceViews {
  std::vector<DeviceView> devices;
  std::vector<prometheus::MetricFamily> families;
  // Set instead of `families` by a source that keeps what it published
  // (the same families as its last view: NVML between whole reads): the
  // registry keeps and lends this one, and nothing is built or copied. Each
  // family in the page's order (PutInPageOrder): the page takes it as it is.
  std::shared_ptr<const std::vector<prometheus::MetricFamily>> kept_families;
  Coverage coverage = Coverage::kListed;
  std::string vendor;  // with kListed: "0x10de"; empty: none
  std::string driver;  // with vendor: the kernel driver its cards are bound to ("nvidia")
};

// One card of the node (DeviceRegistry::Inventory): keyed by its canonical
// bus address where any layer knows it, named by whoever knows it (XDM, the
// sysfs tree, NVML, the kubelet). Its existence needs none of them.
struct InventoryDevice {
  std::string key;     // bus_id, or "minor/N", or "uuid/X" for a device without one
  std::string bus_id;  // canonical; empty when no layer knows it
  int32_t minor = -1;  // -1: not named by a minor (yet)
  std::string uuid;
  std::string model;
  std::string vendor;   // "0x10de", from the pci source
  std::string driver;   // the kernel driver bound to it, from the pci source
  bool present = true;  // false: the pci source saw it leave the bus
  bool xdm = false;     // XDM lists it
  std::string port;     // the port above its link, from the pci source; empty: unknown
  bool operator==(const InventoryDevice&) const = default;
};

// The node's health as one read (DeviceRegistry::Health): every open
// source's view, the cards they are judged on, and whether that inventory
// is known (sinks::ConditionOf, sinks::VerdictsOf). One read, so that a
// card that left the inventory is not judged against views made without it.
struct HealthPicture {
  std::vector<SourceView> views;
  std::vector<InventoryDevice> inventory;
  // XDM's list has come, or a source that finds cards (pci, sysfs, nvml)
  // has spoken; while minors are chosen (--xdm.devices), XDM's list or a
  // source that names cards by minor (sysfs, nvml): the bus alone names no
  // chosen card.
  bool inventory_known = false;
};

}  // namespace xpu::store
