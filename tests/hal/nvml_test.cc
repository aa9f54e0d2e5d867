// The nvml backend's reading code against the stand-in library
// (fake_nvml/fake_nvml.cc): a real dlopen of a real shared library that
// exports NVML's functions, serving the cards a fixture names; NVIDIA's own
// library needs a driver and a GPU that cannot run here.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hal/fault_catalog.h"
#include "hal/nvml/nvml_lookout.h"
#include "hal/nvml/nvml_reader.h"
#include "hal/nvml/nvml_sampler.h"
#include "sinks/node_health.h"
#include "store/device_registry.h"
#include "support/metrics_util.h"
#include "support/test_util.h"

namespace xpu::hal {
namespace {

using Json = nlohmann::json;

// Two cards: an A100 with MIG on, ECC, a pending remap and a process; an
// H800 with NVLinks, a thermal slowdown and a pending page retirement.
Json TwoCards() {
  return Json::parse(R"({
    "devices": [
      {"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-a100-0", "bus_id": "00000000:3B:00.0",
       "temperature": 41, "power_mw": 91500, "energy_mj": 5000000,
       "memory": {"total": 85899345920, "used": 1073741824},
       "utilization": {"gpu": 37, "memory": 12}, "ecc_mode": 1,
       "ecc": {"volatile_corrected": 3, "volatile_uncorrected": 0,
               "aggregate_corrected": 17, "aggregate_uncorrected": 1},
       "retired": {"single_bit": 2, "double_bit": 1, "pending": false},
       "remap": {"corrected": 1, "uncorrected": 2, "pending": true, "failure": false},
       "clocks_event_reasons": 1, "pcie_replays": 4,
       "mig": {"enabled": true, "devices": [
         {"uuid": "MIG-a100-0-1", "gi": 1, "ci": 0, "memory": {"total": 10737418240, "used": 536870912}},
         {"uuid": "MIG-a100-0-2", "gi": 2, "ci": 0, "memory": {"total": 10737418240, "used": 0}}]},
       "processes": [{"pid": 4242, "used": 536870912, "gi": 1, "ci": 0}]},
      {"name": "NVIDIA H800", "uuid": "GPU-h800-1", "bus_id": "00000000:5E:00.0",
       "temperature": 88, "memory": {"total": 85899345920, "used": 0}, "ecc_mode": 1,
       "retired": {"single_bit": 0, "double_bit": 0, "pending": true},
       "clocks_event_reasons": 96, "mig": {"enabled": false},
       "nvlinks": [{"active": true, "replay": 5, "recovery": 1, "crc_flit": 7, "crc_data": 0},
                   {"active": false}],
       "unsupported": ["nvmlDeviceGetPowerUsage"],
       "processes": [{"pid": 7, "used": 1024}]}
    ]})");
}

constexpr std::chrono::milliseconds kGenerousDeadline{30000};

class NvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One fixture file for the whole process, named once: a reader or
    // event thread an earlier test left behind (detached, it ends when its
    // call returns) may still be in the library, which reads the variable,
    // and setenv beside a getenv is a race.
    static const std::string shared = [] {
      static xpu::testing::TempDir dir;  // removed at exit: a late reader finds no file
      const std::string path = dir.File("nvml.json");
      setenv("XPU_FAKE_NVML_FIXTURE", path.c_str(), 1);
      return path;
    }();
    fixture_ = shared;
    Write(TwoCards());
  }
  void Write(const Json& j) {
    // A new file renamed over the old: the library never reads half of it.
    const std::string tmp = fixture_ + ".tmp";
    std::ofstream(tmp) << j.dump();
    std::filesystem::rename(tmp, fixture_);
  }
  std::shared_ptr<const NvmlLibrary> Open(const std::string& path = FAKE_NVML_PATH) {
    std::shared_ptr<const NvmlLibrary> lib;
    const Status s = NvmlLibrary::Open(path, &lib);
    EXPECT_TRUE(s.ok()) << s.message();
    return lib;
  }
  std::vector<NvmlDevice> Read(const NvmlLibrary& lib) {
    std::vector<NvmlDevice> out;
    const Status s = ReadNvmlDevices(lib, &out);
    EXPECT_TRUE(s.ok()) << s.message();
    return out;
  }
  // Another name for the stand-in: a path the process has not opened (the
  // library is kept per path), so its nvmlInit_v2 runs again.
  std::string FreshPath(const std::string& name) {
    const std::string link = dir_.path() + "/" + name;
    std::filesystem::create_symlink(FAKE_NVML_PATH, link);
    return link;
  }

  xpu::testing::TempDir dir_;
  std::string fixture_;
};

TEST_F(NvmlTest, ALibraryThatCannotLoadIsNotFoundAndSaysWhere) {
  std::shared_ptr<const NvmlLibrary> lib;
  const Status s = NvmlLibrary::Open(dir_.path() + "/libnvidia-ml.so.1", &lib);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find(dir_.path()), std::string::npos) << s.message();
  EXPECT_EQ(lib, nullptr);
}

TEST_F(NvmlTest, AFailingInitIsUnavailableInNvmlsWords) {
  Json f = TwoCards();
  f["init_error"] = nvml::kErrorDriverNotLoaded;
  Write(f);
  std::shared_ptr<const NvmlLibrary> lib;
  const Status s = NvmlLibrary::Open(FreshPath("init-fails.so"), &lib);
  EXPECT_EQ(s.code(), Status::Code::kUnavailable);
  EXPECT_NE(s.message().find("Driver Not Loaded"), std::string::npos) << s.message();
}

TEST_F(NvmlTest, TheLibraryIsOpenedOncePerPath) {
  auto a = Open();
  auto b = Open();
  EXPECT_EQ(a.get(), b.get());
  EXPECT_TRUE(a->missing().empty()) << a->missing().front();
}

TEST_F(NvmlTest, ReadsEveryFieldOfEveryCard) {
  auto lib = Open();
  const std::vector<NvmlDevice> d = Read(*lib);
  ASSERT_EQ(d.size(), 2u);
  const NvmlDevice& a = d[0];
  EXPECT_EQ(a.name, "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(a.uuid, "GPU-a100-0");
  EXPECT_EQ(a.bus_id, "0000:3b:00.0");  // NVML's 8-digit domain, upper case: canonical
  EXPECT_FALSE(a.lost);
  EXPECT_EQ(a.temperature_celsius, 41);
  EXPECT_EQ(a.power_watts, 91.5);
  EXPECT_EQ(a.energy_joules, 5000);
  EXPECT_EQ(a.memory_total_bytes, 85899345920u);
  EXPECT_EQ(a.memory_used_bytes, 1073741824u);
  EXPECT_EQ(a.gpu_utilization, 37u);
  EXPECT_EQ(a.memory_utilization, 12u);
  EXPECT_EQ(a.ecc_enabled, true);
  EXPECT_EQ(a.ecc_volatile_corrected, 3u);
  EXPECT_EQ(a.ecc_volatile_uncorrected, 0u);
  EXPECT_EQ(a.ecc_aggregate_corrected, 17u);
  EXPECT_EQ(a.ecc_aggregate_uncorrected, 1u);
  EXPECT_EQ(a.retired_pages_single_bit, 2u);
  EXPECT_EQ(a.retired_pages_double_bit, 1u);
  EXPECT_EQ(a.retirement_pending, false);
  ASSERT_TRUE(a.remap);
  EXPECT_EQ(*a.remap, (NvmlDevice::Remap{1, 2, true, false}));
  EXPECT_EQ(a.clocks_event_reasons, nvml::kClocksEventGpuIdle);
  EXPECT_EQ(a.pcie_replays, 4u);
  EXPECT_EQ(a.mig_enabled, true);
  ASSERT_EQ(a.mig.size(), 2u);
  EXPECT_EQ(a.mig[0], (NvmlMigDevice{"MIG-a100-0-1", 1, 0, 10737418240u, 536870912u}));
  EXPECT_EQ(a.mig[1].uuid, "MIG-a100-0-2");
  EXPECT_EQ(a.mig[1].gpu_instance, 2u);
  ASSERT_EQ(a.processes.size(), 1u);
  EXPECT_EQ(a.processes[0], (NvmlProcess{4242, 536870912u, 1u, 0u}));
  EXPECT_TRUE(a.nvlinks.empty());
  EXPECT_TRUE(a.errors.empty()) << a.errors.front();

  const NvmlDevice& h = d[1];
  EXPECT_EQ(h.bus_id, "0000:5e:00.0");
  EXPECT_EQ(h.power_watts, std::nullopt);  // not supported: quiet, not an error
  EXPECT_EQ(h.energy_joules, std::nullopt);
  EXPECT_EQ(h.retirement_pending, true);
  EXPECT_EQ(h.remap, std::nullopt);  // the card has no row remapping
  EXPECT_EQ(h.clocks_event_reasons,
            nvml::kClocksEventSwThermalSlowdown | nvml::kClocksEventHwThermalSlowdown);
  EXPECT_EQ(h.mig_enabled, false);
  EXPECT_TRUE(h.mig.empty());
  ASSERT_EQ(h.nvlinks.size(), 2u);
  EXPECT_EQ(h.nvlinks[0], (NvmlLink{0, true, 5u, 1u, 7u, 0u}));
  EXPECT_FALSE(h.nvlinks[1].active);
  ASSERT_EQ(h.processes.size(), 1u);
  EXPECT_EQ(h.processes[0].gpu_instance, std::nullopt);  // no MIG
  EXPECT_TRUE(h.errors.empty()) << h.errors.front();
}

// A fixture changed on disk is what the next read sees.
TEST_F(NvmlTest, ReadsTheCardsAsTheyAreNow) {
  auto lib = Open();
  ASSERT_EQ(Read(*lib)[0].temperature_celsius, 41);
  Json f = TwoCards();
  f["devices"][0]["temperature"] = 77;
  f["devices"].erase(1);
  Write(f);
  const std::vector<NvmlDevice> d = Read(*lib);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].temperature_celsius, 77);
}

