#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <thread>

#include "common/fault_code.h"
#include "hal/fault_catalog.h"
#include "hal/sysfs/hal_sampler.h"
#include "hal/sysfs/sysfs_backend.h"
#include "sinks/node_health.h"
#include "store/device_registry.h"
#include "support/metrics_util.h"
#include "support/test_util.h"
#include "support/views_util.h"

namespace xpu::hal {
namespace {

namespace fs = std::filesystem;

// ---- parsers, one case per kind of bad file ----

TEST(SysfsParseTest, HealthAcceptsOnlyOneOrZeroWithNewline) {
  bool h = false;
  EXPECT_TRUE(ParseHealthFile("1\n", &h).ok());
  EXPECT_TRUE(h);
  EXPECT_TRUE(ParseHealthFile("0\n", &h).ok());
  EXPECT_FALSE(h);
  EXPECT_NE(ParseHealthFile("", &h).message().find("empty"), std::string::npos);
  EXPECT_NE(ParseHealthFile("1", &h).message().find("truncated"), std::string::npos);
  EXPECT_FALSE(ParseHealthFile("yes\n", &h).ok());
  EXPECT_FALSE(ParseHealthFile("\x01\xff\n", &h).ok());
  EXPECT_FALSE(ParseHealthFile("1\n1\n", &h).ok());
}

TEST(SysfsParseTest, UuidMustBeOneSaneLine) {
  std::string u;
  EXPECT_TRUE(ParseUuidFile("PPU-1234-abcd\n", &u).ok());
  EXPECT_EQ(u, "PPU-1234-abcd");
  EXPECT_FALSE(ParseUuidFile("", &u).ok());
  EXPECT_FALSE(ParseUuidFile("PPU-12", &u).ok());     // truncated
  EXPECT_FALSE(ParseUuidFile("PPU\"12\n", &u).ok());  // garbage
  EXPECT_FALSE(ParseUuidFile(std::string(300, 'a') + "\n", &u).ok());
}

TEST(SysfsParseTest, FaultCodesOnePerLineEmptyMeansNone) {
  std::vector<std::string> c;
  EXPECT_TRUE(ParseFaultCodesFile("", &c).ok());
  EXPECT_TRUE(c.empty());
  EXPECT_TRUE(ParseFaultCodesFile("0x80e18400\n80C98000\n0x80E18400\n", &c).ok());
  EXPECT_EQ(c, (std::vector<std::string>{"0x80C98000", "0x80E18400"}));
  EXPECT_FALSE(ParseFaultCodesFile("0x80E18400\n0x80C9", &c).ok());  // partly written
  EXPECT_FALSE(ParseFaultCodesFile("0x80E18400\nzzz\n", &c).ok());   // garbage
  EXPECT_FALSE(ParseFaultCodesFile("\n", &c).ok());                  // blank line
  EXPECT_FALSE(ParseFaultCodesFile("0x123456789\n", &c).ok());       // too long
}

// ---- the backend on fixture trees ----

class SysfsTreeTest : public ::testing::Test {
 protected:
  void Write(const std::string& rel, const std::string& content) {
    const fs::path p = fs::path(dir_.path()) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << content;
  }
  void Device(int minor, const std::string& health, const std::string& faults) {
    const std::string d = "xpu" + std::to_string(minor) + "/";
    Write(d + "uuid", "U-" + std::to_string(minor) + "\n");
    Write(d + "health", health);
    Write(d + "fault_codes", faults);
  }
  xpu::testing::TempDir dir_;
};

TEST_F(SysfsTreeTest, ListsDevicesByMinorAndIgnoresStrangers) {
  Device(10, "1\n", "");
  Device(2, "1\n", "");
  Write("xpuX/uuid", "no\n");
  Write("other/uuid", "no\n");
  Write("xpu3", "a file, not a directory\n");
  SysfsBackend b(dir_.path());
  std::vector<HalDeviceId> ids;
  ASSERT_TRUE(b.ListDevices(&ids).ok());
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0].minor, 2);
  EXPECT_EQ(ids[0].uuid, "U-2");
  EXPECT_EQ(ids[1].minor, 10);
}

