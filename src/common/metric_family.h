#pragma once

// Building blocks for the Collectables that write their families by hand
// (the device registry's joins, the PCI families, the data age): one family
// with its name, help and type, and one sample with its labels.

#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace xpu {

using MetricLabels = std::vector<prometheus::ClientMetric::Label>;

// The page's order of a family's samples: label by label, name then value
// (no label holds a NUL, so a value shorter than another it begins sorts
// first).
inline bool LabelsLess(const prometheus::ClientMetric& a, const prometheus::ClientMetric& b) {
  const size_t n = std::min(a.label.size(), b.label.size());
  for (size_t i = 0; i < n; ++i) {
    if (const int c = a.label[i].name.compare(b.label[i].name); c != 0) return c < 0;
    if (const int c = a.label[i].value.compare(b.label[i].value); c != 0) return c < 0;
  }
  return a.label.size() < b.label.size();
}

// Puts a family's samples in the page's order where they are not: a family
// a source keeps and lends (FamilyLender) is then written without a copy.
inline void PutInPageOrder(prometheus::MetricFamily* f) {
  if (!std::is_sorted(f->metric.begin(), f->metric.end(), LabelsLess))
    std::stable_sort(f->metric.begin(), f->metric.end(), LabelsLess);
}

// A Collectable that keeps some of its families between scrapes and lends
// them to the page, which writes them without a copy (the device registry
// keeps each source's families as the source set them: NVML's, a page's
// worth of small series at 8 cards, were copied and freed every scrape).
// CollectLending gives what Collect gives, less the lent families, which it
// appends to `lent`; they stay as they are for as long as the page holds
// them. Each should be in the page's order already (PutInPageOrder, once
// when it is made): the page checks a lent family once, and copies and
// sorts one that is not at every scrape. Thread-safe as Collect is.
class FamilyLender : public prometheus::Collectable {
 public:
  using Lent = std::vector<std::shared_ptr<const std::vector<prometheus::MetricFamily>>>;
  virtual std::vector<prometheus::MetricFamily> CollectLending(Lent* lent) const = 0;
};

inline prometheus::MetricFamily NewFamily(
    std::string name, std::string help,
    prometheus::MetricType type = prometheus::MetricType::Gauge) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

inline prometheus::ClientMetric GaugeSample(MetricLabels labels, double v) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = v;
  return m;
}

inline prometheus::ClientMetric CounterSample(MetricLabels labels, double v) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = v;
  return m;
}

// A sample of `family`'s own type (gauge or counter).
inline prometheus::ClientMetric SampleOf(const prometheus::MetricFamily& family,
                                         MetricLabels labels, double v) {
  return family.type == prometheus::MetricType::Counter ? CounterSample(std::move(labels), v)
                                                        : GaugeSample(std::move(labels), v);
}

}  // namespace xpu
