#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <map>
#include <string>

namespace xpu::testing {

// Whether the labels of `m` include all of `labels`.
inline bool HasLabels(const prometheus::ClientMetric& m,
                      const std::map<std::string, std::string>& labels) {
  for (const auto& [k, v] : labels) {
    bool found = false;
    for (const auto& l : m.label) found = found || (l.name == k && l.value == v);
    if (!found) return false;
  }
  return true;
}

// The value of the first series of family `name` in `metrics` (a registry,
// or any collectable) whose labels include all of `labels`; -1 when there is
// none. Counters and gauges only.
inline double MetricValue(const prometheus::Collectable& metrics, const std::string& name,
                          const std::map<std::string, std::string>& labels = {}) {
  for (const auto& f : metrics.Collect()) {
    if (f.name != name) continue;
    for (const auto& m : f.metric)
      if (HasLabels(m, labels))
        return f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
  }
  return -1;
}

// The sum over every such series (0 when there is none).
inline double MetricSum(const prometheus::Collectable& metrics, const std::string& name,
                        const std::map<std::string, std::string>& labels = {}) {
  double sum = 0;
  for (const auto& f : metrics.Collect()) {
    if (f.name != name) continue;
    for (const auto& m : f.metric)
      if (HasLabels(m, labels))
        sum += f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
  }
  return sum;
}

}  // namespace xpu::testing