TEST_F(SysfsTreeTest, EachBadFileIsAnErrorForThatDeviceOnly) {
  Device(0, "1\n", "0x80E18400\n");
  Device(1, "", "");               // empty health
  Device(2, "1", "");              // truncated health
  Device(3, "1\n", "0x80E1");      // partly written codes
  Device(4, "1\n", "garbage!\n");  // garbage codes
  Write("xpu5/uuid", "U-5\n");     // missing health and fault_codes
  Device(6, "1\n", "");
  fs::remove(fs::path(dir_.path()) / "xpu6/health");
  fs::create_directory(fs::path(dir_.path()) / "xpu6/health");  // unreadable: a directory
  SysfsBackend b(dir_.path());
  bool h;
  std::vector<std::string> codes;
  EXPECT_TRUE(b.ReadHealth(0, &h).ok());
  EXPECT_TRUE(b.ReadFaultCodes(0, &codes).ok());
  EXPECT_EQ(codes, std::vector<std::string>{"0x80E18400"});
  EXPECT_FALSE(b.ReadHealth(1, &h).ok());
  EXPECT_FALSE(b.ReadHealth(2, &h).ok());
  EXPECT_FALSE(b.ReadFaultCodes(3, &codes).ok());
  EXPECT_FALSE(b.ReadFaultCodes(4, &codes).ok());
  EXPECT_NE(b.ReadHealth(5, &h).message().find("No such file"), std::string::npos);
  EXPECT_FALSE(b.ReadFaultCodes(5, &codes).ok());
  EXPECT_FALSE(b.ReadHealth(6, &h).ok());
  EXPECT_FALSE(b.ReadHealth(99, &h).ok());
}

TEST_F(SysfsTreeTest, MissingRootIsABackendError) {
  SysfsBackend b(dir_.File("nope"));
  std::vector<HalDeviceId> ids;
  EXPECT_FALSE(b.ListDevices(&ids).ok());
}

TEST_F(SysfsTreeTest, HugeFileIsRefused) {
  Device(0, "1\n", std::string(100000, 'A') + "\n");
  SysfsBackend b(dir_.path());
  std::vector<std::string> codes;
  EXPECT_FALSE(b.ReadFaultCodes(0, &codes).ok());
}

TEST_F(SysfsTreeTest, BlockingFileIsRefusedInsteadOfHangingTheSampler) {
  Device(0, "1\n", "");
  const fs::path fifo = fs::path(dir_.path()) / "xpu0/health";
  fs::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // A read that blocks would never return: run it where the test can give up.
  auto done = std::make_shared<std::promise<Status>>();
  std::future<Status> result = done->get_future();
  std::thread([root = dir_.path(), done] {
    SysfsBackend b(root);
    bool h;
    done->set_value(b.ReadHealth(0, &h));
  }).detach();
  ASSERT_EQ(result.wait_for(std::chrono::seconds(5)), std::future_status::ready)
      << "reading a FIFO blocked";
  const Status s = result.get();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.message();
}

TEST_F(SysfsTreeTest, LeadingZeroDirectoryDoesNotAliasAMinor) {
  Device(1, "1\n", "");
  Write("xpu01/uuid", "ALIAS\n");
  Write("xpu00/uuid", "ALIAS\n");
  Device(0, "1\n", "");
  SysfsBackend b(dir_.path());
  std::vector<HalDeviceId> ids;
  ASSERT_TRUE(b.ListDevices(&ids).ok());
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0].uuid, "U-0");
  EXPECT_EQ(ids[1].uuid, "U-1");
}

// A class device's `device` link names its PCI device: the address the
// inventory joins the tree's card to the bus's by (no daemon needed). A
// link that names no PCI address leaves it out.
TEST_F(SysfsTreeTest, TheDeviceLinkGivesTheCardsBusAddress) {
  Device(0, "1\n", "");
  Device(1, "1\n", "");
  Device(2, "1\n", "");
  fs::create_symlink("../../../devices/pci0000:00/0000:00:01.0/0000:3b:00.0",
                     fs::path(dir_.path()) / "xpu0/device");
  fs::create_symlink("../../../devices/platform/not-pci", fs::path(dir_.path()) / "xpu1/device");
  SysfsBackend b(dir_.path());
  std::vector<HalDeviceId> ids;
  ASSERT_TRUE(b.ListDevices(&ids).ok());
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0].bus_id, "0000:3b:00.0");
  EXPECT_EQ(ids[1].bus_id, "");
  EXPECT_EQ(ids[2].bus_id, "") << "no link";
}

