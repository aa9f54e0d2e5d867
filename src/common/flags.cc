#include "common/flags.h"

#include "common/duration.h"

namespace xpu {
namespace {

// CLI11 validator: a Prometheus duration (500ms, 1s, 2m), positive.
struct DurationValidator : public CLI::Validator {
  DurationValidator() {
    name_ = "DURATION";
    func_ = [](const std::string& s) -> std::string {
      auto d = ParseDuration(s);
      if (!d || d->count() <= 0)
        return "'" + s + "' is not a positive duration (e.g. 500ms, 1s, 2m)";
      if (*d > kMaxDuration) return "'" + s + "' is longer than " + FormatDuration(kMaxDuration);
      return "";
    };
  }
};

}  // namespace

CLI::Option* AddDuration(CLI::App& app, const std::string& name, std::chrono::milliseconds* out,
                         const std::string& help) {
  static const DurationValidator duration;
  CLI::Option* opt = app.add_option_function<std::string>(
      name, [out](const std::string& s) { *out = *ParseDuration(s); }, help);
  opt->check(duration);
  if (out->count() > 0) opt->default_str(FormatDuration(*out));
  return opt;
}

const char* ApplierName(Applier a) {
  switch (a) {
    case Applier::kRestart:
      return "restart";
    case Applier::kWebConfig:
      return "web";
    case Applier::kIngest:
      return "ingest";
    case Applier::kHal:
      return "hal";
    case Applier::kPods:
      return "kubelet";
    case Applier::kWatcher:
      return "apiserver";
    case Applier::kNodeHealth:
      return "nodehealth";
    case Applier::kLog:
      return "log";
  }
  return "restart";
}

}  // namespace xpu
