#include "exposition/exposer.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "common/metric_family.h"
#include "exposition/text_format.h"

namespace xpu::exposition {
namespace {

// prometheus-cpp yields a family's children in hash order; sorted, so that
// consecutive scrapes (and golden files) list series the same way. Each
// label set is joined into one key (name NUL value NUL ...), which compares
// as the label vectors do at one memcmp, instead of a string compare per
// label (2,048 topology rows at 256 devices made this a tenth of a scrape).
// Called for a family found out of order (LabelsLess): most come sorted
// (the device registry's are written in card order), and are looked at in
// place, without a key a series.
void SortByLabels(std::vector<prometheus::ClientMetric>* metrics) {
  if (metrics->size() < 2) return;
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

void Exposer::AppendOnItsOwn(
    const prometheus::MetricFamily* family, prometheus::MetricFamily* mine,
    const std::shared_ptr<const std::vector<prometheus::MetricFamily>>& owner, Format format,
    std::string* out) {
  if (!FamilyTextCache::Cacheable(*family) ||
      (exemplars_ != nullptr && exemplars_->HasFamily(family->name))) {
    AppendFamily(*family, out, format, exemplars_);
    return;
  }
  // The cache keeps the family: a lent one with its owner, one of ours
  // moved there (nothing reads it after this).
  std::shared_ptr<const prometheus::MetricFamily> held =
      mine != nullptr ? std::make_shared<const prometheus::MetricFamily>(std::move(*mine))
                      : std::shared_ptr<const prometheus::MetricFamily>(owner, family);
  out->append(*text_cache_.Text(std::move(held), format));
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
  // A family lent (FamilyLender) is written where it lies, and copied only
  // to be merged with another or put in order.
  struct Slot {
    const prometheus::MetricFamily* family;
    prometheus::MetricFamily* mine;  // null while lent
    size_t owner = 0;                // while lent: its vector in `lent`
  };
  std::deque<prometheus::MetricFamily> owned;  // stable addresses
  FamilyLender::Lent lent;                     // kept alive through the page
  std::vector<Slot> slots;
  std::unordered_map<std::string_view, size_t> at;  // names in `owned` or `lent`
  auto own = [&owned](Slot& s) -> prometheus::MetricFamily& {
    if (s.mine == nullptr) {
      owned.push_back(*s.family);
      s.mine = &owned.back();
      s.family = s.mine;
    }
    return *s.mine;
  };
  auto wanted = [&allows](const prometheus::MetricFamily& f) {
    return !f.metric.empty() && (!allows || (*allows)(f.name));
  };
  auto take_owned = [&](prometheus::MetricFamily&& f) {
    if (!wanted(f)) return;
    if (auto it = at.find(f.name); it != at.end()) {
      Slot& s = slots[it->second];
      if (s.family->type != f.type) return;  // a clash of types: the first stands
      prometheus::MetricFamily& into = own(s);
      for (prometheus::ClientMetric& m : f.metric) into.metric.push_back(std::move(m));
      return;
    }
    owned.push_back(std::move(f));
    slots.push_back({&owned.back(), &owned.back()});
    at.emplace(owned.back().name, slots.size() - 1);
  };
  auto take_lent = [&](const prometheus::MetricFamily& f, size_t owner) {
    if (!wanted(f)) return;
    if (auto it = at.find(f.name); it != at.end()) {
      Slot& s = slots[it->second];
      if (s.family->type != f.type) return;
      prometheus::MetricFamily& into = own(s);
      into.metric.insert(into.metric.end(), f.metric.begin(), f.metric.end());
      return;
    }
    slots.push_back({&f, nullptr, owner});
    at.emplace(f.name, slots.size() - 1);
  };
  auto take = [&](const prometheus::Collectable* c) {
    if (const auto* lender = dynamic_cast<const FamilyLender*>(c)) {
      const size_t before = lent.size();
      for (prometheus::MetricFamily& f : lender->CollectLending(&lent)) take_owned(std::move(f));
      for (size_t i = before; i < lent.size(); ++i)
        for (const prometheus::MetricFamily& f : *lent[i]) take_lent(f, i);
      return;
    }
    for (prometheus::MetricFamily& f : c->Collect()) take_owned(std::move(f));
  };
  for (const prometheus::Collectable* c : collectables_) take(c);
  for (const auto& part : parts) take(part.get());
  const std::unique_ptr<bool[]> taken(new bool[slots.size()]());
  SnapshotWriter::FillIns fill_ins;
  fill_ins.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    Slot& s = slots[i];
    // A lent family the last page wrote as it lies was found in order then
    // (FamilyLender): not checked again.
    if ((s.mine != nullptr || !text_cache_.Holds(*s.family)) &&
        !std::is_sorted(s.family->metric.begin(), s.family->metric.end(), LabelsLess))
      SortByLabels(&own(s).metric);
    fill_ins.push_back({s.family->name, s.family, &taken[i]});
  }
  std::sort(fill_ins.begin(), fill_ins.end());
  SnapshotWriter::Append(snap, sink, format, &fill_ins);
  text_cache_.BeginRender();
  for (size_t i = 0; i < slots.size(); ++i) {
    if (taken[i]) continue;  // written into the snapshot's family
    Slot& s = slots[i];
    AppendOnItsOwn(s.family, s.mine, s.mine != nullptr ? nullptr : lent[s.owner], format,
                   sink->buf());
    sink->Check();
  }
  if (format == Format::kOpenMetrics) sink->buf()->append("# EOF\n");
  const bool ok = sink->Finish();
  scrape_duration_.Set(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return ok;
}

}  // namespace xpu::exposition
