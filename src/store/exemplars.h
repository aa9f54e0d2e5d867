#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace xpu::store {

using LabelPairs = std::vector<std::pair<std::string, std::string>>;

// An OpenMetrics exemplar: what one observation of a series came with.
struct Exemplar {
  LabelPairs labels;  // at most kMaxExemplarRunes runes of names and values
  double value = 1;
  double timestamp = 0;  // seconds since the epoch
  bool operator==(const Exemplar&) const = default;
};

// OpenMetrics 1.0 caps an exemplar's label names and values together.
inline constexpr size_t kMaxExemplarRunes = 128;

// The latest exemplar per counter series, written where a counter is
// incremented (a fault raised: the pod that held the device) and read by
// the OpenMetrics writer. At most `max_series` series hold one; beyond that
// new ones are refused (counted). Thread-safe.
class ExemplarStore {
 public:
  explicit ExemplarStore(size_t max_series = 4096) : max_series_(max_series) {}

  // Whether `e` fits OpenMetrics' rune limit (bytes that are not UTF-8
  // continuation bytes).
  static bool Fits(const Exemplar& e);
  // Records `e` for the series `labels` of `family` (its sample name, e.g.
  // "xpu_device_fault_events_total"). False if it does not fit or the
  // store is full.
  bool Set(const std::string& family, const LabelPairs& labels, Exemplar e);
  // The exemplar of a series, labels in any order.
  std::optional<Exemplar> Find(const std::string& family, const LabelPairs& labels) const;
  bool HasFamily(const std::string& family) const;
  size_t refused() const;

 private:
  static std::string Key(const std::string& family, LabelPairs labels);

  const size_t max_series_;
  mutable Mutex mu_;
  std::map<std::string, Exemplar> by_series_ XPU_GUARDED_BY(mu_);
  std::set<std::string> families_ XPU_GUARDED_BY(mu_);
  size_t refused_ XPU_GUARDED_BY(mu_) = 0;
};

}  // namespace xpu::store
