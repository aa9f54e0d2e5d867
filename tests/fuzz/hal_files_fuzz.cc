// The sysfs HAL files (health, uuid, fault_codes), fault-code normalising,
// and a process's cgroup file as the nvml backend reads it.
#include <cctype>

#include "common/fault_code.h"
#include "fuzz_util.h"
#include "hal/fault_catalog.h"
#include "hal/nvml/pod_cgroup.h"
#include "hal/sysfs/sysfs_backend.h"

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
  xpu::hal::PodCgroup cg;
  if (xpu::hal::ParsePodCgroup(text, &cg)) {
    // What it names is a uid (metadata.uid's form, or a static pod's 32 hex
    // digits) and a hex id, never text to repair.
    const size_t n = cg.pod_uid.size();
    if ((n != 36 && n != 32) || cg.container_id.size() != 64) abort();
    for (const char c : cg.pod_uid + cg.container_id)
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != '-') abort();
    if (n == 32 && cg.pod_uid.find('-') != std::string::npos) abort();
  }
  return 0;
}
