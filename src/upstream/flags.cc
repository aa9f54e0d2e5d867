#include "upstream/flags.h"

namespace xpu::upstream {

void AddXdmFlags(const FlagSet& f, ClientOptions* o, size_t* max_series) {
  CLI::App& app = f.app;
  f(Applier::kRestart,
    app.add_option("--xdm.endpoint", o->xdm_endpoint, "XDM gRPC endpoint (dp2mgr.sock)")
        ->capture_default_str());
  f(Applier::kRestart,
    app.add_option("--controller.endpoint", o->controller_endpoint,
                   "Controller gRPC endpoint (config-daemon.sock); empty disables")
        ->capture_default_str());
  f(Applier::kRestart, AddDuration(app, "--xdm.backoff-initial", &o->backoff_initial,
                                   "First wait before re-subscribing a broken stream"));
  f(Applier::kRestart,
    AddDuration(app, "--xdm.backoff-max", &o->backoff_max, "Longest wait before re-subscribing"));
  f(Applier::kIngest,
    AddDuration(app, "--collector.interval", &o->interval,
                "Expected XDM collection interval; polling period while the stream is down"));
  f(Applier::kIngest,
    AddDuration(app, "--collector.stale-after", &o->stale_after,
                "Drop series not refreshed for this long (default 3 intervals, at least 5 s)"));
  f(Applier::kRestart,
    app.add_option("--collector.max-series", *max_series,
                   "Cap on device series held; new series beyond it are dropped and counted")
        ->check(CLI::Range(size_t{1}, size_t{100000000}))
        ->capture_default_str());
  f(Applier::kRestart,
    app.add_option("--collector.max-devices", o->max_devices,
                   "Cap on devices taken from XDM; data of further devices is dropped and counted")
        ->check(CLI::Range(size_t{1}, size_t{65536}))
        ->capture_default_str());
  f(Applier::kRestart,
    app.add_option("--xdm.max-message-size", o->max_message_bytes,
                   "Largest gRPC message accepted from XDM, in bytes (bounds memory)")
        ->check(CLI::Range(4096, 1 << 30))
        ->capture_default_str());
  f(Applier::kIngest,
    app.add_flag("--collector.unknown-metrics", o->keep_unknown,
                 "Export samples with metric IDs the catalog lacks as xpu_unknown_metric{id=...}"));
  f(Applier::kIngest,
    app.add_option(
           "--xdm.devices", o->devices,
           "Export only these devices (minors), repeatable or comma-separated; default all. "
           "A card no layer names by a minor (only the bus or NVML shows it) is left out "
           "while a subset is chosen")
        ->delimiter(',')
        ->check(CLI::Range(0, 1 << 20)));
}

}  // namespace xpu::upstream
