// --hal.kmsg.catalog YAML: parsed (RE2 patterns compiled within their
// memory bound), then matched against one line.
#include "fuzz_util.h"
#include "hal/kmsg/kmsg_catalog.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const xpu::hal::KmsgCatalog> catalog;
  if (xpu::hal::KmsgCatalog::Parse(xpu::fuzz::AsString(data, size), "fuzz", &catalog).ok()) {
    (void)catalog->Match("NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.",
                         "0000:3b:00.0");
    (void)catalog->DriverOf("amdgpu 0000:03:00.0: ring gfx timeout");
  }
  return 0;
}
