// ListAndWatch pushes with ListGpuInfo answers (the first two bytes split the
// input between them) through DecodeDevices and the device registry's page.
#include <prometheus/text_serializer.h>

#include "exposition/text_format.h"
#include "fuzz_util.h"
#include "store/device_registry.h"
#include "upstream/decode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t split = std::min<size_t>(size - 2, (size_t{data[0]} << 8) | data[1]);
  xdm::api::ListAndWatchResponse law;
  xdm::api::GpuInfoResponse info;
  if (!law.ParseFromArray(data + 2, static_cast<int>(split))) return 0;
  if (!info.ParseFromArray(data + 2 + split, static_cast<int>(size - 2 - split))) return 0;
  xpu::upstream::DeviceDecodeStats stats;
  auto devices = xpu::upstream::DecodeDevices(law, info, 64, &stats);
  xpu::store::DeviceRegistry registry;
  registry.SetXdmDevices(std::move(devices));
  std::string page;
  for (const auto& family : registry.Collect()) xpu::exposition::AppendFamily(family, &page);
  xpu::fuzz::CheckExposition(page);
  return 0;
}
