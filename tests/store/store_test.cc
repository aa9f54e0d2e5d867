#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>

#include "store/device_registry.h"
#include "store/metric_store.h"
#include "support/metrics_util.h"
#include "support/views_util.h"

namespace xpu::store {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class StoreTest : public ::testing::Test {
 protected:
  MetricStore store_{catalog::Catalog::Builtin(), {seconds(3), 100}};
  Clock::time_point t0_ = Clock::now();
};

std::vector<Sample> Batch(std::initializer_list<Sample> s) { return s; }

// One device of a source's view, named by what the source knows of it.
DeviceView V(int32_t minor, const std::string& uuid, const std::string& bus,
             std::optional<bool> healthy = true, std::vector<ActiveFault> faults = {}) {
  DeviceView v;
  v.minor = minor;
  v.uuid = uuid;
  v.bus_id = bus;
  v.healthy = healthy;
  v.faults = std::move(faults);
  return v;
}

DeviceViews Views(std::vector<DeviceView> devices, Coverage coverage = Coverage::kListed) {
  DeviceViews v;
  v.devices = std::move(devices);
  v.coverage = coverage;
  return v;
}

PciDeviceView Pci(const std::string& bus, bool present = true) {
  PciDeviceView p;
  p.bus_id = bus;
  p.vendor = "0x10de";
  p.present = present;
  p.driver = present ? "nvidia" : "";
  return p;
}

ActiveFault Fault(const std::string& code, int level, const std::string& level_name) {
  ActiveFault f;
  f.code = code;
  f.name = "fault_" + code;
  f.level = level;
  f.level_name = level_name;
  return f;
}

TEST_F(StoreTest, KeepsLatestSamplePerSeries) {
  store_.Apply(Batch({{0, 4, "", 40}, {1, 4, "", 41}}), t0_);
  store_.Apply(Batch({{0, 4, "", 50}}), t0_ + milliseconds(10));
  Snapshot s = store_.Snap(t0_ + milliseconds(20));
  ASSERT_EQ(s.values.size(), 2u);
  EXPECT_EQ(s.set->rows[0].minor, 0);
  EXPECT_EQ(s.values[0], 50);
  EXPECT_EQ(s.values[1], 41);
}

TEST_F(StoreTest, DropsSeriesNotRefreshedWithinStaleAfter) {
  store_.Apply(Batch({{0, 4, "", 40}, {1, 4, "", 41}}), t0_);
  store_.Apply(Batch({{0, 4, "", 42}}), t0_ + seconds(2));
  Snapshot s = store_.Snap(t0_ + milliseconds(3500));
  ASSERT_EQ(s.values.size(), 1u);
  EXPECT_EQ(s.set->rows[0].minor, 0);
}

TEST_F(StoreTest, DropsSeriesOfVanishedDevice) {
  store_.Apply(Batch({{0, 4, "", 40}, {1, 4, "", 41}, {1, 14, "0", 1}}), t0_);
  store_.SetDevices({{0, {"U0", "M"}}});
  Snapshot s = store_.Snap(t0_);
  ASSERT_EQ(s.values.size(), 1u);
  EXPECT_EQ(s.set->rows[0].device->uuid, "U0");
  // Data for a device the list lacks is refused and counted.
  ApplyStats st = store_.Apply(Batch({{1, 4, "", 41}}), t0_);
  EXPECT_EQ(st.unknown_device, 1u);
  EXPECT_EQ(store_.series_count(), 1u);
}

TEST_F(StoreTest, SeriesCapDropsAndCountsNewSeriesOnly) {
  std::vector<Sample> many;
  for (int i = 0; i < 150; ++i) many.push_back({i, 4, "", 1.0 * i});
  ApplyStats st = store_.Apply(many, t0_);
  EXPECT_EQ(st.dropped, 50u);
  EXPECT_EQ(store_.series_count(), 100u);
  EXPECT_EQ(store_.dropped_total(), 50u);
  // Existing series still update at the cap.
  st = store_.Apply(Batch({{0, 4, "", 99}}), t0_);
  EXPECT_EQ(st.dropped, 0u);
  EXPECT_EQ(store_.Snap(t0_).values[0], 99);
}

TEST_F(StoreTest, CountsDuplicatesInOneBatchAndKeepsTheLast) {
  ApplyStats st = store_.Apply(Batch({{0, 4, "", 1}, {0, 4, "", 2}}), t0_);
  EXPECT_EQ(st.duplicates, 1u);
  EXPECT_EQ(store_.Snap(t0_).values[0], 2);
}

// Apply guesses each sample's series from its position in the previous
// batch. Whatever the order of the next batch, and after series moved
// (removals swap the last series into the gap), every value lands on its
// own series, and duplicates are still counted.
TEST_F(StoreTest, PositionalGuessesNeverMisplaceAValue) {
  std::vector<Sample> batch;
  std::map<std::pair<int32_t, std::string>, double> want;
  for (int32_t minor = 0; minor < 4; ++minor)
    for (int link = 0; link < 6; ++link) batch.push_back({minor, 14, std::to_string(link), 0});
  uint64_t x = 12345;
  const auto check = [&](const char* when) {
    Snapshot snap = store_.Snap(t0_);
    std::map<std::pair<int32_t, std::string>, double> got;
    for (size_t i = 0; i < snap.values.size(); ++i)
      got[{snap.set->rows[i].minor, std::string(snap.set->rows[i].instance)}] = snap.values[i];
    EXPECT_EQ(got, want) << when;
  };
  for (int round = 0; round < 20; ++round) {
    for (size_t i = batch.size(); i > 1; --i) {  // a new order every round
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      std::swap(batch[i - 1], batch[x % i]);
    }
    for (Sample& smp : batch) {
      smp.value = static_cast<double>(round * 1000 + smp.minor * 10) + std::stod(smp.instance);
      want[{smp.minor, smp.instance}] = smp.value;
    }
    if (round == 5) batch.push_back(batch.front());  // a duplicate from here on
    const ApplyStats st = store_.Apply(batch, t0_);
    EXPECT_EQ(st.duplicates, round >= 5 ? 1u : 0u) << round;
    check("after a reordered batch");
    if (round == 10) {  // series move: the last ones fill the gaps
      store_.Drop([](int32_t minor, uint32_t) { return minor == 1; });
      std::erase_if(batch, [](const Sample& smp) { return smp.minor == 1; });
      std::erase_if(want, [](const auto& kv) { return kv.first.first == 1; });
      check("after a drop");
    }
  }
}

TEST_F(StoreTest, OrdersByCatalogThenMinorThenInstance) {
  store_.Apply(
      Batch({{1, 14, "10", 0}, {1, 14, "2", 0}, {0, 14, "1", 0}, {1, 4, "", 0}, {0, 1, "", 0}}),
      t0_);
  Snapshot s = store_.Snap(t0_);
  std::vector<std::tuple<uint32_t, int, std::string>> got;
  for (const Row& r : s.set->rows) got.emplace_back(r.metric_id, r.minor, r.instance);
  EXPECT_EQ(got, (std::vector<std::tuple<uint32_t, int, std::string>>{
                     {1, 0, ""}, {4, 1, ""}, {14, 0, "1"}, {14, 1, "2"}, {14, 1, "10"}}));
}

TEST_F(StoreTest, GenerationChangesOnlyWhenSeriesSetChanges) {
  store_.Apply(Batch({{0, 4, "", 1}}), t0_);
  const uint64_t g1 = store_.Snap(t0_).set->generation;
  store_.Apply(Batch({{0, 4, "", 2}}), t0_);
  EXPECT_EQ(store_.Snap(t0_).set->generation, g1);
  store_.Apply(Batch({{1, 4, "", 2}}), t0_);
  EXPECT_GT(store_.Snap(t0_).set->generation, g1);
}

TEST_F(StoreTest, SnapshotIsConsistentUnderConcurrentWrites) {
  // Every batch writes one value to all series; a snapshot must never mix two.
  MetricStore store(catalog::Catalog::Builtin(), {seconds(60), 100000});
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    std::vector<Sample> b;
    for (double v = 1; !stop; v += 1) {
      b.clear();
      for (int m = 0; m < 64; ++m)
        for (int l = 0; l < 8; ++l) b.push_back({m, 14, std::to_string(l), v});
      store.Apply(b, Clock::now());
    }
  });
  int checked = 0;
  while (checked < 300) {
    Snapshot s = store.Snap(Clock::now());
    if (s.values.size() != 512) continue;
    for (double v : s.values) ASSERT_EQ(v, s.values[0]);
    ++checked;
  }
  stop = true;
  writer.join();
}

