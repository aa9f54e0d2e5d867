#include "kubelet/flags.h"

namespace xpu::kubelet {

void AddKubeletFlags(const FlagSet& f, PodMapperOptions* o) {
  CLI::App& app = f.app;
  f(Applier::kPods,
    app.add_option("--kubelet.pod-resources-socket", o->socket,
                   "kubelet PodResources socket for device-to-pod attribution; empty disables")
        ->capture_default_str());
  f(Applier::kPods,
    AddDuration(app, "--kubelet.interval", &o->interval, "How often to ask the kubelet"));
  f(Applier::kPods,
    app.add_option("--kubelet.dra.drivers", o->dra_drivers,
                   "DRA drivers whose claims name our devices (regexes), repeatable; default any")
        ->delimiter(','));
  f(Applier::kPods,
    app.add_option("--kubelet.dra.device-names", o->dra_device_names,
                   "How a DRA device (or CDI) name names our device: templates of {uuid}, "
                   "{minor}, {bus_id}, repeatable")
        ->delimiter(',')
        ->capture_default_str());
}

}  // namespace xpu::kubelet
