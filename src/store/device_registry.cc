#include "store/device_registry.h"

#include <algorithm>

namespace xpu::store {
namespace {

prometheus::MetricFamily Family(const char* name, const char* help) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = prometheus::MetricType::Gauge;
  return f;
}

prometheus::ClientMetric Gauge(std::vector<prometheus::ClientMetric::Label> labels, double v) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = v;
  return m;
}

}  // namespace

bool DeviceRegistry::SetXdmDevices(std::vector<DeviceInfo> devices) {
  std::lock_guard<std::mutex> lock(mu_);
  if (known_ && devices == devices_) return false;
  devices_ = std::move(devices);
  known_ = true;
  if (listener_) listener_(devices_);
  return true;
}

void DeviceRegistry::OnXdmDevicesChanged(DevicesListener listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = std::move(listener);
}

std::vector<DeviceInfo> DeviceRegistry::Devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  return devices_;
}

void DeviceRegistry::SetXdmLive(bool live) {
  std::lock_guard<std::mutex> lock(mu_);
  xdm_live_ = live;
}

void DeviceRegistry::SetHalDevices(std::vector<HalDeviceView> devices) {
  std::lock_guard<std::mutex> lock(mu_);
  hal_ = std::move(devices);
}

std::vector<HalDeviceView> DeviceRegistry::HalDevices() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hal_;
}

void DeviceRegistry::SetPodAssignments(std::vector<PodAssignment> pods) {
  std::lock_guard<std::mutex> lock(mu_);
  pods_ = std::move(pods);
}

std::vector<PodAssignment> DeviceRegistry::PodAssignments() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pods_;
}

std::vector<prometheus::MetricFamily> DeviceRegistry::Collect() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto info = Family("xpu_device_info",
                     "Static information about a device from XDM (ListAndWatch, ListGpuInfo); "
                     "always 1.");
  auto topo = Family("xpu_device_topology_info",
                     "One series per topology level of a device (ListAndWatch "
                     "extenderResources topology), nearest level first; always 1.");
  auto health =
      Family("xpu_device_health", "Device health as each source sees it: 1 healthy, 0 not.");
  for (const DeviceInfo& d : devices_) {
    const std::string minor = std::to_string(d.minor);
    info.metric.push_back(Gauge({{"minor", minor},
                                 {"uuid", d.uuid},
                                 {"model", d.model},
                                 {"driver_version", d.driver_version},
                                 {"firmware_version", d.firmware_version},
                                 {"bus_id", d.bus_id},
                                 {"serial", d.serial},
                                 {"numa_node", d.numa_node >= 0 ? std::to_string(d.numa_node) : ""},
                                 {"mig_capable", d.mig_capable ? "true" : "false"},
                                 {"memory_mib", std::to_string(d.total_memory_mib)}},
                                1));
    for (const TopologyLevel& t : d.topology) {
      topo.metric.push_back(Gauge({{"minor", minor},
                                   {"uuid", d.uuid},
                                   {"level", std::to_string(t.level)},
                                   {"name", t.name},
                                   {"group", t.group},
                                   {"peers", t.peers}},
                                  1));
    }
    if (xdm_live_)
      health.metric.push_back(
          Gauge({{"minor", minor}, {"uuid", d.uuid}, {"source", "xdm"}}, d.health == "Healthy"));
  }
  auto active = Family("xpu_device_fault_active",
                       "A fault code the HAL reports active on a device, with its catalog level; "
                       "always 1 while active.");
  auto level = Family("xpu_device_fault_level",
                      "Most severe active fault level on a device (0 none, 1 retry_request, "
                      "2 restart_job, 3 restart_card, 4 reset_card, 5 isolate_after_job, "
                      "6 isolate_card).");
  for (const HalDeviceView& h : hal_) {
    const std::string minor = std::to_string(h.minor);
    if (h.healthy)
      health.metric.push_back(
          Gauge({{"minor", minor}, {"uuid", h.uuid}, {"source", "hal"}}, *h.healthy ? 1 : 0));
    int worst = 0;
    for (const ActiveFault& f : h.faults) {
      active.metric.push_back(Gauge(
          {{"minor", minor}, {"uuid", h.uuid}, {"code", f.code}, {"level", f.level_name}}, 1));
      worst = std::max(worst, f.level);
    }
    level.metric.push_back(Gauge({{"minor", minor}, {"uuid", h.uuid}}, worst));
  }
  auto pods = Family("xpu_device_pod_info",
                     "A container that the kubelet reports holding a device (PodResources "
                     "API); always 1. Join on uuid to attribute device metrics to pods.");
  for (const PodAssignment& p : pods_) {
    std::string minor;
    for (const DeviceInfo& d : devices_)
      if (d.uuid == p.uuid) minor = std::to_string(d.minor);
    for (const HalDeviceView& h : hal_)
      if (minor.empty() && h.uuid == p.uuid) minor = std::to_string(h.minor);
    pods.metric.push_back(Gauge({{"minor", minor},
                                 {"uuid", p.uuid},
                                 {"namespace", p.namespace_},
                                 {"pod", p.pod},
                                 {"container", p.container},
                                 {"resource", p.resource}},
                                1));
  }
  std::vector<prometheus::MetricFamily> out;
  if (!pods.metric.empty()) out.push_back(std::move(pods));
  if (!active.metric.empty()) out.push_back(std::move(active));
  if (!level.metric.empty()) out.push_back(std::move(level));
  if (!info.metric.empty()) out.push_back(std::move(info));
  if (!topo.metric.empty()) out.push_back(std::move(topo));
  if (!health.metric.empty()) out.push_back(std::move(health));
  return out;
}

}  // namespace xpu::store
