#include "hal/kmsg/backend.h"

#include <spdlog/spdlog.h>

#include "hal/kmsg/kmsg_sampler.h"

namespace xpu::hal {
namespace {

void KmsgFlags(const FlagSet& f, HalOptions* o) {
  CLI::App& app = f.app;
  f(Applier::kHal, app.add_option("--hal.kmsg.path", o->kmsg_path,
                                  "Kernel log the kmsg backend reads: /dev/kmsg, or a file of "
                                  "records in its format")
                       ->capture_default_str());
  f(Applier::kHal, app.add_option("--hal.kmsg.catalog", o->kmsg_catalog_file,
                                  "Kernel-log catalog YAML replacing the built-in one")
                       ->check(CLI::ExistingFile));
  f(Applier::kHal,
    app.add_option("--hal.state-dir", o->state_dir,
                   "Directory where the kernel log's active states (Xid 79...) are kept across "
                   "restarts, with the boot id (made, mode 0700, when missing); empty: not kept")
        ->capture_default_str());
  f(Applier::kHal, app.add_flag("--hal.kmsg.user-records", o->kmsg_user_records,
                                "Also read records written from userspace (facility user), not "
                                "only the kernel's own"));
}

// --hal=kmsg, or auto where the kernel log can be read (CAP_SYSLOG under
// dmesg_restrict).
Status KmsgMake(const BackendContext& c, std::unique_ptr<Part>* out) {
  const HalOptions& o = c.options;
  const bool readable = c.selection.automatic && KmsgReadable(o.kmsg_path);
  if (c.selection.automatic && !readable)
    spdlog::info("HAL kmsg backend off: {} cannot be read (--hal=kmsg would retry)", o.kmsg_path);
  if (!c.selection.on("kmsg") && !readable) return Status::Ok();
  spdlog::info("HAL backend kmsg at {}", o.kmsg_path);
  *out = std::make_unique<KmsgSampler>(
      KmsgSampler::Options{o.kmsg_path, o.kmsg_user_records, o.interval,
                           o.state_dir.empty() ? "" : o.state_dir + "/kmsg-states.json"},
      c.kmsg, c.faults, c.registry, c.metrics, c.exemplars);
  return Status::Ok();
}

}  // namespace

const BackendKind kKmsgBackend = {"kmsg", "kmsg", KmsgFlags, KmsgMake};

}  // namespace xpu::hal
