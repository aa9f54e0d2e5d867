#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>

#include "store/device_registry.h"
#include "store/metric_store.h"
#include "support/metrics_util.h"

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
      got[{snap.set->rows[i].minor, snap.set->rows[i].instance}] = snap.values[i];
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
  b.minor = 1;
  b.uuid = "U1";
  reg.SetXdmDevices({a, b});
  ASSERT_EQ(reg.Devices().size(), 1u);
  EXPECT_EQ(reg.Devices()[0].minor, 1);
  HalDeviceView h0, h1;
  h0.minor = 0;
  h1.minor = 1;
  reg.SetHalDevices({h0, h1});
  ASSERT_EQ(reg.HalDevices().size(), 1u);
  EXPECT_EQ(reg.HalDevices()[0].minor, 1);
  PciDeviceView p0, p1, unjoined;
  p0.bus_id = "0000:01:00.0";
  p0.minor = "0";
  p1.bus_id = "0000:02:00.0";
  p1.minor = "1";
  unjoined.bus_id = "0000:03:00.0";
  reg.SetPciDevices({p0, p1, unjoined});
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
  HalDeviceView h0, h1;
  h0.minor = 0;
  h1.minor = 1;
  reg.SetHalDevices({h0, h1});
  reg.SetDeviceFilter({1});
  ASSERT_EQ(reg.Devices().size(), 1u);
  EXPECT_EQ(reg.HalDevices().size(), 1u);
  ASSERT_EQ(pushed.size(), 2u);
  EXPECT_EQ(pushed.back().size(), 1u);
  reg.SetDeviceFilter({});
  EXPECT_EQ(reg.Devices().size(), 2u);  // without a new ListAndWatch push
  ASSERT_EQ(pushed.size(), 3u);
  EXPECT_EQ(pushed.back().size(), 2u);
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

// The fault views' counts that the Node's condition waits on: the pci and
// kmsg views join to XDM's list and count only once it is known; the sysfs
// view counts at once; the kmsg view switched off (nullopt) does not count.
TEST(DeviceRegistryTest, FaultViewsCountOnlyOnceTheyCanJoinXdmsList) {
  DeviceRegistry r;
  r.SetHalDevices({});
  r.SetPciDevices({});
  r.SetKmsgDevices(std::vector<KmsgDeviceView>{});
  EXPECT_EQ(r.fault_views_set().hal, 1u);
  EXPECT_EQ(r.fault_views_set().pci, 0u);
  EXPECT_EQ(r.fault_views_set().kmsg, 0u);
  r.SetXdmDevices({});
  r.SetPciDevices({});
  r.SetKmsgDevices(std::vector<KmsgDeviceView>{});
  r.SetKmsgDevices(std::nullopt);
  EXPECT_EQ(r.fault_views_set().pci, 1u);
  EXPECT_EQ(r.fault_views_set().kmsg, 1u);
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
  v.devices = {{0, "GPU-a", "0000:3b:00.0", true, {}, {}},
               {-1, "GPU-b", "0000:5e:00.0", true, {lost}, {}},          // XDM does not list it
               {1, "GPU-c", "0000:86:00.0", std::nullopt, {}, {}},       // health unread
               {2, "GPU-d", "0000:af:00.0", std::nullopt, {lost}, {}}};  // unread, but a fault
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
  EXPECT_EQ(r.fault_views_set().others.at("nvml"), 1u);
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
  EXPECT_FALSE(views[0].joins_device_list);
  ASSERT_EQ(views[0].devices.size(), 3u)
      << "a device whose health was not read is not seen, unless a card-level fault judges it";
  EXPECT_EQ(views[0].devices[1].faults, std::vector<ActiveFault>{lost});
  EXPECT_EQ(views[0].devices[2].bus_id, "0000:af:00.0");
  EXPECT_EQ(views[0].devices[2].faults, std::vector<ActiveFault>{lost});

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
  DeviceView card{0, "GPU-a", "0000:3b:00.0", true, {}, {}};
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
  DeviceView card{0, "GPU-a", "0000:3b:00.0", true, {}, {}};
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
