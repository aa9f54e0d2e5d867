#pragma once

// The registry as each kind of part sees it: one narrow port per role, so a
// source or a sink names what it writes and reads, and only the wiring
// (app/) knows the whole store::DeviceRegistry, which implements them all.
// Every port is thread-safe (the registry's lock); a part holds it for its
// life, and the registry outlives every part.

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "store/faults.h"
#include "store/views.h"

namespace xpu::store {

// XDM's client: the device list and whether the daemon is alive.
class DeviceListPort {
 public:
  // Replaces the device list. Returns false if nothing changed.
  virtual bool SetXdmDevices(std::vector<DeviceInfo> devices) = 0;
  // Whether XDM is alive (ListAndWatch open, data fresh). While it is not,
  // xpu_device_health{source="xdm"} is withdrawn: a dead daemon's last word
  // on health is not current truth. True until first set.
  virtual void SetXdmLive(bool live) = 0;

 protected:
  ~DeviceListPort() = default;
};

// A health source (a HAL backend): it publishes what it sees of the cards,
// keyed by what it knows of each (bus address, minor, uuid), or says it is
// blind (docs/hal.md, "The health model"). The registry makes the join.
class HealthSourcePort {
 public:
  // XDM's device list now, filtered (--xdm.devices).
  virtual std::vector<DeviceInfo> Devices() const = 0;
  // Every card of the node now, named as far as any layer names it
  // (store/views.h, InventoryDevice), filtered.
  virtual std::vector<InventoryDevice> Inventory() const = 0;
  // Which containers hold which devices (a raise's exemplar names the pod).
  virtual std::vector<PodAssignment> PodAssignments() const = 0;
  // A sampler opens its source when it is built (nothing seen yet:
  // kNotYet), then with each sample either sets its view (it sees) or says
  // it is blind (the view it had ages). A blind source's per-device health
  // series are withdrawn at once, and a view older than kStaleIntervals of
  // the source's interval is withdrawn whole (health, faults, its
  // families). Opening an open source keeps its view (a reload's new
  // sampler goes on); closing drops it. A view set on a source never opened
  // opens it with a one-second interval.
  virtual void OpenSource(const std::string& source, std::chrono::milliseconds interval) = 0;
  virtual void SetSourceBlind(const std::string& source, std::string why) = 0;
  virtual void CloseSource(const std::string& source) = 0;
  // A source not found yet, looked for in the background (--hal=auto's
  // NVML before the driver is loaded): said on /status, never judged (no
  // health, no sight, no readiness). Empty `why`: no longer looked for.
  virtual void SetLooking(const std::string& source, std::string why) = 0;
  // The pci source's view (sorted by bus_id): its own families, and its
  // view in the one lane derived from it. `absent`: addresses XDM names that
  // the bus does not show at all (the bus is the inventory: such a card is
  // not seen, neither healthy nor lost).
  virtual void SetPciDevices(std::vector<PciDeviceView> devices,
                             std::vector<std::string> absent = {}) = 0;
  // Replaces the source's view: it sees. Written as
  // xpu_device_health{source}, xpu_device_fault_*{source} and its own
  // families, withdrawn by the rule above.
  virtual void SetDeviceViews(const std::string& source, DeviceViews views) = 0;
  // The raises the backends saw happen (not the ones found at start), which
  // the Node reporter turns into Events (hal::NoteRaise adds them).
  virtual FaultRaises& raises() = 0;

 protected:
  ~HealthSourcePort() = default;
};

// The pod sources (the kubelet's PodResources, the API server's watch): who
// holds which device, and what the API server says of those pods.
class PodPort {
 public:
  virtual std::vector<DeviceInfo> Devices() const = 0;
  // Every card (the kubelet's DRA matching joins by bus id and uuid).
  virtual std::vector<InventoryDevice> Inventory() const = 0;
  virtual std::vector<PciDeviceView> PciDevices() const = 0;
  // Each replaces the last: the kubelet's assignments
  // (xpu_device_pod_info), the API server's pod labels, HAMi's grants
  // (xpu_container_*_limit_*) and registered shares
  // (xpu_device_split_count...).
  virtual void SetPodAssignments(std::vector<PodAssignment> pods) = 0;
  virtual void SetPodMetadata(std::vector<PodMetadata> pods) = 0;
  virtual void SetContainerQuotas(std::vector<ContainerQuota> quotas) = 0;
  virtual void SetDeviceShares(std::vector<DeviceShare> shares) = 0;

 protected:
  ~PodPort() = default;
};

// A sink that judges the node's health (the Node reporter): every open
// source's view, how often each was set, and the raises to report.
class HealthViewPort {
 public:
  virtual std::vector<DeviceInfo> Devices() const = 0;
  // The cards the condition judges (the raises it tells of are theirs).
  virtual std::vector<InventoryDevice> Inventory() const = 0;
  virtual std::vector<SourceView> SourceViews() const = 0;
  virtual HealthPicture Health() const = 0;
  virtual FaultViewsSet fault_views_set() const = 0;
  virtual const FaultRaises& raises() const = 0;

 protected:
  ~HealthViewPort() = default;
};

}  // namespace xpu::store
