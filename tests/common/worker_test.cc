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

}  // namespace
}  // namespace xpu
