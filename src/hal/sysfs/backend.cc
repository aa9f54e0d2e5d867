#include "hal/sysfs/backend.h"

#include <spdlog/spdlog.h>

#include "hal/sysfs/hal_sampler.h"

namespace xpu::hal {
namespace {

void SysfsFlags(const FlagSet& f, HalOptions* o) {
  f(Applier::kHal,
    f.app.add_option("--hal.root", o->root, "Root of the sysfs HAL tree (xpu<minor>/...)")
        ->capture_default_str());
}

// --hal=sysfs, or auto where the root exists.
Status SysfsMake(const BackendContext& c, std::unique_ptr<Part>* out) {
  const HalOptions& o = c.options;
  std::unique_ptr<HalBackend> backend;
  if (c.selection.automatic || c.selection.on("sysfs")) {
    if (Status s = MakeBackend(c.selection.on("sysfs") ? "sysfs" : "auto", o.root, &backend);
        !s.ok())
      return s;
  }
  if (!backend) {
    spdlog::info("HAL sysfs backend off (--hal={}, {})", o.backend, o.root);
    return Status::Ok();
  }
  spdlog::info("HAL backend {} at {}, every {} ms", backend->name(), o.root, o.interval.count());
  *out = std::make_unique<HalSampler>(std::move(backend), c.faults, o.interval, c.registry,
                                      c.metrics, c.exemplars, c.shared_metrics);
  return Status::Ok();
}

}  // namespace

const BackendKind kSysfsBackend = {"sysfs", "hal", SysfsFlags, SysfsMake};

}  // namespace xpu::hal
