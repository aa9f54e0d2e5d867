// extenderResources["topology"] JSON.
#include "fuzz_util.h"
#include "upstream/decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<xpu::store::TopologyLevel> levels;
  xpu::Status s = xpu::upstream::ParseTopology(xpu::fuzz::AsString(data, size), &levels);
  if (!s.ok() && !levels.empty()) abort();  // the contract: empty on error
  if (levels.size() > xpu::upstream::kMaxTopologyLevels) abort();
  return 0;
}
