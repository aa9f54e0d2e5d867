#pragma once

#include "hal/backend.h"

namespace xpu::hal {

// The nvml backend's row of BackendKinds() (docs/hal.md).
extern const BackendKind kNvmlBackend;

}  // namespace xpu::hal