TEST_F(SysfsTreeTest, AnIdentityIsReadOnceADirectoryAndHealthEveryRound) {
  // A card's UUID and address are read once for its directory (not every
  // round: docs/hal.md), its health and faults every round; a card replaced
  // (its directory made anew) is read anew, and a card whose identity could
  // not be read whole is tried again each round.
  Device(0, "1\n", "");
  Device(1, "1\n", "");  // no device link: its identity is not whole
  fs::create_symlink("../../../devices/pci0000:00/0000:00:01.0/0000:3b:00.0",
                     fs::path(dir_.path()) / "xpu0/device");
  SysfsBackend b(dir_.path());
  std::vector<HalDeviceId> ids;
  ASSERT_TRUE(b.ListDevices(&ids).ok());
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0].uuid, "U-0");
  Write("xpu0/uuid", "U-rewritten\n");
  Write("xpu1/uuid", "U-1b\n");
  Write("xpu0/health", "0\n");
  ASSERT_TRUE(b.ListDevices(&ids).ok());
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0].uuid, "U-0") << "kept for the same directory";
  EXPECT_EQ(ids[0].bus_id, "0000:3b:00.0");
  EXPECT_EQ(ids[1].uuid, "U-1b") << "not whole: read again";
  bool healthy = true;
  ASSERT_TRUE(b.ReadHealth(0, &healthy).ok());
  EXPECT_FALSE(healthy) << "health is read every round";
  // A uuid renamed over the old one (as stand-in trees replace files): read
  // anew, though the directory is the same.
  Write("xpu0/uuid.new", "U-renamed\n");
  fs::rename(fs::path(dir_.path()) / "xpu0/uuid.new", fs::path(dir_.path()) / "xpu0/uuid");
  ASSERT_TRUE(b.ListDevices(&ids).ok());
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0].uuid, "U-renamed");
  // Replaced: another directory of the same name.
  fs::remove_all(fs::path(dir_.path()) / "xpu0");
  Write("xpu0/uuid", "U-new\n");
  Write("xpu0/health", "1\n");
  Write("xpu0/fault_codes", "");
  fs::create_symlink("../../../devices/pci0000:00/0000:00:01.0/0000:5e:00.0",
                     fs::path(dir_.path()) / "xpu0/device");
  ASSERT_TRUE(b.ListDevices(&ids).ok());
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0].uuid, "U-new");
  EXPECT_EQ(ids[0].bus_id, "0000:5e:00.0");
  // Gone for a round, then back (the same directory or not): read anew.
  fs::rename(fs::path(dir_.path()) / "xpu0", fs::path(dir_.path()) / "away");
  ASSERT_TRUE(b.ListDevices(&ids).ok());
  ASSERT_EQ(ids.size(), 1u);
  Write("away/uuid", "U-back\n");
  fs::rename(fs::path(dir_.path()) / "away", fs::path(dir_.path()) / "xpu0");
  ASSERT_TRUE(b.ListDevices(&ids).ok());
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0].uuid, "U-back");
}

TEST_F(SysfsTreeTest, TooManyFaultCodesAreRefused) {
  std::string codes;
  for (size_t i = 0; i <= kMaxFaultCodes; ++i) codes += "0x" + std::to_string(10000 + i) + "\n";
  Device(0, "1\n", codes);
  SysfsBackend b(dir_.path());
  std::vector<std::string> out;
  EXPECT_FALSE(b.ReadFaultCodes(0, &out).ok());
}

// ---- the sampler ----

double Value(const prometheus::Collectable& r, const std::string& name,
             const std::map<std::string, std::string>& labels = {}) {
  return xpu::testing::MetricValue(r, name, labels);
}

class SamplerTest : public SysfsTreeTest {
 protected:
  void SetUp() override {
    sampler_ = std::make_unique<HalSampler>(std::make_unique<SysfsBackend>(dir_.path()),
                                            FaultCatalog::Builtin(), std::chrono::seconds(1),
                                            &registry_, &metrics_);
  }
  store::DeviceRegistry registry_;
  prometheus::Registry metrics_;
  std::unique_ptr<HalSampler> sampler_;
};

TEST_F(SamplerTest, RaisesClearsAndCountsFaultEvents) {
  Device(0, "1\n", "");
  Device(1, "0\n", "0x80E18400\n");
  sampler_->SampleOnce();
  auto hal = xpu::testing::ViewOf(registry_, "sysfs");
  ASSERT_EQ(hal.size(), 2u);
  EXPECT_EQ(hal[0].healthy, true);
  EXPECT_EQ(hal[1].healthy, false);
  ASSERT_EQ(hal[1].faults.size(), 1u);
  EXPECT_EQ(hal[1].faults[0].level_name, "reset_card");
  EXPECT_EQ(hal[1].faults[0].name, "hbm_uncorrectable_ecc");
  const std::map<std::string, std::string> ev = {{"minor", "1"}, {"code", "0x80E18400"}};
  EXPECT_EQ(Value(metrics_, "xpu_device_fault_events_total", ev), 1);
  sampler_->SampleOnce();  // still active: not a new event
  EXPECT_EQ(Value(metrics_, "xpu_device_fault_events_total", ev), 1);
  Device(1, "0\n", "");
  sampler_->SampleOnce();
  EXPECT_TRUE(xpu::testing::ViewOf(registry_, "sysfs")[1].faults.empty());
  Device(1, "0\n", "0x80E18400\n");
  sampler_->SampleOnce();
  EXPECT_EQ(Value(metrics_, "xpu_device_fault_events_total", ev), 2);
  EXPECT_EQ(Value(metrics_, "xpu_hal_up"), 1);
}

// A backend whose devices and reads the test sets.
class SetBackend : public HalBackend {
 public:
  std::string name() const override { return "set"; }
  Status ListDevices(std::vector<HalDeviceId>* out) override {
    *out = ids;
    return Status::Ok();
  }
  Status ReadHealth(int32_t, bool* healthy) override {
    *healthy = true;
    return Status::Ok();
  }
  Status ReadFaultCodes(int32_t, std::vector<std::string>* out) override {
    if (!faults_readable) return Status::IoError("fault_codes: torn read");
    *out = codes;
    return Status::Ok();
  }
  std::vector<HalDeviceId> ids;
  std::vector<std::string> codes;
  bool faults_readable = true;
};

