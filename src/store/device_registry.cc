#include "store/device_registry.h"

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
  return true;
}

std::vector<DeviceInfo> DeviceRegistry::Devices() const {
  std::lock_guard<std::mutex> lock(mu_);
  return devices_;
}

bool DeviceRegistry::known() const {
  std::lock_guard<std::mutex> lock(mu_);
  return known_;
}

std::vector<prometheus::MetricFamily> DeviceRegistry::Collect() const {
  std::lock_guard<std::mutex> lock(mu_);
  auto info = Family("xpu_device_info",
                     "Static information about a device from XDM (ListAndWatch, ListGpuInfo); "
                     "always 1.");
  auto topo = Family("xpu_device_topology_info",
                     "One series per topology level of a device (ListAndWatch "
                     "extenderResources topology), nearest level first; always 1.");
  auto health = Family("xpu_device_health",
                       "Device health as each source sees it: 1 healthy, 0 not.");
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
    health.metric.push_back(
        Gauge({{"minor", minor}, {"uuid", d.uuid}, {"source", "xdm"}}, d.health == "Healthy"));
  }
  std::vector<prometheus::MetricFamily> out;
  if (!info.metric.empty()) out.push_back(std::move(info));
  if (!topo.metric.empty()) out.push_back(std::move(topo));
  if (!health.metric.empty()) out.push_back(std::move(health));
  return out;
}

}  // namespace xpu::store
