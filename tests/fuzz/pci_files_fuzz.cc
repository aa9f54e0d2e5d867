// The pci backend's parsers of the kernel's PCI sysfs files: link speed and
// width, IDs, AER counter files, PCI addresses (XDM's bus_id too) and the
// class filter of --hal.pci.classes.
#include "fuzz_util.h"
#include "hal/pci/pci.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = xpu::fuzz::AsString(data, size);
  if (auto s = xpu::hal::ParseLinkSpeed(text); s && !(*s > 0)) abort();
  if (auto w = xpu::hal::ParseLinkWidth(text); w && (*w < 0 || *w > 32)) abort();
  (void)xpu::hal::ParseHex(text);
  (void)xpu::hal::ParseInt(text);
  std::vector<std::pair<std::string, uint64_t>> aer;
  if (xpu::hal::ParseAerFile(text, &aer).ok() && aer.size() > xpu::hal::kMaxAerCounters) abort();
  const std::string a = xpu::hal::CanonicalPciAddress(text);
  // Canonical form is a fixed point.
  if (!a.empty() && xpu::hal::CanonicalPciAddress(a) != a) abort();
  (void)xpu::hal::ParseClassFilter(text);
  return 0;
}
