#pragma once

#include <string>

#include "common/flags.h"
#include "common/status.h"
#include "hal/hal.h"

namespace xpu::hal {

// The HAL backends' flags (--hal and --hal.*), writing into `o`; --hal's
// text is parsed by ParseHalSelection. A backend's flags are added here.
void AddHalFlags(const FlagSet& f, HalOptions* o);

// What --hal selects: "auto" (each backend that finds devices, and kmsg
// where the kernel log is readable), "none", or a comma-separated list of
// "sysfs", "pci" and "kmsg". InvalidArgument names an unknown backend.
Status ParseHalSelection(const std::string& flag, HalSelection* out);

}  // namespace xpu::hal
