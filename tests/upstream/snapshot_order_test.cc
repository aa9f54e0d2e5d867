// SnapshotOrder on a fake clock: the daemon's order, restarts, expiry.
#include "upstream/snapshot_order.h"

#include <gtest/gtest.h>

namespace xpu::upstream {
namespace {

using std::chrono::milliseconds;
using V = SnapshotOrder::Verdict;

class OrderTest : public ::testing::Test {
 protected:
  // The wall clock and the steady clock move together, from `t` ms.
  V Judge(int64_t ts, uint64_t seq) {
    return order_.Judge(ts, seq,
                        {kEpoch + t_, std::chrono::steady_clock::time_point(milliseconds(t_)),
                         milliseconds(5000), milliseconds(150)});
  }
  static constexpr int64_t kEpoch = 1'700'000'000'000;
  int64_t t_ = 10'000;
  SnapshotOrder order_;
};

TEST_F(OrderTest, AppliesNewerAndRefusesOlderByTimestampThenSequence) {
  EXPECT_EQ(Judge(kEpoch + 9'900, 10), V::kApply);
  t_ += 100;
  EXPECT_EQ(Judge(kEpoch + 10'000, 11), V::kApply);
  EXPECT_EQ(Judge(kEpoch + 9'900, 10), V::kOutOfOrder);   // a late stream message
  EXPECT_EQ(Judge(kEpoch + 10'000, 9), V::kOutOfOrder);   // same time, lower sequence
  EXPECT_EQ(Judge(kEpoch + 10'000, 12), V::kApply);       // same time, higher sequence
  EXPECT_EQ(Judge(kEpoch + 10'050, 1), V::kApply);        // sequence reset, newer time: restart
  EXPECT_EQ(Judge(kEpoch + 10'000, 12), V::kOutOfOrder);  // and the old order is gone
}

TEST_F(OrderTest, SameSnapshotIsFreshWithinItsIntervalThenARepeat) {
  EXPECT_EQ(Judge(kEpoch + 10'000, 5), V::kApply);
  t_ += 100;
  EXPECT_EQ(Judge(kEpoch + 10'000, 5), V::kSame);
  t_ += 100;  // 200 ms > the 150 ms window
  EXPECT_EQ(Judge(kEpoch + 10'000, 5), V::kRepeat);
}

TEST_F(OrderTest, SequenceAloneOrdersUnstampedTimes) {
  EXPECT_EQ(Judge(0, 7), V::kApply);
  EXPECT_EQ(Judge(0, 6), V::kOutOfOrder);
  EXPECT_EQ(Judge(0, 8), V::kApply);
  EXPECT_EQ(Judge(0, 0), V::kApply);  // no stamps at all: nothing to order by
}

TEST_F(OrderTest, OlderThanStaleAfterIsExpired) {
  EXPECT_EQ(Judge(kEpoch + t_ - 5'001, 1), V::kExpired);
  EXPECT_EQ(Judge(kEpoch + t_ - 4'999, 1), V::kApply);
}

TEST_F(OrderTest, ForgetLetsARestartedDaemonsSnapshotsThrough) {
  EXPECT_EQ(Judge(kEpoch + 10'000, 500), V::kApply);
  EXPECT_EQ(Judge(kEpoch + 9'990, 1), V::kOutOfOrder);  // its clock went back a little
  order_.Forget();                                      // ExporterGetStatus: new startTimeMs
  EXPECT_EQ(Judge(kEpoch + 9'990, 1), V::kApply);
  EXPECT_EQ(Judge(kEpoch + 9'995, 2), V::kApply);
}

TEST_F(OrderTest, AClockThatRanAheadHoldsNothingBackOnceCorrected) {
  // An hour ahead (never expired: it is in the future)...
  EXPECT_EQ(Judge(kEpoch + t_ + 3'600'000, 500), V::kApply);
  EXPECT_EQ(Judge(kEpoch + t_ + 3'600'000, 500), V::kSame);  // still known again
  // ...then corrected: the next interval's snapshot is newer than "now".
  t_ += 200;
  EXPECT_EQ(Judge(kEpoch + t_, 501), V::kApply);
  t_ += 100;
  EXPECT_EQ(Judge(kEpoch + t_, 502), V::kApply);
  EXPECT_EQ(Judge(kEpoch + t_ - 100, 501), V::kOutOfOrder);  // late ones still refused
  // A late one from before the correction: newer by its stamp, older by
  // the daemon's count.
  EXPECT_EQ(Judge(kEpoch + t_ + 3'599'900, 499), V::kOutOfOrder);
  EXPECT_EQ(Judge(-5, 503), V::kExpired);  // before 1970
}

// A daemon whose clock runs a minute ahead of ours, or behind, with a late
// older snapshot after every third: not one older snapshot is applied (the
// clamp of a future stamp once made every late one compare as newer).
TEST_F(OrderTest, NoClockSkewLetsALateOlderSnapshotThrough) {
  for (const int64_t skew : {60'000, -60'000, 150, 1'000, 0}) {
    SnapshotOrder order;
    int64_t now = 10'000;
    uint64_t seq = 1;
    std::vector<std::pair<int64_t, uint64_t>> sent;  // (stamp, sequence) as sent
    auto judge = [&](int64_t ts, uint64_t s) {
      return order.Judge(ts, s,
                         {kEpoch + now, std::chrono::steady_clock::time_point(milliseconds(now)),
                          milliseconds(120'000), milliseconds(150)});
    };
    for (int i = 0; i < 300; ++i, now += 100) {
      const int64_t ts = kEpoch + now + skew;
      EXPECT_EQ(judge(ts, seq), V::kApply) << "skew " << skew << " at " << i;
      sent.emplace_back(ts, seq++);
      if (i % 3 == 2) {  // a late one, up to two back
        const auto& [old_ts, old_seq] = sent[sent.size() - 1 - static_cast<size_t>(1 + i % 2)];
        EXPECT_EQ(judge(old_ts, old_seq), V::kOutOfOrder) << "skew " << skew << " at " << i;
      }
    }
  }
}

TEST_F(OrderTest, AClockSteppedBackIsFollowedOnceItPassesTheLastStamp) {
  // Its clock stepped back 1 s and it restarted unseen (no startTimeMs
  // read): its snapshots are older than the last one applied for 1 s, then
  // newer again.
  EXPECT_EQ(Judge(kEpoch + t_, 500), V::kApply);
  const int64_t stepped = t_;
  for (int i = 1; i <= 9; ++i) {
    t_ += 100;
    EXPECT_EQ(Judge(kEpoch + t_ - 1'000, static_cast<uint64_t>(i)), V::kOutOfOrder) << i;
  }
  t_ = stepped + 1'100;
  EXPECT_EQ(Judge(kEpoch + t_ - 1'000, 11), V::kApply);
}

TEST_F(OrderTest, ASequenceThatRestartsWithoutTimestampsIsFollowedAfterStaleAfter) {
  EXPECT_EQ(Judge(0, 900), V::kApply);
  t_ += 4'900;
  EXPECT_EQ(Judge(0, 1), V::kOutOfOrder);
  t_ += 200;
  EXPECT_EQ(Judge(0, 2), V::kApply);
}

}  // namespace
}  // namespace xpu::upstream
