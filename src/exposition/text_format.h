#pragma once

#include <prometheus/metric_family.h>

#include <string>
#include <string_view>
#include <vector>

namespace xpu::exposition {

// Primitives of the Prometheus text format 0.0.4, shared by every writer so
// that one set of escaping and number rules applies to every family.
// Pure functions; any thread.

// Label value escaping: backslash, double quote and newline.
void AppendLabelValue(std::string_view v, std::string* out);
// HELP escaping: backslash and newline (prometheus-cpp 1.0 does not escape).
void AppendHelp(std::string_view v, std::string* out);
// Shortest round-trip form; NaN, +Inf, -Inf as Prometheus writes them.
void AppendValue(double v, std::string* out);
// "# HELP name help\n# TYPE name type\n".
void AppendHeader(std::string_view name, std::string_view help, std::string_view type,
                  std::string* out);
// Renders `{a="x",b="y"}` (nothing if `labels` is empty).
void AppendLabels(const std::vector<std::pair<std::string, std::string>>& labels, std::string* out);

// Writes one prometheus-cpp family (gauges, counters, untyped, info-style).
void AppendFamily(const prometheus::MetricFamily& family, std::string* out);

}  // namespace xpu::exposition
