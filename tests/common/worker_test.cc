#include "common/worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>

namespace xpu {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;

TEST(WorkerTest, StopWakesEverySleeperAtOnce) {
  Worker w;
  std::atomic<int> ended{0};
  for (int i = 0; i < 3; ++i) {
    w.Start([&] {
      while (w.SleepFor(hours(1))) {
      }
      ++ended;
    });
  }
  w.Stop();  // would block for an hour if a sleeper were not woken
  EXPECT_EQ(ended.load(), 3);
  EXPECT_TRUE(w.stopping());
  EXPECT_FALSE(w.SleepFor(hours(1)));
}

TEST(WorkerTest, AlarmEndsOneSleepAndIsConsumed) {
  Worker w;
  Worker::Alarm alarm;
  w.Ring(&alarm);
  EXPECT_TRUE(w.SleepFor(hours(1), &alarm));  // rung before: returns at once
  const auto t0 = Worker::Clock::now();
  EXPECT_TRUE(w.SleepFor(milliseconds(20), &alarm));  // consumed: sleeps out
  EXPECT_GE(Worker::Clock::now() - t0, milliseconds(20));
  w.Ring(&alarm);
  w.Reset(&alarm);
  EXPECT_TRUE(w.SleepFor(milliseconds(1), &alarm));
}

TEST(WorkerTest, AlarmRungFromAnotherThreadWakesTheSleeper) {
  Worker w;
  Worker::Alarm alarm;
  std::promise<bool> woke;
  w.Start([&] { woke.set_value(w.SleepFor(hours(1), &alarm)); });
  w.Ring(&alarm);
  auto f = woke.get_future();
  EXPECT_TRUE(f.get());  // woke by the alarm, not by stopping
  w.Stop();
}

TEST(LogLimiterTest, OneLinePerPeriodAndTheRestCounted) {
  LogLimiter limit(std::chrono::seconds(60));
  const auto t0 = LogLimiter::Clock::time_point{} + std::chrono::hours(1);
  uint64_t held = 99;
  EXPECT_TRUE(limit.Allow("a", t0, &held));
  EXPECT_EQ(held, 0u);
  for (int i = 1; i <= 5; ++i) EXPECT_FALSE(limit.Allow("a", t0 + std::chrono::seconds(i), &held));
  EXPECT_TRUE(limit.Allow("b", t0 + std::chrono::seconds(1), &held));  // keys are separate
  EXPECT_TRUE(limit.Allow("a", t0 + std::chrono::seconds(60), &held));
  EXPECT_EQ(held, 5u);
  EXPECT_FALSE(limit.Allow("a", t0 + std::chrono::seconds(61), &held));
  // Beyond kMaxKeys, new keys share one entry: memory stays bounded.
  for (size_t i = 0; i < LogLimiter::kMaxKeys + 10; ++i)
    limit.Allow("k" + std::to_string(i), t0, &held);
  EXPECT_FALSE(limit.Allow("another new key", t0 + std::chrono::seconds(1), &held));
}

TEST(LogOnceTest, ClearPrefixClearsThatFamilyOnly) {
  LogOnce log;
  log.Raise("watch:403");
  log.Raise("watch:0");
  log.Raise("node:403");
  EXPECT_EQ(log.ClearPrefix("watch:"), 2u);
  EXPECT_EQ(log.ClearPrefix("watch:"), 0u);
  EXPECT_FALSE(log.Raise("node:403"));  // still raised
  EXPECT_TRUE(log.Raise("watch:403"));
}

TEST(LogOnceTest, RaisesOnceUntilCleared) {
  LogOnce log;
  EXPECT_TRUE(log.Raise("a"));
  EXPECT_FALSE(log.Raise("a"));
  EXPECT_TRUE(log.Raise("b"));
  EXPECT_TRUE(log.Clear("a"));
  EXPECT_FALSE(log.Clear("a"));
  EXPECT_TRUE(log.Raise("a"));
}

struct FakeCall {
  int cancels = 0;
  void TryCancel() { ++cancels; }
};

TEST(InFlightCallsTest, CancelAllCancelsLiveCallsAndRefusesNewOnes) {
  InFlightCalls<FakeCall> calls;
  FakeCall live, ended, late;
  {
    InFlightCalls<FakeCall>::Scope s(&calls, &ended);
    EXPECT_TRUE(s.ok());
  }
  InFlightCalls<FakeCall>::Scope s(&calls, &live);
  ASSERT_TRUE(s.ok());
  calls.CancelAll();
  EXPECT_EQ(live.cancels, 1);
  EXPECT_EQ(ended.cancels, 0);  // its scope had ended
  InFlightCalls<FakeCall>::Scope after(&calls, &late);
  EXPECT_FALSE(after.ok());
  calls.CancelAll();
  EXPECT_EQ(late.cancels, 0);
}

TEST(TickGridTest, InstantsLieOnOneGridWhoeverAsks) {
  using T = Worker::Clock::time_point;
  const auto s = std::chrono::seconds(1);
  // On the grid already: itself; otherwise the next whole period.
  EXPECT_EQ(OnGrid(T(s * 7), s), T(s * 7));
  EXPECT_EQ(OnGrid(T(s * 7 + milliseconds(1)), s), T(s * 8));
  EXPECT_EQ(OnGrid(T(s * 7 + milliseconds(999)), s), T(s * 8));
  // A period that is a multiple of another lies on its grid.
  EXPECT_EQ(OnGrid(T(s * 7 + milliseconds(1)), s * 10), T(s * 10));
  EXPECT_EQ(OnGrid(T(milliseconds(1234)), milliseconds(250)), T(milliseconds(1250)));
  // No period: no grid.
  EXPECT_EQ(OnGrid(T(milliseconds(1234)), milliseconds(0)), T(milliseconds(1234)));
}

TEST(TickGridTest, NextTickKeepsTheRateNeitherBurstsNorRunsBackToBack) {
  using T = Worker::Clock::time_point;
  const auto p = milliseconds(1000);  // halves and quarters exact
  const T g(p * 100);
  // Steady: one period after a tick on the grid, whatever the work took up
  // to three quarters of it.
  EXPECT_EQ(NextTick(g, g, p), g + p);
  EXPECT_EQ(NextTick(g, g + milliseconds(750), p), g + p);
  // Longer: a quarter period from now, off the grid (no tick at once after
  // a slow one, no burst after a stall, no whole period lost), and the tick
  // after back on the grid.
  EXPECT_EQ(NextTick(g, g + milliseconds(760), p), g + milliseconds(1010));
  EXPECT_EQ(NextTick(g, g + 5 * p + milliseconds(10), p), g + 5 * p + milliseconds(260));
  EXPECT_EQ(NextTick(g + milliseconds(1010), g + milliseconds(1020), p), g + 2 * p);
  // Still slow: off the grid again, a quarter period's rest each time, the
  // rate that of the work (a source slower than its interval still ticks
  // within an interval and a quarter of its last).
  EXPECT_EQ(NextTick(g + milliseconds(1010), g + milliseconds(1900), p), g + milliseconds(2150));
  // From a start (or an early wake) off the grid: half a period to one and
  // a half away, so that two loops started apart meet on the grid.
  EXPECT_EQ(NextTick(g + milliseconds(300), g + milliseconds(300), p), g + p);
  EXPECT_EQ(NextTick(g + milliseconds(600), g + milliseconds(600), p), g + 2 * p);
  for (int ms = 0; ms < 1000; ms += 37) {
    const T start = g + milliseconds(ms);
    const T next = NextTick(start, start, p);
    EXPECT_EQ(next, OnGrid(next, p));
    EXPECT_GE(next - start, p / 2);
    EXPECT_LT(next - start, p * 3 / 2);
  }
}

TEST(TickGridTest, SleepToTickLandsOnTheGridAndAnAlarmReckonsFromTheWake) {
  Worker w;
  const auto p = milliseconds(20);
  auto tick = Worker::Clock::now();
  ASSERT_TRUE(w.SleepToTick(&tick, p));
  EXPECT_EQ(tick, OnGrid(tick, p));  // on the grid, not where it started
  EXPECT_GE(Worker::Clock::now(), tick);
  const auto last = tick;
  ASSERT_TRUE(w.SleepToTick(&tick, p));
  EXPECT_GE(tick - last, p);  // a period on at least (more if this thread was late)
  EXPECT_EQ(tick, OnGrid(tick, p));
  Worker::Alarm alarm;
  w.Ring(&alarm);
  const auto before = Worker::Clock::now();
  ASSERT_TRUE(w.SleepToTick(&tick, std::chrono::hours(1), &alarm));
  EXPECT_GE(tick, before);  // woken at once: reckoned from the wake
  EXPECT_LE(tick, Worker::Clock::now());
}

}  // namespace
}  // namespace xpu
