#pragma once

#include <prometheus/collectable.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "exposition/snapshot_writer.h"
#include "store/metric_store.h"

namespace xpu::exposition {

// Assembles one scrape: the store's device series (fast path), then every
// registered Collectable (device info, self-metrics...) through the same text
// primitives. No source can fail the scrape: each only contributes what it has.
// Thread-safe; sources must outlive it.
class Exposer {
 public:
  // `self` receives the exposer's own metrics (scrape duration, series).
  Exposer(store::MetricStore* store, prometheus::Registry* self);

  void AddCollectable(const prometheus::Collectable* c) { collectables_.push_back(c); }
  // Families of the collectables whose names this refuses are left out
  // (--metrics.include/exclude). Set before the first Render.
  void SetFamilyFilter(std::function<bool(const std::string&)> allows) {
    allows_ = std::move(allows);
  }

  // Renders the full exposition into `out` (cleared first).
  void Render(std::string* out);

 private:
  store::MetricStore* const store_;
  std::vector<const prometheus::Collectable*> collectables_;
  std::function<bool(const std::string&)> allows_;  // null: every family
  SnapshotWriter writer_;
  prometheus::Gauge& scrape_duration_;
  prometheus::Gauge& series_;
};

}  // namespace xpu::exposition