// Stable labels: data that arrives before the device list is held back
// rather than published with uuid="" and then again with the uuid.
TEST(StoreIdentityTest, HoldsDeviceSeriesUntilTheirIdentityIsKnown) {
  MetricStore::Options o{seconds(60), 100};
  o.identity_wait = seconds(10);
  MetricStore store(catalog::Catalog::Builtin(), o);
  const Clock::time_point t0 = Clock::now();
  store.Apply(Batch({{0, 4, "", 40}, {1, 4, "", 41}}), t0);
  Snapshot s = store.Snap(t0 + milliseconds(1));
  EXPECT_TRUE(s.values.empty());
  EXPECT_TRUE(store.identity_pending());
  store.SetDevices({{0, {"U0", "M"}}, {1, {"U1", "M"}}});
  s = store.Snap(t0 + milliseconds(2));
  ASSERT_EQ(s.values.size(), 2u);
  EXPECT_EQ(s.set->rows[0].device->uuid, "U0");
  EXPECT_EQ(s.set->rows[1].device->uuid, "U1");
  EXPECT_FALSE(store.identity_pending());
  EXPECT_FALSE(store.identity_wait_expired());
}

TEST(StoreIdentityTest, PublishesWithoutIdentityOnceTheWaitRunsOut) {
  MetricStore::Options o{seconds(60), 100};
  o.identity_wait = seconds(10);
  MetricStore store(catalog::Catalog::Builtin(), o);
  const Clock::time_point t0 = Clock::now();
  store.Apply(Batch({{0, 4, "", 40}}), t0);
  EXPECT_TRUE(store.Snap(t0 + seconds(9)).values.empty());
  Snapshot s = store.Snap(t0 + seconds(10));
  ASSERT_EQ(s.values.size(), 1u);
  EXPECT_EQ(s.set->rows[0].device->uuid, "");
  EXPECT_TRUE(store.identity_wait_expired());
  store.SetDevices({{0, {"U0", "M"}}});  // late: labels follow, as before
  EXPECT_FALSE(store.identity_wait_expired());
  EXPECT_EQ(store.Snap(t0 + seconds(11)).set->rows[0].device->uuid, "U0");
}

// --xdm.devices: the registry keeps only the chosen minors from every source.
TEST(DeviceRegistryFilterTest, KeepsOnlyChosenMinorsFromEverySource) {
  DeviceRegistry reg;
  reg.SetDeviceFilter({1});
  DeviceInfo a, b;
  a.minor = 0;
  a.uuid = "U0";
  a.bus_id = "0000:01:00.0";
  b.minor = 1;
  b.uuid = "U1";
  b.bus_id = "0000:02:00.0";
  reg.SetXdmDevices({a, b});
  ASSERT_EQ(reg.Devices().size(), 1u);
  EXPECT_EQ(reg.Devices()[0].minor, 1);
  reg.SetDeviceViews(kSourceSysfs, Views({V(0, "", ""), V(1, "", "")}));
  ASSERT_EQ(xpu::testing::ViewOf(reg, kSourceSysfs).size(), 1u);
  EXPECT_EQ(xpu::testing::ViewOf(reg, kSourceSysfs)[0].minor, 1);
  // A card no layer names by a minor is no chosen one.
  reg.SetPciDevices({Pci("0000:01:00.0"), Pci("0000:02:00.0"), Pci("0000:03:00.0")});
  ASSERT_EQ(reg.PciDevices().size(), 1u);
  EXPECT_EQ(reg.PciDevices()[0].minor, "1");
}

// A reload may change --xdm.devices: the XDM list is re-filtered at once,
// also back to devices dropped before (the registry keeps the whole list).
TEST(DeviceRegistryFilterTest, FilterChangesAtRunTimeInBothDirections) {
  DeviceRegistry reg;
  DeviceInfo a, b;
  a.minor = 0;
  b.minor = 1;
  std::vector<std::vector<DeviceInfo>> pushed;
  reg.OnXdmDevicesChanged([&](const std::vector<DeviceInfo>& d) { pushed.push_back(d); });
  reg.SetXdmDevices({a, b});
  reg.SetDeviceViews(kSourceSysfs, Views({V(0, "", ""), V(1, "", "")}));
  reg.SetDeviceFilter({1});
  ASSERT_EQ(reg.Devices().size(), 1u);
  EXPECT_EQ(xpu::testing::ViewOf(reg, kSourceSysfs).size(), 1u);
  ASSERT_EQ(pushed.size(), 2u);
  EXPECT_EQ(pushed.back().size(), 1u);
  reg.SetDeviceFilter({});
  EXPECT_EQ(reg.Devices().size(), 2u);  // without a new ListAndWatch push
  ASSERT_EQ(pushed.size(), 3u);
  EXPECT_EQ(pushed.back().size(), 2u);
  EXPECT_EQ(xpu::testing::ViewOf(reg, kSourceSysfs).size(), 2u) << "the views are kept whole";
}

