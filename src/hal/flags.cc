#include "hal/flags.h"

#include <algorithm>

namespace xpu::hal {

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
    if (item == "sysfs") {
      out->sysfs = true;
    } else if (item == "pci") {
      out->pci = true;
    } else if (item == "kmsg") {
      out->kmsg = true;
    } else if (item == "nvml") {
      out->nvml = true;
    } else {
      return Status::InvalidArgument("unknown backend '" + item +
                                     "' (auto, none, or a list of sysfs, pci, kmsg and nvml)");
    }
    start = comma + 1;
  }
  return Status::Ok();
}

void AddHalFlags(const FlagSet& f, HalOptions* o) {
  CLI::App& app = f.app;
  f(Applier::kHal,
    app.add_option("--hal", o->backend,
                   "HAL backends: auto (each that finds devices), none, or a list of sysfs, "
                   "pci, kmsg, nvml")
        ->type_name("BACKENDS")  // parsed by Validate
        ->capture_default_str());
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
  f(Applier::kHal,
    app.add_option("--hal.root", o->root, "Root of the sysfs HAL tree (xpu<minor>/...)")
        ->capture_default_str());
  f(Applier::kHal, AddDuration(app, "--hal.interval", &o->interval, "How often to sample the HAL"));
  f(Applier::kHal, app.add_option("--hal.kmsg.path", o->kmsg_path,
                                  "Kernel log the kmsg backend reads: /dev/kmsg, or a file of "
                                  "records in its format")
                       ->capture_default_str());
  f(Applier::kHal, app.add_option("--hal.kmsg.catalog", o->kmsg_catalog_file,
                                  "Kernel-log catalog YAML replacing the built-in one")
                       ->check(CLI::ExistingFile));
  f(Applier::kHal,
    app.add_option("--hal.state-dir", o->state_dir,
                   "Directory (it must exist) where the kernel log's active states (Xid 79...) "
                   "are kept across restarts, with the boot id; empty: not kept")
        ->capture_default_str());
  f(Applier::kHal, app.add_flag("--hal.kmsg.user-records", o->kmsg_user_records,
                                "Also read records written from userspace (facility user), not "
                                "only the kernel's own"));
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
  f(Applier::kHal, app.add_option("--hal.fault-catalog", o->fault_catalog_file,
                                  "Fault-code catalog YAML replacing the built-in one")
                       ->check(CLI::ExistingFile));
}

}  // namespace xpu::hal
