// XdmClient against a real xdm-sim: what holds whatever the machine's load
// (every wait is for a condition, with time to spare). Run beside other
// tests; the mode's timing rules are tested in virtual time (mode_test.cc),
// the real-time windows in client_timing_test.cc.
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "store/device_registry.h"
#include "upstream/client_fixture.h"

namespace xpu::upstream {
namespace {

using std::chrono::milliseconds;
using xpu::testing::HttpPost;
using xpu::testing::WaitFor;

TEST_F(ClientTest, StreamFillsStoreAndDeviceRegistry) {
  ASSERT_TRUE(WaitMode(Mode::kStream));
  ASSERT_TRUE(WaitFor([&] { return Series() == 8u * (15 + 3 * 7); }));
  ASSERT_TRUE(WaitFor([&] { return devices_->Devices().size() == 8; }));
  const auto devs = devices_->Devices();
  EXPECT_EQ(devs[0].model, "PPU-810E");
  EXPECT_FALSE(devs[0].driver_version.empty());
  EXPECT_EQ(devs[0].topology.size(), 8u);
  EXPECT_EQ(Value(*registry_, "xpu_exporter_upstream_up"), 1);
  EXPECT_EQ(Value(*registry_, "xpu_exporter_upstream_mode", {{"mode", "stream"}}), 1);
  ASSERT_TRUE(WaitFor([&] { return client_->info().controller_enabled.has_value(); }));
  EXPECT_TRUE(*client_->info().controller_enabled);
  EXPECT_EQ(client_->info().config->intervalms(), kInterval.count());
}

TEST_F(ClientTest, ExportsEveryInvalidReasonFromTheStart) {
  std::set<std::string_view> names;
  for (const InvalidReasonInfo& r : kInvalidReasons) {
    EXPECT_TRUE(names.insert(r.name).second) << r.name;
    EXPECT_FALSE(r.message.empty()) << r.name;
    EXPECT_EQ(
        Value(*registry_, "xpu_exporter_invalid_samples_total", {{"reason", std::string(r.name)}}),
        0)
        << r.name;
  }
}

TEST_F(ClientTest, DaemonGoneMeansDownAndStaleSeriesVanishThenStreamReturns) {
  ASSERT_TRUE(WaitMode(Mode::kStream));
  ASSERT_TRUE(WaitFor([&] { return Series() > 0; }));
  sim_->Stop();
  EXPECT_TRUE(WaitMode(Mode::kDown));
  EXPECT_EQ(Value(*registry_, "xpu_exporter_upstream_up"), 0);
  EXPECT_TRUE(WaitFor([&] { return Series() == 0; }));  // stale after 3 intervals
  EXPECT_GT(Value(*registry_, "xpu_exporter_poll_failures_total"), 0);
  StartSim();
  EXPECT_TRUE(WaitMode(Mode::kStream, milliseconds(10000)));
  EXPECT_TRUE(WaitFor([&] { return Series() > 0; }));
}

TEST_F(ClientTest, PausedDaemonTripsWatchdogInsteadOfHanging) {
  ASSERT_TRUE(WaitMode(Mode::kStream));
  const uint64_t reconnects = client_->reconnects();
  ASSERT_EQ(HttpPost(Control("/control/pause")).status, 200);
  EXPECT_TRUE(WaitMode(Mode::kDown));
  // The watchdog cancelled the silent stream, so the client re-subscribed.
  EXPECT_TRUE(WaitFor([&] { return client_->reconnects() > reconnects; }));
  ASSERT_EQ(HttpPost(Control("/control/resume")).status, 200);
  EXPECT_TRUE(WaitMode(Mode::kStream, milliseconds(10000)));
}

TEST_F(ClientTest, DevicesAppearingAndVanishingChangeTheSeries) {
  ASSERT_TRUE(WaitFor([&] { return Minors().size() == 8; }));
  ASSERT_EQ(HttpPost(Control("/control/devices"), R"({"count":3})").status, 200);
  EXPECT_TRUE(WaitFor([&] { return Minors() == std::set<int32_t>{0, 1, 2}; }));
  ASSERT_EQ(HttpPost(Control("/control/devices"), R"({"count":10})").status, 200);
  EXPECT_TRUE(WaitFor([&] { return Minors().size() == 10; }));
  EXPECT_TRUE(WaitFor([&] { return devices_->Devices().size() == 10; }));
}

// A ListAndWatch message protobuf refuses (a map key that is not UTF-8) ends
// the call, and the list is read anew: a call left open would keep the
// device list of before for as long as the daemon keeps it open.
TEST_F(ClientTest, AListThatDoesNotParseEndsItsCallAndTheListIsReadAnew) {
  ASSERT_TRUE(WaitFor([&] { return devices_->Devices().size() == 8; }));
  ASSERT_EQ(HttpPost(Control("/control/list-unparsable"), R"({"enabled":true})").status, 200);
  ASSERT_EQ(HttpPost(Control("/control/devices"), R"({"count":5})").status, 200);
  EXPECT_TRUE(WaitFor([&] {
    return Value(*registry_, "xpu_exporter_collector_success", {{"collector", "list_and_watch"}}) ==
           0;
  }));
  EXPECT_EQ(devices_->Devices().size(), 8u);  // nothing of it taken
  ASSERT_EQ(HttpPost(Control("/control/list-unparsable"), R"({"enabled":false})").status, 200);
  ASSERT_EQ(HttpPost(Control("/control/devices"), R"({"count":3})").status, 200);
  EXPECT_TRUE(WaitFor([&] { return devices_->Devices().size() == 3; }, milliseconds(5000)));
}

TEST_F(ClientTest, ReservedSnapshotIsNotFreshData) {
  ASSERT_TRUE(WaitMode(Mode::kStream));
  ASSERT_TRUE(WaitFor([&] { return Series() > 0; }));
  // The daemon keeps answering, but with the same sequence and timestamps.
  ASSERT_EQ(HttpPost(Control("/control/replay"), R"({"enabled":true})").status, 200);
  EXPECT_TRUE(WaitFor([&] { return Series() == 0; }));
  EXPECT_TRUE(WaitMode(Mode::kDown));
  EXPECT_FALSE(XdmHealthServed());
  // Each copy that arrives is counted stale: a repeat while the snapshot
  // is younger than stale-after (3 intervals from its stamp), expired once
  // it is older. The window for "repeat" opens 1.5 intervals after the
  // apply, so it is about 300 ms wide here; on a loaded machine no copy may
  // land in it (fresh31, TSan: the watchdog cancelled the silent stream
  // every 600 ms for 5 s, and every copy that came was past it). Either
  // verdict says the same: not fresh data. SnapshotOrderTest holds each
  // verdict to its exact time.
  EXPECT_TRUE(WaitFor([&] {
    return Value(*registry_, "xpu_exporter_stale_messages_total", {{"reason", "repeat"}}) +
               Value(*registry_, "xpu_exporter_stale_messages_total", {{"reason", "expired"}}) >
           0;
  }));
  ASSERT_EQ(HttpPost(Control("/control/replay"), R"({"enabled":false})").status, 200);
  EXPECT_TRUE(WaitMode(Mode::kStream));
  EXPECT_TRUE(WaitFor([&] { return Series() > 0; }));
}

// A log sink that holds every caller until released, as a full stderr pipe
// does; records what it was given.
class BlockingSink : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  bool Saw(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& m : seen_)
      if (m.find(text) != std::string::npos) return true;
    return false;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    std::unique_lock<std::mutex> lock(mu_);
    seen_.emplace_back(msg.payload.data(), msg.payload.size());
    cv_.wait(lock, [&] { return released_; });
  }
  void flush_() override {}

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> seen_;
  bool released_ = false;
};