// A reloaded catalog: series of unchanged entries keep their values, those
// of changed or vanished entries go; a snapshot taken before keeps its
// catalog's entries alive.
TEST(StoreReloadTest, SetCatalogKeepsUnchangedEntriesAndDropsChangedOnes) {
  std::shared_ptr<const catalog::Catalog> before, after;
  ASSERT_TRUE(catalog::Catalog::Parse(R"(
metrics:
  - {id: 1, name: xpu_a_ratio, type: gauge, unit: ratio, scale: 1, help: a}
  - {id: 2, name: xpu_b_ratio, type: gauge, unit: ratio, scale: 1, help: b}
  - {id: 3, name: xpu_c_ratio, type: gauge, unit: ratio, scale: 1, help: c}
)",
                                      "before", &before)
                  .ok());
  ASSERT_TRUE(catalog::Catalog::Parse(R"(
metrics:
  - {id: 1, name: xpu_a_ratio, type: gauge, unit: ratio, scale: 1, help: a}
  - {id: 2, name: xpu_b_ratio, type: gauge, unit: ratio, scale: 0.01, help: b}
)",
                                      "after", &after)
                  .ok());
  MetricStore store(before, {seconds(3), 100});
  const Clock::time_point t0 = Clock::now();
  store.Apply(Batch({{0, 1, "", 0.5}, {0, 2, "", 0.25}, {0, 3, "", 0.75}}), t0);
  Snapshot old = store.Snap(t0);
  ASSERT_EQ(old.values.size(), 3u);
  store.SetCatalog(after);
  before.reset();
  Snapshot now = store.Snap(t0);
  ASSERT_EQ(now.values.size(), 1u);
  EXPECT_EQ(now.set->rows[0].entry->name, "xpu_a_ratio");
  EXPECT_EQ(now.values[0], 0.5);
  EXPECT_EQ(old.set->rows[2].entry->name, "xpu_c_ratio");  // still valid
  EXPECT_EQ(store.catalog(), after);
}

TEST(StoreReloadTest, DropRemovesTheSelectedSeries) {
  MetricStore store(catalog::Catalog::Builtin(), {seconds(3), 100});
  const Clock::time_point t0 = Clock::now();
  store.Apply(Batch({{0, 4, "", 1}, {1, 4, "", 2}, {1, 5, "", 3}}), t0);
  EXPECT_EQ(store.Drop([](int32_t minor, uint32_t id) { return minor == 1 && id == 4; }), 1u);
  Snapshot s = store.Snap(t0);
  ASSERT_EQ(s.values.size(), 2u);
  EXPECT_EQ(store.series_count(), 2u);
}

// The index holds positions hashed by the key stored there: after series
// leave from the middle (each one's place taken by the last), every key
// still finds its own series, and a new one is its own.
TEST(StoreReloadTest, RemovalsFromTheMiddleKeepEveryKeyFindingItsSeries) {
  MetricStore store(catalog::Catalog::Builtin(), {seconds(3), 1000});
  const Clock::time_point t0 = Clock::now();
  std::vector<Sample> all;
  for (int32_t minor = 0; minor < 6; ++minor)
    for (int link = 0; link < 8; ++link)
      all.push_back({minor, 14, std::to_string(link), static_cast<double>(minor * 100 + link)});
  store.Apply(all, t0);
  // Every third minor's link series leave, and so one series after another
  // moves into a freed place.
  EXPECT_EQ(store.Drop([](int32_t minor, uint32_t) { return minor % 3 == 1; }), 16u);
  std::vector<Sample> again;
  for (const Sample& s : all)
    if (s.minor % 3 != 1) again.push_back({s.minor, s.metric_id, s.instance, s.value + 0.5});
  again.push_back({9, 14, "new", 7});
  const ApplyStats st = store.Apply(again, t0);
  EXPECT_EQ(st.applied, again.size());
  EXPECT_EQ(st.duplicates, 0u) << "a key found another's series";
  EXPECT_EQ(store.series_count(), again.size()) << "a key found no series and made one";
  Snapshot snap = store.Snap(t0);
  ASSERT_EQ(snap.values.size(), again.size());
  for (size_t i = 0; i < snap.values.size(); ++i) {
    const Row& r = snap.set->rows[i];
    const double want = r.minor == 9 ? 7 : r.minor * 100 + std::stoi(std::string(r.instance)) + 0.5;
    EXPECT_EQ(snap.values[i], want) << r.minor << "/" << r.instance;
  }
  // Again: the new series, in a place another left, is found by its key.
  const ApplyStats st2 = store.Apply(again, t0);
  EXPECT_EQ(st2.applied, again.size());
  EXPECT_EQ(store.series_count(), again.size()) << "a series stored twice";
}

// Instance names are held once each and let go once most are unused: a
// daemon that renames its links each round does not grow them without
// bound, a set given out before the names were pruned still reads its own,
// and every series is still found by its key after.
TEST(StoreReloadTest, InstanceNamesNoSeriesUsesAreLetGo) {
  MetricStore store(catalog::Catalog::Builtin(), {seconds(3), 1000});
  const Clock::time_point t0 = Clock::now();
  std::vector<Snapshot> kept;
  for (int round = 0; round < 50; ++round) {
    std::vector<Sample> batch;
    for (int32_t minor = 0; minor < 2; ++minor)
      for (int link = 0; link < 8; ++link)
        batch.push_back({minor, 14, "r" + std::to_string(round) + "-" + std::to_string(link),
                         static_cast<double>(round * 100 + minor * 10 + link)});
    batch.push_back({0, 14, "steady", static_cast<double>(round)});
    const Clock::time_point t = t0 + seconds(4 * round);  // the last round's are stale
    store.Apply(batch, t);
    kept.push_back(store.Snap(t));
    // A round's own series only, each named as it was sent.
    const Snapshot& snap = kept.back();
    ASSERT_EQ(snap.values.size(), batch.size()) << "round " << round;
    for (size_t i = 0; i < snap.values.size(); ++i) {
      const Row& r = snap.set->rows[i];
      if (r.instance == "steady") {
        EXPECT_EQ(snap.values[i], round);
        continue;
      }
      const std::string want = "r" + std::to_string(round) + "-";
      ASSERT_EQ(r.instance.substr(0, want.size()), want) << "round " << round;
      EXPECT_EQ(snap.values[i], round * 100 + r.minor * 10 +
                                    std::stoi(std::string(r.instance.substr(want.size()))));
    }
    EXPECT_LE(store.instance_names(), 64u + 2 * 10) << "round " << round;
  }
  // Sets given out before a prune still read the names they were given.
  for (size_t round = 0; round < kept.size(); ++round) {
    const std::string want = "r" + std::to_string(round) + "-";
    size_t named = 0;
    for (const Row& r : kept[round].set->rows) named += r.instance.substr(0, want.size()) == want;
    EXPECT_EQ(named, 16u) << "round " << round;
  }
  // Found again by key after the last prune: no series made twice.
  std::vector<Sample> again;
  for (int link = 0; link < 8; ++link) again.push_back({1, 14, "r49-" + std::to_string(link), 1});
  again.push_back({0, 14, "steady", 1});
  const Clock::time_point last = t0 + seconds(4 * 49);
  store.Apply(again, last);
  EXPECT_EQ(store.series_count(), 17u);
}

