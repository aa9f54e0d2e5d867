#pragma once

#include "common/flags.h"
#include "kubernetes/options.h"

namespace xpu::kubernetes {

// The API server's flags (--kubernetes.*) into `o`: the watch's and the
// credentials every user of the API server shares (the Node reporter's own
// are sinks::AddNodeHealthFlags').
void AddKubernetesFlags(const FlagSet& f, KubernetesOptions* o);

}  // namespace xpu::kubernetes
