// --metrics.catalog YAML.
#include "catalog/catalog.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::shared_ptr<const xpu::catalog::Catalog> catalog;
  if (xpu::catalog::Catalog::Parse(xpu::fuzz::AsString(data, size), "fuzz", &catalog).ok()) {
    for (const auto& e : catalog->entries())
      if (!xpu::catalog::CheckEntry(e).empty()) abort();  // Parse admitted a bad entry
  }
  return 0;
}
