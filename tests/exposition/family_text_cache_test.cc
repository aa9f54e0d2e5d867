// FamilyTextCache: the text it gives is what AppendFamily writes for the
// family given, whatever was cached before under its name (a value, a label,
// the help, the sign of a zero changed; the other format), and a name not
// written for a while is forgotten. Scrapes at once, with families that
// keep changing, each get their own family's text (run under TSan too).
#include "exposition/family_text_cache.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/metric_family.h"

namespace xpu::exposition {
namespace {

using Family = std::shared_ptr<const prometheus::MetricFamily>;

Family Make(double value, const std::string& card = "GPU-0", const std::string& help = "h",
            prometheus::MetricType type = prometheus::MetricType::Gauge) {
  prometheus::MetricFamily f = NewFamily("xpu_nvml_thing", help, type);
  for (int link = 0; link < 3; ++link)
    f.metric.push_back(SampleOf(f, {{"uuid", card}, {"link", std::to_string(link)}},
                                link == 0 ? value : value + link));
  return std::make_shared<const prometheus::MetricFamily>(std::move(f));
}

std::string Written(const Family& f, Format format) {
  std::string out;
  AppendFamily(*f, &out, format, nullptr);
  return out;
}

TEST(FamilyTextCacheTest, TheTextIsAlwaysTheGivenFamilysOwn) {
  FamilyTextCache cache;
  const std::vector<Family> versions = {Make(1),
                                        Make(1),
                                        Make(2),
                                        Make(2, "GPU-\"1\""),
                                        Make(2, "GPU-0", "other help"),
                                        Make(0.0),
                                        Make(-0.0),
                                        Make(std::nan("")),
                                        Make(2, "GPU-0", "h", prometheus::MetricType::Counter),
                                        Make(1)};
  for (const Family& f : versions) {
    cache.BeginRender();
    for (Format format : {Format::kText, Format::kOpenMetrics, Format::kText}) {
      SCOPED_TRACE(Written(f, format));
      EXPECT_EQ(*cache.Text(f, format), Written(f, format));
    }
  }
  EXPECT_EQ(cache.size(), 1u);
}

TEST(FamilyTextCacheTest, AnEqualFamilyIsServedTheKeptTextAndItsHolderKept) {
  FamilyTextCache cache;
  const Family a = Make(1), b = Make(1);
  cache.BeginRender();
  const auto first = cache.Text(a, Format::kText);
  EXPECT_TRUE(cache.Holds(*a));
  cache.BeginRender();
  const auto second = cache.Text(b, Format::kText);
  EXPECT_EQ(first, second);  // the same text, not written again
  EXPECT_TRUE(cache.Holds(*b));
  EXPECT_FALSE(cache.Holds(*a));
  EXPECT_TRUE(FamilyTextCache::Same(*a, *b));
  EXPECT_FALSE(FamilyTextCache::Same(*Make(0.0), *Make(-0.0)));
}

TEST(FamilyTextCacheTest, OnlySmallGaugesCountersAndUntypedFamiliesAreKept) {
  EXPECT_TRUE(FamilyTextCache::Cacheable(*Make(1)));
  EXPECT_FALSE(FamilyTextCache::Cacheable(NewFamily("h", "h", prometheus::MetricType::Histogram)));
  prometheus::MetricFamily big = NewFamily("xpu_device_topology_info", "h");
  for (size_t i = 0; i <= FamilyTextCache::kMaxSamples; ++i)
    big.metric.push_back(GaugeSample({{"i", std::to_string(i)}}, 1));
  EXPECT_FALSE(FamilyTextCache::Cacheable(big));
}

TEST(FamilyTextCacheTest, ANameNotWrittenForAWhileIsForgotten) {
  FamilyTextCache cache;
  cache.BeginRender();
  cache.Text(Make(1), Format::kText);
  for (uint64_t i = 0; i < 2 * FamilyTextCache::kForgetAfter; ++i) cache.BeginRender();
  EXPECT_EQ(cache.size(), 0u);
}

TEST(FamilyTextCacheTest, ScrapesAtOnceEachGetTheirFamilysText) {
  FamilyTextCache cache;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        const Family f = Make(i % 3 == 0 ? 1 : t);  // some shared, some each thread's
        const Format format = (i + t) % 2 ? Format::kText : Format::kOpenMetrics;
        cache.BeginRender();
        if (*cache.Text(f, format) != Written(f, format)) ++wrong;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace xpu::exposition
