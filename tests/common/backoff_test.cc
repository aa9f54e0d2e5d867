#include "common/backoff.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace xpu {
namespace {

using Ms = std::chrono::milliseconds;

// A fixed "random" value: 0.5 is no jitter, 0 the low bound, ~1 the high one.
Backoff Make(double u) {
  return Backoff(Ms(1000), 2.0, Ms(30000), 0.2, [u] { return u; });
}

TEST(BackoffTest, DoublesFromOneSecondAndCapsAtThirty) {
  Backoff b = Make(0.5);
  std::vector<int64_t> got;
  for (int i = 0; i < 8; ++i) got.push_back(b.Next().count());
  EXPECT_EQ(got, (std::vector<int64_t>{1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000}));
}

TEST(BackoffTest, JitterStaysWithinTwentyPercentAndNeverExceedsMax) {
  Backoff low = Make(0.0);
  Backoff high = Make(0.999999);
  const int64_t base[] = {1000, 2000, 4000, 8000, 16000, 30000, 30000};
  for (int64_t b : base) {
    EXPECT_EQ(low.Next().count(), b * 8 / 10);
    const int64_t h = high.Next().count();
    EXPECT_GE(h, std::min<int64_t>(b * 12 / 10 - 1, 30000));
    EXPECT_LE(h, std::min<int64_t>(b * 12 / 10, 30000));
  }
}

TEST(BackoffTest, ResetStartsOverAtOneSecond) {
  Backoff b = Make(0.5);
  b.Next();
  b.Next();
  b.Next();
  EXPECT_EQ(b.base(), Ms(8000));
  b.Reset();
  EXPECT_EQ(b.Next(), Ms(1000));
  EXPECT_EQ(b.Next(), Ms(2000));
}

TEST(BackoffTest, RejectsNonsenseConstruction) {
  auto u = [] { return 0.5; };
  EXPECT_THROW(Backoff(Ms(0), 2, Ms(10), 0.2, u), std::invalid_argument);
  EXPECT_THROW(Backoff(Ms(10), 2, Ms(5), 0.2, u), std::invalid_argument);
  EXPECT_THROW(Backoff(Ms(10), 0.5, Ms(50), 0.2, u), std::invalid_argument);
  EXPECT_THROW(Backoff(Ms(10), 2, Ms(50), 1.5, u), std::invalid_argument);
  EXPECT_THROW(Backoff(Ms(10), 2, Ms(50), 0.2, nullptr), std::invalid_argument);
}

// One source shared by backoffs on two threads that draw at once (XDM's
// stream and ListAndWatch when the daemon dies): each draw in [0, 1), and no
// data race (the TSan build runs this; a shared engine without a lock was
// one).
TEST(BackoffTest, ASharedUniformSourceDrawsOnSeveralThreadsAtOnce) {
  const std::function<double()> shared = SharedUniform01();
  std::atomic<bool> out_of_range{false};
  auto draw = [&] {
    Backoff b(Ms(1000), 2.0, Ms(30000), 0.2, shared);
    for (int i = 0; i < 20000; ++i) {
      const double u = shared();
      if (u < 0 || u >= 1) out_of_range = true;
      if (i % 100 == 0) b.Reset();
      (void)b.Next();
    }
  };
  std::thread a(draw), c(draw);
  a.join();
  c.join();
  EXPECT_FALSE(out_of_range);
}

}  // namespace
}  // namespace xpu
