#pragma once

#include <prometheus/collectable.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "exposition/family_text_cache.h"
#include "exposition/page_sink.h"
#include "exposition/snapshot_writer.h"
#include "store/metric_store.h"

namespace xpu::exposition {

// Assembles one scrape: the store's device series (fast path), then every
// registered Collectable (device info, self-metrics...) through the same text
// primitives. No source can fail the scrape: each only contributes what it has.
// Families of one name from several collectables are written as one (the
// collector families several parts share, the HAL backends' fault counters):
// a page never has two HELP/TYPE blocks for a name.
// Thread-safe; sources added with AddCollectable must outlive it.
class Exposer {
 public:
  // `self` receives the exposer's own metrics (scrape duration, series).
  Exposer(store::MetricStore* store, prometheus::Registry* self);

  // Before the first Render.
  void AddCollectable(const prometheus::Collectable* c) { collectables_.push_back(c); }
  // A part's metrics, by name ("hal", "kubelet"...): replaced, or removed
  // with null (a reload switched the part off: its series leave the page).
  // Any time; a scrape under way keeps what it took.
  void SetPart(const std::string& name, std::shared_ptr<const prometheus::Collectable> metrics);
  // Families of the collectables whose names this refuses are left out
  // (--metrics.include/exclude); null: every family. Any time (a reload).
  using FamilyFilter = std::function<bool(const std::string&)>;
  void SetFamilyFilter(FamilyFilter allows);

  // The exemplars OpenMetrics scrapes attach to counter samples; may be
  // null. Set before the first Render; must outlive the exposer.
  void SetExemplars(const store::ExemplarStore* exemplars) { exemplars_ = exemplars; }

  // Renders the full exposition into `sink` in pieces, then Finish()es it;
  // OpenMetrics ends with "# EOF". Whether the sink took every piece.
  bool Render(PageSink* sink, Format format = Format::kText);
  // The same, whole, into `out` (cleared first).
  void Render(std::string* out, Format format = Format::kText);

 private:
  store::MetricStore* const store_;
  std::vector<const prometheus::Collectable*> collectables_;
  const store::ExemplarStore* exemplars_ = nullptr;
  Mutex filter_mu_;
  std::shared_ptr<const FamilyFilter> allows_ XPU_GUARDED_BY(filter_mu_);  // null: every family
  // The parts' metrics, by name.
  std::map<std::string, std::shared_ptr<const prometheus::Collectable>> parts_
      XPU_GUARDED_BY(filter_mu_);
  prometheus::Gauge& scrape_duration_;
  prometheus::Gauge& series_;
  // Writes a family that is not the snapshot's: `mine` when the page owns
  // it (moved into the cache), else lent by `owner`; kept as text when the
  // cache may keep it.
  void AppendOnItsOwn(const prometheus::MetricFamily* family, prometheus::MetricFamily* mine,
                      const std::shared_ptr<const std::vector<prometheus::MetricFamily>>& owner,
                      Format format, std::string* out);
  // The families written on their own, kept as text between scrapes.
  FamilyTextCache text_cache_;
};

}  // namespace xpu::exposition
