#pragma once

#include <cstddef>

#include "common/flags.h"
#include "upstream/xdm_client.h"

namespace xpu::upstream {

// The XDM client's flags (endpoints, backoff, interval, caps, devices),
// writing into `o`; --collector.max-series, the store's cap, into
// `max_series`.
void AddXdmFlags(const FlagSet& f, ClientOptions* o, size_t* max_series);

}  // namespace xpu::upstream
