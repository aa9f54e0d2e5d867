#pragma once

#include "common/flags.h"
#include "kubernetes/options.h"

namespace xpu::kubernetes {

// The API server's flags (--kubernetes.*): the watch's into `o`, the
// Node condition's and Events' into `nh`.
void AddKubernetesFlags(const FlagSet& f, KubernetesOptions* o, NodeHealthOptions* nh);

}  // namespace xpu::kubernetes