// An older driver's library lacks nvmlDeviceGetRemappedRows and names the
// clock-event reasons by their older name: the reasons still come, the
// remap is not read, everything else works, and missing() says what.
TEST_F(NvmlTest, AFunctionTheLibraryLacksDisablesOnlyWhatNeedsIt) {
  auto lib = Open(FAKE_NVML_OLD_PATH);
  EXPECT_EQ(lib->missing(), std::vector<std::string>{"nvmlDeviceGetRemappedRows"});
  const std::vector<NvmlDevice> d = Read(*lib);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].remap, std::nullopt);
  EXPECT_EQ(d[0].clocks_event_reasons, nvml::kClocksEventGpuIdle);
  EXPECT_EQ(d[0].ecc_aggregate_uncorrected, 1u);
  EXPECT_EQ(d[0].mig.size(), 2u);
  EXPECT_TRUE(DeriveNvmlFaults(d[0]).empty()) << "no remap read, no remap fault";
}

TEST_F(NvmlTest, ALostCardIsMarkedAndTheOthersAreRead) {
  Json f = TwoCards();
  f["devices"][1]["lost"] = true;
  Write(f);
  auto lib = Open();
  const std::vector<NvmlDevice> d = Read(*lib);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_FALSE(d[0].lost);
  EXPECT_EQ(d[0].temperature_celsius, 41);
  EXPECT_TRUE(d[1].lost);
  EXPECT_EQ(d[1].uuid, "");  // nothing can be read from it
  EXPECT_EQ(d[1].temperature_celsius, std::nullopt);
  EXPECT_TRUE(d[1].errors.empty()) << "lost is said once, as lost";
  EXPECT_EQ(DeriveNvmlFaults(d[1]), std::vector<std::string>{kNvmlGpuLost});
}

TEST_F(NvmlTest, ALibraryThatIsNotNvmlIsRefused) {
  std::shared_ptr<const NvmlLibrary> lib;
  const Status s = NvmlLibrary::Open("libz.so.1", &lib);
  EXPECT_EQ(s.code(), Status::Code::kNotFound);
  EXPECT_NE(s.message().find("not NVML"), std::string::npos) << s.message();
}

// Answers beyond the bounds, and answers that are neither success nor
// "not supported": each bounded, recorded or judged, the rest still read.
TEST_F(NvmlTest, AnswersBeyondTheBoundsAndErrorsAreBoundedAndSaid) {
  Json f = TwoCards();
  Json many = Json::array();
  for (unsigned i = 0; i < kMaxNvmlProcesses + 1; ++i)
    many.push_back({{"pid", i + 1}, {"used", 1}});
  f["devices"][0]["processes"] = many;
  f["devices"][0]["retired"]["single_bit"] = kMaxNvmlRetiredPages + 88;  // more than the buffer
  f["devices"][1]["errors"] = {{"nvmlDeviceGetEccMode", nvml::kErrorResetRequired},
                               {"nvmlDeviceGetTemperature", nvml::kErrorUnknown}};
  Write(f);
  auto lib = Open();
  std::vector<NvmlDevice> d = Read(*lib);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_TRUE(d[0].processes.empty());
  ASSERT_EQ(d[0].errors.size(), 1u);
  EXPECT_NE(d[0].errors[0].find("more than 256"), std::string::npos) << d[0].errors[0];
  EXPECT_EQ(d[0].retired_pages_single_bit, kMaxNvmlRetiredPages + 88);  // the count NVML gave
  EXPECT_EQ(d[0].retired_pages_double_bit, 1u);
  EXPECT_TRUE(d[1].reset_required);
  EXPECT_EQ(d[1].temperature_celsius, std::nullopt);
  ASSERT_EQ(d[1].errors.size(), 1u);
  EXPECT_NE(d[1].errors[0].find("temperature"), std::string::npos) << d[1].errors[0];
  EXPECT_EQ(DeriveNvmlFaults(d[1]),
            (std::vector<std::string>{kNvmlRetirementPending, kNvmlResetRequired}));
  // A card whose handle cannot be had is listed, unread and not lost.
  f["devices"][1]["errors"] = {{"nvmlDeviceGetHandleByIndex_v2", nvml::kErrorUnknown}};
  Write(f);
  d = Read(*lib);
  EXPECT_TRUE(d[1].unreadable);
  EXPECT_FALSE(d[1].lost);
  EXPECT_EQ(d[1].uuid, "");
}

// A name or uuid that is no UTF-8 (a driver's bytes) becomes a label: one
// invalid label value makes Prometheus refuse the whole scrape. They are
// made valid as every label from outside is.
TEST_F(NvmlTest, ANameOrUuidThatIsNoUtf8IsMadeAValidLabel) {
  Json f = TwoCards();
  f["devices"][0]["name_bytes"] = {0x48, 0xff, 0x31, 0x30, 0x30};  // "H\xff100"
  f["devices"][1]["uuid_bytes"] = {0x47, 0x50, 0x55, 0x2d, 0xc3};  // "GPU-" and half a character
  Write(f);
  auto lib = Open();
  std::vector<NvmlDevice> d = Read(*lib);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].name,
            "H\xef\xbf\xbd"
            "100");  // U+FFFD
  EXPECT_EQ(d[1].uuid, "GPU-\xef\xbf\xbd");
}

TEST_F(NvmlTest, FaultsFollowRemapsAndRetirement) {
  NvmlDevice d;
  EXPECT_TRUE(DeriveNvmlFaults(d).empty());
  d.remap = NvmlDevice::Remap{0, 1, true, false};
  EXPECT_EQ(DeriveNvmlFaults(d), std::vector<std::string>{kNvmlRowRemapPending});
  d.remap->failure = true;
  d.retirement_pending = true;
  EXPECT_EQ(DeriveNvmlFaults(d),
            (std::vector<std::string>{kNvmlRowRemapFailure, kNvmlRowRemapPending,
                                      kNvmlRetirementPending}));
  // As read from the stand-in: the A100's pending remap, the H800's retirement.
  auto lib = Open();
  const std::vector<NvmlDevice> read = Read(*lib);
  EXPECT_EQ(DeriveNvmlFaults(read[0]), std::vector<std::string>{kNvmlRowRemapPending});
  EXPECT_EQ(DeriveNvmlFaults(read[1]), std::vector<std::string>{kNvmlRetirementPending});
}

// Every code the backend derives is in the built-in fault catalog, at the
// level NVIDIA's guidance gives it.
TEST_F(NvmlTest, EveryDerivedCodeIsInTheCatalog) {
  const auto catalog = FaultCatalog::Builtin();
  EXPECT_EQ(catalog->Lookup(kNvmlGpuLost).level, FaultLevel::kIsolateCard);
  EXPECT_EQ(catalog->Lookup(kNvmlRowRemapFailure).level, FaultLevel::kIsolateCard);
  EXPECT_EQ(catalog->Lookup(kNvmlRowRemapPending).level, FaultLevel::kResetCard);
  EXPECT_EQ(catalog->Lookup(kNvmlRetirementPending).level, FaultLevel::kResetCard);
  EXPECT_EQ(catalog->Lookup(kNvmlResetRequired).level, FaultLevel::kResetCard);
  for (const char* code : {kNvmlGpuLost, kNvmlRowRemapFailure, kNvmlRowRemapPending,
                           kNvmlRetirementPending, kNvmlResetRequired})
    EXPECT_TRUE(catalog->Lookup(code).known) << code;
}

