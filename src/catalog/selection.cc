#include "catalog/selection.h"

namespace xpu::catalog {
namespace {

Status Compile(const std::vector<std::string>& patterns, const char* flag,
               std::vector<std::regex>* out) {
  for (const std::string& p : patterns) {
    try {
      out->emplace_back(p, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      return Status::InvalidArgument(std::string(flag) + ": '" + p +
                                     "' is not a valid regex: " + e.what());
    }
  }
  return Status::Ok();
}

bool AnyMatch(const std::vector<std::regex>& patterns, const std::string& name) {
  for (const std::regex& r : patterns)
    if (std::regex_match(name, r)) return true;
  return false;
}

}  // namespace

Status Selection::Make(const std::vector<std::string>& include,
                       const std::vector<std::string>& exclude, Selection* out) {
  Selection s;
  if (Status st = Compile(include, "--metrics.include", &s.include_); !st.ok()) return st;
  if (Status st = Compile(exclude, "--metrics.exclude", &s.exclude_); !st.ok()) return st;
  *out = std::move(s);
  return Status::Ok();
}

bool Selection::Allows(const std::string& family) const {
  if (everything()) return true;
  if (!include_.empty() && !AnyMatch(include_, family)) return false;
  return !AnyMatch(exclude_, family);
}

std::unordered_set<uint32_t> Selection::ExcludedIds(const Catalog& catalog) const {
  std::unordered_set<uint32_t> out;
  if (everything()) return out;
  for (const Entry& e : catalog.entries())
    if (!Allows(e.name)) out.insert(e.id);
  return out;
}

}  // namespace xpu::catalog