// The same without a scrape between: series dropped by reloads and new
// names sent after them never pile up names.
TEST(StoreReloadTest, InstanceNamesStayBoundedWithoutAScrape) {
  MetricStore store(catalog::Catalog::Builtin(), {seconds(3), 1000});
  const Clock::time_point t0 = Clock::now();
  for (int round = 0; round < 100; ++round) {
    std::vector<Sample> batch;
    for (int link = 0; link < 8; ++link)
      batch.push_back({0, 14, std::to_string(round) + "/" + std::to_string(link), 1});
    store.Apply(batch, t0);
    EXPECT_EQ(store.Drop([](int32_t, uint32_t) { return true; }), 8u);
    EXPECT_LE(store.instance_names(), 64u + 8) << "round " << round;
  }
  std::vector<Sample> last{{0, 14, "a", 1}, {0, 14, "b", 2}};
  store.Apply(last, t0);
  const Snapshot snap = store.Snap(t0);
  ASSERT_EQ(snap.values.size(), 2u);
  EXPECT_EQ(snap.set->rows[0].instance, "a");
  EXPECT_EQ(snap.set->rows[1].instance, "b");
  EXPECT_EQ(snap.values[1], 2);
}

// An empty instance is a view of a string held, never a null one: the
// page writer copies it with memcpy, which a null pointer makes undefined
// even for no bytes (UBSan stops there).
TEST(StoreReloadTest, AnEmptyInstanceIsNeverANullView) {
  MetricStore store(catalog::Catalog::Builtin(), {seconds(3), 1000});
  const Clock::time_point t0 = Clock::now();
  store.Apply({{0, 14, "", 1}, {0, 14, "3", 2}}, t0);
  const Snapshot snap = store.Snap(t0);
  ASSERT_EQ(snap.values.size(), 2u);
  EXPECT_EQ(snap.set->rows[0].instance, "");
  EXPECT_NE(snap.set->rows[0].instance.data(), nullptr);
}

TEST(StoreCtorTest, RejectsMisuse) {
  EXPECT_THROW(MetricStore(nullptr, {}), std::invalid_argument);
  EXPECT_THROW(MetricStore(catalog::Catalog::Builtin(), {milliseconds(0), 1}),
               std::invalid_argument);
}

TEST(DeviceRegistryTest, ExposesInfoTopologyAndXdmHealth) {
  DeviceRegistry reg;
  EXPECT_TRUE(reg.Collect().empty());
  DeviceInfo d;
  d.minor = 3;
  d.uuid = "U3";
  d.model = "PPU-810E";
  d.health = "Unhealthy";
  d.topology = {{1, "icnLink2", "1", "1,2"}};
  EXPECT_TRUE(reg.SetXdmDevices({d}));
  EXPECT_FALSE(reg.SetXdmDevices({d}));
  auto fams = reg.Collect();
  ASSERT_EQ(fams.size(), 3u);
  EXPECT_EQ(fams[0].name, "xpu_device_info");
  EXPECT_EQ(fams[1].name, "xpu_device_topology_info");
  EXPECT_EQ(fams[2].name, "xpu_device_health");
  EXPECT_EQ(fams[2].metric[0].gauge.value, 0);
}

// The views' counts that the Node's condition waits on: each counts at once
// (the registry joins it to the inventory as it is now). The inventory is
// known once XDM's list or a source that finds cards has spoken, never from
// the kernel log's addresses alone.
TEST(DeviceRegistryTest, ViewsCountAtOnceAndTheInventoryIsKnownFromCardsNotAddresses) {
  DeviceRegistry r;
  r.SetDeviceViews(kSourceKmsg, Views({}, Coverage::kAddressedSilent));
  EXPECT_EQ(r.fault_views_set().of(kSourceKmsg), 1u);
  EXPECT_FALSE(r.fault_views_set().inventory_known);
  r.SetPciDevices({});
  EXPECT_EQ(r.fault_views_set().of(kSourcePci), 1u);
  EXPECT_TRUE(r.fault_views_set().inventory_known);
  EXPECT_FALSE(r.fault_views_set().devices_known);
  DeviceRegistry x;
  x.SetXdmDevices({});
  EXPECT_TRUE(x.fault_views_set().inventory_known);
}

// Minors chosen (--xdm.devices) and no daemon yet: the bus names no card by
// its minor, so no chosen card is known and the inventory is not (the Node
// condition read True over no card at all); XDM's list, or a source that
// names minors, makes it known. Health() is the same read as
// fault_views_set() and Inventory().
TEST(DeviceRegistryTest, WithMinorsChosenTheBusAloneIsNoInventory) {
  DeviceRegistry r;
  r.SetDeviceFilter({0});
  r.OpenSource(kSourcePci, seconds(60));
  r.OpenSource(kSourceKmsg, seconds(60));
  r.SetPciDevices({Pci("0000:3b:00.0")});
  r.SetDeviceViews(kSourceKmsg, Views({}, Coverage::kAddressedSilent));
  EXPECT_FALSE(r.fault_views_set().inventory_known);
  HealthPicture h = r.Health();
  EXPECT_FALSE(h.inventory_known);
  EXPECT_TRUE(h.inventory.empty());
  EXPECT_EQ(h.views.size(), 2u);
  DeviceInfo zero;
  zero.minor = 0;
  zero.bus_id = "0000:3b:00.0";
  r.SetXdmDevices({zero});
  h = r.Health();
  EXPECT_TRUE(h.inventory_known);
  ASSERT_EQ(h.inventory.size(), 1u);
  EXPECT_EQ(h.inventory[0].minor, 0);
  EXPECT_EQ(h.inventory, r.Inventory());
  EXPECT_EQ(h.views, r.SourceViews());
  // A source that names minors (the sysfs tree) is enough too, once it
  // names a chosen one.
  DeviceRegistry s;
  s.SetDeviceFilter({0});
  s.SetPciDevices({Pci("0000:3b:00.0")});
  EXPECT_FALSE(s.Health().inventory_known);
  DeviceView other;
  other.minor = 1;
  other.bus_id = "0000:5e:00.0";
  other.healthy = true;
  s.SetDeviceViews(kSourceSysfs, Views({other}));
  EXPECT_FALSE(s.Health().inventory_known) << "minor 1 is not chosen";
  EXPECT_TRUE(s.Health().inventory.empty());
  DeviceView tree;
  tree.minor = 0;
  tree.bus_id = "0000:3b:00.0";
  tree.healthy = true;
  s.SetDeviceViews(kSourceSysfs, Views({tree}));
  EXPECT_TRUE(s.Health().inventory_known);
  EXPECT_TRUE(s.fault_views_set().inventory_known);
  EXPECT_EQ(s.Health().inventory.size(), 1u);
}