// The sampler over the stand-in, publishing into a real registry.
class NvmlSamplerTest : public NvmlTest {
 protected:
  void SetUp() override {
    NvmlTest::SetUp();
    store::DeviceInfo a100;  // XDM lists the A100 only
    a100.minor = 3;
    a100.uuid = "XDM-3";
    a100.bus_id = "0000:3b:00.0";
    registry_.SetXdmDevices({a100});
  }
  std::unique_ptr<NvmlSampler> Make(const std::string& library = FAKE_NVML_PATH,
                                    std::chrono::milliseconds deadline = {}) {
    NvmlSampler::Options o;
    o.library = library;
    o.interval = std::chrono::seconds(1);
    o.gauge_interval = o.interval;  // every read whole, but in the cadence's own test
    // Unless a test times a hang: generous, so that a slow (sanitizer, -O0)
    // build on a loaded machine is never mistaken for a hang.
    o.deadline = deadline.count() > 0 ? deadline : kGenerousDeadline;
    return std::make_unique<NvmlSampler>(o, FaultCatalog::Builtin(), &registry_, &self_);
  }
  double Health(const std::string& uuid) {
    return xpu::testing::MetricValue(registry_, "xpu_device_health",
                                     {{"source", "nvml"}, {"uuid", uuid}});
  }
  store::Sight Sight() {
    for (const store::SourceView& v : registry_.SourceViews())
      if (v.source == "nvml") return v.sight;
    return store::Sight::kNotYet;
  }

  store::DeviceRegistry registry_;
  prometheus::Registry self_;
};

TEST_F(NvmlSamplerTest, PublishesEveryCardJoinedToXdmsListByBusId) {
  auto s = Make();
  ASSERT_TRUE(s->SampleOnce());
  using xpu::testing::MetricValue;
  EXPECT_EQ(MetricValue(self_, "xpu_nvml_up"), 1);
  EXPECT_EQ(Sight(), store::Sight::kSeeing);
  // The A100 by XDM's minor and uuid; its pending remap is reset_card.
  EXPECT_EQ(
      MetricValue(
          registry_, "xpu_device_fault_active",
          {{"source", "nvml"}, {"minor", "3"}, {"uuid", "XDM-3"}, {"code", kNvmlRowRemapPending}}),
      1);
  EXPECT_EQ(Health("XDM-3"), 0);
  // The H800, which XDM does not list: named by NVML's UUID, judged.
  EXPECT_EQ(
      MetricValue(registry_, "xpu_device_fault_active",
                  {{"source", "nvml"}, {"uuid", "GPU-h800-1"}, {"code", kNvmlRetirementPending}}),
      1);
  EXPECT_EQ(Health("GPU-h800-1"), 0);
  // Its families, on the joined names.
  EXPECT_EQ(MetricValue(registry_, "xpu_nvml_ecc_errors_total",
                        {{"minor", "3"}, {"error", "uncorrected"}, {"scope", "aggregate"}}),
            1);
  EXPECT_EQ(MetricValue(registry_, "xpu_nvml_clock_event_active",
                        {{"uuid", "GPU-h800-1"}, {"reason", "hw_thermal_slowdown"}}),
            1);
  EXPECT_EQ(MetricValue(registry_, "xpu_nvml_clock_event_active",
                        {{"uuid", "GPU-h800-1"}, {"reason", "gpu_idle"}}),
            0);
  EXPECT_EQ(MetricValue(registry_, "xpu_nvml_nvlink_errors_total",
                        {{"uuid", "GPU-h800-1"}, {"link", "0"}, {"counter", "crc_flit"}}),
            7);
  EXPECT_EQ(MetricValue(registry_, "xpu_nvml_mig_device_info",
                        {{"minor", "3"}, {"mig_uuid", "MIG-a100-0-1"}, {"gpu_instance", "1"}}),
            1);
  EXPECT_EQ(MetricValue(registry_, "xpu_nvml_row_remap_pending", {{"minor", "3"}}), 1);
}

// A lost card (NVML_ERROR_GPU_IS_LOST) is unhealthy with nvidia_gpu_lost
// at isolate_card in the sample that finds it; the other card still reads.
// The gauges XDM reports too, under XDM's families and labels (minor,
// uuid, model): XDM's minor, uuid and model for a card it lists, NVML's own
// for one it does not; only what the card gives (the H800 gives no power).
// A reload between an Xid and the sample that would raise it: the new
// sampler takes the events its predecessor's reader had taken (NVML gives a
// new event set nothing from before it was made).
TEST_F(NvmlSamplerTest, EventsTakenBeforeAReloadAreRaisedAfterIt) {
  Json f = TwoCards();
  f["devices"][0].erase("remap");
  Write(f);
  void* lib = dlopen(FAKE_NVML_PATH, RTLD_NOW);
  ASSERT_NE(lib, nullptr);
  auto sets_made = reinterpret_cast<int (*)()>(dlsym(lib, "xpu_fake_nvml_event_sets_made"));
  auto delivered = reinterpret_cast<int (*)()>(dlsym(lib, "xpu_fake_nvml_events_delivered"));
  ASSERT_NE(sets_made, nullptr);
  ASSERT_NE(delivered, nullptr);
  auto old = Make();
  const int sets_before = sets_made();
  ASSERT_TRUE(old->SampleOnce());
  ASSERT_TRUE(
      xpu::testing::WaitFor([&] { return sets_made() > sets_before; }, std::chrono::seconds(5)));
  const int delivered_before = delivered();
  f["events"] = {{{"device", 0}, {"type", 8}, {"data", 79}}};
  Write(f);
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return delivered() > delivered_before; },
                                    std::chrono::seconds(5)));
  auto next = Make();
  // The reader queues what NVML delivered a moment after: taken over until there.
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] {
        next->TakeOver(*old);
        return next->SampleOnce() &&
               xpu::testing::MetricValue(
                   registry_, "xpu_device_fault_active",
                   {{"source", "nvml"}, {"uuid", "XDM-3"}, {"code", "0x10DE004F"}}) == 1;
      },
      std::chrono::seconds(5)));
  dlclose(lib);
}

// Events the driver reports while a reload swaps the samplers (after the
// old one's last sample, before the new one's first) all raise: the new
// sampler goes on with the old one's reader and its event listener. Before,
// the old listener was quit and the new one's event set, made at its first
// read, got nothing from before it.
TEST_F(NvmlSamplerTest, XidEventsDeliveredDuringAReloadAllRaise) {
  Json f = TwoCards();
  f["devices"][0].erase("remap");
  Write(f);
  void* lib = dlopen(FAKE_NVML_PATH, RTLD_NOW);
  ASSERT_NE(lib, nullptr);
  auto sets_made = reinterpret_cast<int (*)()>(dlsym(lib, "xpu_fake_nvml_event_sets_made"));
  ASSERT_NE(sets_made, nullptr);
  auto old = Make();
  const int sets_before = sets_made();
  ASSERT_TRUE(old->SampleOnce());
  ASSERT_TRUE(
      xpu::testing::WaitFor([&] { return sets_made() > sets_before; }, std::chrono::seconds(5)));
  auto next = Make();
  next->TakeOver(*old);
  old.reset();
  // Between the swap and the new sampler's first read: an Xid 79 on the
  // A100 and an Xid 48 (double-bit ECC) on the H800.
  f["events"] = {{{"device", 0}, {"type", 8}, {"data", 79}},
                 {{"device", 1}, {"type", 8}, {"data", 48}}};
  Write(f);
  const auto active = [&](const std::string& uuid, const char* code) {
    return xpu::testing::MetricValue(registry_, "xpu_device_fault_active",
                                     {{"source", "nvml"}, {"uuid", uuid}, {"code", code}}) == 1;
  };
  EXPECT_TRUE(xpu::testing::WaitFor(
      [&] {
        return next->SampleOnce() && active("XDM-3", "0x10DE004F") &&
               active("GPU-h800-1", "0x10DE0030");
      },
      std::chrono::seconds(5)));
  EXPECT_EQ(sets_made(), sets_before + 1) << "the event set of the first reader goes on";
  dlclose(lib);
}

