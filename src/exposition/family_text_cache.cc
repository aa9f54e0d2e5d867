#include "exposition/family_text_cache.h"

#include <bit>
#include <cstdint>

namespace xpu::exposition {
namespace {

double ValueOf(const prometheus::MetricFamily& f, const prometheus::ClientMetric& m) {
  switch (f.type) {
    case prometheus::MetricType::Counter:
      return m.counter.value;
    case prometheus::MetricType::Gauge:
      return m.gauge.value;
    default:
      return m.untyped.value;
  }
}

}  // namespace

bool FamilyTextCache::Cacheable(const prometheus::MetricFamily& family) {
  return family.metric.size() <= kMaxSamples && (family.type == prometheus::MetricType::Counter ||
                                                 family.type == prometheus::MetricType::Gauge ||
                                                 family.type == prometheus::MetricType::Untyped);
}

bool FamilyTextCache::Same(const prometheus::MetricFamily& a, const prometheus::MetricFamily& b) {
  if (&a == &b) return true;
  if (a.type != b.type || a.name != b.name || a.help != b.help ||
      a.metric.size() != b.metric.size())
    return false;
  for (size_t i = 0; i < a.metric.size(); ++i) {
    const prometheus::ClientMetric& x = a.metric[i];
    const prometheus::ClientMetric& y = b.metric[i];
    // The same bits: 0 and -0, and NaNs, are written apart.
    if (std::bit_cast<uint64_t>(ValueOf(a, x)) != std::bit_cast<uint64_t>(ValueOf(b, y)) ||
        x.label.size() != y.label.size())
      return false;
    for (size_t l = 0; l < x.label.size(); ++l)
      if (x.label[l].value != y.label[l].value || x.label[l].name != y.label[l].name) return false;
  }
  return true;
}

void FamilyTextCache::BeginRender() {
  const uint64_t now = renders_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (now % kForgetAfter != 0) return;
  MutexLock lock(mu_);
  std::erase_if(entries_, [now](const auto& e) { return e.second.used + kForgetAfter < now; });
}

bool FamilyTextCache::Holds(const prometheus::MetricFamily& family) const {
  MutexLock lock(mu_);
  auto it = entries_.find(family.name);
  return it != entries_.end() && it->second.family.get() == &family;
}

size_t FamilyTextCache::size() const {
  MutexLock lock(mu_);
  return entries_.size();
}

std::shared_ptr<const std::string> FamilyTextCache::Text(
    std::shared_ptr<const prometheus::MetricFamily> family, Format format) {
  const size_t f = format == Format::kOpenMetrics ? 1 : 0;
  const uint64_t now = renders_.load(std::memory_order_relaxed);
  Entry last;
  {
    MutexLock lock(mu_);
    auto it = entries_.find(family->name);
    if (it != entries_.end()) last = it->second;
  }
  // Compared outside the lock: a scrape of another format goes on.
  const bool same = last.family && Same(*last.family, *family);
  if (same && last.text[f]) {
    MutexLock lock(mu_);
    auto it = entries_.find(family->name);
    if (it != entries_.end() && it->second.family == last.family) {
      it->second.family = std::move(family);  // the newest holder: the older is let go
      it->second.used = now;
    }
    return last.text[f];
  }
  auto text = std::make_shared<std::string>();
  AppendFamily(*family, text.get(), format, nullptr);
  MutexLock lock(mu_);
  Entry& e = entries_[family->name];
  // Another scrape may have stored a newer one meanwhile: only ours or an
  // equal one takes the text.
  if (!e.family || e.family == last.family) {
    if (!same) e.text[1 - f].reset();
    e.family = std::move(family);
  } else if (e.family != family && !Same(*e.family, *family)) {
    return text;
  }
  e.text[f] = text;
  e.used = now;
  return text;
}

}  // namespace xpu::exposition
