#pragma once

#include <optional>
#include <string>
#include <vector>

#include "store/device_registry.h"

namespace xpu::testing {

// `source`'s devices as the registry holds them while it sees (empty
// otherwise), each named from the inventory and with its health as the
// page writes it: following the worst active fault, none while unread.
inline std::vector<store::DeviceView> ViewOf(const store::DeviceRegistry& registry,
                                             const std::string& source) {
  auto seen = registry.SeenDeviceViews();
  auto it = seen.find(source);
  if (it == seen.end()) return {};
  for (store::DeviceView& d : it->second)
    d.healthy = store::HealthWithFaults(d.seen ? d.healthy : std::nullopt, d.faults);
  return it->second;
}

}  // namespace xpu::testing
