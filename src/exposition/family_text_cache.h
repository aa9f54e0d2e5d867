#pragma once

#include <prometheus/metric_family.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "exposition/text_format.h"

namespace xpu::exposition {

// The text of each family the page writes on its own, kept from one scrape
// to the next: a family that reads the same as the last one of its name
// (help, type, every sample's labels and value) is copied from the text
// AppendFamily wrote then, not written again. Most of a HAL page's families
// (NVML's links, the pci source's, the device registry's health and
// topology) change seldom between scrapes; comparing a family is a fraction
// of writing it (labels are escaped and values formatted). Gauges,
// counters and untyped families only, without exemplars (the caller asks
// Cacheable: at most kMaxSamples). Holds the last family of each name (shared with its owner
// where it is lent) and its text per format; a name not written for
// kForgetAfter renders is forgotten. Thread-safe: scrapes call it at once.
class FamilyTextCache {
 public:
  static constexpr uint64_t kForgetAfter = 64;
  // A family of more samples is written each time: what it would keep (the
  // family and its text, per format) is memory the page does not hold
  // between scrapes otherwise (the topology of the 100k page's 256 cards,
  // 2,048 samples, kept: +5 MiB PSS), and its compare saves less than a
  // small family's. NVML's largest at 8 cards is 576.
  static constexpr size_t kMaxSamples = 1024;

  static bool Cacheable(const prometheus::MetricFamily& family);
  // Whether two families write the same text (in any format).
  static bool Same(const prometheus::MetricFamily& a, const prometheus::MetricFamily& b);

  // Once per render, before its Text calls.
  void BeginRender();
  // What AppendFamily(*family, out, format, nullptr) writes.
  std::shared_ptr<const std::string> Text(std::shared_ptr<const prometheus::MetricFamily> family,
                                          Format format);
  // Whether the entry of `family`'s name holds this very object (a lent
  // family written as it lay by an earlier render).
  bool Holds(const prometheus::MetricFamily& family) const;
  // Names kept now (for tests).
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<const prometheus::MetricFamily> family;
    std::array<std::shared_ptr<const std::string>, 2> text;  // by format: text, OpenMetrics
    uint64_t used = 0;
  };
  mutable Mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_ XPU_GUARDED_BY(mu_);
  std::atomic<uint64_t> renders_{0};
};

}  // namespace xpu::exposition