// The faults kept over a failed read are the card's own: where the minor now
// names another card (xpu0's device link moved from one address to
// another), that card is not read and carries none of the other's faults,
// which were shown on it (and gone from their own card) before.
TEST(HalSamplerTest, FaultsKeptOverAFailedReadAreTheCardsOwn) {
  store::DeviceRegistry registry;
  prometheus::Registry metrics;
  auto owned = std::make_unique<SetBackend>();
  SetBackend* b = owned.get();
  HalSampler sampler(std::move(owned), FaultCatalog::Builtin(), std::chrono::seconds(1), &registry,
                     &metrics);
  b->ids = {{0, "U-A", "0000:3b:00.0"}};
  b->codes = {"0x80E18400"};
  sampler.SampleOnce();
  ASSERT_EQ(xpu::testing::ViewOf(registry, "sysfs").size(), 1u);
  ASSERT_EQ(xpu::testing::ViewOf(registry, "sysfs")[0].faults.size(), 1u);
  // The same card, its read torn: its faults kept, not seen.
  b->faults_readable = false;
  sampler.SampleOnce();
  EXPECT_EQ(xpu::testing::ViewOf(registry, "sysfs")[0].faults.size(), 1u);
  EXPECT_FALSE(xpu::testing::ViewOf(registry, "sysfs")[0].seen);
  // Minor 0 is another card now, its read torn.
  b->ids = {{0, "U-B", "0000:5e:00.0"}};
  sampler.SampleOnce();
  const auto views = xpu::testing::ViewOf(registry, "sysfs");
  ASSERT_EQ(views.size(), 1u);
  EXPECT_EQ(views[0].bus_id, "0000:5e:00.0");
  EXPECT_TRUE(views[0].faults.empty()) << "another card's faults";
  EXPECT_FALSE(views[0].seen);
}

// A raise on a device that a pod holds leaves that pod as the exemplar of its
// xpu_device_fault_events_total series (OpenMetrics).
TEST(FaultEventsTest, RaiseLeavesThePodHoldingTheDeviceAsExemplar) {
  store::DeviceRegistry registry;
  prometheus::Registry metrics;
  store::ExemplarStore exemplars;
  store::PodAssignment a, b;
  a.uuid = b.uuid = "U1";
  a.namespace_ = b.namespace_ = "ml";
  a.pod = "train-b";
  b.pod = "train-a";  // the first by name is the one named
  a.container = b.container = "main";
  registry.SetPodAssignments({a, b});
  FaultEvents events(FaultCatalog::Builtin(), &metrics, "sysfs", &registry, &exemplars);
  events.Update("1", "xpu1", "1", "U1", "", {"0x80E18400"});
  events.Update("2", "xpu2", "2", "U2", "", {"0x80E18400"});  // nobody holds it
  events.EndSample();
  const store::LabelPairs series = {{"minor", "1"},          {"uuid", "U1"},
                                    {"bus_id", ""},          {"code", "0x80E18400"},
                                    {"level", "reset_card"}, {"source", "sysfs"}};
  auto e = exemplars.Find("xpu_device_fault_events_total", series);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->labels,
            (store::LabelPairs{{"namespace", "ml"}, {"pod", "train-a"}, {"container", "main"}}));
  EXPECT_EQ(e->value, 1);
  EXPECT_GT(e->timestamp, 1.7e9);
  store::LabelPairs other = series;
  other[0].second = "2";
  other[1].second = "U2";
  EXPECT_FALSE(exemplars.Find("xpu_device_fault_events_total", other).has_value());
  // Over 128 runes with the container: named without it.
  a.pod = std::string(100, 'p');
  a.container = std::string(20, 'c');
  registry.SetPodAssignments({a});
  events.Update("1", "xpu1", "1", "U1", "", {});
  events.EndSample();
  events.Update("1", "xpu1", "1", "U1", "", {"0x80E18400"});
  e = exemplars.Find("xpu_device_fault_events_total", series);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->labels.size(), 2u);
  EXPECT_EQ(e->labels[1].second, a.pod);
}

