#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <regex>
#include <sstream>

#include "common/metric_family.h"
#include "exposition/exposer.h"
#include "exposition/snapshot_writer.h"
#include "exposition/text_format.h"

namespace xpu::exposition {
namespace {

using store::Clock;

// Parses text-format sample lines into "name{labels}" -> value. Label order
// and spacing are kept as written; both writers emit labels in the same order.
std::map<std::string, double> ParseSamples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

store::Snapshot Sample(store::MetricStore* s) {
  s->SetDevices({{0, {"GPU-0", "A\"1\\0\n"}}, {1, {"GPU-1", "PPU-810E"}}});
  s->Apply(
      {{0, 1, "", 0.5}, {0, 7, "", 1234.5}, {1, 14, "3", 1e15}, {1, 16, "0", 1}, {0, 999, "x", 7}},
      Clock::now());
  return s->Snap(Clock::now());
}

// NeedsEscape looks at a long value eight bytes at a time: every byte value
// at every place of values up to 27 bytes long (short ones, then three
// words and a tail) is judged as the byte-by-byte rule judges it, bytes with
// the high bit set included.
TEST(TextFormatTest, NeedsEscapeFindsEverySpecialByteAtEveryPlace) {
  for (size_t len = 1; len <= 27; ++len) {
    for (size_t at = 0; at < len; ++at) {
      for (int b = 0; b < 256; ++b) {
        std::string v(len, 'a');
        v[at] = static_cast<char>(b);
        const bool special = b == '\\' || b == '\n' || b == '"';
        ASSERT_EQ(NeedsEscape(v), special) << "length " << len << ", byte " << b << " at " << at;
      }
    }
  }
  EXPECT_FALSE(NeedsEscape(""));
  EXPECT_FALSE(NeedsEscape(std::string(64, '\xff')));
}

TEST(SnapshotWriterTest, MatchesTextSerializerOnTheSameFamilies) {
  store::MetricStore store(catalog::Catalog::Builtin(), {std::chrono::seconds(10), 1000});
  store::Snapshot snap = Sample(&store);
  SnapshotWriter w;
  std::string fast;
  w.Append(snap, &fast);
  const std::string reference =
      prometheus::TextSerializer().Serialize(SnapshotWriter::ToFamilies(snap));
  auto a = ParseSamples(fast), b = ParseSamples(reference);
  EXPECT_EQ(a.size(), 5u);
  EXPECT_EQ(a, b);
}

// The rows the one row writer assembles in its growable buffer: longer
// than its first 1 KiB (a huge model name), an instance that needs
// escaping under a family's instance label, an unknown ID with and without
// an instance; each as prometheus-cpp's own serializer writes it.
TEST(SnapshotWriterTest, LongRowsAndEscapedInstancesMatchTheTextSerializer) {
  store::MetricStore store(catalog::Catalog::Builtin(), {std::chrono::seconds(10), 1000});
  store.SetDevices({{0, {"GPU-0", std::string(3000, 'm')}}, {1, {"GPU-1", "PPU"}}});
  store.Apply({{0, 1, "", 0.5},
               {1, 16, "a\"b\\c\nd", 1},
               {0, 16, std::string(2000, 'i'), 2},
               {1, 999, "", 3},
               {1, 998, "q\"", 4}},
              Clock::now());
  const store::Snapshot snap = store.Snap(Clock::now());
  SnapshotWriter w;
  std::string fast;
  w.Append(snap, &fast);
  const auto a = ParseSamples(fast);
  EXPECT_EQ(a.size(), 5u) << fast;
  EXPECT_EQ(a,
            ParseSamples(prometheus::TextSerializer().Serialize(SnapshotWriter::ToFamilies(snap))));
  EXPECT_NE(fast.find(",link=\"a\\\"b\\\\c\\nd\"} 1\n"), std::string::npos) << fast;
}

TEST(SnapshotWriterTest, FollowsNewValuesAndNewSeries) {
  store::MetricStore store(catalog::Catalog::Builtin(), {std::chrono::seconds(10), 1000});
  Sample(&store);
  SnapshotWriter w;
  std::string first, second, third;
  w.Append(store.Snap(Clock::now()), &first);
  store.Apply({{0, 1, "", 0.75}}, Clock::now());
  w.Append(store.Snap(Clock::now()), &second);
  EXPECT_NE(second.find("} 0.75\n"), std::string::npos);
  store.Apply({{1, 1, "", 0.25}}, Clock::now());  // a new series
  w.Append(store.Snap(Clock::now()), &third);
  EXPECT_NE(third.find("xpu_utilization_ratio{minor=\"1\""), std::string::npos);
}

TEST(SnapshotWriterTest, WritesHeadersOncePerFamilyAndEscapesLabels) {
  store::MetricStore store(catalog::Catalog::Builtin(), {std::chrono::seconds(10), 1000});
  SnapshotWriter w;
  std::string out;
  w.Append(Sample(&store), &out);
  EXPECT_NE(out.find("model=\"A\\\"1\\\\0\\n\""), std::string::npos) << out;
  EXPECT_NE(out.find("# TYPE xpu_energy_joules_total counter\n"), std::string::npos);
  EXPECT_NE(out.find("xpu_link_up{minor=\"1\",uuid=\"GPU-1\",model=\"PPU-810E\",link=\"0\"} 1\n"),
            std::string::npos);
  EXPECT_NE(out.find("xpu_unknown_metric{minor=\"0\",uuid=\"GPU-0\",model=\"A\\\"1\\\\0\\n\",id="
                     "\"999\",instance_id=\"x\"} 7"),
            std::string::npos);
  std::regex type_line("# TYPE (\\S+) ");
  std::map<std::string, int> types;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), type_line);
       it != std::sregex_iterator(); ++it)
    ++types[(*it)[1]];
  for (const auto& [name, n] : types) EXPECT_EQ(n, 1) << name;
}