// --hal=auto with a driver that loads after the exporter: nvmlInit_v2
// fails, then works. Meanwhile the source is "looking" (no nvml family, no
// sight to judge); once it works, xpu_nvml_up is 1 within 3 intervals.
TEST_F(NvmlSamplerTest, AutoPicksUpADriverThatLoadsLate) {
  Json f = TwoCards();
  f["init_error"] = nvml::kErrorDriverNotLoaded;
  Write(f);
  NvmlLookout::Build b;
  b.options.library = FreshPath("late.so");  // not opened by this process yet
  b.options.interval = std::chrono::seconds(1);
  b.catalog = FaultCatalog::Builtin();
  b.registry = &registry_;
  b.self_metrics = &self_;
  NvmlLookout lookout(b);
  lookout.Start();
  ASSERT_TRUE(xpu::testing::WaitFor([&] {
    auto looking = registry_.Looking();
    auto it = looking.find("nvml");
    return it != looking.end() && it->second.find("Driver Not Loaded") != std::string::npos;
  }));
  EXPECT_EQ(xpu::testing::MetricValue(self_, "xpu_nvml_up"), -1) << "no family while looking";
  EXPECT_EQ(Sight(), store::Sight::kNotYet) << "not judged while looking";
  Write(TwoCards());
  const auto loaded = std::chrono::steady_clock::now();
  // Waited for through the registry (its lock orders this thread after the
  // sampler's first view); the self-metrics are read once it sees.
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return Sight() == store::Sight::kSeeing; },
                                    std::chrono::seconds(10)));
  EXPECT_LE(std::chrono::steady_clock::now() - loaded, 3 * b.options.interval);
  EXPECT_EQ(xpu::testing::MetricValue(self_, "xpu_nvml_up"), 1);
  EXPECT_TRUE(registry_.Looking().empty());
  lookout.Stop();
}

// A reload keeps the source it found: the new lookout takes the running
// sampler over without looking again, and a library that then stops
// answering leaves it blind, never closed (no longer "not found").
TEST_F(NvmlSamplerTest, AReloadKeepsTheNvmlSourceItFound) {
  NvmlLookout::Build b;
  b.options.library = FAKE_NVML_PATH;
  b.options.interval = std::chrono::milliseconds(500);
  b.options.deadline = std::chrono::milliseconds(400);
  b.catalog = FaultCatalog::Builtin();
  b.registry = &registry_;
  b.self_metrics = &self_;
  auto first = std::make_unique<NvmlLookout>(b);
  first->Start();
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return Sight() == store::Sight::kSeeing; },
                                    std::chrono::seconds(10)));
  first->Stop();
  Json f = TwoCards();
  f["hang_ms"] = {{"nvmlDeviceGetUUID", 3000}};  // a call of every read, health only too
  Write(f);                                      // the library hangs from here on
  prometheus::Registry other;
  b.self_metrics = &other;
  NvmlLookout second(b);
  second.TakeOver(*first);
  second.Start();
  ASSERT_NE(second.sampler(), nullptr) << "found at once";
  EXPECT_TRUE(registry_.Looking().empty());
  EXPECT_TRUE(xpu::testing::WaitFor([&] { return Sight() == store::Sight::kBlind; },
                                    std::chrono::seconds(10)));
  second.Stop();
  first.reset();
  Write(TwoCards());  // the hanging call ends
}

// Each fact at its cadence: between whole reads (every --hal.gauge-interval)
// each interval reads only what raises a fault, so a row remap pending is
// raised in the next sample, while the gauges keep their last whole read's
// values; the next whole read brings them. The read between asks a few
// calls a card, not every field's.
TEST_F(NvmlSamplerTest, GaugesAreReadAtTheirCadenceAndFaultsEveryInterval) {
  void* lib = dlopen(FAKE_NVML_PATH, RTLD_NOW);
  ASSERT_NE(lib, nullptr);
  auto calls = reinterpret_cast<long (*)()>(dlsym(lib, "xpu_fake_nvml_calls"));
  ASSERT_NE(calls, nullptr);
  Json f = TwoCards();
  f["devices"][0].erase("remap");
  Write(f);
  NvmlSampler::Options o;
  o.library = FAKE_NVML_PATH;
  o.interval = std::chrono::seconds(1);
  o.gauge_interval = std::chrono::milliseconds(1500);
  o.deadline = kGenerousDeadline;
  NvmlSampler s(o, FaultCatalog::Builtin(), &registry_, &self_);
  using xpu::testing::MetricValue;
  const std::map<std::string, std::string> a100 = {{"minor", "3"}};
  long before = calls();
  ASSERT_TRUE(s.SampleOnce());  // the first read is whole
  const long whole = calls() - before;
  EXPECT_EQ(MetricValue(registry_, "xpu_temperature_celsius", a100), 41);
  f["devices"][0]["temperature"] = 77;
  f["devices"][0]["remap"] = {{"corrected", 0}, {"uncorrected", 1}, {"pending", true}};
  Write(f);
  before = calls();
  ASSERT_TRUE(s.SampleOnce());  // within the gauges' cadence: health only
  const long health_only = calls() - before;
  EXPECT_EQ(MetricValue(registry_, "xpu_device_fault_active",
                        {{"source", "nvml"}, {"minor", "3"}, {"code", kNvmlRowRemapPending}}),
            1)
      << "a fault is read every interval";
  EXPECT_EQ(MetricValue(registry_, "xpu_temperature_celsius", a100), 41)
      << "a gauge waits for its cadence";
  // (Summed over the card's links: the family is in the page's order, whose
  // first series of the card is a counter at 0.)
  EXPECT_GT(
      xpu::testing::MetricSum(registry_, "xpu_nvml_nvlink_errors_total", {{"uuid", "GPU-h800-1"}}),
      0)
      << "the slow facts stay between whole reads";
  EXPECT_LT(health_only * 4, whole) << health_only << " calls against " << whole;
  EXPECT_TRUE(xpu::testing::WaitFor(
      [&] {
        return s.SampleOnce() && MetricValue(registry_, "xpu_temperature_celsius", a100) == 77;
      },
      std::chrono::seconds(10)));
  dlclose(lib);
}

// A whole read slower than the deadline (a gauge's calls slow on a busy
// node) leaves the reads between whole ones to the faults, which answer in
// time: a row remap pending is raised. Before, a whole read that never
// answered in time was asked again at every sample, no health-only read
// ran, and the source stayed blind for good.
TEST_F(NvmlSamplerTest, AWholeReadSlowerThanTheDeadlineLeavesTheFaultsRead) {
  Json f = TwoCards();
  f["hang_ms"] = {{"nvmlDeviceGetTemperature", 700}};  // a gauge's call: whole reads only
  f["devices"][0]["remap"] = {{"corrected", 0}, {"uncorrected", 1}, {"pending", true}};
  Write(f);
  NvmlSampler::Options o;
  o.library = FAKE_NVML_PATH;
  o.interval = std::chrono::seconds(1);
  o.gauge_interval = std::chrono::seconds(5);
  o.deadline = std::chrono::milliseconds(300);
  NvmlSampler s(o, FaultCatalog::Builtin(), &registry_, &self_);
  EXPECT_TRUE(xpu::testing::WaitFor(
      [&] {
        return s.SampleOnce() &&
               xpu::testing::MetricValue(
                   registry_, "xpu_device_fault_active",
                   {{"source", "nvml"}, {"minor", "3"}, {"code", kNvmlRowRemapPending}}) == 1;
      },
      std::chrono::seconds(8)))
      << "blind while every read was whole and late";
}

// A driver whose nvmlEventSetCreate fails: no Xid events, said once, and
// tried again a register retry (the gauge interval) later, not at every
// read. Before, every read (each second) started a thread that tried and
// warned again.
TEST_F(NvmlSamplerTest, AnEventSetThatCannotBeMadeIsTriedAgainLaterNotAtEveryRead) {
  void* lib = dlopen(FAKE_NVML_PATH, RTLD_NOW);
  ASSERT_NE(lib, nullptr);
  auto attempts = reinterpret_cast<int (*)()>(dlsym(lib, "xpu_fake_nvml_event_set_attempts"));
  ASSERT_NE(attempts, nullptr);
  Json f = TwoCards();
  f["event_create_error"] = 999;  // NVML_ERROR_UNKNOWN
  Write(f);
  NvmlSampler::Options o;
  o.library = FAKE_NVML_PATH;
  o.interval = std::chrono::seconds(1);
  o.gauge_interval = std::chrono::seconds(30);
  o.deadline = kGenerousDeadline;
  NvmlSampler s(o, FaultCatalog::Builtin(), &registry_, &self_);
  const int before = attempts();
  ASSERT_TRUE(s.SampleOnce());
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return attempts() > before; }, std::chrono::seconds(5)));
  for (int i = 1; i < 6; ++i) {
    ASSERT_TRUE(s.SampleOnce());
    // A read that starts another try makes it within this wait.
    (void)xpu::testing::WaitFor([&] { return attempts() > before + i; },
                                std::chrono::milliseconds(300));
  }
  EXPECT_EQ(attempts() - before, 1) << "tried again at every read";
  dlclose(lib);
}

