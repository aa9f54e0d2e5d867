#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <vector>

#include "store/device_registry.h"

namespace xpu::hal {

// The pci backend's families (docs/hal.md): presence, driver, power state,
// link speed and width against the slot, AER counts, the driver's hwmon
// sensors and observed resets, each series with bus_id, and minor and uuid
// when XDM lists the device.
std::vector<prometheus::MetricFamily> PciFamilies(const std::vector<store::PciDeviceView>& pci);

// Those families on the page, from the PCI views the PciSampler publishes
// into the registry (joined there to XDM's devices and filtered by
// --xdm.devices). No view, no family: the backend off or nothing found.
// Any thread; the registry must outlive it.
class PciDeviceMetrics : public prometheus::Collectable {
 public:
  explicit PciDeviceMetrics(const store::DeviceRegistry* registry) : registry_(registry) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    return PciFamilies(registry_->PciDevices());
  }

 private:
  const store::DeviceRegistry* registry_;
};

}  // namespace xpu::hal