// A collectable that gives fixed families.
class Fixed : public prometheus::Collectable {
 public:
  explicit Fixed(std::vector<prometheus::MetricFamily> f) : f_(std::move(f)) {}
  std::vector<prometheus::MetricFamily> Collect() const override { return f_; }

 private:
  std::vector<prometheus::MetricFamily> f_;
};

prometheus::MetricFamily Temperatures(std::initializer_list<std::pair<const char*, double>> by_uuid,
                                      prometheus::MetricType type = prometheus::MetricType::Gauge) {
  prometheus::MetricFamily f;
  f.name = "xpu_temperature_celsius";
  f.help = "another source's help";
  f.type = type;
  for (const auto& [uuid, v] : by_uuid) {
    prometheus::ClientMetric m;
    m.label = {{"minor", ""}, {"uuid", uuid}, {"model", "NVIDIA H800"}};
    (type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value) = v;
    f.metric.push_back(m);
  }
  return f;
}

// Another source's samples of a family XDM's snapshot has (NVML's
// temperature) go into that family, once on the page, for the devices XDM
// gives none of; XDM's value stands for a device it has. Without XDM's
// family, the other source's is a family of its own. In both formats.
TEST(ExposerTest, AFamilyTheSnapshotHasTooIsWrittenOnceAndXdmsValuesStand) {
  for (const Format format : {Format::kText, Format::kOpenMetrics}) {
    store::MetricStore store(catalog::Catalog::Builtin(), {std::chrono::seconds(10), 1000});
    store.SetDevices({{0, {"GPU-0", "H800"}}, {1, {"GPU-1", "H800"}}});
    store.Apply({{0, 4, "", 40}, {1, 4, "", 41}, {0, 6, "", 300}}, Clock::now());
    prometheus::Registry self;
    Exposer exposer(&store, &self);
    exposer.SetPart("nvml", std::make_shared<Fixed>(std::vector<prometheus::MetricFamily>{
                                Temperatures({{"GPU-0", 99}, {"GPU-x", 38}})}));
    std::string page;
    exposer.Render(&page, format);
    const std::string om = format == Format::kOpenMetrics ? " (OpenMetrics)" : "";
    size_t headers = 0;
    for (size_t at = page.find("# TYPE xpu_temperature_celsius "); at != std::string::npos;
         at = page.find("# TYPE xpu_temperature_celsius ", at + 1))
      ++headers;
    EXPECT_EQ(headers, 1u) << om << page;
    EXPECT_NE(page.find("xpu_temperature_celsius{minor=\"0\",uuid=\"GPU-0\",model=\"H800\"} 40\n"),
              std::string::npos)
        << om << page;
    EXPECT_EQ(page.find("} 99"), std::string::npos) << "XDM's value stands" << om << page;
    EXPECT_NE(page.find("xpu_temperature_celsius{minor=\"\",uuid=\"GPU-x\",model=\"NVIDIA "
                        "H800\"} 38\n"),
              std::string::npos)
        << om << page;
    EXPECT_EQ(page.find("another source's help"), std::string::npos) << om << page;
    // The filled-in sample sits in XDM's family, before the next family.
    EXPECT_LT(page.find("uuid=\"GPU-x\""), page.find("# TYPE xpu_power_watts")) << om << page;

    // XDM gives no temperature: the other source's family stands alone.
    store::MetricStore power_only(catalog::Catalog::Builtin(), {std::chrono::seconds(10), 1000});
    power_only.SetDevices({{0, {"GPU-0", "H800"}}});
    power_only.Apply({{0, 6, "", 300}}, Clock::now());
    Exposer alone(&power_only, &self);
    alone.SetPart("nvml", std::make_shared<Fixed>(std::vector<prometheus::MetricFamily>{
                              Temperatures({{"GPU-0", 99}, {"GPU-x", 38}})}));
    alone.Render(&page, format);
    EXPECT_NE(page.find("# HELP xpu_temperature_celsius another source's help"), std::string::npos)
        << om << page;
    EXPECT_NE(page.find("uuid=\"GPU-0\",model=\"NVIDIA H800\"} 99\n"), std::string::npos)
        << om << page;
    if (format == Format::kOpenMetrics) {
      EXPECT_EQ(page.substr(page.size() - 6), "# EOF\n");
    }
  }
}

