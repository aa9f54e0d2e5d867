// Kernel log records (/dev/kmsg, --hal.kmsg.path): the record parser, the
// built-in catalog's patterns on its text, and the sampler's state, which
// must stay within its bounds whatever the records say.
#include <prometheus/registry.h>

#include "fuzz_util.h"
#include "hal/fault_catalog.h"
#include "hal/kmsg/kmsg.h"
#include "hal/kmsg/kmsg_catalog.h"
#include "hal/kmsg/kmsg_sampler.h"
#include "store/device_registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace xpu::hal;
  static prometheus::Registry metrics;
  static xpu::store::DeviceRegistry registry;
  static KmsgSampler sampler(KmsgSampler::Options{"", /*user_records=*/true},
                             KmsgCatalog::Builtin(), FaultCatalog::Builtin(), &registry, &metrics,
                             nullptr, [] { return uint64_t{1} << 40; });
  const std::string input = xpu::fuzz::AsString(data, size);
  KmsgRecord r;
  if (ParseKmsgRecord(input, &r).ok()) {
    if (r.text.size() > kKmsgMaxRecord) abort();  // unescaping never grows the text
    auto m = KmsgCatalog::Builtin()->Match(r.text, "");
    if (m && m->pattern->effect == KmsgEffect::kFault && m->code.size() != 10) abort();
    (void)NormalizePciAddress(r.text);
  }
  sampler.HandleRecord(input);
  sampler.Publish();
  return 0;
}
