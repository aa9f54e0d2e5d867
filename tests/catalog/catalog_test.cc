#include "catalog/catalog.h"

#include <gtest/gtest.h>

#include <set>

#include "catalog/selection.h"
#include "models.h"  // xdm-sim's metric IDs

namespace xpu::catalog {
namespace {

TEST(CatalogTest, BuiltinEntriesFollowPrometheusNamingRules) {
  auto cat = Catalog::Builtin();
  ASSERT_FALSE(cat->entries().empty());
  std::set<uint32_t> ids;
  std::set<std::string> names;
  for (const Entry& e : cat->entries()) {
    EXPECT_EQ(CheckEntry(e), "") << e.name;
    EXPECT_TRUE(ids.insert(e.id).second) << "duplicate id " << e.id;
    EXPECT_TRUE(names.insert(e.name).second) << "duplicate name " << e.name;
  }
}

TEST(CatalogTest, CoversEveryMetricTheSimulatorServes) {
  auto cat = Catalog::Builtin();
  for (const auto& m : xdmsim::AllMetrics()) {
    const Entry* e = cat->Find(m.id);
    ASSERT_NE(e, nullptr) << m.name;
    EXPECT_EQ(!e->instance_label.empty(), m.per_link) << m.name;
  }
}

Entry Make(std::string name, MetricType type, std::string unit) {
  Entry e;
  e.id = 1;
  e.name = std::move(name);
  e.type = type;
  e.unit = std::move(unit);
  e.help = "h";
  return e;
}

TEST(CatalogTest, CheckEntryRejectsNamesThatBreakTheRules) {
  EXPECT_NE(CheckEntry(Make("gpu_temp_celsius", MetricType::kGauge, "celsius")), "");    // prefix
  EXPECT_NE(CheckEntry(Make("xpu_util_percent", MetricType::kGauge, "ratio")), "");      // percent
  EXPECT_NE(CheckEntry(Make("xpu_energy_joules", MetricType::kCounter, "joules")), "");  // _total
  EXPECT_NE(CheckEntry(Make("xpu_temp_total", MetricType::kGauge, "none")), "");    // gauge _total
  EXPECT_NE(CheckEntry(Make("xpu_memory_used", MetricType::kGauge, "bytes")), "");  // no unit
  EXPECT_NE(CheckEntry(Make("xpu_memory_mib", MetricType::kGauge, "mib")), "");     // not base
  EXPECT_NE(CheckEntry(Make("xpu-bad", MetricType::kGauge, "none")), "");           // chars
  EXPECT_NE(CheckEntry(Make("xpu_power_watts", MetricType::kGauge, "none")), "");   // unit lies
  Entry no_help = Make("xpu_power_watts", MetricType::kGauge, "watts");
  no_help.help.clear();
  EXPECT_NE(CheckEntry(no_help), "");
  Entry bad_scale = Make("xpu_power_watts", MetricType::kGauge, "watts");
  bad_scale.scale = 0;
  EXPECT_NE(CheckEntry(bad_scale), "");
  Entry clash = Make("xpu_link_up", MetricType::kGauge, "none");
  clash.instance_label = "uuid";
  EXPECT_NE(CheckEntry(clash), "");
  EXPECT_EQ(CheckEntry(Make("xpu_energy_joules_total", MetricType::kCounter, "joules")), "");
}

TEST(CatalogTest, CheckEntryRejectsFamiliesTheExporterExportsItself) {
  EXPECT_NE(CheckEntry(Make("xpu_device_info", MetricType::kGauge, "none")), "");
  EXPECT_NE(CheckEntry(Make("xpu_device_health", MetricType::kGauge, "none")), "");
  EXPECT_NE(CheckEntry(Make("xpu_hal_up", MetricType::kGauge, "none")), "");
  EXPECT_NE(CheckEntry(Make("xpu_exporter_series", MetricType::kGauge, "none")), "");
  EXPECT_NE(CheckEntry(Make("xpu_device_fault_events_total", MetricType::kCounter, "none")), "");
  EXPECT_EQ(CheckEntry(Make("xpu_device_info_extra", MetricType::kGauge, "none")), "");
}

TEST(CatalogTest, ParseNamesUnknownKeyAndLine) {
  std::shared_ptr<const Catalog> c;
  Status s = Catalog::Parse(
      "metrics:\n  - id: 1\n    name: xpu_power_watts\n    type: gauge\n    unit: watts\n"
      "    help: h\n  - id: 2\n    name: xpu_x_watts\n    type: gauge\n    unit: watts\n"
      "    help: h\n    colour: red\n",
      "test.yaml", &c);
  ASSERT_FALSE(s.ok());
  // file:line of the key itself, and which entry it sits in.
  EXPECT_EQ(s.message(), "test.yaml:12: unknown key 'metrics[1].colour'");
}

TEST(CatalogTest, ParseRejectsDuplicatesAndGarbage) {
  std::shared_ptr<const Catalog> c;
  const std::string one =
      "  - id: 1\n    name: xpu_power_watts\n    type: gauge\n    unit: watts\n    help: h\n";
  EXPECT_FALSE(Catalog::Parse("metrics:\n" + one + one, "t", &c).ok());
  EXPECT_FALSE(Catalog::Parse("metrics: [", "t", &c).ok());
  EXPECT_FALSE(Catalog::Parse("other: 1", "t", &c).ok());
  EXPECT_FALSE(Catalog::Parse("metrics:\n  - id: 1\n    name: xpu_a\n    type: histogram\n"
                              "    unit: none\n    help: h\n",
                              "t", &c)
                   .ok());
  EXPECT_TRUE(Catalog::Parse("metrics:\n" + one, "t", &c).ok());
}

TEST(CatalogTest, PercentScaleDividesExactly) {
  const Entry* util = Catalog::Builtin()->Find(1);
  ASSERT_NE(util, nullptr);
  EXPECT_EQ(util->Apply(44.7), 0.447);
  EXPECT_EQ(util->Apply(100), 1.0);
}

}  // namespace
}  // namespace xpu::catalog

