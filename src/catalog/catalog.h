#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace xpu::catalog {

enum class MetricType { kGauge, kCounter };

// One XDM metric ID and the Prometheus family it becomes.
struct Entry {
  uint32_t id = 0;
  std::string name;
  MetricType type = MetricType::kGauge;
  std::string unit;  // base unit the name ends with, or "none"
  double scale = 1;  // native value * scale = exported value
  // 1/scale when that is a whole number (0.01 -> 100): dividing by it keeps
  // 44.7% exactly 0.447, where multiplying by 0.01 gives 0.44700000000000006.
  double divisor = 0;
  double Apply(double v) const { return divisor > 0 ? v / divisor : v * scale; }
  std::string help;
  std::string instance_label;  // label for MetricData.instance; empty if none
  bool operator==(const Entry&) const = default;
};

// The metric catalog: immutable after Load, so any thread may read it.
class Catalog {
 public:
  // Parses the YAML text (see src/catalog/metrics.yaml). Every entry must pass
  // CheckEntry and IDs and names must be unique; errors name the entry.
  static Status Parse(const std::string& yaml_text, const std::string& origin,
                      std::shared_ptr<const Catalog>* out);
  // The catalog compiled into the binary.
  static std::shared_ptr<const Catalog> Builtin();
  static Status LoadFile(const std::string& path, std::shared_ptr<const Catalog>* out);

  const Entry* Find(uint32_t id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : &entries_[it->second];
  }
  // The entry exporting family `name`, or nullptr (a replaced catalog may
  // lack it).
  const Entry* FindByName(const std::string& name) const;
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
  std::unordered_map<uint32_t, size_t> by_id_;
};

// Prometheus naming rules for one entry: a valid name with prefix xpu_, known
// base unit as suffix (no percent), counters end in _total and gauges do not,
// a positive scale, non-empty help, a valid instance label. Returns the first
// violation, or an empty string.
std::string CheckEntry(const Entry& e);

// The families the exporter writes besides the catalog's: own_families.yaml,
// embedded (the one list; the end-to-end tests hold real pages to it).
struct OwnFamilies {
  std::vector<std::string> prefixes;
  std::vector<std::pair<std::string, MetricType>> families;
};
const OwnFamilies& ExporterFamilies();

// Whether a family `name` of `type` belongs to, or collides with, a family
// the exporter writes itself (ExporterFamilies()): by name, by prefix, or in
// OpenMetrics, where counter X_total is family X and also writes X_created.
// Returns the reason ("" when free): "is the exporter's own family X".
std::string ReservedFamilyReason(const std::string& name, MetricType type);
bool IsReservedFamily(const std::string& name);  // either type

// The OpenMetrics family of a catalog entry (X for counter X_total) and the
// sample names it writes (X_total and X_created for a counter).
std::string OpenMetricsFamily(const std::string& name, MetricType type);

inline constexpr size_t kMaxCatalogEntries = 4096;

// Whether `name` is a valid Prometheus metric / label name.
bool IsValidMetricName(const std::string& name);
bool IsValidLabelName(const std::string& name);

}  // namespace xpu::catalog