// The inventory (docs/hal.md): every accelerator the bus shows is a card
// from the first sample, keyed by its address; XDM's list, the sysfs tree
// and NVML name cards already known (NVIDIA's spelling of an address too);
// a device XDM lists off the bus, or the sysfs tree's own, is a card still;
// one that left the bus stays, lost; two unnamed cards never collide.
TEST(InventoryTest, TheBusIsTheInventoryAndEveryLayerNamesWhatItKnows) {
  DeviceRegistry r;
  r.SetPciDevices(
      {Pci("0000:3b:00.0"), Pci("0000:5e:00.0"), Pci("0000:86:00.0", false), Pci("10000:e1:00.0")});
  std::vector<InventoryDevice> inv = r.Inventory();
  ASSERT_EQ(inv.size(), 4u) << "no daemon, no other source: the bus alone";
  EXPECT_EQ(inv[0].key, "0000:3b:00.0");
  EXPECT_EQ(inv[0].minor, -1);
  EXPECT_EQ(inv[0].vendor, "0x10de");
  EXPECT_FALSE(inv[2].present);
  DeviceInfo a, off;
  a.minor = 3;
  a.uuid = "U3";
  a.model = "H200";
  a.bus_id = "00000000:5E:00.0";
  off.minor = 9;  // a device XDM lists that the bus does not show
  off.uuid = "U9";
  r.SetXdmDevices({a, off});
  r.SetDeviceViews(kSourceSysfs, Views({V(9, "", "")}));
  r.SetDeviceViews("nvml", Views({V(-1, "GPU-x", "0000:3b:00.0")}));
  inv = r.Inventory();
  ASSERT_EQ(inv.size(), 5u);
  EXPECT_EQ(inv[0].uuid, "GPU-x");
  EXPECT_EQ(inv[1].minor, 3);
  EXPECT_EQ(inv[1].uuid, "U3");
  EXPECT_EQ(inv[1].model, "H200");
  EXPECT_EQ(inv[4].key, "minor/9");
  EXPECT_EQ(inv[4].uuid, "U9");
  // Two cards no layer names carry their addresses: two series, not one.
  PciDeviceView lost = Pci("0000:86:00.0", false);
  lost.faults = {Fault("0xFC000004", 6, "isolate_card")};
  PciDeviceView vmd = Pci("10000:e1:00.0");
  vmd.faults = {Fault("0xFC000004", 6, "isolate_card")};
  r.SetPciDevices({Pci("0000:3b:00.0"), Pci("0000:5e:00.0"), lost, vmd});
  using xpu::testing::MetricValue;
  EXPECT_EQ(MetricValue(r, "xpu_device_fault_level",
                        {{"source", "pci"}, {"bus_id", "0000:86:00.0"}, {"minor", ""}}),
            6);
  EXPECT_EQ(MetricValue(r, "xpu_device_fault_level",
                        {{"source", "pci"}, {"bus_id", "10000:e1:00.0"}, {"minor", ""}}),
            6);
  EXPECT_EQ(MetricValue(r, "xpu_device_health", {{"source", "pci"}, {"bus_id", "0000:5e:00.0"}}),
            1);
  EXPECT_EQ(MetricValue(r, "xpu_device_health", {{"source", "pci"}, {"minor", "3"}}), 1)
      << "named by XDM";
}

// Coverage: the kernel log judges every card with an address (its silence
// is health), an address that is no card of the inventory (a NIC) is
// dropped; NVML covers NVIDIA's cards only, so a PPU beside them is not
// "unseen" by it; a card it covers and does not list is.
TEST(InventoryTest, EachSourceJudgesOnlyTheCardsItCovers) {
  DeviceRegistry r;
  PciDeviceView ppu = Pci("0000:10:00.0");
  ppu.vendor = "0x1ded";
  r.SetPciDevices({Pci("0000:3b:00.0"), Pci("0000:5e:00.0"), ppu});
  const ActiveFault xid79 = Fault("0x10DE004F", 6, "isolate_card");
  r.SetDeviceViews(kSourceKmsg, Views({V(-1, "", "0000:3b:00.0", true, {xid79}),
                                       V(-1, "", "0000:99:00.0", true, {xid79})},
                                      Coverage::kAddressedSilent));
  DeviceViews nvml = Views({V(-1, "GPU-a", "0000:3b:00.0")});
  nvml.vendor = "0x10de";
  r.SetDeviceViews("nvml", nvml);
  using xpu::testing::MetricValue;
  EXPECT_EQ(MetricValue(r, "xpu_device_health", {{"source", "kmsg"}, {"bus_id", "0000:3b:00.0"}}),
            0);
  EXPECT_EQ(MetricValue(r, "xpu_device_health", {{"source", "kmsg"}, {"bus_id", "0000:10:00.0"}}),
            1)
      << "the log's silence on a card is its health";
  EXPECT_EQ(MetricValue(r, "xpu_device_fault_level", {{"bus_id", "0000:99:00.0"}}), -1)
      << "not a card";
  std::map<std::string, SourceView> by;
  for (SourceView& v : r.SourceViews()) by[v.source] = v;
  ASSERT_EQ(by["kmsg"].devices.size(), 3u);
  EXPECT_TRUE(by["kmsg"].needs_inventory);
  ASSERT_EQ(by["nvml"].devices.size(), 2u) << "NVIDIA's two cards, not the PPU";
  EXPECT_TRUE(by["nvml"].devices[0].seen);
  EXPECT_FALSE(by["nvml"].devices[1].seen) << "an NVIDIA card NVML does not list";
  EXPECT_EQ(by["nvml"].devices[1].bus_id, "0000:5e:00.0");
  ASSERT_EQ(by["pci"].devices.size(), 3u);
}

// A read that fails keeps the faults last read: not seen by the condition,
// its faults still there for it, and on the page its kept card-level fault
// still judges its health (a fault seen is seen).
TEST(InventoryTest, AnUnreadCardKeepsItsFaultsAndHasNoHealth) {
  DeviceRegistry r;
  DeviceView v = V(0, "U0", "", std::nullopt, {Fault("0x80E18400", 4, "reset_card")});
  v.seen = false;
  r.SetDeviceViews(kSourceSysfs, Views({v}));
  using xpu::testing::MetricValue;
  EXPECT_EQ(MetricValue(r, "xpu_device_health", {{"source", "sysfs"}}), 0);
  EXPECT_EQ(MetricValue(r, "xpu_device_fault_level", {{"source", "sysfs"}}), 4);
  const std::vector<SourceView> views = r.SourceViews();
  ASSERT_EQ(views.size(), 1u);
  ASSERT_EQ(views[0].devices.size(), 1u);
  EXPECT_FALSE(views[0].devices[0].seen);
  EXPECT_EQ(views[0].devices[0].faults.size(), 1u);
}

