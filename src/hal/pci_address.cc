#include "hal/pci_address.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>

namespace xpu::hal {

bool IsHex(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isxdigit(static_cast<unsigned char>(c)) != 0;
  });
}

std::string CanonicalPciAddress(std::string_view text) {
  std::string_view v = text;  // without a final newline and surrounding blanks
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
  while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
  // [domain:]bus:device.function
  std::string_view domain = "0000";
  const size_t first = v.find(':');
  if (first == std::string_view::npos) return "";
  if (v.find(':', first + 1) != std::string_view::npos) {
    domain = v.substr(0, first);
    v.remove_prefix(first + 1);
  }
  const size_t colon = v.find(':');
  const size_t dot = v.find('.');
  if (colon == std::string_view::npos || dot == std::string_view::npos || dot < colon) return "";
  const std::string_view bus = v.substr(0, colon), dev = v.substr(colon + 1, dot - colon - 1),
                         fn = v.substr(dot + 1);
  if (!IsHex(domain) || domain.size() > 8 || !IsHex(bus) || bus.size() > 2 || !IsHex(dev) ||
      dev.size() > 2 || fn.size() != 1 || fn[0] < '0' || fn[0] > '7')
    return "";
  uint32_t d = 0, b = 0, s = 0;
  std::from_chars(domain.data(), domain.data() + domain.size(), d, 16);
  std::from_chars(bus.data(), bus.data() + bus.size(), b, 16);
  std::from_chars(dev.data(), dev.data() + dev.size(), s, 16);
  // A 32-bit domain is one (Intel VMD puts its devices at 10000: and up):
  // written with as many digits as it has, at least four, as the kernel does.
  if (s > 0x1f) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%c", d, b, s, fn[0]);
  return buf;
}

}  // namespace xpu::hal
