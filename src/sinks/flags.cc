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
    app.add_flag("--kubernetes.events", nh->events,
                 "Post an Event on the Node per fault raise at restart_card or worse, "
                 "rate-limited (needs create on events)"));
}

}  // namespace xpu::sinks
