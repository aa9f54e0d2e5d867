#include "exposition/negotiate.h"

#include <tuple>

#include "http/headers.h"

namespace xpu::exposition {
namespace {

// What can be offered, each version on its own: the q of each is read apart.
enum class Offer { kText, kOpenMetrics100, kOpenMetrics001 };

}  // namespace

Negotiated NegotiateFormat(std::string_view accept) {
  constexpr int kMaxRanges = 64;
  // For each format we serve: the q of the most specific range naming it
  // (RFC 9110 12.5.1: type/subtype;version > type/subtype > type/* > */*),
  // and that specificity.
  constexpr int kFormats = 3;  // Offer's values
  double q_of[kFormats] = {-1, -1, -1};
  int level_of[kFormats] = {-1, -1, -1};
  const auto offer = [&](Offer f, int level, double q) {
    const int i = static_cast<int>(f);
    if (level > level_of[i]) {
      level_of[i] = level;
      q_of[i] = q;
    }
  };
  size_t start = 0;
  for (int n = 0; n < kMaxRanges && start <= accept.size(); ++n) {
    size_t end = accept.find(',', start);
    if (end == std::string_view::npos) end = accept.size();
    std::string_view range = accept.substr(start, end - start);
    start = end + 1;
    // type/subtype *(; param=value): unknown and repeated parameters are
    // tolerated (the first q and version count).
    size_t semi = range.find(';');
    const std::string_view type = http::Trim(range.substr(0, semi));
    if (type.empty()) continue;
    double q = 1;
    bool have_q = false;
    std::string_view version;
    bool have_version = false;
    while (semi != std::string_view::npos) {
      const size_t next = range.find(';', semi + 1);
      const std::string_view param = http::Trim(range.substr(semi + 1, next - semi - 1));
      semi = next;
      const size_t eq = param.find('=');
      if (eq == std::string_view::npos) continue;
      const std::string_view key = http::Trim(param.substr(0, eq));
      std::string_view value = http::Trim(param.substr(eq + 1));
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"')
        value = value.substr(1, value.size() - 2);
      if (http::EqualsNoCase(key, "q") && !have_q) {
        have_q = true;
        q = http::QValue(value);
      } else if (http::EqualsNoCase(key, "version") && !have_version) {
        have_version = true;
        version = value;
      }
    }
    if (http::EqualsNoCase(type, "application/openmetrics-text")) {
      if (!have_version) {
        offer(Offer::kOpenMetrics100, 2, q);
        offer(Offer::kOpenMetrics001, 2, q);
      } else if (version == "1.0.0") {
        offer(Offer::kOpenMetrics100, 3, q);
      } else if (version == "0.0.1") {
        offer(Offer::kOpenMetrics001, 3, q);
      }
    } else if (http::EqualsNoCase(type, "text/plain")) {
      // 0.0.4, and 1.0.0 (the same lines for the names we write).
      if (!have_version || version == "0.0.4" || version == "1.0.0")
        offer(Offer::kText, have_version ? 3 : 2, q);
    } else if (http::EqualsNoCase(type, "application/*")) {
      offer(Offer::kOpenMetrics100, 1, q);
      offer(Offer::kOpenMetrics001, 1, q);
    } else if (http::EqualsNoCase(type, "text/*")) {
      offer(Offer::kText, 1, q);
    } else if (type == "*/*") {
      for (int i = 0; i < kFormats; ++i) offer(static_cast<Offer>(i), 0, q);
    }
    // Anything else (protobuf, say) is not served: ignored.
  }
  // The highest q wins; then the more specific range; then, among types
  // named outright, OpenMetrics 1.0.0, 0.0.1, text (Prometheus lists them
  // so), and among wildcards alone text (what curl's */* gets everywhere).
  // Nothing acceptable: text.
  const auto rank = [&](Offer f) {
    const int i = static_cast<int>(f);
    const int pref =
        level_of[i] >= 2 ? (f == Offer::kText ? 0 : 3 - i) : (f == Offer::kText ? 3 : 3 - i);
    return std::tuple<double, int, int>(q_of[i], level_of[i], pref);
  };
  Offer best = Offer::kText;
  for (Offer f : {Offer::kOpenMetrics100, Offer::kOpenMetrics001})
    if (rank(f) > rank(best)) best = f;
  if (q_of[static_cast<int>(best)] <= 0) best = Offer::kText;
  // The version asked for (0.0.1 and 1.0.0 are the same lines for what we
  // write); always one version parameter, never two.
  switch (best) {
    case Offer::kOpenMetrics100:
      return {Format::kOpenMetrics, kOpenMetricsContentType};
    case Offer::kOpenMetrics001:
      return {Format::kOpenMetrics, kOpenMetrics001ContentType};
    case Offer::kText:
      break;
  }
  return {Format::kText, kTextContentType};
}

}  // namespace xpu::exposition