TEST_F(NvmlSamplerTest, XdmsGaugesUnderXdmsNamesForEveryCard) {
  store::DeviceInfo a100;
  a100.minor = 3;
  a100.uuid = "XDM-3";
  a100.model = "A100";
  a100.bus_id = "0000:3b:00.0";
  registry_.SetXdmDevices({a100});
  auto s = Make();
  ASSERT_TRUE(s->SampleOnce());
  using xpu::testing::MetricValue;
  const std::map<std::string, std::string> a = {
      {"minor", "3"}, {"uuid", "XDM-3"}, {"model", "A100"}};
  const std::map<std::string, std::string> h = {
      {"minor", ""}, {"uuid", "GPU-h800-1"}, {"model", "NVIDIA H800"}};
  EXPECT_EQ(MetricValue(registry_, "xpu_temperature_celsius", a), 41);
  EXPECT_EQ(MetricValue(registry_, "xpu_temperature_celsius", h), 88);
  EXPECT_EQ(MetricValue(registry_, "xpu_power_watts", a), 91.5);
  EXPECT_EQ(MetricValue(registry_, "xpu_power_watts", h), -1) << "not supported: none";
  EXPECT_EQ(MetricValue(registry_, "xpu_energy_joules_total", a), 5000);
  EXPECT_EQ(MetricValue(registry_, "xpu_memory_used_bytes", a), 1073741824);
  EXPECT_EQ(MetricValue(registry_, "xpu_memory_total_bytes", h), 85899345920.0);
  EXPECT_DOUBLE_EQ(MetricValue(registry_, "xpu_utilization_ratio", a), 0.37);
}

TEST_F(NvmlSamplerTest, ALostCardIsIsolateCardInTheSampleThatFindsIt) {
  auto s = Make();
  ASSERT_TRUE(s->SampleOnce());
  Json f = TwoCards();
  f["devices"][0]["lost"] = true;
  Write(f);
  ASSERT_TRUE(s->SampleOnce());
  using xpu::testing::MetricValue;
  EXPECT_EQ(MetricValue(registry_, "xpu_device_fault_level", {{"source", "nvml"}, {"minor", "3"}}),
            6);
  EXPECT_EQ(MetricValue(registry_, "xpu_device_fault_active",
                        {{"source", "nvml"}, {"minor", "3"}, {"code", kNvmlGpuLost}}),
            1);
  EXPECT_EQ(Health("XDM-3"), 0);
  EXPECT_EQ(MetricValue(registry_, "xpu_nvml_clock_event_active",
                        {{"uuid", "GPU-h800-1"}, {"reason", "hw_thermal_slowdown"}}),
            1);
}

// A card lost before NVML ever named it (the exporter restarted after the
// Xid 79: NVML's index read answers GPU_IS_LOST from the first call, with
// no uuid or bus id): asked for by the address the inventory knows (here
// XDM's list), found lost, and its isolate_card is on a series that names
// its bus address and reaches the Node condition: False, not DeviceNotSeen.
TEST_F(NvmlSamplerTest, ACardLostFromTheFirstReadIsFoundByItsAddress) {
  Json f = TwoCards();
  f["devices"][0]["lost"] = true;
  Write(f);
  auto s = Make();
  ASSERT_TRUE(s->SampleOnce());
  using xpu::testing::MetricValue;
  EXPECT_EQ(
      MetricValue(
          registry_, "xpu_device_fault_active",
          {{"source", "nvml"}, {"bus_id", "0000:3b:00.0"}, {"minor", "3"}, {"code", kNvmlGpuLost}}),
      1);
  EXPECT_EQ(MetricValue(registry_, "xpu_device_fault_level", {{"source", "nvml"}, {"bus_id", ""}}),
            -1)
      << "no card without an address beside it";
  const sinks::NodeCondition c = sinks::ConditionOf(registry_.SourceViews(), true);
  EXPECT_EQ(c.status, "False") << c.reason << ": " << c.message;
  EXPECT_NE(c.message.find("xpu 3 (0000:3b:00.0): " + std::string(kNvmlGpuLost)), std::string::npos)
      << c.message;
}

// Two cards lost at once, NVML's index order not their addresses' order
// (index 0 at 5e, index 1 at 3b), the inventory naming them by address only:
// each keeps its own uuid with its own address, whether the library gives a
// lost card's handle by index (paired by handle) or not (named by what its
// index was); whether XDM lists the cards (no uuid) or no daemon answers and
// the bus is the inventory; and whether NVML read nothing (blind) between
// the read that named them and the one that finds them lost. Before, the
// cards asked for by address were paired with the nameless lost ones in the
// order asked, and each lost card was shown with the other's uuid.
TEST_F(NvmlSamplerTest, TwoCardsLostAtOnceKeepTheirOwnNames) {
  for (const bool handle_by_index : {true, false}) {
    for (const bool no_daemon : {false, true}) {
      for (const bool blind_between : {false, true}) {
        SCOPED_TRACE(
            std::string(handle_by_index ? "handle given by index" : "handle only by address") +
            (no_daemon ? ", no daemon: the bus lists them" : ", XDM lists them") +
            (blind_between ? ", NVML blind between" : ""));
        store::DeviceRegistry registry;
        if (no_daemon) {
          std::vector<store::PciDeviceView> bus(2);
          for (auto& [view, address] :
               {std::pair{&bus[0], "0000:3b:00.0"}, {&bus[1], "0000:5e:00.0"}}) {
            view->bus_id = address;
            view->vendor = "0x10de";
            view->driver = "nvidia";
          }
          registry.SetPciDevices(bus);
        } else {
          std::vector<store::DeviceInfo> xdm(2);
          xdm[0].minor = 3;
          xdm[0].bus_id = "0000:3b:00.0";
          xdm[1].minor = 5;
          xdm[1].bus_id = "0000:5e:00.0";
          registry.SetXdmDevices(xdm);
        }
        Json f = TwoCards();
        std::swap(f["devices"][0], f["devices"][1]);
        f["lost_by_index_no_handle"] = !handle_by_index;
        Write(f);
        NvmlSampler::Options o;
        o.library = FAKE_NVML_PATH;
        o.interval = std::chrono::seconds(1);
        o.gauge_interval = o.interval;
        o.deadline = kGenerousDeadline;
        prometheus::Registry self;
        NvmlSampler s(o, FaultCatalog::Builtin(), &registry, &self);
        ASSERT_TRUE(s.SampleOnce());
        if (blind_between) {
          f["count_error"] = 999;  // NVML_ERROR_UNKNOWN
          Write(f);
          ASSERT_FALSE(s.SampleOnce());
          ASSERT_FALSE(s.up());
          f.erase("count_error");
        }
        f["devices"][0]["lost"] = true;
        f["devices"][1]["lost"] = true;
        Write(f);
        ASSERT_TRUE(s.SampleOnce());
        using xpu::testing::MetricValue;
        const std::map<std::string, std::string> own = {{"0000:3b:00.0", "GPU-a100-0"},
                                                        {"0000:5e:00.0", "GPU-h800-1"}};
        for (const auto& [bus, uuid] : own) {
          EXPECT_EQ(
              MetricValue(
                  registry, "xpu_device_fault_active",
                  {{"source", "nvml"}, {"bus_id", bus}, {"uuid", uuid}, {"code", kNvmlGpuLost}}),
              1)
              << bus << " is " << uuid;
          for (const auto& [other_bus, other] : own) {
            if (other_bus == bus) continue;
            EXPECT_EQ(MetricValue(registry, "xpu_device_fault_active",
                                  {{"source", "nvml"}, {"bus_id", bus}, {"uuid", other}}),
                      -1)
                << bus << " is not " << other;
          }
        }
        for (const auto& [index, id] : s.identities()) {
          if (id.bus_id.empty()) continue;
          EXPECT_EQ(own.at(id.bus_id), id.uuid) << "index " << index << " named as it was";
        }
        EXPECT_EQ(
            MetricValue(registry, "xpu_device_fault_level", {{"source", "nvml"}, {"bus_id", ""}}),
            -1)
            << "no card without an address beside them";
      }
    }
  }
}