// The client logged while holding its mutex (the interval XDM reports, the
// watchdog): with stderr blocked, every caller of state() and mode(), a
// scrape among them, and the ingest threads waited on the log.
TEST_F(ClientTest, ABlockedLogDoesNotHoldTheClientsLock) {
  client_->Stop();
  auto sink = std::make_shared<BlockingSink>();
  auto previous = spdlog::default_logger();
  // Held here too: threads released from the sink are still inside the
  // logger when the default one is put back.
  auto blocked = std::make_shared<spdlog::logger>("blocked", sink);
  spdlog::set_default_logger(blocked);
  ClientOptions o = DefaultOptions();
  o.interval = milliseconds(100);  // XDM says 200 ms: the client logs the change
  Begin(kInterval, o);
  EXPECT_TRUE(WaitFor([&] { return sink->Saw("XDM collects every 200 ms"); }));
  // Loggers are stuck; the lock must not be.
  auto mode = std::async(std::launch::async, [&] { return client_->state().mode; });
  const bool answered = mode.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
  sink->Release();
  client_->Stop();  // no thread of the client logs after this
  spdlog::set_default_logger(previous);
  EXPECT_TRUE(answered) << "state() waited on a blocked log";
}

TEST(StaleAfter, ThreeIntervalsButNoLessThanTheFloorUnlessSet) {
  EXPECT_EQ(EffectiveStaleAfter(milliseconds(0), milliseconds(100), kStallFloor), kStallFloor);
  EXPECT_EQ(EffectiveStaleAfter(milliseconds(0), milliseconds(10000), kStallFloor),
            milliseconds(30000));
  EXPECT_EQ(EffectiveStaleAfter(milliseconds(700), milliseconds(100), kStallFloor),
            milliseconds(700));  // an explicit --collector.stale-after is kept
}

}  // namespace
}  // namespace xpu::upstream
