#pragma once

#include <chrono>
#include <string>

namespace xpu::sinks {

// Device health handed to Kubernetes (docs/kubernetes.md, "Device health on
// the Node"), each off by default: the Node condition XpuDevicesHealthy
// (--kubernetes.node-condition), and an Event on the Node per fault raise at
// restart_card or worse (--kubernetes.events). Applied by their own part
// (sinks::NodeReporter), which uses the API server kubernetes::KubernetesOptions
// name.
struct NodeHealthOptions {
  bool condition = false;
  bool events = false;
  // --kubernetes.node-condition-hold: how long a better condition must hold
  // before it is patched (NodeReporter::Options::recover_hold).
  std::chrono::milliseconds hold{30000};
  // --kubernetes.device-taints: a DeviceTaintRule per faulted card
  // (sinks::DeviceTainter), with its effect (NoSchedule, or None to only
  // watch) and the lowest fault level that evicts (NoExecute; empty: none).
  // Its hold is the condition's.
  bool device_taints = false;
  std::string taint_effect = "NoSchedule";
  std::string taint_evict_level;
  bool operator==(const NodeHealthOptions&) const = default;
};

}  // namespace xpu::sinks
