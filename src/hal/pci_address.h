#pragma once

// PCI addresses as every source writes them, made one join key. No
// dependency beyond the standard library: tools/nvml-check links it.

#include <string>
#include <string_view>

namespace xpu::hal {

// Whether `s` is one or more hex digits.
bool IsHex(std::string_view s);

// "0000:3b:00.0", "00000000:3B:00.0" (NVIDIA's 8-digit domain) and
// "3b:00.0" -> "0000:3b:00.0", "10000:e1:00.0" (a 32-bit domain, as Intel
// VMD's) as it is; empty if not a PCI address. The join key
// between XDM's bus_id and the PCI tree.
std::string CanonicalPciAddress(std::string_view text);

}  // namespace xpu::hal
