#include "hal/nvml/backend.h"

#include <spdlog/spdlog.h>

#include "hal/kmsg/kmsg_catalog.h"
#include "hal/nvml/nvml_lookout.h"
#include "hal/nvml/nvml_sampler.h"

namespace xpu::hal {
namespace {

void NvmlFlags(const FlagSet& f, HalOptions* o) {
  CLI::App& app = f.app;
  f(Applier::kHal,
    app.add_option("--hal.nvml.library", o->nvml_library,
                   "NVIDIA's NVML library the nvml backend opens at run time (a name the "
                   "dynamic loader looks up, or a path)")
        ->capture_default_str());
  f(Applier::kHal,
    app.add_option(
           "--hal.nvml.host-proc", o->nvml_host_proc,
           "The /proc of the PID namespace NVML's process ids are in (the host's: "
           "/proc with hostPID: true): the nvml backend joins each process on a card to its pod "
           "and container by its cgroup there (xpu_container_memory_used_bytes); "
           "empty: not joined")
        ->capture_default_str());
}

// --hal=nvml: the sampler, blind until NVIDIA's library answers. auto: a
// lookout that runs it once the library loads and lists a card (a driver
// loading after the exporter is picked up; a node without one shows
// nothing).
Status NvmlMake(const BackendContext& c, std::unique_ptr<Part>* out) {
  const HalOptions& o = c.options;
  if (!c.selection.automatic && !c.selection.on("nvml")) return Status::Ok();
  NvmlSampler::Options options;
  options.library = o.nvml_library;
  options.interval = o.interval;
  options.gauge_interval = o.gauge_interval;
  options.host_proc = o.nvml_host_proc;
  if (c.kmsg) {  // Xid events as the kernel log's catalog names them: both sources agree
    options.event_active_for = c.kmsg->event_active_for();
    options.states = c.kmsg->states();
  }
  if (!c.selection.on("nvml")) {
    spdlog::info("HAL backend nvml: looking for {} (--hal=auto)", o.nvml_library);
    *out = std::make_unique<NvmlLookout>(NvmlLookout::Build{
        std::move(options), c.faults, c.registry, c.metrics, c.exemplars, c.shared_metrics});
    return Status::Ok();
  }
  spdlog::info("HAL backend nvml through {}, every {} ms", o.nvml_library, o.interval.count());
  *out = std::make_unique<NvmlSampler>(std::move(options), c.faults, c.registry, c.metrics,
                                       c.exemplars, c.shared_metrics);
  return Status::Ok();
}

}  // namespace

const BackendKind kNvmlBackend = {"nvml", "nvml", NvmlFlags, NvmlMake};

}  // namespace xpu::hal
