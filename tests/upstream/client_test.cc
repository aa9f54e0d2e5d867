// XdmClient against a real xdm-sim on temporary Unix sockets.
#include <gtest/gtest.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <future>
#include <set>

#include "simulator.h"
#include "support/metrics_util.h"
#include "support/test_util.h"
#include "upstream/xdm_client.h"

namespace xpu::upstream {
namespace {

using std::chrono::milliseconds;
using xpu::testing::HttpPost;
using xpu::testing::WaitFor;

constexpr milliseconds kInterval(200);

double Value(const prometheus::Registry& r, const std::string& name,
             const std::map<std::string, std::string>& labels = {}) {
  return xpu::testing::MetricValue(r, name, labels);
}

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override { Begin(kInterval, DefaultOptions()); }
  ClientOptions DefaultOptions() {
    ClientOptions o;
    o.xdm_endpoint = "unix://" + dir_.File("dp2mgr.sock");
    o.controller_endpoint = "unix://" + dir_.File("config-daemon.sock");
    o.interval = kInterval;
    o.backoff_initial = milliseconds(100);
    o.backoff_max = milliseconds(400);
    // Most tests watch what happens past a stall: the floor is the 3
    // intervals it defaults to without one. The stall tests set their own.
    o.stall_floor = kInterval * 3;
    return o;
  }
  // (Re)starts xdm-sim collecting every `sim_interval` and a fresh client.
  void Begin(milliseconds sim_interval, const ClientOptions& o) {
    if (client_) client_->Stop();
    client_.reset();
    if (sim_) sim_->Stop();
    sim_interval_ = sim_interval;
    StartSim();
    store_ = std::make_unique<store::MetricStore>(
        catalog::Catalog::Builtin(), store::MetricStore::Options{o.interval * 3, 100000});
    registry_ = std::make_unique<prometheus::Registry>();
    devices_ = std::make_unique<store::DeviceRegistry>();
    store_->FollowDevices(devices_.get());
    client_ = std::make_unique<XdmClient>(o, catalog::Catalog::Builtin(), store_.get(),
                                          devices_.get(), registry_.get());
    client_->Start();
  }
  void TearDown() override {
    client_->Stop();
    if (sim_) sim_->Stop();
  }
  void StartSim() {
    xdmsim::SimOptions so;
    so.socket_path = dir_.File("dp2mgr.sock");
    so.controller_socket_path = dir_.File("config-daemon.sock");
    so.interval = sim_interval_;
    sim_ = std::make_unique<xdmsim::Simulator>(so);
    ASSERT_TRUE(sim_->Start().ok());
  }
  std::string Control(const std::string& p) {
    return "http://127.0.0.1:" + std::to_string(sim_->control_port()) + p;
  }
  std::set<int32_t> Minors() {
    std::set<int32_t> out;
    auto snap = store_->Snap(std::chrono::steady_clock::now());
    for (const auto& r : snap.set->rows) out.insert(r.minor);
    return out;
  }
  size_t Series() { return store_->Snap(std::chrono::steady_clock::now()).values.size(); }
  bool WaitMode(Mode m, milliseconds timeout = milliseconds(5000)) {
    return WaitFor([&] { return client_->mode() == m; }, timeout);
  }

  // Whether xpu_device_health{source="xdm"} is on the page for any device.
  bool XdmHealthServed() {
    for (const auto& f : devices_->Collect()) {
      if (f.name != "xpu_device_health") continue;
      for (const auto& m : f.metric)
        for (const auto& l : m.label)
          if (l.name == "source" && l.value == "xdm") return true;
    }
    return false;
  }