// Memory used as nvidia-smi shows it (nvmlDeviceGetMemoryInfo_v2), with the
// driver's reservation on the page apart: the H200's own readings (NVIDIA's
// binding, idle and under load, tests/fixtures/nvidia-h200/) through a
// stand-in that answers both versions as that driver did.
TEST_F(NvmlSamplerTest, MemoryUsedIsWhatTheSecondVersionSaysAndTheReservationIsApart) {
  std::ifstream tsv(std::string(XPU_FIXTURES_DIR) + "/nvidia-h200/pynvml-readings.tsv");
  ASSERT_TRUE(tsv.good());
  std::map<std::pair<std::string, std::string>, double> reading;
  for (std::string line; std::getline(tsv, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string state, field, value;
    std::getline(in, state, '\t');
    std::getline(in, field, '\t');
    std::getline(in, value, '\t');
    reading[{state, field}] = std::stod(value);
  }
  for (const char* state : {"idle", "load"}) {
    const double total = reading.at({state, "memory total B"});
    const double v1 = reading.at({state, "memory used B (v1)"});
    const double v2 = reading.at({state, "memory used B (v2)"});
    ASSERT_GT(v1, v2) << "the first version counts the reservation";
    Json f = TwoCards();
    f["devices"][0]["memory"] = {{"total", static_cast<uint64_t>(total)},
                                 {"used", static_cast<uint64_t>(v2)},
                                 {"reserved", static_cast<uint64_t>(v1 - v2)}};
    Write(f);
    auto s = Make();
    ASSERT_TRUE(s->SampleOnce());
    using xpu::testing::MetricValue;
    const std::map<std::string, std::string> card = {{"uuid", "XDM-3"}};
    EXPECT_EQ(MetricValue(registry_, "xpu_memory_used_bytes", card), v2) << state;
    EXPECT_EQ(MetricValue(registry_, "xpu_memory_total_bytes", card), total) << state;
    EXPECT_EQ(MetricValue(registry_, "xpu_nvml_memory_reserved_bytes", card), v1 - v2) << state;
  }
}

// XDM may give a bus id in NVIDIA's own form: the join does not depend on it.
TEST_F(NvmlSamplerTest, JoinsXdmsBusIdInAnyFormItGives) {
  store::DeviceInfo a100;
  a100.minor = 3;
  a100.uuid = "XDM-3";
  a100.bus_id = "00000000:3B:00.0";
  registry_.SetXdmDevices({a100});
  auto s = Make();
  ASSERT_TRUE(s->SampleOnce());
  EXPECT_EQ(xpu::testing::MetricValue(registry_, "xpu_device_health",
                                      {{"source", "nvml"}, {"minor", "3"}, {"uuid", "XDM-3"}}),
            0)
      << "joined to minor 3 (its pending remap is reset_card)";
}

// A card whose registration for events failed (NVML busy, the card lost a
// moment) is registered again, at each whole read's cadence, not left deaf:
// an Xid on it after that raises. It used to be never registered again, and
// its Xids were dropped while the source read it as healthy.
TEST_F(NvmlSamplerTest, ACardThatCouldNotBeRegisteredForEventsIsRegisteredAgain) {
  NvmlSampler::Options o;
  o.library = FAKE_NVML_PATH;
  o.interval = std::chrono::milliseconds(100);
  o.gauge_interval = std::chrono::milliseconds(100);
  o.deadline = kGenerousDeadline;
  auto s = std::make_unique<NvmlSampler>(o, FaultCatalog::Builtin(), &registry_, &self_);
  Json f = TwoCards();
  f["devices"][0].erase("remap");
  f["devices"][1]["retired"]["pending"] = false;
  f["devices"][1]["errors"] = {{"nvmlDeviceRegisterEvents", nvml::kErrorUnknown}};
  Write(f);
  void* lib = dlopen(FAKE_NVML_PATH, RTLD_NOW);
  ASSERT_NE(lib, nullptr);
  auto sets_made = reinterpret_cast<int (*)()>(dlsym(lib, "xpu_fake_nvml_event_sets_made"));
  auto delivered = reinterpret_cast<int (*)()>(dlsym(lib, "xpu_fake_nvml_events_delivered"));
  auto registered_of = reinterpret_cast<int (*)(int)>(dlsym(lib, "xpu_fake_nvml_registrations_of"));
  ASSERT_NE(sets_made, nullptr);
  ASSERT_NE(delivered, nullptr);
  ASSERT_NE(registered_of, nullptr);
  const int sets_before = sets_made();
  ASSERT_TRUE(s->SampleOnce());
  ASSERT_TRUE(
      xpu::testing::WaitFor([&] { return sets_made() > sets_before; }, std::chrono::seconds(5)));
  const int card1_before = registered_of(1);  // card 1 refuses: no listener registers it
  f["devices"][1].erase("errors");            // registration works from here on
  Write(f);
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return registered_of(1) > card1_before; },
                                    std::chrono::seconds(10)))
      << "card 1 was not registered again";
  const int delivered_before = delivered();
  f["events"] = {{{"device", 1}, {"type", 8}, {"data", 48}}};
  Write(f);
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return delivered() > delivered_before; },
                                    std::chrono::seconds(10)));
  EXPECT_TRUE(xpu::testing::WaitFor(
      [&] {
        (void)s->SampleOnce();
        return xpu::testing::MetricValue(
                   registry_, "xpu_device_fault_active",
                   {{"source", "nvml"}, {"uuid", "GPU-h800-1"}, {"code", "0x10DE0030"}}) == 1;
      },
      std::chrono::seconds(5)))
      << "the Xid 48 of a card registered again";
}

// NVML's Xid events raise the codes the kernel log gives the same Xid, at
// the same levels: a state (Xid 79) stays, an event clears after its time.
TEST_F(NvmlSamplerTest, XidEventsRaiseTheKernelLogsCodesAndEventsClearInTime) {
  NvmlSampler::Options o;
  o.library = FAKE_NVML_PATH;
  o.interval = std::chrono::seconds(1);
  o.event_active_for = std::chrono::milliseconds(300);
  o.states = {"0x10DE004F"};
  o.deadline = kGenerousDeadline;
  auto s = std::make_unique<NvmlSampler>(o, FaultCatalog::Builtin(), &registry_, &self_);
  Json f = TwoCards();
  f["devices"][0].erase("remap");  // no pending remap: only the events raise
  f["devices"][1]["retired"]["pending"] = false;
  Write(f);
  void* lib = dlopen(FAKE_NVML_PATH, RTLD_NOW);
  ASSERT_NE(lib, nullptr);
  auto sets_made = reinterpret_cast<int (*)()>(dlsym(lib, "xpu_fake_nvml_event_sets_made"));
  ASSERT_NE(sets_made, nullptr);
  const int sets_before = sets_made();
  ASSERT_TRUE(s->SampleOnce());  // the event thread starts with the first read
  EXPECT_EQ(Health("XDM-3"), 1);
  // Events come to a set made before them, as NVML's do.
  ASSERT_TRUE(
      xpu::testing::WaitFor([&] { return sets_made() > sets_before; }, std::chrono::seconds(5)));
  f["events"] = {{{"device", 0}, {"type", 8}, {"data", 79}},
                 {{"device", 1}, {"type", 8}, {"data", 13}}};
  Write(f);
  using xpu::testing::MetricValue;
  auto active = [&](const std::string& uuid, const std::string& code) {
    return MetricValue(registry_, "xpu_device_fault_active",
                       {{"source", "nvml"}, {"uuid", uuid}, {"code", code}});
  };
  // Both events may come in one sample, and the event's 300 ms may pass
  // before the next on a slow build: each is looked for in every sample.
  bool seen13 = false;
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] {
        const bool read = s->SampleOnce();
        seen13 = seen13 || active("GPU-h800-1", "0x10DE000D") == 1;
        return read && active("XDM-3", "0x10DE004F") == 1;
      },
      std::chrono::seconds(5)));
  EXPECT_EQ(MetricValue(registry_, "xpu_device_fault_level", {{"source", "nvml"}, {"minor", "3"}}),
            6)
      << "Xid 79 is isolate_card, as in the kernel log's catalog";
  EXPECT_EQ(Health("XDM-3"), 0);
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] {
        seen13 = seen13 || (s->SampleOnce() && active("GPU-h800-1", "0x10DE000D") == 1);
        return seen13;
      },
      std::chrono::seconds(5)));
  // The event clears once its time has passed; the state stays.
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] { return s->SampleOnce() && active("GPU-h800-1", "0x10DE000D") != 1; },
      std::chrono::seconds(5)));
  EXPECT_EQ(active("XDM-3", "0x10DE004F"), 1);
  EXPECT_EQ(Health("XDM-3"), 0);
  dlclose(lib);
}

