#include "exposition/exposer.h"

#include <algorithm>
#include <chrono>

#include "exposition/text_format.h"

namespace xpu::exposition {

Exposer::Exposer(store::MetricStore* store, prometheus::Registry* self)
    : store_(store),
      scrape_duration_(prometheus::BuildGauge()
                           .Name("xpu_exporter_scrape_duration_seconds")
                           .Help("Time the previous scrape took to render.")
                           .Register(*self)
                           .Add({})),
      series_(prometheus::BuildGauge()
                  .Name("xpu_exporter_series")
                  .Help("Device series currently held in the store.")
                  .Register(*self)
                  .Add({})) {}

void Exposer::SetFamilyFilter(FamilyFilter allows) {
  auto fresh = allows ? std::make_shared<const FamilyFilter>(std::move(allows)) : nullptr;
  std::lock_guard<std::mutex> lock(filter_mu_);
  allows_ = std::move(fresh);
}

void Exposer::Render(std::string* out, Format format) {
  out->clear();
  PageSink sink(out);
  Render(&sink, format);
}

bool Exposer::Render(PageSink* sink, Format format) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const FamilyFilter> allows;
  {
    std::lock_guard<std::mutex> lock(filter_mu_);
    allows = allows_;
  }
  store::Snapshot snap = store_->Snap(std::chrono::steady_clock::now());
  series_.Set(static_cast<double>(snap.values.size()));
  SnapshotWriter::Append(snap, sink, format);
  for (const prometheus::Collectable* c : collectables_) {
    for (prometheus::MetricFamily& f : c->Collect()) {
      if (allows && !(*allows)(f.name)) continue;
      if (f.metric.empty()) continue;
      // prometheus-cpp yields a family's children in hash order; sort them so
      // consecutive scrapes (and golden files) list series the same way.
      std::sort(f.metric.begin(), f.metric.end(),
                [](const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) {
                  return a.label < b.label;
                });
      AppendFamily(f, sink->buf(), format, exemplars_);
      sink->Check();
    }
  }
  if (format == Format::kOpenMetrics) sink->buf()->append("# EOF\n");
  const bool ok = sink->Finish();
  scrape_duration_.Set(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return ok;
}

}  // namespace xpu::exposition
