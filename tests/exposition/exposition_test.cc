#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <map>
#include <regex>
#include <sstream>

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

TEST(SnapshotWriterTest, CachesRenderingUntilTheSeriesSetChanges) {
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
}

}  // namespace
}  // namespace xpu::exposition
