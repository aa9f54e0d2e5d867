#include "exposition/exposer.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include "exposition/text_format.h"

namespace xpu::exposition {
namespace {

// prometheus-cpp yields a family's children in hash order; sorted, so that
// consecutive scrapes (and golden files) list series the same way. Each
// label set is joined into one key (name NUL value NUL ...), which compares
// as the label vectors do at one memcmp, instead of a string compare per
// label (2,048 topology rows at 256 devices made this a tenth of a scrape).
// The order of those keys, compared in place: label by label, name then
// value (no label holds a NUL, so a string shorter than another it begins
// sorts first, as its key does).
bool LabelsLess(const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) {
  const size_t n = std::min(a.label.size(), b.label.size());
  for (size_t i = 0; i < n; ++i) {
    if (const int c = a.label[i].name.compare(b.label[i].name); c != 0) return c < 0;
    if (const int c = a.label[i].value.compare(b.label[i].value); c != 0) return c < 0;
  }
  return a.label.size() < b.label.size();
}

void SortByLabels(std::vector<prometheus::ClientMetric>* metrics) {
  if (metrics->size() < 2) return;
  // Most families come sorted (the device registry's are written in card
  // order): looked at in place, without a key a series.
  if (std::is_sorted(metrics->begin(), metrics->end(), LabelsLess)) return;
  std::vector<std::pair<std::string, size_t>> keys(metrics->size());
  for (size_t i = 0; i < metrics->size(); ++i) {
    std::string& k = keys[i].first;
    for (const prometheus::ClientMetric::Label& l : (*metrics)[i].label) {
      k.append(l.name).push_back('\0');
      k.append(l.value).push_back('\0');
    }
    keys[i].second = i;
  }
  std::sort(keys.begin(), keys.end());
  std::vector<prometheus::ClientMetric> sorted;
  sorted.reserve(metrics->size());
  for (const auto& key : keys) sorted.push_back(std::move((*metrics)[key.second]));
  metrics->swap(sorted);
}

}  // namespace

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
  MutexLock lock(filter_mu_);
  allows_ = std::move(fresh);
}

void Exposer::SetPart(const std::string& name,
                      std::shared_ptr<const prometheus::Collectable> metrics) {
  MutexLock lock(filter_mu_);
  if (metrics) {
    parts_[name] = std::move(metrics);
  } else {
    parts_.erase(name);
  }
}

void Exposer::Render(std::string* out, Format format) {
  out->clear();
  PageSink sink(out);
  Render(&sink, format);
}

bool Exposer::Render(PageSink* sink, Format format) {
  const auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<const FamilyFilter> allows;
  std::vector<std::shared_ptr<const prometheus::Collectable>> parts;
  {
    MutexLock lock(filter_mu_);
    allows = allows_;
    for (const auto& [name, part] : parts_) parts.push_back(part);
  }
  store::Snapshot snap = store_->Snap(std::chrono::steady_clock::now());
  series_.Set(static_cast<double>(snap.values.size()));
  // Every family first, merged by name (first one's help and type), then
  // written: a name two collectables share is still one family, and one the
  // snapshot has too is written into the snapshot's (SnapshotWriter::FillIns).
  std::vector<prometheus::MetricFamily> families;
  std::unordered_map<std::string, size_t> at;
  auto take = [&](const prometheus::Collectable* c) {
    for (prometheus::MetricFamily& f : c->Collect()) {
      if (f.metric.empty() || (allows && !(*allows)(f.name))) continue;
      auto [it, fresh] = at.emplace(f.name, families.size());
      if (fresh) {
        families.push_back(std::move(f));
        continue;
      }
      prometheus::MetricFamily& into = families[it->second];
      if (into.type != f.type) continue;  // a clash of types: the first stands
      for (prometheus::ClientMetric& m : f.metric) into.metric.push_back(std::move(m));
    }
  };
  for (const prometheus::Collectable* c : collectables_) take(c);
  for (const auto& part : parts) take(part.get());
  SnapshotWriter::FillIns fill_ins;
  fill_ins.reserve(families.size());
  for (prometheus::MetricFamily& f : families) {
    SortByLabels(&f.metric);
    fill_ins.emplace_back(f.name, &f);
  }
  std::sort(fill_ins.begin(), fill_ins.end());
  SnapshotWriter::Append(snap, sink, format, &fill_ins);
  for (prometheus::MetricFamily& f : families) {
    if (f.metric.empty()) continue;  // written into the snapshot's family
    AppendFamily(f, sink->buf(), format, exemplars_);
    sink->Check();
  }
  if (format == Format::kOpenMetrics) sink->buf()->append("# EOF\n");
  const bool ok = sink->Finish();
  scrape_duration_.Set(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return ok;
}

}  // namespace xpu::exposition
