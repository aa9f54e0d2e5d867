#pragma once

// Building blocks for the Collectables that write their families by hand
// (the device registry's joins, the PCI families, the data age): one family
// with its name, help and type, and one sample with its labels.

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>

#include <string>
#include <utility>
#include <vector>

namespace xpu {

using MetricLabels = std::vector<prometheus::ClientMetric::Label>;

inline prometheus::MetricFamily NewFamily(
    std::string name, std::string help,
    prometheus::MetricType type = prometheus::MetricType::Gauge) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

inline prometheus::ClientMetric GaugeSample(MetricLabels labels, double v) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = v;
  return m;
}

inline prometheus::ClientMetric CounterSample(MetricLabels labels, double v) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = v;
  return m;
}

// A sample of `family`'s own type (gauge or counter).
inline prometheus::ClientMetric SampleOf(const prometheus::MetricFamily& family,
                                         MetricLabels labels, double v) {
  return family.type == prometheus::MetricType::Counter ? CounterSample(std::move(labels), v)
                                                        : GaugeSample(std::move(labels), v);
}

}  // namespace xpu
