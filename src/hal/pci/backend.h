#pragma once

#include "hal/backend.h"

namespace xpu::hal {

// The pci backend's row of BackendKinds() (docs/hal.md).
extern const BackendKind kPciBackend;

}  // namespace xpu::hal
