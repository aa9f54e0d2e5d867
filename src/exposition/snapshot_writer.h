#pragma once

#include <prometheus/metric_family.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "exposition/page_sink.h"
#include "exposition/text_format.h"
#include "store/metric_store.h"

namespace xpu::exposition {

// Family name of samples whose metric ID the catalog lacks (when exported).
inline constexpr const char* kUnknownFamily = "xpu_unknown_metric";

// The labels of one stored series: minor, uuid, model, then the catalog's
// instance label (or, for unknown IDs, id and instance).
std::vector<std::pair<std::string, std::string>> RowLabels(const store::Row& row);

// Writes MetricStore snapshots in the text format or OpenMetrics, straight
// from the SeriesSet's rows: per scrape it builds only the label fragment of
// each device (minor, uuid, model) and each family's header, so no copy of
// the page's label text is kept between scrapes (at 100k series that copy
// was ~10 MB per format). Stateless; any thread.
class SnapshotWriter {
 public:
  // Families another source gives under a name the snapshot may have too
  // (NVML's temperature of a card XDM does not report), sorted by name.
  // Append writes each one it meets after that family's rows, leaving out
  // the samples of a device (by uuid) the family already has a row for
  // (XDM's value stands), and sets its `*taken` (a clash of types is taken
  // unwritten: the snapshot's stands): one family a name on the page. The
  // caller writes those not taken as families of their own. The families
  // are only read (they may be lent: FamilyLender).
  struct FillIn {
    std::string_view name;
    const prometheus::MetricFamily* family;
    bool* taken;
    bool operator<(const FillIn& o) const { return name < o.name; }
  };
  using FillIns = std::vector<FillIn>;

  // Appends the snapshot to `sink`, offering it a piece between series.
  static void Append(const store::Snapshot& snap, PageSink* sink, Format format = Format::kText,
                     const FillIns* fill_ins = nullptr);
  // The whole rendering appended to `out`.
  static void Append(const store::Snapshot& snap, std::string* out, Format format = Format::kText);

  // The same series and values as prometheus-cpp families: the reference
  // path that TextSerializer renders, used to check Append.
  static std::vector<prometheus::MetricFamily> ToFamilies(const store::Snapshot& snap);
};

}  // namespace xpu::exposition