  xpu::testing::TempDir dir_;
  milliseconds sim_interval_ = kInterval;
  std::unique_ptr<xdmsim::Simulator> sim_;
  std::unique_ptr<prometheus::Registry> registry_;
  std::unique_ptr<store::DeviceRegistry> devices_;
  std::unique_ptr<store::MetricStore> store_;
  std::unique_ptr<XdmClient> client_;
};

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

TEST_F(ClientTest, StreamBreakFallsBackToPollingThenReturnsToStream) {
  ASSERT_TRUE(WaitMode(Mode::kStream));
  // Keep the stream from coming back at once: while paused, re-subscriptions
  // get nothing, so only a poll can... not answer either. Instead break and
  // watch the poll happen before the 100 ms backoff ends.
  const double polls_before = Value(*registry_, "xpu_exporter_poll_requests_total");
  ASSERT_EQ(HttpPost(Control("/control/stream/break")).status, 200);
  ASSERT_TRUE(
      WaitFor([&] { return Value(*registry_, "xpu_exporter_poll_requests_total") > polls_before; },
              kInterval + milliseconds(300)));
  EXPECT_GE(Value(*registry_, "xpu_exporter_collector_success", {{"collector", "poll"}}), 1);
  // The backoff is 100 ms: the stream returns, and polling stops.
  ASSERT_TRUE(
      WaitFor([&] { return client_->reconnects() >= 1 && client_->mode() == Mode::kStream; }));
  const double polls = Value(*registry_, "xpu_exporter_poll_requests_total");
  const uint64_t ticks = sim_->signals().ticks();
  ASSERT_TRUE(WaitFor([&] { return sim_->signals().ticks() >= ticks + 4; }));
  EXPECT_LE(Value(*registry_, "xpu_exporter_poll_requests_total"), polls + 1);
  EXPECT_EQ(client_->mode(), Mode::kStream);
}

TEST_F(ClientTest, BrokenStreamThatCannotResubscribePollsEveryInterval) {
  ASSERT_TRUE(WaitMode(Mode::kStream));
  // Break the stream repeatedly: every re-subscription is broken again before
  // it delivers, so data must come from polling.
  std::atomic<bool> breaking{true};
  std::thread breaker([&] {
    while (breaking) {
      HttpPost(Control("/control/stream/break"));
      std::this_thread::sleep_for(milliseconds(20));
    }
  });
  EXPECT_TRUE(WaitMode(Mode::kPoll, kInterval * 3));
  const auto before = store_->last_update();
  ASSERT_TRUE(before.has_value());
  EXPECT_TRUE(WaitFor([&] { return store_->last_update() > before; }, kInterval * 3));
  EXPECT_GT(Series(), 0u);
  breaking = false;
  breaker.join();
  EXPECT_TRUE(WaitMode(Mode::kStream));
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

TEST_F(ClientTest, StopReturnsPromptlyWithCallsInFlight) {
  ASSERT_TRUE(WaitMode(Mode::kStream));
  ASSERT_EQ(HttpPost(Control("/control/pause")).status, 200);  // calls hang
  const auto t0 = std::chrono::steady_clock::now();
  client_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  HttpPost(Control("/control/resume"));
}

TEST_F(ClientTest, FollowsTheIntervalXdmReportsInsteadOfFlapping) {
  // XDM collects every 600 ms; the flag says 100 ms. Judged by the flag, the
  // stream would look dead between pushes: poll, watchdog, reconnect.
  ClientOptions o = DefaultOptions();
  o.interval = milliseconds(100);
  Begin(milliseconds(600), o);
  ASSERT_TRUE(WaitMode(Mode::kStream));
  ASSERT_TRUE(WaitFor([&] { return client_->interval() == milliseconds(600); }));
  EXPECT_EQ(Value(*registry_, "xpu_exporter_upstream_interval_seconds"), 0.6);
  const double polls = Value(*registry_, "xpu_exporter_poll_requests_total");
  const uint64_t reconnects = client_->reconnects();
  const uint64_t ticks = sim_->signals().ticks();
  bool left_stream = false;
  WaitFor(
      [&] {
        left_stream |= client_->mode() != Mode::kStream;
        return sim_->signals().ticks() >= ticks + 5;
      },
      milliseconds(10000));
  EXPECT_FALSE(left_stream);
  EXPECT_EQ(client_->reconnects(), reconnects);
  EXPECT_EQ(Value(*registry_, "xpu_exporter_poll_requests_total"), polls);
  EXPECT_GT(Series(), 0u);  // stale-after followed the interval too
}

TEST_F(ClientTest, DeadDaemonsHealthIsWithdrawn) {
  ASSERT_TRUE(WaitMode(Mode::kStream));
  ASSERT_TRUE(WaitFor([&] { return XdmHealthServed(); }));
  sim_->Stop();
  EXPECT_TRUE(WaitFor([&] { return !XdmHealthServed(); }, kInterval * 6));
  EXPECT_EQ(devices_->Devices().size(), 8u);  // identity stays for joins
  StartSim();
  EXPECT_TRUE(WaitFor([&] { return XdmHealthServed(); }));
}

TEST_F(ClientTest, ReservedSnapshotIsNotFreshData) {
  ASSERT_TRUE(WaitMode(Mode::kStream));
  ASSERT_TRUE(WaitFor([&] { return Series() > 0; }));
  // The daemon keeps answering, but with the same sequence and timestamps.
  ASSERT_EQ(HttpPost(Control("/control/replay"), R"({"enabled":true})").status, 200);
  EXPECT_TRUE(WaitFor([&] { return Series() == 0; }));
  EXPECT_TRUE(WaitMode(Mode::kDown));
  EXPECT_FALSE(XdmHealthServed());
  EXPECT_GT(Value(*registry_, "xpu_exporter_stale_messages_total", {{"reason", "repeat"}}), 0);
  ASSERT_EQ(HttpPost(Control("/control/replay"), R"({"enabled":false})").status, 200);
  EXPECT_TRUE(WaitMode(Mode::kStream));
  EXPECT_TRUE(WaitFor([&] { return Series() > 0; }));
}

TEST_F(ClientTest, AStallShorterThanTheFloorKeepsSeriesAndModeARefusingDaemonIsDownAtOnce) {
  ClientOptions o = DefaultOptions();
  o.interval = milliseconds(100);
  o.stall_floor = kStallFloor;
  Begin(milliseconds(100), o);
  // The store's stale-after, as the exporter sets it: 3 intervals, but no
  // less than the floor.
  store_->set_stale_after(EffectiveStaleAfter(o.stale_after, o.interval, o.stall_floor));
  ASSERT_TRUE(WaitMode(Mode::kStream));
  ASSERT_TRUE(WaitFor([&] { return Series() == 8u * (15 + 3 * 7) && XdmHealthServed(); }));
  // Paused, the daemon's calls hang: the stream goes silent and polls time
  // out, 15 intervals long.
  ASSERT_EQ(HttpPost(Control("/control/pause")).status, 200);
  const auto t0 = std::chrono::steady_clock::now();
  const double polls = Value(*registry_, "xpu_exporter_poll_failures_total");
  size_t fewest = SIZE_MAX;
  bool went_down = false;
  while (std::chrono::steady_clock::now() - t0 < milliseconds(1500)) {
    fewest = std::min(fewest, Series());
    went_down |= client_->mode() == Mode::kDown;
    std::this_thread::sleep_for(milliseconds(5));  // reads every 5 ms, leaving the cores free
  }
  EXPECT_EQ(fewest, 8u * (15 + 3 * 7));
  EXPECT_FALSE(went_down);
  EXPECT_TRUE(XdmHealthServed());
  EXPECT_GT(Value(*registry_, "xpu_exporter_poll_failures_total"), polls);  // it was tried
  ASSERT_EQ(HttpPost(Control("/control/resume")).status, 200);
  ASSERT_TRUE(WaitFor([&] { return store_->last_update() > t0 + milliseconds(1500); }));
  // A daemon that is gone (its socket refuses) is down at once, floor or not.
  sim_->Stop();
  EXPECT_TRUE(WaitMode(Mode::kDown, milliseconds(1000)));
  EXPECT_GT(Series(), 0u);  // its last values stay until stale-after (the floor)
  EXPECT_TRUE(WaitFor([&] { return Series() == 0; }, kStallFloor * 2));
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

// Every counter in the store, checked against its last value each time the
// store is read; fails on the first step back.
class CounterWatch {
 public:
  explicit CounterWatch(store::MetricStore* store) : store_(store) {}
  // Reads the store once; returns how many counters went backwards.
  int Check() {
    int backwards = 0;
    const store::Snapshot snap = store_->Snap(std::chrono::steady_clock::now());
    for (size_t i = 0; i < snap.values.size(); ++i) {
      const store::Row& r = snap.set->rows[i];
      if (r.entry == nullptr || r.entry->type != catalog::MetricType::kCounter) continue;
      auto [it, fresh] = last_.try_emplace({r.metric_id, r.minor, r.instance}, snap.values[i]);
      if (!fresh && snap.values[i] < it->second) {
        ++backwards;
        ADD_FAILURE() << r.entry->name << "{minor=" << r.minor << ",instance=" << r.instance
                      << "} went from " << it->second << " to " << snap.values[i];
      }
      it->second = snap.values[i];
      ++reads_;
    }
    return backwards;
  }
  size_t reads() const { return reads_; }

 private:
  store::MetricStore* store_;
  std::map<std::tuple<uint32_t, int32_t, std::string>, double> last_;
  size_t reads_ = 0;
};

TEST_F(ClientTest, OlderSnapshotsOnTheStreamAndFromPollsNeverMoveACounterBack) {
  ASSERT_TRUE(WaitMode(Mode::kStream));
  ASSERT_TRUE(WaitFor([&] { return Series() > 0; }));
  ASSERT_EQ(HttpPost(Control("/control/reorder"), R"({"enabled":true})").status, 200);
  CounterWatch watch(store_.get());
  auto watch_ticks = [&](uint64_t n) {
    const uint64_t until = sim_->signals().ticks() + n;
    int backwards = 0;
    WaitFor(
        [&] {
          backwards += watch.Check();
          return sim_->signals().ticks() >= until;
        },
        kInterval * static_cast<int>(n) * 4);
    return backwards;
  };
  // On the stream: one push in three is followed by an older snapshot.
  EXPECT_EQ(watch_ticks(12), 0);
  // Refused as older than what was applied (or, when a delivery is slow, as
  // sampled longer than stale-after ago).
  auto refused = [&] {
    return Value(*registry_, "xpu_exporter_stale_messages_total", {{"reason", "out_of_order"}}) +
           Value(*registry_, "xpu_exporter_stale_messages_total", {{"reason", "expired"}});
  };
  const double late = refused();
  EXPECT_GT(Value(*registry_, "xpu_exporter_stale_messages_total", {{"reason", "out_of_order"}}),
            0);
  // Through polls too: the stream is broken again and again, so polls and
  // re-subscribed streams race, and every other poll answer is older.
  const double polls = Value(*registry_, "xpu_exporter_poll_requests_total");
  std::atomic<bool> breaking{true};
  std::thread breaker([&] {
    while (breaking) {
      HttpPost(Control("/control/stream/break"));
      std::this_thread::sleep_for(milliseconds(30));
    }
  });
  EXPECT_EQ(watch_ticks(12), 0);
  breaking = false;
  breaker.join();
  EXPECT_GT(Value(*registry_, "xpu_exporter_poll_requests_total"), polls + 2);
  EXPECT_GT(refused(), late);
  EXPECT_GT(watch.reads(), 1000u);
  EXPECT_GT(Series(), 0u);  // the data still flows
}

TEST_F(ClientTest, ReturningDaemonIsStreamedAtOnceDespiteLongBackoff) {
  // A long backoff: without a shortcut the stream and ListAndWatch would
  // wait ~4-6 s after the daemon is back.
  ClientOptions o = DefaultOptions();
  o.backoff_initial = milliseconds(5000);
  o.backoff_max = milliseconds(30000);
  Begin(kInterval, o);
  ASSERT_TRUE(WaitMode(Mode::kStream));
  ASSERT_TRUE(WaitFor([&] { return XdmHealthServed(); }));
  sim_->Stop();
  ASSERT_TRUE(WaitMode(Mode::kDown));
  ASSERT_TRUE(WaitFor([&] { return !XdmHealthServed(); }));
  StartSim();
  // A poll finds the daemon within an interval; both streams follow at once.
  EXPECT_TRUE(WaitMode(Mode::kStream, milliseconds(2000)));
  EXPECT_TRUE(WaitFor([&] { return XdmHealthServed(); }, milliseconds(2000)));
}

}  // namespace
}  // namespace xpu::upstream