// A source that publishes the common shape (SetDeviceViews, the nvml
// backend's way): its health, faults and own families on the page while it
// sees; its health goes when blind, the whole view when stale or closed; the
// device filter reaches its families; the Node condition's view has it.
TEST(DeviceRegistryTest, DeviceViewsFollowTheOneRuleOfEverySource) {
  DeviceRegistry r;
  auto now = std::chrono::steady_clock::now();
  r.SetClock([&now] { return now; });
  r.OpenSource("nvml", seconds(1));
  DeviceViews v;
  ActiveFault lost;
  lost.code = "0xFC010001";
  lost.name = "nvidia_gpu_lost";
  lost.level = 6;
  lost.level_name = "isolate_card";
  v.devices = {V(0, "GPU-a", "0000:3b:00.0"),
               V(-1, "GPU-b", "0000:5e:00.0", true, {lost}),          // XDM does not list it
               V(1, "GPU-c", "0000:86:00.0", std::nullopt),           // health unread
               V(2, "GPU-d", "0000:af:00.0", std::nullopt, {lost})};  // unread, but a fault
  prometheus::MetricFamily temp;
  temp.name = "xpu_test_temperature_celsius";
  temp.help = "t";
  temp.type = prometheus::MetricType::Gauge;
  for (const auto& [minor, value] : {std::pair{"0", 40.0}, {"", 50.0}, {"1", 60.0}}) {
    prometheus::ClientMetric m;
    m.label = {{"minor", minor}};
    m.gauge.value = value;
    temp.metric.push_back(m);
  }
  v.families = {temp};
  r.SetDeviceViews("nvml", v);
  EXPECT_EQ(r.fault_views_set().of("nvml"), 1u);
  using xpu::testing::MetricValue;
  EXPECT_EQ(MetricValue(r, "xpu_device_health", {{"source", "nvml"}, {"uuid", "GPU-a"}}), 1);
  // Named and judged without XDM's list: unhealthy by its fault.
  EXPECT_EQ(MetricValue(r, "xpu_device_health", {{"source", "nvml"}, {"uuid", "GPU-b"}}), 0);
  EXPECT_EQ(MetricValue(r, "xpu_device_fault_active",
                        {{"source", "nvml"}, {"uuid", "GPU-b"}, {"code", "0xFC010001"}}),
            1);
  EXPECT_EQ(MetricValue(r, "xpu_device_health", {{"source", "nvml"}, {"uuid", "GPU-c"}}), -1);
  // What it could not read is unknown, but the fault it saw is seen.
  EXPECT_EQ(MetricValue(r, "xpu_device_health", {{"source", "nvml"}, {"uuid", "GPU-d"}}), 0);
  EXPECT_EQ(MetricValue(r, "xpu_test_temperature_celsius", {{"minor", "1"}}), 60);
  std::vector<SourceView> views = r.SourceViews();
  ASSERT_EQ(views.size(), 1u);
  EXPECT_EQ(views[0].source, "nvml");
  EXPECT_EQ(views[0].sight, Sight::kSeeing);
  EXPECT_FALSE(views[0].needs_inventory);
  ASSERT_EQ(views[0].devices.size(), 4u);
  EXPECT_EQ(views[0].devices[1].faults, std::vector<ActiveFault>{lost});
  EXPECT_FALSE(views[0].devices[2].seen)
      << "a device whose health was not read is not seen, unless a card-level fault judges it";
  EXPECT_EQ(views[0].devices[3].bus_id, "0000:af:00.0");
  EXPECT_TRUE(views[0].devices[3].seen);
  EXPECT_EQ(views[0].devices[3].faults, std::vector<ActiveFault>{lost});

  // The filter keeps the chosen devices and their samples only.
  r.SetDeviceFilter({0});
  EXPECT_EQ(MetricValue(r, "xpu_test_temperature_celsius", {{"minor", "0"}}), 40);
  EXPECT_EQ(MetricValue(r, "xpu_test_temperature_celsius", {{"minor", ""}}), -1);
  EXPECT_EQ(MetricValue(r, "xpu_device_health", {{"source", "nvml"}, {"uuid", "GPU-b"}}), -1);
  r.SetDeviceFilter({});
  r.SetDeviceViews("nvml", v);

  // Blind: its health goes at once, its faults and families stay until stale.
  r.SetSourceBlind("nvml", "NVML did not answer");
  EXPECT_EQ(MetricValue(r, "xpu_device_health", {{"source", "nvml"}, {"uuid", "GPU-a"}}), -1);
  EXPECT_EQ(MetricValue(r, "xpu_device_fault_active", {{"source", "nvml"}, {"uuid", "GPU-b"}}), 1);
  EXPECT_EQ(r.SourceViews()[0].sight, Sight::kBlind);
  now += kStaleIntervals * seconds(1) + milliseconds(1);
  EXPECT_EQ(MetricValue(r, "xpu_device_fault_active", {{"source", "nvml"}, {"uuid", "GPU-b"}}), -1);
  EXPECT_EQ(MetricValue(r, "xpu_test_temperature_celsius"), -1);
  // Seeing again, then closed: nothing left.
  r.SetDeviceViews("nvml", v);
  EXPECT_EQ(MetricValue(r, "xpu_test_temperature_celsius", {{"minor", "0"}}), 40);
  r.CloseSource("nvml");
  EXPECT_EQ(MetricValue(r, "xpu_test_temperature_celsius"), -1);
  EXPECT_EQ(MetricValue(r, "xpu_device_health", {{"source", "nvml"}}), -1);
  EXPECT_TRUE(r.SourceViews().empty());
}

// Two devices of one source may name one card (two minors of a sysfs tree
// linked to one function, a daemon listing two minors at one address): the
// card's view from that source holds both's faults, in either order, and is
// seen only if both are. The later one used to hide the earlier's fault.
TEST(DeviceRegistryTest, TwoDevicesOfOneSourceThatNameOneCardBothCount) {
  for (bool fault_first : {true, false}) {
    DeviceRegistry reg;
    DeviceViews views;
    DeviceView a, b;
    a.bus_id = b.bus_id = "0000:3b:00.0";
    a.minor = 0;
    b.minor = 1;
    a.healthy = b.healthy = true;
    a.faults = {Fault("0x80E18400", 6, "isolate_card")};
    views.devices = fault_first ? std::vector<DeviceView>{a, b} : std::vector<DeviceView>{b, a};
    reg.SetDeviceViews("sysfs", views);
    std::vector<SourceView::Device> seen;
    for (const SourceView& v : reg.SourceViews())
      if (v.source == "sysfs") seen = v.devices;
    ASSERT_EQ(seen.size(), 1u) << fault_first;
    ASSERT_EQ(seen[0].faults.size(), 1u) << "fault first: " << fault_first;
    EXPECT_EQ(seen[0].faults[0].code, "0x80E18400");
    EXPECT_TRUE(seen[0].seen);
    // The page has one series a family for the card and the source, as
    // bad as the worse of the two: two (1, then 0) are a duplicate series,
    // of which Prometheus keeps the first and an alert misses the fault.
    std::map<std::string, std::vector<double>> samples;  // by family
    for (const prometheus::MetricFamily& f : reg.Collect())
      for (const prometheus::ClientMetric& m : f.metric) {
        bool card = false, sysfs = false;
        for (const auto& l : m.label) {
          card = card || (l.name == "bus_id" && l.value == "0000:3b:00.0");
          sysfs = sysfs || (l.name == "source" && l.value == "sysfs");
        }
        if (card && sysfs) samples[f.name].push_back(m.gauge.value);
      }
    EXPECT_EQ(samples["xpu_device_health"], std::vector<double>{0}) << fault_first;
    EXPECT_EQ(samples["xpu_device_fault_level"], std::vector<double>{6}) << fault_first;
    EXPECT_EQ(samples["xpu_device_fault_active"], std::vector<double>{1}) << fault_first;
    auto health_samples = [&reg] {
      std::vector<double> out;
      for (const prometheus::MetricFamily& f : reg.Collect())
        if (f.name == "xpu_device_health")
          for (const prometheus::ClientMetric& m : f.metric)
            for (const auto& l : m.label)
              if (l.name == "source" && l.value == "sysfs") out.push_back(m.gauge.value);
      return out;
    };
    // One of the two not read this sample: the card is not seen, unless the
    // one read says it is bad (sight enough of that), as the page has it.
    views.devices[1].seen = false;
    reg.SetDeviceViews("sysfs", views);
    for (const SourceView& v : reg.SourceViews())
      if (v.source == "sysfs") seen = v.devices;
    ASSERT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0].seen, fault_first) << fault_first;
    EXPECT_EQ(seen[0].faults.size(), 1u) << fault_first;
    // On the page, one series, 0: the faulted view read says so whatever
    // the other's read did, and a faulted view not read keeps its fault.
    EXPECT_EQ(health_samples(), std::vector<double>{0}) << fault_first;
  }
}