// Lends its families (FamilyLender), as the device registry lends the
// sources' own, and gives one more by value.
class Lender : public FamilyLender {
 public:
  Lender(std::vector<prometheus::MetricFamily> lent, std::vector<prometheus::MetricFamily> given)
      : lent_(std::make_shared<const std::vector<prometheus::MetricFamily>>(std::move(lent))),
        given_(std::move(given)) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out = given_;
    out.insert(out.end(), lent_->begin(), lent_->end());
    return out;
  }
  std::vector<prometheus::MetricFamily> CollectLending(Lent* lent) const override {
    lent->push_back(lent_);
    return given_;
  }
  const std::vector<prometheus::MetricFamily>& lent() const { return *lent_; }

 private:
  std::shared_ptr<const std::vector<prometheus::MetricFamily>> lent_;
  std::vector<prometheus::MetricFamily> given_;
};

// Lent families are written as the same families given by value are: one
// out of order is sorted, one another collectable shares is merged, one the
// snapshot has is filled in (XDM's value standing), and a filtered one is
// left out; what was lent is left as it was. In both formats.
TEST(ExposerTest, LentFamiliesAreWrittenAsFamiliesGivenByValue) {
  prometheus::MetricFamily unsorted = Temperatures({{"GPU-z", 1}, {"GPU-a", 2}});
  unsorted.name = "xpu_nvml_unsorted";
  prometheus::MetricFamily shared = Temperatures({{"GPU-b", 3}});
  shared.name = "xpu_nvml_shared";
  prometheus::MetricFamily shared_too = Temperatures({{"GPU-c", 4}});
  shared_too.name = "xpu_nvml_shared";
  prometheus::MetricFamily hidden = Temperatures({{"GPU-h", 5}});
  hidden.name = "xpu_nvml_hidden";
  const std::vector<prometheus::MetricFamily> lent = {
      unsorted, shared, Temperatures({{"GPU-0", 99}, {"GPU-x", 38}}), hidden};
  for (const Format format : {Format::kText, Format::kOpenMetrics}) {
    std::string pages[2];
    for (int lending = 0; lending < 2; ++lending) {
      store::MetricStore store(catalog::Catalog::Builtin(), {std::chrono::seconds(10), 1000});
      store.SetDevices({{0, {"GPU-0", "H800"}}});
      store.Apply({{0, 4, "", 40}}, Clock::now());
      prometheus::Registry self;
      Exposer exposer(&store, &self);
      exposer.SetFamilyFilter([](const std::string& name) { return name != "xpu_nvml_hidden"; });
      auto lender = std::make_shared<Lender>(lent, std::vector<prometheus::MetricFamily>{});
      if (lending == 1) {
        exposer.SetPart("nvml", lender);
      } else {
        exposer.SetPart("nvml", std::make_shared<Fixed>(lent));
      }
      exposer.SetPart("other",
                      std::make_shared<Fixed>(std::vector<prometheus::MetricFamily>{shared_too}));
      exposer.Render(&pages[lending], format);
      if (lending == 1) {
        ASSERT_EQ(lender->lent().size(), lent.size());
        for (size_t i = 0; i < lent.size(); ++i) {
          EXPECT_EQ(lender->lent()[i].metric.size(), lent[i].metric.size()) << i;
          EXPECT_EQ(lender->lent()[i].metric[0].label, lent[i].metric[0].label) << i;
        }
      }
    }
    const std::string om = format == Format::kOpenMetrics ? " (OpenMetrics)" : "";
    EXPECT_EQ(pages[1], pages[0]) << om;
    const std::string& page = pages[1];
    EXPECT_LT(page.find("uuid=\"GPU-a\""), page.find("uuid=\"GPU-z\"")) << om << page;
    EXPECT_NE(page.find("uuid=\"GPU-c\""), std::string::npos) << om << page;
    EXPECT_EQ(page.find("# TYPE xpu_nvml_shared", page.find("# TYPE xpu_nvml_shared") + 1),
              std::string::npos)
        << "one family a name" << om << page;
    EXPECT_EQ(page.find("} 99"), std::string::npos) << "XDM's value stands" << om << page;
    EXPECT_NE(page.find("uuid=\"GPU-x\""), std::string::npos) << om << page;
    EXPECT_EQ(page.find("xpu_nvml_hidden"), std::string::npos) << om << page;
  }
}

