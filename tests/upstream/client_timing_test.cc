// XdmClient against a real xdm-sim: the real-time windows (a poll within an
// interval, no flapping over five pushes, a stall shorter than the floor, a
// prompt return). They measure the real clock, so they run alone (SERIAL);
// the same decisions are tested in virtual time in mode_test.cc.
#include <atomic>
#include <thread>

#include "upstream/client_fixture.h"

namespace xpu::upstream {
namespace {

using std::chrono::milliseconds;
using xpu::testing::HttpPost;
using xpu::testing::WaitFor;

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
  // Polled while the stream cannot stay: the poll counter moves, twice
  // within three intervals. (Not the mode at one instant: each
  // re-subscription delivers at once, so the client is in poll mode for a
  // millisecond of every 20, which a check every 5 ms can miss for 300 ms.)
  const double polls = Value(*registry_, "xpu_exporter_poll_requests_total");
  EXPECT_TRUE(
      WaitFor([&] { return Value(*registry_, "xpu_exporter_poll_requests_total") >= polls + 2; },
              kInterval * 3));
  const auto before = store_->last_update();
  ASSERT_TRUE(before.has_value());
  EXPECT_TRUE(WaitFor([&] { return store_->last_update() > before; }, kInterval * 3));
  EXPECT_GT(Series(), 0u);
  breaking = false;
  breaker.join();
  EXPECT_TRUE(WaitMode(Mode::kStream));
}

// A daemon whose stream delivers its first message and then drops the call
// (a handler that fails after its first write): re-subscribed with a growing
// backoff, polled meanwhile. Before, that first message reset the backoff and
// the polls' hurry: the stream was re-subscribed at the backoff's first step,
// or at a poll's hurry, for as long as it went on.
TEST_F(ClientTest, AStreamThatDropsAfterItsFirstMessageBacksOff) {
  // XDM collects every second: a stream holds once it lived a second, which
  // a break every 50 ms leaves no stream to do on a loaded machine either.
  ClientOptions o = DefaultOptions();
  o.interval = milliseconds(1000);
  o.backoff_max = milliseconds(30000);
  Begin(milliseconds(1000), o);
  ASSERT_TRUE(WaitMode(Mode::kStream));
  std::atomic<bool> breaking{true};
  std::thread breaker([&] {
    while (breaking) {
      HttpPost(Control("/control/stream/break"));
      std::this_thread::sleep_for(milliseconds(50));
    }
  });
  const double reconnects = Value(*registry_, "xpu_exporter_stream_reconnects_total");
  const uint64_t ticks = sim_->signals().ticks();
  ASSERT_TRUE(WaitFor([&] { return sim_->signals().ticks() >= ticks + 4; }, milliseconds(10000)));
  const double made = Value(*registry_, "xpu_exporter_stream_reconnects_total") - reconnects;
  breaking = false;
  breaker.join();
  // 100 ms, x2: 0.1 + 0.2 + 0.4 + 0.8 + 1.6 s is 3.1 s of the 4 s; a hurry
  // or two more at most.
  EXPECT_LE(made, 8) << "re-subscribed without backing off";
  EXPECT_GE(made, 2);
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

TEST_F(ClientTest, ADaemonThatAnswersPollsButNotTheStreamIsNotHammered) {
  // A poll that succeeds cuts the stream's backoff short (the daemon is
  // back), but a stream the daemon refuses while it answers polls must not
  // be re-subscribed at every poll, nor the poll run at every refusal: that
  // was a loop of thousands of calls a second.
  ASSERT_TRUE(BeginPolledOnly());
  const double reconnects = Value(*registry_, "xpu_exporter_stream_reconnects_total");
  const double polls = Value(*registry_, "xpu_exporter_poll_requests_total");
  const uint64_t ticks = sim_->signals().ticks();
  ASSERT_TRUE(WaitFor([&] { return sim_->signals().ticks() >= ticks + 5; }));
  // Five intervals: a poll each (one more for the edges), and at most the
  // one hurried re-subscription (its backoff then starts anew, at 30 s).
  EXPECT_LE(Value(*registry_, "xpu_exporter_stream_reconnects_total"), reconnects + 1);
  EXPECT_LE(Value(*registry_, "xpu_exporter_poll_requests_total"), polls + 7);
  EXPECT_EQ(client_->mode(), Mode::kPoll);
}

TEST_F(ClientTest, ListAndWatchIsFollowedWhileOnlyPolled) {
  // A daemon without the stream, and a stream backoff far past the test: the
  // client only polls, and XDM's health still follows ListAndWatch (e2e_stall
  // times the same against a daemon in a process of its own).
  ASSERT_TRUE(BeginPolledOnly());
  const auto health = [&] {
    return xpu::testing::MetricValue(*devices_, "xpu_device_health",
                                     {{"source", "xdm"}, {"minor", "3"}});
  };
  ASSERT_TRUE(WaitFor([&] { return health() == 1; }));
  for (bool healthy : {false, true, false}) {
    ASSERT_EQ(HttpPost(Control("/control/health"),
                       std::string("{\"minor\": 3, \"healthy\": ") + (healthy ? "true}" : "false}"))
                  .status,
              200);
    EXPECT_TRUE(WaitFor([&] { return health() == (healthy ? 1 : 0); })) << "healthy " << healthy;
  }
  EXPECT_EQ(client_->mode(), Mode::kPoll);
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
      auto [it, fresh] =
          last_.try_emplace({r.metric_id, r.minor, std::string(r.instance)}, snap.values[i]);
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

// The same with the daemon's clock a minute ahead, then behind (stale-after
// set past the skew, so a clock behind is not all expired): raw stamps are
// compared with raw stamps, so no late older snapshot compares as newer.
TEST_F(ClientTest, ADaemonClockAheadOrBehindNeverMovesACounterBack) {
  for (const int skew : {60'000, -60'000}) {
    ClientOptions o = DefaultOptions();
    o.stale_after = std::chrono::seconds(120);
    Begin(kInterval, o);
    ASSERT_TRUE(WaitMode(Mode::kStream));
    ASSERT_TRUE(WaitFor([&] { return Series() > 0; }));
    const std::string body = R"({"enabled":true,"skew_ms":)" + std::to_string(skew) + "}";
    ASSERT_EQ(HttpPost(Control("/control/reorder"), body).status, 200);
    CounterWatch watch(store_.get());
    const uint64_t until = sim_->signals().ticks() + 15;
    int backwards = 0;
    WaitFor(
        [&] {
          backwards += watch.Check();
          return sim_->signals().ticks() >= until;
        },
        kInterval * 15 * 4);
    EXPECT_EQ(backwards, 0) << "skew " << skew;
    EXPECT_GT(Value(*registry_, "xpu_exporter_stale_messages_total", {{"reason", "out_of_order"}}),
              0)
        << "skew " << skew;
    EXPECT_GT(watch.reads(), 100u);
  }
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

TEST_F(ClientTest, StopReturnsPromptlyWithCallsInFlight) {
  ASSERT_TRUE(WaitMode(Mode::kStream));
  ASSERT_EQ(HttpPost(Control("/control/pause")).status, 200);  // calls hang
  const auto t0 = std::chrono::steady_clock::now();
  client_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  HttpPost(Control("/control/resume"));
}

}  // namespace
}  // namespace xpu::upstream
