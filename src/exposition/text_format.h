#pragma once

#include <prometheus/metric_family.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "store/exemplars.h"

namespace xpu::exposition {

// Primitives of the Prometheus text format 0.0.4 and of OpenMetrics 1.0,
// shared by every writer so that one set of escaping and number rules applies
// to every family. Pure functions; any thread.

enum class Format { kText, kOpenMetrics };
inline constexpr const char* kTextContentType = "text/plain; version=0.0.4; charset=utf-8";
inline constexpr const char* kOpenMetricsContentType =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
inline constexpr const char* kOpenMetrics001ContentType =
    "application/openmetrics-text; version=0.0.1; charset=utf-8";

// OpenMetrics names a counter family without the "_total" its samples carry;
// a counter whose name lacks it is typed "unknown" there (its samples could
// not be named otherwise).
std::string_view OmFamilyName(std::string_view name, bool counter);
// The base unit a family's name ends with (OpenMetrics' "# UNIT"), or empty:
// seconds, bytes, ratio, celsius, joules, watts, hertz, volts, amperes.
std::string_view UnitOf(std::string_view om_family);
// "# HELP", "# TYPE" and, when `unit` is set, "# UNIT" lines. `type` is the
// OpenMetrics type (counter, gauge, unknown...).
void AppendOmHeader(std::string_view family, std::string_view help, std::string_view type,
                    std::string_view unit, std::string* out);
// " # {labels} value timestamp": appended after a sample's value, before its
// newline.
void AppendExemplar(const store::Exemplar& e, std::string* out);

// Label value escaping: backslash, double quote and newline.
void AppendLabelValue(std::string_view v, std::string* out);
// HELP escaping: backslash and newline (prometheus-cpp 1.0 does not escape).
void AppendHelp(std::string_view v, std::string* out);
// Shortest round-trip form; NaN, +Inf, -Inf as Prometheus writes them.
void AppendValue(double v, std::string* out);
// The same written at `p`, which has room for kMaxValueChars; returns the end.
inline constexpr size_t kMaxValueChars = 32;
char* WriteValue(double v, char* p);
// Whether a label value needs escaping (backslash, double quote, newline).
bool NeedsEscape(std::string_view label_value);
// "# HELP name help\n# TYPE name type\n".
void AppendHeader(std::string_view name, std::string_view help, std::string_view type,
                  std::string* out);
// Renders `{a="x",b="y"}` (nothing if `labels` is empty).
void AppendLabels(const std::vector<std::pair<std::string, std::string>>& labels, std::string* out);

// Writes one prometheus-cpp family (gauges, counters, untyped, info-style,
// histograms, summaries). In OpenMetrics, counter samples carry the
// exemplar `exemplars` holds for their series, if any.
void AppendFamily(const prometheus::MetricFamily& family, std::string* out,
                  Format format = Format::kText, const store::ExemplarStore* exemplars = nullptr);
// AppendFamily's samples without its header: more samples of a family
// already begun on the page; with `keep`, only those it keeps.
void AppendSamples(const prometheus::MetricFamily& family, std::string* out,
                   Format format = Format::kText, const store::ExemplarStore* exemplars = nullptr,
                   const std::function<bool(const prometheus::ClientMetric&)>& keep = nullptr);

}  // namespace xpu::exposition