// A family of the same name but another type is dropped: the snapshot's
// stands, and the page never has the name twice.
TEST(ExposerTest, AFamilyOfTheSameNameAndAnotherTypeIsDropped) {
  store::MetricStore store(catalog::Catalog::Builtin(), {std::chrono::seconds(10), 1000});
  store.SetDevices({{0, {"GPU-0", "H800"}}});
  store.Apply({{0, 4, "", 40}}, Clock::now());
  prometheus::Registry self;
  Exposer exposer(&store, &self);
  exposer.SetPart("other", std::make_shared<Fixed>(std::vector<prometheus::MetricFamily>{
                               Temperatures({{"GPU-x", 38}}, prometheus::MetricType::Counter)}));
  std::string page;
  exposer.Render(&page);
  EXPECT_EQ(page.find("GPU-x"), std::string::npos) << page;
  EXPECT_EQ(page.find("# TYPE xpu_temperature_celsius"),
            page.rfind("# TYPE xpu_temperature_celsius"))
      << page;
}

TEST(TextFormatTest, EscapesHelpAndFormatsSpecialValues) {
  std::string out;
  AppendHeader("x", "a\\b\nc", "gauge", &out);
  EXPECT_EQ(out, "# HELP x a\\\\b\\nc\n# TYPE x gauge\n");
  out.clear();
  AppendValue(std::numeric_limits<double>::quiet_NaN(), &out);
  out.push_back(' ');
  AppendValue(std::numeric_limits<double>::infinity(), &out);
  out.push_back(' ');
  AppendValue(-std::numeric_limits<double>::infinity(), &out);
  out.push_back(' ');
  AppendValue(0.1, &out);
  out.push_back(' ');
  AppendValue(1e21, &out);
  EXPECT_EQ(out, "NaN +Inf -Inf 0.1 1e+21");
}

// WriteValue's own integer path writes exactly what std::to_chars (the
// shortest round-trip form) writes, fixed or scientific alike.
TEST(TextFormatTest, IntegersAreWrittenAsToCharsWritesThem) {
  std::vector<double> values = {0,      -0.0,    1,        -1,      9,      10,   100,
                                10000,  100000,  120000,   1200000, 123456, 1e14, -1e14,
                                1e15,   -1e15,   1e15 - 1, 4.5e14,  1e16,   2e15, 999999999999999,
                                123000, 1230000, 12300000, 0.5,     1e-7};
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  for (int i = 0; i < 200000; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const int scale = static_cast<int>(x % 16);
    double v = static_cast<double>(x >> (8 + scale * 3));
    for (int z = 0; z < static_cast<int>(x % 7); ++z) v = std::round(v / 10) * 10;  // zeros
    values.push_back((x & 1) ? -v : v);
  }
  for (double v : values) {
    char mine[kMaxValueChars], ref[kMaxValueChars];
    const std::string a(mine, WriteValue(v, mine));
    const std::string b(ref, std::to_chars(ref, ref + sizeof ref, v).ptr);
    ASSERT_EQ(a, b) << v;
  }
}