// What a backend found active at its first sample was there before the
// exporter looked: counted, but no live raise (the Node's Events). A raise
// after a sample, or after a reload's seeding, is live, with its catalog
// entry and address.
TEST(FaultEventsTest, OnlyRaisesAfterTheFirstSampleAreLive) {
  store::DeviceRegistry registry;
  prometheus::Registry metrics;
  FaultEvents events(FaultCatalog::Builtin(), &metrics, "sysfs", &registry);
  uint64_t cursor = registry.raises().end();
  events.Update("1", "xpu1", "1", "U1", "0000:3b:00.0", {"0x80E18400"});
  events.EndSample();
  EXPECT_TRUE(registry.raises().Since(&cursor).empty());
  EXPECT_EQ(xpu::testing::MetricValue(metrics, "xpu_device_fault_events_total",
                                      {{"minor", "1"}, {"code", "0x80E18400"}}),
            1);
  events.Update("1", "xpu1", "1", "U1", "0000:3b:00.0", {"0x80E18400", "0x80CB8001"});
  events.EndSample();
  std::vector<store::FaultRaise> raised = registry.raises().Since(&cursor);
  ASSERT_EQ(raised.size(), 1u);
  EXPECT_EQ(raised[0].source, "sysfs");
  EXPECT_EQ(raised[0].minor, "1");
  EXPECT_EQ(raised[0].uuid, "U1");
  EXPECT_EQ(raised[0].bus_id, "0000:3b:00.0");
  EXPECT_EQ(raised[0].fault.code, "0x80CB8001");
  EXPECT_EQ(raised[0].fault.level_name, "isolate_card");

  FaultEvents rebuilt(FaultCatalog::Builtin(), &metrics, "sysfs", &registry);
  rebuilt.Seed(events.state());
  rebuilt.Update("1", "xpu1", "1", "U1", "", {"0x80E18400", "0x80CB8001", "0x80E01801"});
  ASSERT_EQ(registry.raises().Since(&cursor).size(), 1u);
}

// Readers of the raises each keep a cursor; one that falls behind the ring
// learns how many it lost and goes on from the oldest kept.
TEST(FaultRaisesTest, ReadersKeepTheirPlaceAndLearnWhatTheyLost) {
  store::FaultRaises raises;
  uint64_t a = raises.end(), b = raises.end();
  for (int i = 0; i < 3; ++i) raises.Add({"hal", std::to_string(i), "", "", {}, {}});
  uint64_t lost = 9;
  std::vector<store::FaultRaise> got = raises.Since(&a, &lost);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].minor, "0");
  EXPECT_EQ(got[2].minor, "2");
  EXPECT_EQ(lost, 0u);
  EXPECT_TRUE(raises.Since(&a, &lost).empty());
  const size_t extra = store::FaultRaises::kCapacity + 7;
  for (size_t i = 3; i < 3 + extra; ++i) raises.Add({"hal", std::to_string(i), "", "", {}, {}});
  got = raises.Since(&b, &lost);
  EXPECT_EQ(lost, 3 + extra - store::FaultRaises::kCapacity);
  ASSERT_EQ(got.size(), store::FaultRaises::kCapacity);
  EXPECT_EQ(got.front().minor, std::to_string(3 + extra - store::FaultRaises::kCapacity));
  EXPECT_EQ(got.back().minor, std::to_string(2 + extra));
  got = raises.Since(&a, &lost);
  EXPECT_EQ(lost, 7u);
  EXPECT_EQ(got.size(), store::FaultRaises::kCapacity);
}

std::ostringstream log_;  // FaultEventsTest's captured log

// A code that flaps every sample logs one raise line a minute, not one per
// raise; every raise is still counted.
TEST(FaultEventsTest, FlappingCodeIsLoggedOnceAMinuteAndCountedEveryTime) {
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_);
  auto old = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("test", sink));
  prometheus::Registry metrics;
  FaultEvents events(FaultCatalog::Builtin(), &metrics, "sysfs");
  for (int i = 0; i < 50; ++i) {
    events.Update("1", "xpu1", "1", "U1", "", {"0x80E18400"});
    events.EndSample();
    events.Update("1", "xpu1", "1", "U1", "", {});
    events.EndSample();
  }
  spdlog::set_default_logger(old);
  const std::string text = log_.str();
  size_t raised = 0, cleared = 0;
  for (size_t at = text.find("raised"); at != std::string::npos; at = text.find("raised", at + 1))
    ++raised;
  for (size_t at = text.find("cleared"); at != std::string::npos; at = text.find("cleared", at + 1))
    ++cleared;
  EXPECT_EQ(raised, 1u) << text;
  EXPECT_EQ(cleared, 1u) << text;
  EXPECT_EQ(xpu::testing::MetricValue(metrics, "xpu_device_fault_events_total",
                                      {{"minor", "1"}, {"code", "0x80E18400"}}),
            50);
}

TEST_F(SamplerTest, TornReadKeepsActiveFaultsAndCountsTheError) {
  Device(0, "1\n", "0x80C98000\n");
  sampler_->SampleOnce();
  Device(0, "1\n", "0x80C9");  // caught mid-write
  sampler_->SampleOnce();
  ASSERT_EQ(xpu::testing::ViewOf(registry_, "sysfs")[0].faults.size(), 1u);
  EXPECT_EQ(Value(metrics_, "xpu_hal_read_errors_total", {{"minor", "0"}}), 1);
  EXPECT_EQ(Value(metrics_, "xpu_device_fault_events_total", {{"code", "0x80C98000"}}), 1);
}