namespace xpu::catalog {
namespace {

TEST(SelectionTest, IncludeThenExcludeOnWholeNames) {
  Selection all;
  ASSERT_TRUE(Selection::Make({}, {}, &all).ok());
  EXPECT_TRUE(all.everything());
  EXPECT_TRUE(all.Allows("anything"));
  Selection s;
  ASSERT_TRUE(Selection::Make({"xpu_.*", "process_cpu_seconds_total"}, {"xpu_link_.*"}, &s).ok());
  EXPECT_TRUE(s.Allows("xpu_utilization_ratio"));
  EXPECT_TRUE(s.Allows("process_cpu_seconds_total"));
  EXPECT_FALSE(s.Allows("process_open_fds"));    // not included
  EXPECT_FALSE(s.Allows("xpu_link_up"));         // excluded
  EXPECT_FALSE(s.Allows("my_xpu_utilization"));  // the whole name must match
  Selection bad;
  EXPECT_FALSE(Selection::Make({"("}, {}, &bad).ok());
  EXPECT_FALSE(Selection::Make({}, {"[a-"}, &bad).ok());
}

TEST(SelectionTest, ExcludedIdsFollowTheCatalogNames) {
  Selection s;
  ASSERT_TRUE(Selection::Make({}, {"xpu_link_.*"}, &s).ok());
  const auto cat = Catalog::Builtin();
  const auto ids = s.ExcludedIds(*cat);
  ASSERT_FALSE(ids.empty());
  for (const Entry& e : cat->entries())
    EXPECT_EQ(ids.count(e.id) != 0, e.name.rfind("xpu_link_", 0) == 0) << e.name;
}

}  // namespace
}  // namespace xpu::catalog