// A driver's tree answers for every card of the vendors it has listed: one
// gone from it is not seen, down to the last. When the tree lost its last
// card its kin was empty and it answered only for XDM's cards: a card the
// bus alone names read healthy by the others (a helper's audit). Its kin is
// what it published, whether or not a reader (the Node condition, the
// tainter, a scrape) joined its views between the listing and the loss.
TEST(DeviceRegistryTest, ATreeThatLostItsLastCardStillAnswersForItsKin) {
  for (const bool read_between : {true, false}) {
    SCOPED_TRACE(read_between ? "read between" : "not read between");
    DeviceRegistry r;
    r.OpenSource(kSourcePci, seconds(60));
    r.OpenSource(kSourceSysfs, seconds(60));
    r.SetPciDevices({Pci("0000:3b:00.0")});
    r.SetDeviceViews(kSourceSysfs, Views({V(0, "U0", "0000:3b:00.0")}, Coverage::kListedAndKin));
    auto sysfs_devices = [&r] {
      for (const SourceView& v : r.SourceViews())
        if (v.source == kSourceSysfs) return v.devices;
      return std::vector<SourceView::Device>{};
    };
    if (read_between) {
      ASSERT_EQ(sysfs_devices().size(), 1u);
      EXPECT_TRUE(sysfs_devices()[0].seen);
    }
    r.SetDeviceViews(kSourceSysfs, Views({}, Coverage::kListedAndKin));
    const std::vector<SourceView::Device> after = sysfs_devices();
    ASSERT_EQ(after.size(), 1u) << "the card it listed is still its kin";
    EXPECT_EQ(after[0].bus_id, "0000:3b:00.0");
    EXPECT_FALSE(after[0].seen);
  }
}

// No layer's absence removes a card: with no daemon, the bus named the
// cards; when the pci source goes blind, then stale, and NVML (which named
// the other) goes stale too, both cards stay in the inventory as last known,
// and the kernel log's fault on one stays placed on it. Before, a stale
// source's cards left the inventory, and the log's fault with them.
TEST(DeviceRegistryTest, ACardStaysInTheInventoryWhenTheSourcesThatNamedItGoStale) {
  DeviceRegistry r;
  auto now = std::chrono::steady_clock::now();
  r.SetClock([&now] { return now; });
  r.OpenSource(kSourcePci, seconds(1));
  r.OpenSource(kSourceKmsg, seconds(1));
  r.OpenSource("nvml", seconds(1));
  r.SetPciDevices({Pci("0000:3b:00.0")});
  r.SetDeviceViews("nvml", Views({V(-1, "GPU-b", "0000:5e:00.0")}));
  const DeviceView xid = V(-1, "", "0000:3b:00.0", true, {Fault("0x10DE004F", 6, "isolate_card")});
  r.SetDeviceViews(kSourceKmsg, Views({xid}, Coverage::kAddressedSilent));
  auto cards = [&r] {
    std::set<std::string> out;
    for (const InventoryDevice& d : r.Health().inventory) out.insert(d.bus_id);
    return out;
  };
  auto kmsg_faults_on = [&r](const std::string& bus) {
    for (const SourceView& v : r.Health().views)
      if (v.source == kSourceKmsg)
        for (const SourceView::Device& d : v.devices)
          if (d.bus_id == bus) return d.faults.size();
    return size_t{0};
  };
  const std::set<std::string> both = {"0000:3b:00.0", "0000:5e:00.0"};
  ASSERT_EQ(cards(), both);
  ASSERT_EQ(kmsg_faults_on("0000:3b:00.0"), 1u);
  r.SetSourceBlind(kSourcePci, "scan failed");
  now += seconds(4);  // pci and nvml stale; the log still publishes
  r.SetDeviceViews(kSourceKmsg, Views({xid}, Coverage::kAddressedSilent));
  EXPECT_EQ(cards(), both) << "no layer's absence removes a card";
  EXPECT_EQ(r.Health().inventory.size(), 2u) << "and adds none";
  EXPECT_EQ(kmsg_faults_on("0000:3b:00.0"), 1u) << "the log's fault stays on its card";
  for (const InventoryDevice& d : r.Health().inventory) {
    if (d.bus_id != "0000:3b:00.0") continue;
    EXPECT_EQ(d.vendor, "0x10de") << "as the bus last said";
  }
}

// A stale source's card that a fresh layer names elsewhere now (by its
// uuid) is that card: no ghost left at the address the stale view had.
TEST(DeviceRegistryTest, AStaleViewLeavesNoGhostWhereItsCardWas) {
  DeviceRegistry r;
  auto now = std::chrono::steady_clock::now();
  r.SetClock([&now] { return now; });
  r.OpenSource("nvml", seconds(1));
  r.SetDeviceViews("nvml", Views({V(-1, "GPU-b", "0000:5e:00.0")}));
  now += seconds(4);
  DeviceInfo moved;
  moved.minor = 1;
  moved.uuid = "GPU-b";
  moved.bus_id = "0000:5f:00.0";
  r.SetXdmDevices({moved});
  const std::vector<InventoryDevice> cards = r.Health().inventory;
  ASSERT_EQ(cards.size(), 1u);
  EXPECT_EQ(cards[0].bus_id, "0000:5f:00.0");
  // A card a fresh layer names where the stale view had it: the stale view
  // still fills in what it knew (its uuid, its model), no label moves.
  DeviceInfo same;
  same.minor = 1;
  same.bus_id = "0000:5e:00.0";
  r.SetXdmDevices({same});
  const std::vector<InventoryDevice> named = r.Health().inventory;
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].uuid, "GPU-b");
}

