#pragma once

#include <CLI/CLI.hpp>
#include <chrono>
#include <map>
#include <string>

namespace xpu {

// Every duration flag must lie in (0, kMaxDuration]: longer ones overflow
// the clock arithmetic (100y in nanoseconds does) and mean nothing here.
inline constexpr std::chrono::milliseconds kMaxDuration{std::chrono::hours(24)};

// Who applies a setting when a reload changes it: each flag names its
// applier where it is registered, beside the part that reads it (each
// folder's flags.cc), and a reload rebuilds or re-applies exactly the
// appliers whose settings changed (docs/architecture.md, "Reload"); the
// HAL backends share kHal. kRestart: only a restart applies it.
enum class Applier { kRestart, kWebConfig, kIngest, kHal, kPods, kWatcher, kNodeHealth, kLog };
inline constexpr int kApplierCount = static_cast<int>(Applier::kLog) + 1;
const char* ApplierName(Applier a);  // "restart", "web", "ingest", "hal", ...

// The flags being registered and who applies each: every registration passes
// its option through here once (app/config.cc refuses a flag that did not).
// Used while the command line is parsed, on that thread.
struct FlagSet {
  CLI::App& app;
  std::map<std::string, Applier>* appliers;
  CLI::Option* operator()(Applier a, CLI::Option* opt) const {
    (*appliers)[opt->get_name().substr(2)] = a;
    return opt;
  }
};

// A duration flag (a Prometheus duration: 500ms, 1s, 2m; positive, at most
// kMaxDuration), parsed once into `out`, whose value is the default.
CLI::Option* AddDuration(CLI::App& app, const std::string& name, std::chrono::milliseconds* out,
                         const std::string& help);

}  // namespace xpu
