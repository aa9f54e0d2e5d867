#pragma once

#include "common/flags.h"
#include "kubelet/pod_mapper.h"

namespace xpu::kubelet {

// The kubelet's flags (--kubelet.*), writing into `o`.
void AddKubeletFlags(const FlagSet& f, PodMapperOptions* o);

}  // namespace xpu::kubelet