// A source publishes each interval, mostly what it published last: the same
// view again is seen (it keeps the source fresh) without the join being
// made again (the pci families lent to the page stay the very ones); a view
// that differs in anything is joined at once.
TEST(DeviceRegistryTest, TheSameViewAgainKeepsTheJoinAndStillCountsAsSeen) {
  DeviceRegistry r;
  auto now = std::chrono::steady_clock::now();
  r.SetClock([&now] { return now; });
  r.OpenSource(kSourcePci, seconds(1));
  r.OpenSource(kSourceSysfs, seconds(1));
  auto lent_pci = [&r] {
    xpu::FamilyLender::Lent lent;
    r.CollectLending(&lent);
    return lent.empty() ? nullptr : lent.front();
  };
  r.SetPciDevices({Pci("0000:3b:00.0"), Pci("0000:5e:00.0")});
  r.SetDeviceViews(kSourceSysfs, Views({V(0, "U0", "0000:3b:00.0")}, Coverage::kListedAndKin));
  const auto first = lent_pci();
  ASSERT_NE(first, nullptr);
  for (int i = 0; i < 2 * kStaleIntervals; ++i) {
    now += seconds(1);
    r.SetPciDevices({Pci("0000:3b:00.0"), Pci("0000:5e:00.0")});
    r.SetDeviceViews(kSourceSysfs, Views({V(0, "U0", "0000:3b:00.0")}, Coverage::kListedAndKin));
    EXPECT_EQ(lent_pci(), first) << "the same view was joined again at " << i;
  }
  EXPECT_EQ(r.fault_views_set().of(kSourcePci), 1u + 2 * kStaleIntervals)
      << "each view counts as one that came";
  // Never stale while it comes, though it is the same.
  EXPECT_EQ(xpu::testing::MetricValue(r, "xpu_device_health",
                                      {{"source", "sysfs"}, {"bus_id", "0000:3b:00.0"}}),
            1);
  EXPECT_EQ(r.Inventory().size(), 2u);
  // XDM's list pushed again, the same: the join kept too.
  DeviceInfo xdm;
  xdm.minor = 0;
  xdm.uuid = "U0";
  xdm.bus_id = "0000:3b:00.0";
  r.SetXdmDevices({xdm});
  const auto with_xdm = lent_pci();
  EXPECT_FALSE(r.SetXdmDevices({xdm}));
  EXPECT_EQ(lent_pci(), with_xdm);
  // A field that differs (a driver unbound; a card's health) is joined now.
  PciDeviceView unbound = Pci("0000:5e:00.0");
  unbound.driver.clear();
  r.SetPciDevices({Pci("0000:3b:00.0"), unbound});
  const auto second = lent_pci();
  EXPECT_NE(second, with_xdm);
  EXPECT_EQ(r.Inventory()[1].driver, "");
  r.SetDeviceViews(kSourceSysfs,
                   Views({V(0, "U0", "0000:3b:00.0", false)}, Coverage::kListedAndKin));
  EXPECT_EQ(xpu::testing::MetricValue(r, "xpu_device_health",
                                      {{"source", "sysfs"}, {"bus_id", "0000:3b:00.0"}}),
            0);
  // Blind, then the same view again: seeing, its health back on the page.
  r.SetSourceBlind(kSourceSysfs, "gone for a moment");
  EXPECT_EQ(xpu::testing::MetricValue(r, "xpu_device_health",
                                      {{"source", "sysfs"}, {"bus_id", "0000:3b:00.0"}}),
            -1);
  r.SetDeviceViews(kSourceSysfs,
                   Views({V(0, "U0", "0000:3b:00.0", false)}, Coverage::kListedAndKin));
  EXPECT_EQ(xpu::testing::MetricValue(r, "xpu_device_health",
                                      {{"source", "sysfs"}, {"bus_id", "0000:3b:00.0"}}),
            0);
}

// A container's memory on a device (the nvml backend's processes, joined
// by cgroup): on the page for a pod the API server gave, by its name and
// its container's; nothing for a uid or container id it does not know; gone
// when the source is blind or the pod is.
TEST(DeviceRegistryTest, ContainerMemoryIsNamedOnlyForPodsTheApiServerGave) {
  DeviceRegistry r;
  r.OpenSource("nvml", seconds(1));
  const std::string uid = "1f6c2f9e-7a1b-4c2d-9e3f-0a1b2c3d4e5f";
  const std::string id(64, 'a'), other(64, 'b');
  DeviceViews v;
  DeviceView card = V(0, "GPU-a", "0000:3b:00.0");
  card.containers = {{uid, id, 4096}, {uid, other, 1}, {"no-such-uid", id, 2}};
  v.devices = {card};
  r.SetDeviceViews("nvml", v);
  using xpu::testing::MetricSum;
  using xpu::testing::MetricValue;
  EXPECT_EQ(MetricValue(r, "xpu_container_memory_used_bytes"), -1) << "no pod known yet";
  r.SetPodMetadata({{"ml", "train-0", {}, uid, {{id, "trainer"}}}});
  EXPECT_EQ(MetricValue(r, "xpu_container_memory_used_bytes",
                        {{"minor", "0"},
                         {"uuid", "GPU-a"},
                         {"namespace", "ml"},
                         {"pod", "train-0"},
                         {"container", "trainer"},
                         {"source", "nvml"}}),
            4096);
  EXPECT_EQ(MetricSum(r, "xpu_container_memory_used_bytes"), 4096)
      << "the unknown container and the unknown pod are not named";
  r.SetSourceBlind("nvml", "NVML did not answer");
  EXPECT_EQ(MetricValue(r, "xpu_container_memory_used_bytes"), -1) << "blind: not seen now";
  r.SetDeviceViews("nvml", v);
  EXPECT_EQ(MetricSum(r, "xpu_container_memory_used_bytes"), 4096);
  r.SetPodMetadata({});
  EXPECT_EQ(MetricValue(r, "xpu_container_memory_used_bytes"), -1) << "the pod is gone";
}

// Two pods that claim one uid (a pod that sets a static pod's mirror
// annotation on itself, say): a container is named by the one pod that
// lists its id (a pod cannot write another's container ids: the kubelet
// does), and by neither where both list it.
TEST(DeviceRegistryTest, AUidTwoPodsClaimNamesOnlyWhatOneAloneLists) {
  DeviceRegistry r;
  r.OpenSource("nvml", seconds(1));
  const std::string hash = "6f1c2e9a7b1d4c2e9f3a0b1c2d3e4f5a";
  const std::string id(64, 'a');
  DeviceViews v;
  DeviceView card = V(0, "GPU-a", "0000:3b:00.0");
  card.containers = {{hash, id, 4096}};
  v.devices = {card};
  r.SetDeviceViews("nvml", v);
  r.SetPodMetadata({{"kube-system", "infer-node-a", {}, hash, {{id, "main"}}}});
  EXPECT_EQ(xpu::testing::MetricValue(r, "xpu_container_memory_used_bytes",
                                      {{"namespace", "kube-system"}, {"pod", "infer-node-a"}}),
            4096);
  // An impostor claims the uid, with containers of its own: the static
  // pod's container is still its own.
  r.SetPodMetadata({{"ml", "impostor", {}, hash, {{std::string(64, 'b'), "x"}}},
                    {"kube-system", "infer-node-a", {}, hash, {{id, "main"}}}});
  EXPECT_EQ(xpu::testing::MetricValue(r, "xpu_container_memory_used_bytes",
                                      {{"namespace", "kube-system"}, {"pod", "infer-node-a"}}),
            4096);
  EXPECT_EQ(xpu::testing::MetricSum(r, "xpu_container_memory_used_bytes"), 4096);
  // Both list the id: whose it is is not known, so neither is named.
  r.SetPodMetadata({{"kube-system", "infer-node-a", {}, hash, {{id, "main"}}},
                    {"ml", "impostor", {}, hash, {{id, "main"}}}});
  EXPECT_EQ(xpu::testing::MetricValue(r, "xpu_container_memory_used_bytes"), -1);
}

}  // namespace
}  // namespace xpu::store
