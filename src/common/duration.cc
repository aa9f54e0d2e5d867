#include "common/duration.h"

#include <array>
#include <cctype>
#include <cstdint>
#include <ctime>
#include <limits>

namespace xpu {
namespace {

struct Unit {
  std::string_view name;
  int64_t ms;
};
// Longest names first so "ms" is not read as "m" followed by garbage.
constexpr std::array<Unit, 7> kUnits = {{{"ms", 1},
                                         {"s", 1000},
                                         {"m", 60'000},
                                         {"h", 3'600'000},
                                         {"d", 86'400'000},
                                         {"w", 604'800'000},
                                         {"y", 31'536'000'000}}};

}  // namespace

std::optional<std::chrono::milliseconds> ParseDuration(std::string_view text) {
  if (text.empty()) return std::nullopt;
  if (text == "0") return std::chrono::milliseconds(0);
  int64_t total = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return std::nullopt;
    int64_t n = 0;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
      if (n > (std::numeric_limits<int64_t>::max() - 9) / 10) return std::nullopt;
      n = n * 10 + (text[i] - '0');
      ++i;
    }
    const Unit* unit = nullptr;
    for (const Unit& u : kUnits) {
      if (text.substr(i, u.name.size()) == u.name) {
        unit = &u;
        break;
      }
    }
    if (unit == nullptr) return std::nullopt;
    i += unit->name.size();
    if (n > std::numeric_limits<int64_t>::max() / unit->ms) return std::nullopt;
    if (total > std::numeric_limits<int64_t>::max() - n * unit->ms) return std::nullopt;
    total += n * unit->ms;
  }
  return std::chrono::milliseconds(total);
}

std::string FormatDuration(std::chrono::milliseconds d) {
  int64_t ms = d.count();
  if (ms == 0) return "0s";
  std::string out;
  if (ms < 0) {
    out = "-";
    ms = -ms;
  }
  // Same unit ladder as Prometheus' model.Duration.String (y, w, d, h, m, s, ms).
  for (auto it = kUnits.rbegin(); it != kUnits.rend(); ++it) {
    if (ms >= it->ms) {
      out += std::to_string(ms / it->ms);
      out += it->name;
      ms %= it->ms;
    }
  }
  return out;
}

std::string Rfc3339(std::chrono::system_clock::time_point t) {
  const std::time_t tt = std::chrono::system_clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace xpu