TEST(NvmlEventCodeTest, XidsDoubleBitEccAndTheRest) {
  EXPECT_EQ(NvmlEventCode({0, nvml::kEventXidCriticalError, 79}), "0x10DE004F");
  EXPECT_EQ(NvmlEventCode({0, nvml::kEventDoubleBitEccError, 0}), "0x10DE0030");
  EXPECT_EQ(NvmlEventCode({0, nvml::kEventXidCriticalError, 0}), "");
  EXPECT_EQ(NvmlEventCode({0, nvml::kEventXidCriticalError, 0x10000}), "");
  EXPECT_EQ(NvmlEventCode({0, nvml::kEventSingleBitEccError, 0}), "");
  EXPECT_EQ(NvmlEventCode({0, nvml::kEventClock, 0}), "");
}

// A card whose handle cannot be had is not seen: no health (Unknown to the
// Node), never healthy; the other card is judged.
TEST_F(NvmlSamplerTest, ACardThatCannotBeReadHasNoHealthAndKeepsTheFaultsLastRead) {
  Json f = TwoCards();
  f["devices"][1]["retired"]["pending"] = false;  // healthy
  Write(f);
  auto s = Make();
  ASSERT_TRUE(s->SampleOnce());
  EXPECT_EQ(Health("GPU-h800-1"), 1);
  f["devices"][1]["errors"] = {{"nvmlDeviceGetHandleByIndex_v2", nvml::kErrorUnknown}};
  Write(f);
  ASSERT_TRUE(s->SampleOnce());
  EXPECT_EQ(Health("GPU-h800-1"), -1);
  EXPECT_EQ(Health("XDM-3"), 0);  // its pending remap
  // A card with a card-level fault (a pending page retirement) whose reads
  // then fail: the fault last read stays (a failed read is no recovery),
  // the card is not seen, and its kept fault still judges it.
  f = TwoCards();
  Write(f);
  ASSERT_TRUE(s->SampleOnce());
  const std::map<std::string, std::string> pending = {
      {"source", "nvml"}, {"uuid", "GPU-h800-1"}, {"code", kNvmlRetirementPending}};
  ASSERT_EQ(xpu::testing::MetricValue(registry_, "xpu_device_fault_active", pending), 1);
  f["devices"][1]["errors"] = {{"nvmlDeviceGetHandleByIndex_v2", nvml::kErrorUnknown}};
  Write(f);
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(s->SampleOnce());
    EXPECT_EQ(xpu::testing::MetricValue(registry_, "xpu_device_fault_active", pending), 1);
    EXPECT_EQ(Health("GPU-h800-1"), 0);
  }
  for (const store::SourceView& v : registry_.SourceViews())
    for (const store::SourceView::Device& d : v.devices)
      if (v.source == "nvml" && d.bus_id == "0000:5e:00.0") {
        EXPECT_FALSE(d.seen);
        EXPECT_EQ(d.faults.size(), 1u);
      }
}

// A card whose handle answers but whose health cannot be read is not seen
// either: a call that tells its health (row remaps, page retirement) failing
// for another reason than "not supported", or every call failing, leaves its
// health Unknown, never healthy. A fault it shows all the same still counts.
TEST_F(NvmlSamplerTest, ACardWhoseHealthCallsFailHasNoHealth) {
  auto s = Make();
  Json f = TwoCards();
  f["devices"][1]["retired"]["pending"] = false;  // healthy as far as it answers
  f["devices"][1]["errors"] = {{"nvmlDeviceGetRemappedRows", nvml::kErrorUnknown}};
  Write(f);
  ASSERT_TRUE(s->SampleOnce());
  EXPECT_EQ(Health("GPU-h800-1"), -1) << "a failed remap read is not a clean one";
  // "Not supported" is an answer: a card without row remapping is judged.
  f["devices"][1]["errors"] = {{"nvmlDeviceGetRemappedRows", nvml::kErrorNotSupported}};
  Write(f);
  ASSERT_TRUE(s->SampleOnce());
  EXPECT_EQ(Health("GPU-h800-1"), 1);
  // Every call failing (a driver in a bad state answers each with UNKNOWN).
  Json all = Json::object();
  for (const char* fn : {"nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetPciInfo_v3",
                         "nvmlDeviceGetTemperature", "nvmlDeviceGetPowerUsage",
                         "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetMemoryInfo",
                         "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetCurrentClocksEventReasons",
                         "nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetEccMode",
                         "nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus",
                         "nvmlDeviceGetRemappedRows", "nvmlDeviceGetNvLinkState",
                         "nvmlDeviceGetMigMode", "nvmlDeviceGetComputeRunningProcesses_v2"})
    all[fn] = nvml::kErrorUnknown;
  f["devices"][1]["errors"] = all;
  Write(f);
  ASSERT_TRUE(s->SampleOnce());
  EXPECT_EQ(Health("GPU-h800-1"), -1) << "nothing read is nothing seen";
  // A fault seen beside a failed call is still a fault: the A100's pending
  // remap with its retirement read failing.
  f["devices"][0]["errors"] = {{"nvmlDeviceGetRetiredPagesPendingStatus", nvml::kErrorUnknown}};
  Write(f);
  ASSERT_TRUE(s->SampleOnce());
  EXPECT_EQ(Health("XDM-3"), 0);
}

// The processes on each card, joined to their pods by their cgroups in the
// host's /proc (written here as the kubelet's cgroups name them): one series
// per container and card, its processes' memory summed; a process in no pod,
// one whose /proc entry is gone and one of a pod the API server did not give
// are counted, never named.
TEST_F(NvmlSamplerTest, ProcessesAreJoinedToTheirPodsByCgroup) {
  const std::string uid = "1f6c2f9e-7a1b-4c2d-9e3f-0a1b2c3d4e5f";
  const std::string stranger = "99999999-7a1b-4c2d-9e3f-0a1b2c3d4e5f";
  const std::string id(64, 'c');
  xpu::testing::TempDir proc;
  auto cgroup = [&](unsigned pid, const std::string& path) {
    std::filesystem::create_directory(proc.File(std::to_string(pid)));
    std::ofstream(proc.File(std::to_string(pid) + "/cgroup")) << "0::" << path << "\n";
  };
  const std::string in_pod = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                             std::string("1f6c2f9e_7a1b_4c2d_9e3f_0a1b2c3d4e5f") +
                             ".slice/cri-containerd-" + id + ".scope";
  cgroup(4242, in_pod);
  cgroup(4243, in_pod);
  cgroup(8, in_pod);
  cgroup(7, "/system.slice/nvidia-persistenced.service");
  cgroup(9, "/kubepods/besteffort/pod" + stranger + "/" + id);
  Json f = TwoCards();
  f["devices"][0]["processes"].push_back({{"pid", 4243}, {"used", 1024}});
  f["devices"][1]["processes"] = {{{"pid", 7}, {"used", 1}},
                                  {{"pid", 8}, {"used", 2048}},
                                  {{"pid", 9}, {"used", 4}},
                                  {{"pid", 10}, {"used", 8}},  // 10: no such process
                                  // NVML_VALUE_NOT_AVAILABLE: never summed
                                  {{"pid", 8}, {"used", 18446744073709551615ULL}}};
  Write(f);
  registry_.SetPodMetadata({{"ml", "train-0", {}, uid, {{id, "trainer"}}}});
  NvmlSampler::Options o;
  o.library = FAKE_NVML_PATH;
  o.deadline = kGenerousDeadline;
  o.host_proc = proc.path();
  auto s = std::make_unique<NvmlSampler>(o, FaultCatalog::Builtin(), &registry_, &self_);
  ASSERT_TRUE(s->SampleOnce());
  using xpu::testing::MetricSum;
  using xpu::testing::MetricValue;
  const std::map<std::string, std::string> trainer = {
      {"namespace", "ml"}, {"pod", "train-0"}, {"container", "trainer"}, {"source", "nvml"}};
  auto with = [&](std::map<std::string, std::string> l, const char* minor, const char* uuid) {
    l["minor"] = minor;
    l["uuid"] = uuid;
    return l;
  };
  EXPECT_EQ(MetricValue(registry_, "xpu_container_memory_used_bytes", with(trainer, "3", "XDM-3")),
            536870912 + 1024);
  EXPECT_EQ(
      MetricValue(registry_, "xpu_container_memory_used_bytes", with(trainer, "", "GPU-h800-1")),
      2048);
  EXPECT_EQ(MetricSum(registry_, "xpu_container_memory_used_bytes"), 536870912 + 1024 + 2048);
  EXPECT_EQ(MetricValue(self_, "xpu_nvml_processes", {{"cgroup", "pod"}}), 4);
  EXPECT_EQ(MetricValue(self_, "xpu_nvml_processes", {{"cgroup", "not_a_pod"}}), 1);
  EXPECT_EQ(MetricValue(self_, "xpu_nvml_processes", {{"cgroup", "unreadable"}}), 1);
  EXPECT_EQ(MetricValue(self_, "xpu_nvml_processes", {{"cgroup", "off"}}), 0);
  EXPECT_EQ(MetricValue(self_, "xpu_nvml_processes", {{"cgroup", "no_memory_value"}}), 1);

  // Without the host's /proc nothing is joined, and every process says so.
  o.host_proc.clear();
  s = std::make_unique<NvmlSampler>(o, FaultCatalog::Builtin(), &registry_, &self_);
  ASSERT_TRUE(s->SampleOnce());
  EXPECT_EQ(MetricValue(registry_, "xpu_container_memory_used_bytes"), -1);
  EXPECT_EQ(MetricValue(self_, "xpu_nvml_processes", {{"cgroup", "off"}}), 6);
  EXPECT_EQ(MetricValue(self_, "xpu_nvml_processes", {{"cgroup", "no_memory_value"}}), 1);
}