TEST_F(SamplerTest, UnknownCodesGetTheDefaultLevelAndAreCounted) {
  Device(0, "1\n", "0xDEADBEEF\n");
  sampler_->SampleOnce();
  auto f = xpu::testing::ViewOf(registry_, "sysfs")[0].faults.at(0);
  EXPECT_FALSE(f.known);
  EXPECT_EQ(f.level_name, LevelName(FaultCatalog::Builtin()->default_level()));
  EXPECT_EQ(Value(metrics_, "xpu_hal_unknown_fault_codes_total"), 1);
}

TEST_F(SamplerTest, BadHealthFileHidesHalHealthForThatDeviceOnly) {
  Device(0, "maybe\n", "");
  Device(1, "1\n", "");
  sampler_->SampleOnce();
  auto hal = xpu::testing::ViewOf(registry_, "sysfs");
  EXPECT_FALSE(hal[0].healthy.has_value());
  EXPECT_EQ(hal[1].healthy, true);
  auto fams = registry_.Collect();
  int hal_health = 0;
  for (const auto& f : fams)
    if (f.name == "xpu_device_health") hal_health = static_cast<int>(f.metric.size());
  EXPECT_EQ(hal_health, 1);
}

// The health model's one rule (docs/hal.md): a blind source's health
// series go at once, never a 1; the rest of its view once it is stale.
TEST_F(SamplerTest, VanishedRootMeansHalDownAndItsHealthIsWithdrawn) {
  auto now = std::chrono::steady_clock::now();
  registry_.SetClock([&now] { return now; });
  Device(0, "1\n", "0x80E18400\n");  // reset_card
  sampler_->SampleOnce();
  EXPECT_TRUE(sampler_->up());
  auto count = [&](const std::string& family, const std::string& source) {
    int n = 0;
    for (const auto& f : registry_.Collect())
      if (f.name == family)
        for (const auto& m : f.metric)
          for (const auto& l : m.label)
            if (l.name == "source" && l.value == source) ++n;
    return n;
  };
  EXPECT_EQ(count("xpu_device_health", "sysfs"), 1);
  EXPECT_EQ(Value(registry_, "xpu_exporter_source_up", {{"source", "sysfs"}}), 1);
  fs::remove_all(dir_.path());
  sampler_->SampleOnce();
  EXPECT_FALSE(sampler_->up());
  EXPECT_EQ(Value(metrics_, "xpu_hal_up"), 0);
  EXPECT_EQ(count("xpu_device_health", "sysfs"), 0) << "a blind source's health stays on the page";
  EXPECT_EQ(count("xpu_device_fault_active", "sysfs"), 1) << "the fault seen last, until stale";
  EXPECT_EQ(Value(registry_, "xpu_exporter_source_up", {{"source", "sysfs"}}), 0);
  ASSERT_EQ(registry_.SourceViews().size(), 1u);
  EXPECT_EQ(registry_.SourceViews()[0].sight, store::Sight::kBlind);
  now += store::kStaleIntervals * std::chrono::seconds(1) + std::chrono::milliseconds(1);
  sampler_->SampleOnce();
  EXPECT_EQ(count("xpu_device_fault_active", "sysfs"), 0) << "a stale view stays on the page";
  EXPECT_TRUE(xpu::testing::ViewOf(registry_, "sysfs").empty());
  // Back: seen again at once.
  Device(0, "1\n", "");
  sampler_->SampleOnce();
  EXPECT_EQ(count("xpu_device_health", "sysfs"), 1);
  EXPECT_EQ(registry_.SourceViews()[0].sight, store::Sight::kSeeing);
}

// A device whose fault codes cannot be read is not seen: no health on the
// page, and the Node condition's view says so (DeviceNotSeen), even when
// nothing was ever read from it.
TEST_F(SamplerTest, ADeviceWhoseFaultsCannotBeReadIsNotSeen) {
  Device(0, "1\n", "");
  Device(1, "1\n", "");
  fs::remove(fs::path(dir_.path()) / "xpu1/fault_codes");
  fs::create_directory(fs::path(dir_.path()) / "xpu1/fault_codes");  // unreadable: a directory
  sampler_->SampleOnce();
  const auto views = registry_.SourceViews();
  ASSERT_EQ(views.size(), 1u);
  ASSERT_EQ(views[0].devices.size(), 2u);
  EXPECT_EQ(views[0].devices[0].minor, 0);
  EXPECT_TRUE(views[0].devices[0].seen);
  EXPECT_EQ(views[0].devices[1].minor, 1);
  EXPECT_FALSE(views[0].devices[1].seen);
  EXPECT_EQ(sinks::ConditionOf(views, true).reason, "DeviceNotSeen");
  int health = 0;
  for (const auto& f : registry_.Collect())
    if (f.name == "xpu_device_health") health += static_cast<int>(f.metric.size());
  EXPECT_EQ(health, 1) << "device 1's health without its faults";
}

