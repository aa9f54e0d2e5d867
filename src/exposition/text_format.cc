#include "exposition/text_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

namespace xpu::exposition {

namespace {

// Whether `v` holds a character to escape, eight bytes at a time (a byte
// equal to c makes x ^ c*ones hold a zero byte, which the borrow test
// finds exactly), the tail one by one: for long values (UUIDs, models).
template <bool kQuote>
[[gnu::noinline]] bool HasSpecialWide(std::string_view v) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL, kHighs = 0x8080808080808080ULL;
  auto has = [](uint64_t x, unsigned char c) {
    const uint64_t y = x ^ (kOnes * c);
    return ((y - kOnes) & ~y & kHighs) != 0;
  };
  const char* p = v.data();
  size_t n = v.size();
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t x;
    std::memcpy(&x, p, 8);
    if (has(x, '\\') || has(x, '\n') || (kQuote && has(x, '"'))) return true;
  }
  for (; n > 0; ++p, --n) {
    if (*p == '\\' || *p == '\n' || (kQuote && *p == '"')) return true;
  }
  return false;
}

// Whether `v` holds a character to escape. Every label value of a family
// written per scrape passes here: a short one (a link's "12", a minor) by a
// plain loop the caller inlines, a long one eight bytes at a time.
template <bool kQuote>
inline bool HasSpecial(std::string_view v) {
  if (v.size() >= 16) return HasSpecialWide<kQuote>(v);
  for (char c : v) {
    if (c == '\\' || c == '\n' || (kQuote && c == '"')) return true;
  }
  return false;
}

// The text format escapes backslash and newline in HELP, and the double
// quote too in label values.
template <bool kQuote>
void AppendEscaped(std::string_view v, std::string* out) {
  if (!HasSpecial<kQuote>(v)) {
    out->append(v);  // the common case: nothing to escape
    return;
  }
  for (char c : v) {
    if (c == '\\') {
      out->append("\\\\");
    } else if (c == '\n') {
      out->append("\\n");
    } else if (kQuote && c == '"') {
      out->append("\\\"");
    } else {
      out->push_back(c);
    }
  }
}

}  // namespace

void AppendLabelValue(std::string_view v, std::string* out) { AppendEscaped<true>(v, out); }

std::string_view OmFamilyName(std::string_view name, bool counter) {
  constexpr std::string_view kTotal = "_total";
  if (counter && name.size() > kTotal.size() && name.ends_with(kTotal))
    return name.substr(0, name.size() - kTotal.size());
  return name;
}

std::string_view UnitOf(std::string_view family) {
  static constexpr std::string_view kUnits[] = {"seconds", "bytes", "ratio", "celsius", "joules",
                                                "watts",   "hertz", "volts", "amperes"};
  for (std::string_view u : kUnits) {
    if (family.size() > u.size() + 1 && family.ends_with(u) &&
        family[family.size() - u.size() - 1] == '_')
      return u;
  }
  return {};
}

void AppendOmHeader(std::string_view family, std::string_view help, std::string_view type,
                    std::string_view unit, std::string* out) {
  out->append("# HELP ").append(family).push_back(' ');
  AppendEscaped<true>(help, out);  // OpenMetrics escapes '"' in HELP too
  out->append("\n# TYPE ").append(family).push_back(' ');
  out->append(type).push_back('\n');
  if (!unit.empty()) out->append("# UNIT ").append(family).append(" ").append(unit).push_back('\n');
}

void AppendExemplar(const store::Exemplar& e, std::string* out) {
  out->append(" # ");
  if (e.labels.empty()) out->append("{}");  // OpenMetrics writes the braces even then
  AppendLabels(e.labels, out);
  out->push_back(' ');
  AppendValue(e.value, out);
  if (e.timestamp > 0) {
    out->push_back(' ');
    char buf[32];
    auto res = std::to_chars(buf, buf + sizeof buf, e.timestamp, std::chars_format::fixed, 3);
    out->append(buf, res.ptr);
  }
}

void AppendHelp(std::string_view v, std::string* out) { AppendEscaped<false>(v, out); }

char* WriteValue(double v, char* p) {
  if (std::isnan(v) || std::isinf(v)) {
    const std::string_view word = std::isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf";
    return std::copy(word.begin(), word.end(), p);
  }
  // Most values are integers (states, counters, IDs): written here in the
  // form std::to_chars would choose, at a fraction of its general cost.
  if (std::fabs(v) < 1e15 && v == std::trunc(v) && !(v == 0 && std::signbit(v))) {
    const int64_t n = static_cast<int64_t>(v);
    uint64_t u = n < 0 ? static_cast<uint64_t>(-n) : static_cast<uint64_t>(n);
    char digits[16];
    int d = 0;
    do {
      digits[d++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u != 0);
    int trailing = 0;
    while (trailing < d - 1 && digits[trailing] == '0') ++trailing;
    // to_chars takes the shorter of fixed and scientific, fixed on a tie:
    // "1e+05" (5) beats "100000" (6); the exponent here has two digits.
    const int mantissa = d - trailing;
    const int scientific = mantissa + (mantissa > 1 ? 1 : 0) + 4;
    if (d <= scientific) {
      if (n < 0) *p++ = '-';
      while (d > 0) *p++ = digits[--d];
      return p;
    }
  }
  return std::to_chars(p, p + kMaxValueChars, v).ptr;  // at most 24 chars
}

void AppendValue(double v, std::string* out) {
  char buf[kMaxValueChars];
  out->append(buf, WriteValue(v, buf));
}

bool NeedsEscape(std::string_view v) { return HasSpecial<true>(v); }

void AppendHeader(std::string_view name, std::string_view help, std::string_view type,
                  std::string* out) {
  out->append("# HELP ").append(name).push_back(' ');
  AppendHelp(help, out);
  out->append("\n# TYPE ").append(name).push_back(' ');
  out->append(type).push_back('\n');
}

void AppendLabels(const std::vector<std::pair<std::string, std::string>>& labels,
                  std::string* out) {
  if (labels.empty()) return;
  out->push_back('{');
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out->push_back(',');
    first = false;
    out->append(k).append("=\"");
    AppendLabelValue(v, out);
    out->push_back('"');
  }
  out->push_back('}');
}

