#pragma once

#include <prometheus/metric_family.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "exposition/text_format.h"
#include "store/metric_store.h"

namespace xpu::exposition {

// Family name of samples whose metric ID the catalog lacks (when exported).
inline constexpr const char* kUnknownFamily = "xpu_unknown_metric";

// The labels of one stored series: minor, uuid, model, then the catalog's
// instance label (or, for unknown IDs, id and instance).
std::vector<std::pair<std::string, std::string>> RowLabels(const store::Row& row);

// Writes MetricStore snapshots in the text format or OpenMetrics. What does
// not change from scrape to scrape (HELP/TYPE/UNIT headers, names and label
// sets) is rendered once per SeriesSet generation and format and reused; a
// scrape then only appends values. Thread-safe: concurrent scrapes share the
// cache.
class SnapshotWriter {
 public:
  void Append(const store::Snapshot& snap, std::string* out, Format format = Format::kText);

  // The same series and values as prometheus-cpp families: the reference
  // path that TextSerializer renders, used to check Append.
  static std::vector<prometheus::MetricFamily> ToFamilies(const store::Snapshot& snap);

 private:
  struct Rendered {
    uint64_t generation = 0;
    std::string text;  // all headers and prefixes, back to back
    // For row i: bytes of `text` to emit before its value, from offsets[i]
    // to offsets[i + 1].
    std::vector<size_t> offsets;
  };
  std::shared_ptr<const Rendered> Render(const store::SeriesSet& set, Format format);

  std::mutex mu_;
  std::shared_ptr<const Rendered> cache_[2];  // by Format; guarded by mu_
};

}  // namespace xpu::exposition
