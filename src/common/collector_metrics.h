#pragma once

#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>
#include <string>

namespace xpu {

// xpu_exporter_collector_success / _duration_seconds{collector}: one
// definition for every source (XDM RPCs, the kubelet) so they share one
// family per registry. Thread-safe like prometheus-cpp's families.
class CollectorMetrics {
 public:
  explicit CollectorMetrics(prometheus::Registry& registry);
  // Records the outcome of one call of `collector`; creates its series.
  void Record(const std::string& collector, bool ok, std::chrono::steady_clock::duration took);

 private:
  prometheus::Family<prometheus::Gauge>& success_;
  prometheus::Family<prometheus::Gauge>& duration_;
};

}  // namespace xpu
