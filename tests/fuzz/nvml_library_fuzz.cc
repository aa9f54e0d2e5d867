// The nvml backend's reading of what NVIDIA's library answers (NVML is the
// outside input here: a driver of any version, or a broken one): the whole
// read of every card, the faults derived from it and its families, with a
// library (libfuzz_nvml.so, fuzz_nvml.cc) that answers every call from the
// fuzz input. Held: no crash or overrun, at most kMaxNvmlDevices cards,
// every bus id either empty or canonical, every family sample labelled.
#include <dlfcn.h>

#include <cstdlib>
#include <memory>

#include "hal/nvml/nvml_library.h"
#include "hal/nvml/nvml_reader.h"
#include "hal/nvml/nvml_sampler.h"
#include "hal/pci_address.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static std::shared_ptr<const xpu::hal::NvmlLibrary> lib;
  static void (*set)(const uint8_t*, size_t) = nullptr;
  if (!lib) {
    if (!xpu::hal::NvmlLibrary::Open(FUZZ_NVML_PATH, &lib).ok()) abort();
    void* handle = dlopen(FUZZ_NVML_PATH, RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) abort();
    set = reinterpret_cast<void (*)(const uint8_t*, size_t)>(dlsym(handle, "xpu_fuzz_nvml_set"));
    if (set == nullptr) abort();
  }
  set(data, size);
  // The inventory's addresses, asked for by address where no card read by
  // index names them (a card lost before NVML named it).
  const std::vector<std::string> ask = {"0000:3b:00.0", "0000:5e:00.0", "10000:e1:00.0"};
  std::vector<xpu::hal::NvmlDevice> cards;
  if (!xpu::hal::ReadNvmlDevices(*lib, &cards, ask).ok()) return 0;
  if (cards.size() > xpu::hal::kMaxNvmlDevices + ask.size()) abort();
  std::vector<xpu::hal::NvmlJoined> joined;
  for (const xpu::hal::NvmlDevice& c : cards) {
    if (!c.bus_id.empty() && xpu::hal::CanonicalPciAddress(c.bus_id) != c.bus_id) abort();
    (void)xpu::hal::DeriveNvmlFaults(c);
    joined.push_back({&c, "", c.uuid});
  }
  for (const auto& family : xpu::hal::NvmlFamilies(joined))
    for (const auto& m : family.metric)
      if (m.label.empty()) abort();
  return 0;
}