void AppendFamily(const prometheus::MetricFamily& family, std::string* out, Format format,
                  const store::ExemplarStore* exemplars) {
  const bool om = format == Format::kOpenMetrics;
  const char* type = om ? "unknown" : "untyped";
  switch (family.type) {
    case prometheus::MetricType::Counter:
      type = "counter";
      break;
    case prometheus::MetricType::Gauge:
      type = "gauge";
      break;
    case prometheus::MetricType::Summary:
      type = "summary";
      break;
    case prometheus::MetricType::Histogram:
      type = "histogram";
      break;
    case prometheus::MetricType::Untyped:
      break;
  }
  if (om) {
    const bool counter = family.type == prometheus::MetricType::Counter;
    const std::string_view name = OmFamilyName(family.name, counter);
    if (counter && name == family.name) type = "unknown";  // no "_total" to strip
    AppendOmHeader(name, family.help, type, UnitOf(name), out);
  } else {
    AppendHeader(family.name, family.help, type, out);
  }
  AppendSamples(family, out, format, exemplars);
}

void AppendSamples(const prometheus::MetricFamily& family, std::string* out, Format format,
                   const store::ExemplarStore* exemplars,
                   const std::function<bool(const prometheus::ClientMetric&)>& keep) {
  const bool om = format == Format::kOpenMetrics;
  // Only counters of a family that has exemplars look theirs up.
  const bool with_exemplars = om && exemplars != nullptr &&
                              family.type == prometheus::MetricType::Counter &&
                              exemplars->HasFamily(family.name);
  // Each sample's labels are written straight from the family's (no copy of
  // them a sample: the HAL's families are a page's worth of small series),
  // with the bucket's or quantile's label after them.
  std::vector<std::pair<std::string, std::string>> labels;  // exemplars' lookup only
  for (const prometheus::ClientMetric& m : family.metric) {
    if (keep && !keep(m)) continue;
    auto line = [&](std::string_view suffix, double value, std::string_view extra_name = {},
                    std::string_view extra_value = {},
                    const std::optional<store::Exemplar>& exemplar = std::nullopt) {
      out->append(family.name).append(suffix);
      if (!m.label.empty() || !extra_name.empty()) {
        out->push_back('{');
        bool first = true;
        for (const auto& l : m.label) {
          if (!first) out->push_back(',');
          first = false;
          out->append(l.name).append("=\"");
          AppendLabelValue(l.value, out);
          out->push_back('"');
        }
        if (!extra_name.empty()) {
          if (!first) out->push_back(',');
          out->append(extra_name).append("=\"").append(extra_value).push_back('"');
        }
        out->push_back('}');
      }
      out->push_back(' ');
      AppendValue(value, out);
      if (exemplar) AppendExemplar(*exemplar, out);
      out->push_back('\n');
    };
    switch (family.type) {
      case prometheus::MetricType::Counter:
        if (with_exemplars) {
          labels.clear();
          for (const auto& l : m.label) labels.emplace_back(l.name, l.value);
          line("", m.counter.value, {}, {}, exemplars->Find(family.name, labels));
        } else {
          line("", m.counter.value);
        }
        break;
      case prometheus::MetricType::Gauge:
        line("", m.gauge.value);
        break;
      case prometheus::MetricType::Untyped:
        line("", m.untyped.value);
        break;
      case prometheus::MetricType::Histogram: {
        for (const auto& b : m.histogram.bucket) {
          // prometheus-cpp's Histogram lists +Inf among its buckets; it is
          // written once, below, from the count.
          if (std::isinf(b.upper_bound)) continue;
          char le[kMaxValueChars];
          const char* end = WriteValue(b.upper_bound, le);
          line("_bucket", static_cast<double>(b.cumulative_count), "le",
               std::string_view(le, static_cast<size_t>(end - le)));
        }
        line("_bucket", static_cast<double>(m.histogram.sample_count), "le", "+Inf");
        line("_sum", m.histogram.sample_sum);
        line("_count", static_cast<double>(m.histogram.sample_count));
        break;
      }
      case prometheus::MetricType::Summary: {
        for (const auto& q : m.summary.quantile) {
          char qs[kMaxValueChars];
          const char* end = WriteValue(q.quantile, qs);
          line("", q.value, "quantile", std::string_view(qs, static_cast<size_t>(end - qs)));
        }
        line("_sum", m.summary.sample_sum);
        line("_count", static_cast<double>(m.summary.sample_count));
        break;
      }
    }
  }
}

}  // namespace xpu::exposition
