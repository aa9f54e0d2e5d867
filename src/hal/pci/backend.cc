#include "hal/pci/backend.h"

#include <spdlog/spdlog.h>

#include "hal/pci/pci_sampler.h"

namespace xpu::hal {
namespace {

void PciFlags(const FlagSet& f, HalOptions* o) {
  CLI::App& app = f.app;
  f(Applier::kHal, app.add_option("--hal.pci.sysfs-root", o->pci_root,
                                  "sysfs root the pci backend reads (<root>/bus/pci/devices)")
                       ->capture_default_str());
  f(Applier::kHal,
    app.add_option(
           "--hal.pci.classes", o->pci_classes,
           "PCI classes the pci backend watches (4 or 6 hex digits), repeatable or comma-separated")
        ->delimiter(',')
        ->capture_default_str());
  f(Applier::kHal,
    app.add_option("--hal.pci.vendors", o->pci_vendors,
                   "Only these PCI vendors (0x10de...), whose VGA devices count too; default any")
        ->delimiter(','));
}

// --hal=pci, or auto where the tree has a device to watch.
Status PciMake(const BackendContext& c, std::unique_ptr<Part>* out) {
  const HalOptions& o = c.options;
  if (!c.selection.automatic && !c.selection.on("pci")) return Status::Ok();
  PciScanner scanner(o.pci_root, c.pci_filter);
  std::vector<PciDevice> found;
  const bool usable = scanner.Scan(&found).ok();
  if (!c.selection.on("pci") && (!usable || found.empty())) return Status::Ok();
  spdlog::info("HAL backend pci at {}: {} device(s), faults every {} ms, the rest every {} ms",
               o.pci_root, found.size(), o.interval.count(),
               std::max(o.interval, o.gauge_interval).count());
  *out = std::make_unique<PciSampler>(std::move(scanner), c.faults, o.interval, o.gauge_interval,
                                      c.registry, c.metrics, c.exemplars, c.shared_metrics);
  return Status::Ok();
}

}  // namespace

const BackendKind kPciBackend = {"pci", "pci", PciFlags, PciMake};

}  // namespace xpu::hal