// The tree's cards join the bus's by their `device` link with no daemon:
// one card each, not two (the pci source's by address, the tree's by minor).
TEST_F(SamplerTest, TheTreesCardsAreTheBussCardsByTheirDeviceLink) {
  Device(0, "1\n", "");
  fs::create_symlink("../sys/bus/pci/devices/0000:3b:00.0", fs::path(dir_.path()) / "xpu0/device");
  registry_.OpenSource(store::kSourcePci, std::chrono::hours(1));
  store::PciDeviceView p;
  p.bus_id = "0000:3b:00.0";
  p.vendor = "0x1ded";
  p.driver = "xpu";
  registry_.SetPciDevices({p});
  sampler_->SampleOnce();
  const std::vector<store::InventoryDevice> inv = registry_.Inventory();
  ASSERT_EQ(inv.size(), 1u);
  EXPECT_EQ(inv[0].bus_id, "0000:3b:00.0");
  EXPECT_EQ(inv[0].minor, 0);
  EXPECT_EQ(inv[0].uuid, "U-0");
}

// A card gone from the driver's tree is not seen: the tree covers every
// card XDM lists (while the bus tells no vendor), or every card of its
// cards' vendor (when it does).
TEST_F(SamplerTest, ACardGoneFromTheTreeIsNotSeen) {
  store::DeviceInfo a, b;
  a.minor = 0;
  b.minor = 1;
  registry_.SetXdmDevices({a, b});
  Device(0, "1\n", "");
  Device(1, "1\n", "");
  sampler_->SampleOnce();
  EXPECT_EQ(sinks::ConditionOf(registry_.SourceViews(), true).status, "True");
  fs::remove_all(fs::path(dir_.path()) / "xpu1");
  sampler_->SampleOnce();
  const sinks::NodeCondition c = sinks::ConditionOf(registry_.SourceViews(), true);
  EXPECT_EQ(c.reason, "DeviceNotSeen") << c.message;
  EXPECT_NE(c.message.find("sysfs does not see xpu 1"), std::string::npos) << c.message;
}

// A health bit at 0 read while the fault codes could not be: still False
// (the card says it is unhealthy; a torn read is no recovery).
TEST_F(SamplerTest, AnUnhealthyBitStaysFalseThroughAFailedFaultRead) {
  Device(0, "0\n", "");
  sampler_->SampleOnce();
  EXPECT_EQ(sinks::ConditionOf(registry_.SourceViews(), true).reason, "DeviceUnhealthy");
  fs::remove(fs::path(dir_.path()) / "xpu0/fault_codes");
  fs::create_directory(fs::path(dir_.path()) / "xpu0/fault_codes");
  sampler_->SampleOnce();
  EXPECT_EQ(sinks::ConditionOf(registry_.SourceViews(), true).reason, "DeviceUnhealthy");
}

// A reset_card card whose driver starts answering errors for its fault
// codes: the faults last read are kept, and the Node condition stays False
// (a failed read is no recovery), though the card is not seen.
TEST_F(SamplerTest, AResetCardCardWhoseFaultReadStartsFailingKeepsTheConditionFalse) {
  Device(0, "1\n", "");
  Device(1, "1\n", "0x80E18400\n");  // reset_card
  sampler_->SampleOnce();
  EXPECT_EQ(sinks::ConditionOf(registry_.SourceViews(), true).status, "False");
  fs::remove(fs::path(dir_.path()) / "xpu1/fault_codes");
  fs::create_directory(fs::path(dir_.path()) / "xpu1/fault_codes");  // EISDIR from now on
  for (int i = 0; i < 3; ++i) {
    sampler_->SampleOnce();
    const sinks::NodeCondition c = sinks::ConditionOf(registry_.SourceViews(), true);
    EXPECT_EQ(c.status, "False") << c.reason << ": " << c.message;
    EXPECT_EQ(c.reason, "ResetCard");
  }
  EXPECT_EQ(Value(metrics_, "xpu_hal_read_errors_total", {{"minor", "1"}}), 3);
}

// The card's own health bit (health 0, no fault code) reaches the
// condition: False, not True.
TEST_F(SamplerTest, AnUnhealthyBitWithoutAFaultCodeMakesTheConditionFalse) {
  Device(0, "1\n", "");
  Device(1, "0\n", "");
  sampler_->SampleOnce();
  const sinks::NodeCondition c = sinks::ConditionOf(registry_.SourceViews(), true);
  EXPECT_EQ(c.status, "False");
  EXPECT_EQ(c.reason, "DeviceUnhealthy");
  EXPECT_NE(c.message.find("xpu 1: reports itself unhealthy [unhealthy, sysfs]"), std::string::npos)
      << c.message;
}

TEST_F(SamplerTest, FaultLevelIsTheWorstActive) {
  Device(0, "1\n", "0x80CB8000\n0x80C98000\n0x80CB8001\n");  // none, restart_job, isolate_card
  sampler_->SampleOnce();
  const prometheus::MetricFamily* level = nullptr;
  const auto fams = registry_.Collect();
  for (const auto& f : fams)
    if (f.name == "xpu_device_fault_level") level = &f;
  ASSERT_NE(level, nullptr) << "xpu_device_fault_level not exported";
  ASSERT_EQ(level->metric.size(), 1u);
  EXPECT_EQ(level->metric[0].gauge.value, 6);
}