TEST(TextFormatTest, AppendFamilyHandlesEveryType) {
  prometheus::MetricFamily h;
  h.name = "h_seconds";
  h.help = "h";
  h.type = prometheus::MetricType::Histogram;
  prometheus::ClientMetric m;
  m.histogram.sample_count = 3;
  m.histogram.sample_sum = 1.5;
  m.histogram.bucket = {{1, 0.1}, {3, 1.0}};
  h.metric.push_back(m);
  std::string out;
  AppendFamily(h, &out);
  EXPECT_NE(out.find("h_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << out;
  EXPECT_NE(out.find("h_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(out.find("h_seconds_sum 1.5\n"), std::string::npos);
  // A +Inf bucket in the data (prometheus-cpp's Histogram has one) is not
  // written twice: OpenMetrics refuses a repeated sample.
  h.metric[0].histogram.bucket.push_back({3, std::numeric_limits<double>::infinity()});
  for (const bool om : {false, true}) {
    std::string page;
    AppendFamily(h, &page, om ? Format::kOpenMetrics : Format::kText);
    size_t n = 0;
    for (size_t at = page.find("le=\"+Inf\""); at != std::string::npos;
         at = page.find("le=\"+Inf\"", at + 1))
      ++n;
    EXPECT_EQ(n, 1u) << page;
  }
}

// OpenMetrics from the store: the same series and values as the text
// format, counters' families without _total, # UNIT from the name's unit.
TEST(OpenMetricsTest, SnapshotWriterWritesTheSameSamplesWithOpenMetricsHeaders) {
  store::MetricStore store(catalog::Catalog::Builtin(), {std::chrono::seconds(10), 1000});
  store::Snapshot snap = Sample(&store);
  SnapshotWriter w;
  std::string text, om;
  w.Append(snap, &text);
  w.Append(snap, &om, Format::kOpenMetrics);
  EXPECT_EQ(ParseSamples(text), ParseSamples(om));
  EXPECT_NE(om.find("# TYPE xpu_utilization_ratio gauge\n# UNIT xpu_utilization_ratio ratio\n"),
            std::string::npos)
      << om;
  const catalog::Entry* counter = nullptr;
  for (const catalog::Entry& e : catalog::Catalog::Builtin()->entries())
    if (e.type == catalog::MetricType::kCounter && e.id == 7) counter = &e;
  ASSERT_NE(counter, nullptr) << "the sample's ID 7 is a counter";
  const std::string family = counter->name.substr(0, counter->name.size() - 6);
  EXPECT_NE(om.find("# TYPE " + family + " counter\n"), std::string::npos) << om;
  EXPECT_NE(om.find("\n" + counter->name + "{"), std::string::npos);
  EXPECT_EQ(text.find("# UNIT"), std::string::npos);
  // Both formats are cached side by side: writing one leaves the other.
  std::string again;
  w.Append(snap, &again);
  EXPECT_EQ(again, text);
}

TEST(OpenMetricsTest, FamiliesTypesUnitsEscapingAndExemplars) {
  prometheus::MetricFamily c;
  c.name = "xpu_exporter_reconnects_total";
  c.help = "say \"hi\"\\";
  c.type = prometheus::MetricType::Counter;
  prometheus::ClientMetric m;
  m.label = {{"b", "2"}, {"a", "1"}};
  m.counter.value = 3;
  c.metric.push_back(m);
  store::ExemplarStore exemplars;
  store::Exemplar e;
  e.labels = {{"pod", "p\"1"}};
  e.timestamp = 1700000000.25;
  ASSERT_TRUE(exemplars.Set(c.name, {{"a", "1"}, {"b", "2"}}, e));
  std::string out;
  AppendFamily(c, &out, Format::kOpenMetrics, &exemplars);
  EXPECT_EQ(out,
            "# HELP xpu_exporter_reconnects say \\\"hi\\\"\\\\\n"
            "# TYPE xpu_exporter_reconnects counter\n"
            "xpu_exporter_reconnects_total{b=\"2\",a=\"1\"} 3 # {pod=\"p\\\"1\"} 1 "
            "1700000000.250\n");
  std::string text;
  AppendFamily(c, &text, Format::kText, &exemplars);
  EXPECT_EQ(text.find(" # {"), std::string::npos) << text;

  prometheus::MetricFamily odd = c;  // a counter without _total, and untyped
  odd.name = "odd_seconds";
  std::string o;
  AppendFamily(odd, &o, Format::kOpenMetrics);
  EXPECT_NE(o.find("# TYPE odd_seconds unknown\n# UNIT odd_seconds seconds\n"), std::string::npos)
      << o;
  odd.type = prometheus::MetricType::Untyped;
  o.clear();
  AppendFamily(odd, &o, Format::kOpenMetrics);
  EXPECT_NE(o.find("# TYPE odd_seconds unknown\n"), std::string::npos) << o;
  EXPECT_EQ(UnitOf("xpu_memory_used_bytes"), "bytes");
  EXPECT_EQ(UnitOf("bytes"), "");
  EXPECT_EQ(UnitOf("xpu_megabytes"), "");
}

TEST(ExemplarStoreTest, RuneLimitAndSeriesCap) {
  store::Exemplar e;
  e.labels = {{"pod", std::string(125, 'x')}};  // 3 + 125 runes
  EXPECT_TRUE(store::ExemplarStore::Fits(e));
  e.labels[0].second += "y";
  EXPECT_FALSE(store::ExemplarStore::Fits(e));
  e.labels[0].second = std::string(62, 'x');
  for (int i = 0; i < 20; ++i) e.labels[0].second += "\xc3\xa9";  // 20 runes in 40 bytes
  EXPECT_TRUE(store::ExemplarStore::Fits(e));
  store::ExemplarStore s(2);
  EXPECT_TRUE(s.Set("f", {{"a", "1"}}, e));
  EXPECT_TRUE(s.Set("f", {{"a", "2"}}, e));
  EXPECT_TRUE(s.Set("f", {{"a", "1"}}, e));  // an update, not a new series
  EXPECT_FALSE(s.Set("f", {{"a", "3"}}, e));
  EXPECT_EQ(s.refused(), 1u);
  EXPECT_TRUE(s.Find("f", {{"a", "2"}}).has_value());
  EXPECT_FALSE(s.Find("g", {{"a", "2"}}).has_value());
  EXPECT_TRUE(s.HasFamily("f"));
}

// Every value on the page reads back as exactly the store's double (shortest
// round-trip formatting), in both formats, for awkward values too.
TEST(RoundTripTest, EveryValueOnThePageParsesBackToTheStoresDouble) {
  store::MetricStore store(catalog::Catalog::Builtin(), {std::chrono::seconds(10), 100000});
  store.SetDevices({{0, {"GPU-0", "m"}}});
  std::vector<store::Sample> batch;
  uint64_t x = 0x9E3779B97F4A7C15ULL;
  const double awkward[] = {0.1 + 0.2,
                            1e-300,
                            4.9e-324,
                            1.7976931348623157e308,
                            -0.0,
                            0.279,
                            0.27899999999999997,
                            123456789012345678.0,
                            1.0 / 3};
  for (int i = 0; i < 2000; ++i) {
    double v;
    if (i < static_cast<int>(std::size(awkward))) {
      v = awkward[i];
    } else {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      std::memcpy(&v, &x, sizeof v);
      if (!std::isfinite(v)) v = static_cast<double>(x >> 11) / 7;
    }
    batch.push_back({0, 14, std::to_string(i), v});  // one family, one series per value
  }
  store.Apply(batch, Clock::now());
  const store::Snapshot snap = store.Snap(Clock::now());
  ASSERT_EQ(snap.values.size(), batch.size());
  for (Format f : {Format::kText, Format::kOpenMetrics}) {
    std::string page;
    SnapshotWriter().Append(snap, &page, f);
    std::istringstream in(page);
    std::string line;
    size_t row = 0;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      ASSERT_LT(row, snap.values.size());
      const std::string text = line.substr(line.rfind(' ') + 1);
      const double back = std::strtod(text.c_str(), nullptr);
      const double want = snap.values[row];
      EXPECT_EQ(std::memcmp(&back, &want, sizeof back), 0) << text << " vs " << want;
      ++row;
    }
    EXPECT_EQ(row, snap.values.size());
  }
}

}  // namespace
}  // namespace xpu::exposition
