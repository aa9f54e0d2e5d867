#include "catalog/catalog.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

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

// Each of these was accepted by the hand-written list, and each gave the page
// a second HELP/TYPE block for a family the exporter writes: Prometheus then
// refuses the whole scrape.
TEST(CatalogTest, ReservedNamesComeFromTheExportersOwnFamilies) {
  for (const auto& [name, type, unit] :
       std::vector<std::tuple<std::string, MetricType, std::string>>{
           {"xpu_device_split_count", MetricType::kGauge, "none"},
           {"xpu_device_shared_core_ratio", MetricType::kGauge, "ratio"},
           {"xpu_device_shared_memory_bytes", MetricType::kGauge, "bytes"},
           {"xpu_device_shared_healthy", MetricType::kGauge, "none"},
           {"xpu_container_memory_limit_bytes", MetricType::kGauge, "bytes"},
           {"xpu_container_anything", MetricType::kGauge, "none"},
           {"xpu_kubernetes_pods", MetricType::kGauge, "none"},
           {"xpu_device_data_age_seconds", MetricType::kGauge, "seconds"},
           // OpenMetrics: counter X_total is family X and writes X_created.
           {"xpu_device_resets_observed", MetricType::kGauge, "none"},
           {"xpu_device_resets_observed_created", MetricType::kGauge, "none"},
           {"xpu_device_info_total", MetricType::kCounter, "none"},
       }) {
    const std::string why = CheckEntry(Make(name, type, unit));
    EXPECT_NE(why, "") << name;
  }
  // Every family the exporter declares is refused, and names beside them are free.
  for (const auto& [name, type] : ExporterFamilies().families) {
    EXPECT_TRUE(IsReservedFamily(name)) << name;
    EXPECT_FALSE(IsReservedFamily(name + "_extra")) << name;
  }
  EXPECT_EQ(ReservedFamilyReason("xpu_device_resets_observed", MetricType::kGauge),
            "collides with the exporter's own family xpu_device_resets_observed_total (one "
            "OpenMetrics family xpu_device_resets_observed)");
}

TEST(CatalogTest, EntriesThatAreOneOpenMetricsFamilyAreRefusedInOneLine) {
  std::shared_ptr<const Catalog> c;
  auto entry = [](int id, const std::string& name, const std::string& type) {
    return "  - id: " + std::to_string(id) + "\n    name: " + name + "\n    type: " + type +
           "\n    unit: none\n    help: h\n";
  };
  // A gauge X beside a counter X_total.
  Status s = Catalog::Parse(
      "metrics:\n" + entry(1, "xpu_widgets", "gauge") + entry(2, "xpu_widgets_total", "counter"),
      "c.yaml", &c);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message(),
            "c.yaml:7: metrics[1]: xpu_widgets_total and xpu_widgets are one OpenMetrics family "
            "(xpu_widgets): a page with both has two HELP/TYPE blocks for it, and Prometheus "
            "refuses it");
  // A gauge named like a counter's _created sample.
  EXPECT_FALSE(Catalog::Parse("metrics:\n" + entry(1, "xpu_widgets_total", "counter") +
                                  entry(2, "xpu_widgets_created", "gauge"),
                              "c.yaml", &c)
                   .ok());
  EXPECT_TRUE(Catalog::Parse("metrics:\n" + entry(1, "xpu_widgets_total", "counter") +
                                 entry(2, "xpu_gadgets", "gauge"),
                             "c.yaml", &c)
                  .ok());
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