// ---- the fault catalog ----

TEST(FaultCatalogTest, EveryEntryHasLevelDescriptionActionAndUniqueCode) {
  auto cat = FaultCatalog::Builtin();
  ASSERT_GE(cat->entries().size(), 10u);
  std::set<std::string> names;
  for (const auto& [code, f] : cat->entries()) {
    EXPECT_EQ(NormalizeFaultCode(code), code);
    EXPECT_FALSE(f.description.empty()) << code;
    EXPECT_FALSE(f.action.empty()) << code;
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
  }
  // Codes are unique by construction (a map); Parse must refuse duplicates.
  std::shared_ptr<const FaultCatalog> c;
  const std::string one =
      "  - code: \"0x1\"\n    name: a\n    level: none\n    description: d\n    action: a\n";
  EXPECT_FALSE(FaultCatalog::Parse("codes:\n" + one + one, "t", &c).ok());
  EXPECT_TRUE(FaultCatalog::Parse("codes:\n" + one, "t", &c).ok());
}

TEST(FaultCatalogTest, ParseRejectsBadEntries) {
  std::shared_ptr<const FaultCatalog> c;
  EXPECT_FALSE(FaultCatalog::Parse("codes:\n  - code: \"0x1\"\n    name: a\n    level: panic\n"
                                   "    description: d\n    action: a\n",
                                   "t", &c)
                   .ok());
  EXPECT_FALSE(FaultCatalog::Parse("codes:\n  - code: \"xyz\"\n    name: a\n    level: none\n"
                                   "    description: d\n    action: a\n",
                                   "t", &c)
                   .ok());
  EXPECT_FALSE(FaultCatalog::Parse("codes:\n  - code: \"0x1\"\n    name: a\n    level: none\n"
                                   "    action: a\n",
                                   "t", &c)
                   .ok());
  Status s = FaultCatalog::Parse("codes: []\nlevels: 3\n", "t", &c);
  EXPECT_NE(s.message().find("unknown key 'levels'"), std::string::npos);
}

TEST(FaultCatalogTest, LevelsOrderFromNoActionToIsolation) {
  FaultLevel l;
  ASSERT_TRUE(ParseLevel("none", &l));
  EXPECT_EQ(static_cast<int>(l), 0);
  ASSERT_TRUE(ParseLevel("isolate_card", &l));
  EXPECT_EQ(static_cast<int>(l), 6);
  EXPECT_LT(static_cast<int>(FaultLevel::kRestartJob), static_cast<int>(FaultLevel::kResetCard));
}

TEST(HalBackendTest, AutoPicksSysfsOnlyWhenRootExists) {
  xpu::testing::TempDir dir;
  std::unique_ptr<HalBackend> b;
  ASSERT_TRUE(MakeBackend("auto", dir.path(), &b).ok());
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->name(), "sysfs");
  ASSERT_TRUE(MakeBackend("auto", dir.File("absent"), &b).ok());
  EXPECT_EQ(b, nullptr);
  ASSERT_TRUE(MakeBackend("none", dir.path(), &b).ok());
  EXPECT_EQ(b, nullptr);
  EXPECT_FALSE(MakeBackend("nvml", dir.path(), &b).ok());
}

}  // namespace
}  // namespace xpu::hal

namespace xpu::hal {
namespace {

// The Ascend device plugin derives health from fault levels; so does the
// HAL's view: a card-level fault (restart_card and up) means unhealthy even
// when the health file says 1, a job-level one does not.
TEST(HalHealthTest, HealthFollowsTheWorstActiveFaultLevel) {
  store::DeviceRegistry reg;
  store::DeviceView job, card;
  job.minor = 0;
  job.healthy = true;
  job.faults.push_back({"0x80C98000", "icn_link_degraded", 2, "restart_job", "", "", true});
  card.minor = 1;
  card.healthy = true;
  card.faults.push_back({"0x80E18400", "hbm_uncorrectable_ecc", 4, "reset_card", "", "", true});
  store::DeviceViews views;
  views.devices = {job, card};
  reg.SetDeviceViews("sysfs", views);
  const auto hal = xpu::testing::ViewOf(reg, "sysfs");
  ASSERT_EQ(hal.size(), 2u);
  EXPECT_EQ(hal[0].healthy, true);
  EXPECT_EQ(hal[1].healthy, false);
  for (const auto& f : reg.Collect()) {
    if (f.name != "xpu_device_health") continue;
    for (const auto& m : f.metric) {
      const bool minor1 = m.label[0].value == "1";
      EXPECT_EQ(m.gauge.value, minor1 ? 0 : 1);
    }
  }
}

}  // namespace
}  // namespace xpu::hal
