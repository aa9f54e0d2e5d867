#pragma once

#include "hal/backend.h"

namespace xpu::hal {

// The kmsg backend's row of BackendKinds() (docs/hal.md).
extern const BackendKind kKmsgBackend;

}  // namespace xpu::hal
