#pragma once

#include "common/flags.h"
#include "sinks/options.h"

namespace xpu::sinks {

// The Node reporter's flags (--kubernetes.node-condition, -hold, --kubernetes.events)
// into `nh`: the API server's own (the node, the credentials) are
// kubernetes::AddKubernetesFlags'.
void AddNodeHealthFlags(const FlagSet& f, NodeHealthOptions* nh);

}  // namespace xpu::sinks
