#include "common/collector_metrics.h"

namespace xpu {

CollectorMetrics::CollectorMetrics(prometheus::Registry& registry)
    : success_(prometheus::BuildGauge()
                   .Name("xpu_exporter_collector_success")
                   .Help("Whether the last call of each upstream source succeeded.")
                   .Register(registry)),
      duration_(prometheus::BuildGauge()
                    .Name("xpu_exporter_collector_duration_seconds")
                    .Help("How long the last call of each upstream source took.")
                    .Register(registry)) {}

void CollectorMetrics::Record(const std::string& collector, bool ok,
                              std::chrono::steady_clock::duration took) {
  success_.Add({{"collector", collector}}).Set(ok ? 1 : 0);
  duration_.Add({{"collector", collector}}).Set(std::chrono::duration<double>(took).count());
}

}  // namespace xpu
