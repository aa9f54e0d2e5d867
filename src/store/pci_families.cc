#include "store/pci_families.h"

#include "common/metric_family.h"

namespace xpu::store {

std::vector<prometheus::MetricFamily> PciFamilies(const std::vector<PciDeviceView>& pci) {
  auto present = NewFamily("xpu_pci_device_present",
                           "Whether a PCI device once seen is on the bus: 1 present, 0 gone.");
  auto bound = NewFamily("xpu_pci_driver_bound",
                         "Whether a driver is bound to the PCI device: 1 bound (driver label), 0 "
                         "present but unbound.");
  auto power =
      NewFamily("xpu_pci_power_state", "The PCI device's power state (D0 ... D3cold); always 1.");
  auto speed = NewFamily("xpu_pcie_link_speed_transfers_per_second",
                         "PCIe link speed: current, max (the device's), port_max (the upstream "
                         "port's: the slot) and capable (the lower maximum: what the link can "
                         "train to). Below capable alone is often idle power saving.");
  auto width = NewFamily("xpu_pcie_link_width_lanes",
                         "PCIe link width in lanes: current, max (the device's), port_max (the "
                         "upstream port's) and capable (the lower maximum).");
  auto aer = NewFamily("xpu_pcie_aer_errors_total",
                       "PCIe AER errors the device reported since boot, by severity and type.",
                       prometheus::MetricType::Counter);
  auto temp = NewFamily("xpu_hwmon_temperature_celsius", "Temperature from the driver's hwmon.");
  auto watts = NewFamily("xpu_hwmon_power_watts", "Power from the driver's hwmon.");
  auto joules = NewFamily("xpu_hwmon_energy_joules_total", "Energy from the driver's hwmon.",
                          prometheus::MetricType::Counter);
  auto resets = NewFamily("xpu_device_resets_observed_total",
                          "Times the device left the bus or lost its driver and came back.",
                          prometheus::MetricType::Counter);
  for (const PciDeviceView& d : pci) {
    const std::vector<prometheus::ClientMetric::Label> id = {
        {"bus_id", d.bus_id}, {"minor", d.minor}, {"uuid", d.uuid}};
    auto with = [&](std::initializer_list<prometheus::ClientMetric::Label> more) {
      auto l = id;
      l.insert(l.end(), more);
      return l;
    };
    present.metric.push_back(GaugeSample(id, d.present ? 1 : 0));
    resets.metric.push_back(CounterSample(id, static_cast<double>(d.resets_observed)));
    if (!d.present) continue;
    bound.metric.push_back(GaugeSample(with({{"driver", d.driver}}), d.driver.empty() ? 0 : 1));
    if (!d.power_state.empty())
      power.metric.push_back(GaugeSample(with({{"state", d.power_state}}), 1));
    for (const auto& [v, which] :
         {std::make_pair(d.current_link_speed, "current"), std::make_pair(d.max_link_speed, "max"),
          std::make_pair(d.port_max_link_speed, "port_max"),
          std::make_pair(d.capable_link_speed(), "capable")})
      if (v) speed.metric.push_back(GaugeSample(with({{"bound", which}}), *v));
    for (const auto& [v, which] :
         {std::make_pair(d.current_link_width, "current"), std::make_pair(d.max_link_width, "max"),
          std::make_pair(d.port_max_link_width, "port_max"),
          std::make_pair(d.capable_link_width(), "capable")})
      if (v) width.metric.push_back(GaugeSample(with({{"bound", which}}), *v));
    for (const PciDeviceView::Aer& a : d.aer)
      aer.metric.push_back(CounterSample(with({{"severity", a.severity}, {"type", a.type}}),
                                         static_cast<double>(a.count)));
    for (const PciDeviceView::Sensor& s : d.hwmon) {
      auto& f = s.kind == "temperature" ? temp : s.kind == "power" ? watts : joules;
      f.metric.push_back(SampleOf(f, with({{"sensor", s.sensor}}), s.value));
    }
  }
  std::vector<prometheus::MetricFamily> out;
  for (auto* f : {&present, &bound, &power, &speed, &width, &aer, &temp, &watts, &joules, &resets})
    if (!f->metric.empty()) out.push_back(std::move(*f));
  return out;
}

}  // namespace xpu::store
