#include "kubernetes/label_filter.h"

#include <cctype>

namespace xpu::kubernetes {

Status LabelFilter::Make(const std::vector<std::string>& patterns, LabelFilter* out) {
  LabelFilter f;
  for (const std::string& p : patterns) {
    try {
      f.patterns_.emplace_back(p, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      return Status::InvalidArgument("pod label pattern '" + p +
                                     "' is not a valid regex: " + e.what());
    }
  }
  *out = std::move(f);
  return Status::Ok();
}

bool LabelFilter::Allows(const std::string& name) const {
  for (const std::regex& r : patterns_)
    if (std::regex_match(name, r)) return true;
  return false;
}

std::string LabelFilter::ExportName(std::string_view name) {
  std::string out = "label_";
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

}  // namespace xpu::kubernetes
