#include "hal/flags.h"

#include <algorithm>

#include "hal/backend.h"

namespace xpu::hal {
namespace {

// "sysfs, pci, kmsg and nvml": the registered names, for messages and help.
std::string Names() {
  std::string out;
  const std::vector<BackendKind>& kinds = BackendKinds();
  for (size_t i = 0; i < kinds.size(); ++i)
    out += (i == 0 ? "" : i + 1 == kinds.size() ? " and " : ", ") + std::string(kinds[i].name);
  return out;
}

}  // namespace

Status ParseHalSelection(const std::string& flag, HalSelection* out) {
  *out = HalSelection();
  if (flag == "auto") {
    out->automatic = true;
    return Status::Ok();
  }
  if (flag == "none") return Status::Ok();
  size_t start = 0;
  while (start <= flag.size()) {
    const size_t comma = std::min(flag.find(',', start), flag.size());
    const std::string item = flag.substr(start, comma - start);
    const std::vector<BackendKind>& kinds = BackendKinds();
    if (std::none_of(kinds.begin(), kinds.end(),
                     [&](const BackendKind& k) { return item == k.name; }))
      return Status::InvalidArgument("unknown backend '" + item + "' (auto, none, or a list of " +
                                     Names() + ")");
    out->names.insert(item);
    start = comma + 1;
  }
  return Status::Ok();
}

void AddHalFlags(const FlagSet& f, HalOptions* o) {
  CLI::App& app = f.app;
  f(Applier::kHal,
    app.add_option("--hal", o->backend,
                   "HAL backends: auto (each that finds devices), none, or a list of " + Names())
        ->type_name("BACKENDS")  // parsed by Validate
        ->capture_default_str());
  f(Applier::kHal, AddDuration(app, "--hal.interval", &o->interval, "How often to sample the HAL"));
  f(Applier::kHal,
    AddDuration(app, "--hal.gauge-interval", &o->gauge_interval,
                "How often the HAL reads what only changes slowly or is only shown (NVML's "
                "gauges, counters, links, MIG devices and processes); what raises a fault is "
                "read every --hal.interval. At most --hal.interval: all of it every interval"));
  f(Applier::kHal, app.add_option("--hal.fault-catalog", o->fault_catalog_file,
                                  "Fault-code catalog YAML replacing the built-in one")
                       ->check(CLI::ExistingFile));
  // Each backend's own, from its folder.
  for (const BackendKind& k : BackendKinds())
    if (k.flags != nullptr) k.flags(f, o);
}

}  // namespace xpu::hal
