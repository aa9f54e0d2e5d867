#pragma once

#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace xpu::kubernetes {

// Which pod labels are exported (--kubernetes.pod-labels), and under which
// names: a label whose whole name matches one of the regexes becomes
// label_<name> with every character outside [a-zA-Z0-9_] made '_'
// (kube-state-metrics' naming). Made once, by the configuration's
// validation (app::ParsedConfig); immutable, so any thread may read it.
class LabelFilter {
 public:
  // InvalidArgument names the pattern that is no valid regex.
  static Status Make(const std::vector<std::string>& patterns, LabelFilter* out);
  bool empty() const { return patterns_.empty(); }
  bool Allows(const std::string& name) const;
  static std::string ExportName(std::string_view name);

 private:
  std::vector<std::regex> patterns_;
};

}  // namespace xpu::kubernetes
