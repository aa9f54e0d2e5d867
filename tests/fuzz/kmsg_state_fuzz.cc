// The kernel log's state file (--hal.state-dir): whatever a file holds, the
// parser refuses it with a reason or returns states within the backend's
// bounds, which serialize and parse back to the same.
#include "fuzz_util.h"
#include "hal/kmsg/kmsg_sampler.h"
#include "hal/kmsg/kmsg_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace xpu::hal;
  const std::string input = xpu::fuzz::AsString(data, size);
  KmsgSavedStates s;
  const xpu::Status st = ParseKmsgStates(input, &s);
  if (!st.ok()) {
    if (st.message().empty()) abort();
    return 0;
  }
  if (s.states.size() > kMaxKmsgDevices || s.boot_id.empty()) abort();
  for (const auto& [address, codes] : s.states)
    if (codes.size() > kMaxKmsgCodesPerDevice) abort();
  KmsgSavedStates back;
  if (!ParseKmsgStates(SerializeKmsgStates(s), &back).ok() || !(back == s)) abort();
  return 0;
}
