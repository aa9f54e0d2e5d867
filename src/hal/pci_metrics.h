#pragma once

#include <prometheus/metric_family.h>

#include <vector>

#include "store/device_registry.h"

namespace xpu::hal {

// The pci backend's families (docs/hal.md): presence, driver, power state,
// link speed and width against the slot, AER counts, the driver's hwmon
// sensors and observed resets, each series with bus_id, and minor and uuid
// when XDM lists the device. The registry writes them, under its lock, from
// the views the PciSampler publishes (DeviceRegistry::SetPciFamilyWriter).
std::vector<prometheus::MetricFamily> PciFamilies(const std::vector<store::PciDeviceView>& pci);

}  // namespace xpu::hal
