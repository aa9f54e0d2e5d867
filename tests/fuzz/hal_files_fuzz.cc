// The sysfs HAL files (health, uuid, fault_codes) and fault-code normalising.
#include "common/fault_code.h"
#include "fuzz_util.h"
#include "hal/fault_catalog.h"
#include "hal/sysfs_backend.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = xpu::fuzz::AsString(data, size);
  bool healthy;
  (void)xpu::hal::ParseHealthFile(text, &healthy);
  std::string uuid;
  (void)xpu::hal::ParseUuidFile(text, &uuid);
  std::vector<std::string> codes;
  if (xpu::hal::ParseFaultCodesFile(text, &codes).ok()) {
    if (codes.size() > xpu::hal::kMaxFaultCodes) abort();
    static const auto catalog = xpu::hal::FaultCatalog::Builtin();
    for (const auto& c : codes) (void)catalog->Lookup(c);
  }
  (void)xpu::NormalizeFaultCode(text);
  return 0;
}
