#pragma once

#include <string>

#include "common/flags.h"
#include "common/status.h"
#include "hal/hal.h"

namespace xpu::hal {

// The HAL's flags (--hal, --hal.interval, --hal.fault-catalog) and each
// registered backend's own (BackendKind::flags, from its folder), writing
// into `o`; --hal's text is parsed by ParseHalSelection.
void AddHalFlags(const FlagSet& f, HalOptions* o);

// What --hal selects: "auto" (each backend that finds devices, and kmsg
// where the kernel log is readable), "none", or a comma-separated list of
// registered backends' names (BackendKinds). InvalidArgument names an
// unknown backend.
Status ParseHalSelection(const std::string& flag, HalSelection* out);

}  // namespace xpu::hal
