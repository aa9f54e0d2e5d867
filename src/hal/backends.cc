#include "hal/backend.h"
#include "hal/kmsg/backend.h"
#include "hal/nvml/backend.h"
#include "hal/pci/backend.h"
#include "hal/sysfs/backend.h"

namespace xpu::hal {

// Adding a backend: its folder (src/hal/<name>/: its code, flags and
// factory, a backend.h naming its kind) and its row here
// (docs/architecture.md, "How to add a backend").
const std::vector<BackendKind>& BackendKinds() {
  static const std::vector<BackendKind> kinds = {
      kSysfsBackend,
      kPciBackend,
      kKmsgBackend,
      kNvmlBackend,
  };
  return kinds;
}

}  // namespace xpu::hal
