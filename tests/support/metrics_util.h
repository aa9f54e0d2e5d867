#pragma once

#include <prometheus/registry.h>

#include <map>
#include <string>

namespace xpu::testing {

// The value of the first series of family `name` in `registry` whose labels
// include all of `labels`; -1 when there is none. Counters and gauges only.
inline double MetricValue(const prometheus::Registry& registry, const std::string& name,
                          const std::map<std::string, std::string>& labels = {}) {
  for (const auto& f : registry.Collect()) {
    if (f.name != name) continue;
    for (const auto& m : f.metric) {
      bool match = true;
      for (const auto& [k, v] : labels) {
        bool found = false;
        for (const auto& l : m.label) found = found || (l.name == k && l.value == v);
        match = match && found;
      }
      if (match) return f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
    }
  }
  return -1;
}

}  // namespace xpu::testing
