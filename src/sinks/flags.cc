#include "sinks/flags.h"

namespace xpu::sinks {

void AddNodeHealthFlags(const FlagSet& f, NodeHealthOptions* nh) {
  CLI::App& app = f.app;
  f(Applier::kNodeHealth,
    app.add_flag("--kubernetes.node-condition", nh->condition,
                 "Keep the Node condition XpuDevicesHealthy from the devices' worst active "
                 "fault (needs patch on nodes/status)"));
  f(Applier::kNodeHealth,
    AddDuration(app, "--kubernetes.node-condition-hold", &nh->hold,
                "How long a better condition must hold before it is patched (worse is "
                "patched at once), so that a flapping fault costs one patch"));
  f(Applier::kNodeHealth,
    app.add_flag("--kubernetes.device-taints", nh->device_taints,
                 "Write a DRA DeviceTaintRule for each card with a fault at restart_card or "
                 "worse, deleted once it is healthy (needs resourceslices and "
                 "devicetaintrules: docs/kubernetes.md)"));
  f(Applier::kNodeHealth,
    app.add_option("--kubernetes.device-taints.effect", nh->taint_effect,
                   "The rules' effect: NoSchedule (no new pods on the card), or None (seen, "
                   "not acted on: to watch first)")
        ->check(CLI::IsMember({"NoSchedule", "None"}))
        ->capture_default_str());
  f(Applier::kNodeHealth,
    app.add_option("--kubernetes.device-taints.evict-level", nh->taint_evict_level,
                   "The lowest fault level whose rule evicts the card's pods (NoExecute): "
                   "restart_card, reset_card, isolate_after_job or isolate_card; empty: none"));
  f(Applier::kNodeHealth,
    app.add_flag("--kubernetes.events", nh->events,
                 "Post an Event on the Node per fault raise at restart_card or worse, "
                 "rate-limited (needs create on events)"));
}

}  // namespace xpu::sinks
