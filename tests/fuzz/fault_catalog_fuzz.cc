// --hal.fault-catalog YAML.
#include "fuzz_util.h"
#include "hal/fault_catalog.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const xpu::hal::FaultCatalog> catalog;
  if (xpu::hal::FaultCatalog::Parse(xpu::fuzz::AsString(data, size), "fuzz", &catalog).ok())
    (void)catalog->Lookup("0x80E18400");
  return 0;
}
