#pragma once

#include <prometheus/metric_family.h>

#include <vector>

#include "store/views.h"

namespace xpu::store {

// The pci backend's families (docs/hal.md): presence, driver, power state,
// link speed and width against the slot, AER counts, the driver's hwmon
// sensors and observed resets, each series with bus_id, and minor and uuid
// when XDM lists the device. The registry writes them, under its lock, from
// the view the PciSampler publishes (DeviceRegistry::SetPciDevices), as it
// writes the kmsg view's families.
std::vector<prometheus::MetricFamily> PciFamilies(const std::vector<PciDeviceView>& pci);

}  // namespace xpu::store
