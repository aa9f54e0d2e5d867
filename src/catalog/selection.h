#pragma once

#include <cstdint>
#include <regex>
#include <string>
#include <unordered_set>
#include <vector>

#include "catalog/catalog.h"
#include "common/status.h"

namespace xpu::catalog {

// Which metric families are exported (--metrics.include, --metrics.exclude):
// a family is when its whole name matches an include pattern (none given:
// every family) and no exclude pattern. Immutable once made; thread-safe.
class Selection {
 public:
  // InvalidArgument naming the first pattern that is not a valid regex.
  static Status Make(const std::vector<std::string>& include,
                     const std::vector<std::string>& exclude, Selection* out);
  bool everything() const { return include_.empty() && exclude_.empty(); }
  bool Allows(const std::string& family) const;
  // The catalog's metric IDs whose families are not exported (also
  // "xpu_unknown_metric" decides for IDs the catalog lacks): dropped at
  // ingest, so they cost neither memory nor CPU.
  std::unordered_set<uint32_t> ExcludedIds(const Catalog& catalog) const;

 private:
  std::vector<std::regex> include_, exclude_;
};

}  // namespace xpu::catalog