// nvmlInit_v2 failing: the source is blind (Unknown to the Node), never
// healthy, and says why.
TEST_F(NvmlSamplerTest, AFailingInitMakesTheSourceBlindNotHealthy) {
  Json f = TwoCards();
  f["init_error"] = nvml::kErrorDriverNotLoaded;
  Write(f);
  auto s = Make(FreshPath("sampler-init-fails.so"));
  EXPECT_FALSE(s->SampleOnce());
  EXPECT_EQ(Sight(), store::Sight::kBlind);
  EXPECT_EQ(xpu::testing::MetricValue(self_, "xpu_nvml_up"), 0);
  EXPECT_EQ(xpu::testing::MetricValue(registry_, "xpu_device_health", {{"source", "nvml"}}), -1);
  bool said = false;
  for (const store::SourceView& v : registry_.SourceViews())
    said = said || (v.source == "nvml" && v.why.find("Driver Not Loaded") != std::string::npos);
  EXPECT_TRUE(said);
}

// A call the driver never answers holds the reader thread only: the sample
// ends at its deadline with the source blind (its health withdrawn), the
// sampler stops at once, and once the call returns it sees again.
TEST_F(NvmlSamplerTest, AHangingCallMakesTheSourceBlindAtItsDeadline) {
  // The deadline is what divides a hang from a slow read, so it must stand
  // well above a whole read: about 4 ms alone in the TSan build, 25 times
  // that on a loaded CI machine (seen). At 200 ms a loaded run missed it on
  // every read after the hang, and the sampler rightly stayed blind.
  auto s = Make(FAKE_NVML_PATH, std::chrono::milliseconds(500));
  // The first read opens the library and starts NVML, which under a loaded
  // sanitizer build can take longer than the deadline: a read that missed it
  // is given up on and the next sample asks again.
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return s->SampleOnce(); }, std::chrono::seconds(10)));
  EXPECT_EQ(Health("GPU-h800-1"), 0);
  Json f = TwoCards();
  f["hang_ms"] = {{"nvmlDeviceGetTemperature", 1500}};
  Write(f);
  EXPECT_FALSE(s->SampleOnce());
  EXPECT_EQ(Sight(), store::Sight::kBlind);
  EXPECT_EQ(Health("GPU-h800-1"), -1) << "a blind source's health is withdrawn at once";
  Write(TwoCards());
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return s->SampleOnce(); }, std::chrono::seconds(10)));
  EXPECT_EQ(Sight(), store::Sight::kSeeing);
  // Hanging again, then destroyed while its reader is in the call: at once.
  f["hang_ms"] = {{"nvmlDeviceGetTemperature", 1000}};
  Write(f);
  EXPECT_FALSE(s->SampleOnce());
  s.reset();
  // The reader goes on alone; the test waits for it before the process ends.
  void* lib = dlopen(FAKE_NVML_PATH, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto hanging = reinterpret_cast<int (*)()>(dlsym(lib, "xpu_fake_nvml_hanging"));
  ASSERT_NE(hanging, nullptr);
  Write(TwoCards());
  EXPECT_TRUE(xpu::testing::WaitFor([&] { return hanging() == 0; }, std::chrono::seconds(10)));
  dlclose(lib);
}

// A read that does answer, but after its deadline: the source is blind as
// for a hang (what it would publish is older than a sample may be), but it
// says the reads are slow, how slow, and what to change, and the gauge
// shows how long the last read took. Before, it said "a call hangs" for
// ever, though NVML answered every time.
TEST_F(NvmlSamplerTest, AReadPastItsDeadlineIsBlindAndSaysItIsSlowNotHung) {
  auto s = Make(FAKE_NVML_PATH, std::chrono::milliseconds(500));
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return s->SampleOnce(); }, std::chrono::seconds(10)));
  const auto why = [&] {
    for (const store::SourceView& v : registry_.SourceViews())
      if (v.source == "nvml") return v.why;
    return std::string();
  };
  Json f = TwoCards();
  f["hang_ms"] = {{"nvmlDeviceGetTemperature", 500}};
  Write(f);
  EXPECT_FALSE(s->SampleOnce());
  EXPECT_NE(why().find("did not answer within 500 ms"), std::string::npos) << why();
  // The read answers at last (after 500 ms on each card): a later sample
  // finds its late answer, says so, and asks again (as slow). No sample
  // sees meanwhile.
  bool saw = false;
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] {
        saw = saw || s->SampleOnce();
        return why().find("slow, not hung") != std::string::npos;
      },
      std::chrono::seconds(10)))
      << why();
  EXPECT_FALSE(saw);
  EXPECT_EQ(Sight(), store::Sight::kBlind);
  EXPECT_NE(why().find("past the 500 ms deadline"), std::string::npos) << why();
  EXPECT_GE(xpu::testing::MetricValue(self_, "xpu_nvml_read_duration_seconds"), 0.9);
  // It stays slow, in the same words (the Node condition carries them: a
  // new text would be a new patch), whether a sample finds a late answer
  // or a read going on.
  const std::string slow = why();
  for (int i = 0; i < 4; ++i) {
    EXPECT_FALSE(s->SampleOnce());
    EXPECT_EQ(why(), slow);
  }
  // A read that runs far longer than the slow ones (twice theirs and the
  // deadline) hangs, and the gauge shows how long it has run.
  f["hang_ms"] = {{"nvmlDeviceGetTemperature", 60000}};
  Write(f);
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] {
        EXPECT_FALSE(s->SampleOnce());
        return why().find("a call hangs") != std::string::npos;
      },
      std::chrono::seconds(15)))
      << why();
  EXPECT_GE(xpu::testing::MetricValue(self_, "xpu_nvml_read_duration_seconds"), 2.0);
  // Fast again: it sees, and the gauge follows.
  Write(TwoCards());
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return s->SampleOnce(); }, std::chrono::seconds(10)));
  EXPECT_LT(xpu::testing::MetricValue(self_, "xpu_nvml_read_duration_seconds"), 0.9);
  s.reset();
  void* lib = dlopen(FAKE_NVML_PATH, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  auto hanging = reinterpret_cast<int (*)()>(dlsym(lib, "xpu_fake_nvml_hanging"));
  ASSERT_NE(hanging, nullptr);
  EXPECT_TRUE(xpu::testing::WaitFor([&] { return hanging() == 0; }, std::chrono::seconds(10)));
  dlclose(lib);
}

// An older driver's library: the missing function is shown, the rest read.
TEST_F(NvmlSamplerTest, AMissingFunctionIsShownAndTheRestIsRead) {
  auto s = Make(FAKE_NVML_OLD_PATH);
  ASSERT_TRUE(s->SampleOnce());
  using xpu::testing::MetricValue;
  EXPECT_EQ(
      MetricValue(self_, "xpu_nvml_missing_functions", {{"function", "nvmlDeviceGetRemappedRows"}}),
      1);
  EXPECT_EQ(MetricValue(registry_, "xpu_nvml_row_remap_pending"), -1);
  EXPECT_EQ(MetricValue(registry_, "xpu_nvml_ecc_errors_total",
                        {{"minor", "3"}, {"error", "uncorrected"}, {"scope", "aggregate"}}),
            1);
}

}  // namespace
}  // namespace xpu::hal
