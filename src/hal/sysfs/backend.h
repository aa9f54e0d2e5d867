#pragma once

#include "hal/backend.h"

namespace xpu::hal {

// The sysfs backend's row of BackendKinds() (docs/hal.md).
extern const BackendKind kSysfsBackend;

}  // namespace xpu::hal
