#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace xpu {

// Parses a duration the way Prometheus writes one: one or more <number><unit>
// terms, units ms, s, m, h, d, w, y ("500ms", "1s", "1m30s"). Returns nullopt
// for anything else, including an empty string, negative numbers and overflow.
std::optional<std::chrono::milliseconds> ParseDuration(std::string_view text);

// The inverse, shortest form: 1500ms -> "1s500ms", 60000ms -> "1m", 0 -> "0s".
std::string FormatDuration(std::chrono::milliseconds d);

// A time as Kubernetes and /status write one, to the second in UTC:
// "2026-12-01T21:32:18Z".
std::string Rfc3339(std::chrono::system_clock::time_point t);

}  // namespace xpu
