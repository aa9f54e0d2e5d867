// The upstream mode machine in virtual time: every transition the client and
// the chaos suite go through, each at the instant it is due, with no
// simulator, no sockets and no sleeping.
#include <gtest/gtest.h>

#include "upstream/mode_machine.h"

namespace xpu::upstream {
namespace {

using std::chrono::milliseconds;
using Clock = ModeMachine::Clock;

class ModeTest : public ::testing::Test {
 protected:
  // A steady clock of its own, far from the epoch like a real one.
  Clock::time_point now_ = Clock::time_point{} + std::chrono::hours(100);
  ModeMachine m_{ModeMachine::Options{milliseconds(1000), milliseconds(0), milliseconds(5000)}};

  void Advance(milliseconds d) { now_ += d; }
  ModeMachine::Change Update() { return m_.Update(now_); }
  // A stream subscribed now that delivers at once.
  void StreamUp() {
    m_.StreamOpened(now_);
    m_.StreamDelivered(now_);
  }
  void StreamBreaks(const std::string& why) {
    m_.Failed(why);
    m_.StreamEnded();
  }
};

TEST_F(ModeTest, StartsDownAndSaysNothingWhileTheFirstAnswerIsAwaited) {
  EXPECT_EQ(m_.mode(), Mode::kDown);
  Advance(milliseconds(3000));
  const auto c = Update();
  EXPECT_EQ(c.to, Mode::kDown);
  EXPECT_FALSE(c.changed());
  EXPECT_FALSE(c.say_down);  // no call has failed yet
}

TEST_F(ModeTest, AStreamThatDeliversIsStreamForOneAndAHalfIntervals) {
  StreamUp();
  auto c = Update();
  EXPECT_EQ(c.from, Mode::kDown);
  EXPECT_EQ(c.to, Mode::kStream);
  EXPECT_FALSE(c.say_back);  // nothing was said down
  Advance(milliseconds(1499));
  EXPECT_TRUE(m_.StreamFresh(now_));
  Advance(milliseconds(1));
  EXPECT_FALSE(m_.StreamFresh(now_));  // the poller polls from here
}

// A poll that answered at start, then hours of stream: when the stream
// ends, that old answer says nothing of now. The mode holds as a stall until
// a poll answers (or the floor passes). Before, it went stream -> poll at
// once on the start's answer, and a poll that then timed out held "poll"
// with no poll having answered.
TEST_F(ModeTest, APollAnsweredBeforeTheStreamSaysNothingWhenTheStreamEnds) {
  m_.Polled(now_, /*fresh=*/true, /*refused=*/false);
  EXPECT_EQ(Update().to, Mode::kPoll);
  StreamUp();
  EXPECT_EQ(Update().to, Mode::kStream);
  for (int i = 0; i < 600; ++i) {
    Advance(milliseconds(1000));
    m_.StreamDelivered(now_);
  }
  m_.StreamEnded();
  EXPECT_EQ(Update().to, Mode::kStream) << "a stall holds its mode";
  m_.Polled(now_, /*fresh=*/true, /*refused=*/false);
  EXPECT_EQ(Update().to, Mode::kPoll);
}

TEST_F(ModeTest, AMessageBeforeTheStreamReopenedDoesNotMakeTheNewOneFresh) {
  StreamUp();
  m_.StreamEnded();
  EXPECT_FALSE(m_.StreamFresh(now_));
  Advance(milliseconds(10));
  m_.StreamOpened(now_);
  EXPECT_FALSE(m_.StreamFresh(now_));  // subscribed, nothing delivered yet
  m_.StreamDelivered(now_);
  EXPECT_TRUE(m_.StreamFresh(now_));
}

// The stream breaks while the daemon still answers polls: poll at once,
// and stream again once the re-subscribed stream delivers.
TEST_F(ModeTest, StreamToPollAndBack) {
  StreamUp();
  Update();
  Advance(milliseconds(500));
  StreamBreaks("ExporterDataStream: 14 broken");
  m_.Polled(now_, /*fresh=*/true, /*refused=*/false);
  auto c = Update();
  EXPECT_EQ(c.from, Mode::kStream);
  EXPECT_EQ(c.to, Mode::kPoll);
  EXPECT_FALSE(c.say_down);
  Advance(milliseconds(1000));
  StreamUp();
  c = Update();
  EXPECT_EQ(c.to, Mode::kStream);
  EXPECT_TRUE(m_.StreamFresh(now_));  // the poller stops polling
}

// A poll that brings only what is stored already (a repeat) is not data:
// it does not hold the mode at poll.
TEST_F(ModeTest, APollOfRepeatedDataIsNotPollMode) {
  m_.Polled(now_, /*fresh=*/true, false);
  EXPECT_EQ(Update().to, Mode::kPoll);
  Advance(milliseconds(1000));
  m_.Polled(now_, /*fresh=*/false, false);
  // Within the stall floor of the last fresh data: held.
  EXPECT_EQ(Update().to, Mode::kPoll);
  Advance(milliseconds(4000));
  m_.Polled(now_, false, false);
  m_.Failed("ExporterGetDataList: repeats");
  const auto c = Update();
  EXPECT_EQ(c.to, Mode::kDown);
  EXPECT_TRUE(c.say_down);
}

// A stopped daemon (SIGSTOP): its answers time out. The mode holds until
// the stall floor after the last fresh data, then goes down, said once
// with the last failure; the first data after says it is back, once.
TEST_F(ModeTest, AStallHoldsTheModeUntilTheFloorThenDownIsSaidOnceAndBackOnce) {
  StreamUp();
  Update();
  for (int i = 1; i < 5; ++i) {
    Advance(milliseconds(1000));
    m_.Failed("ExporterGetDataList: 4 Deadline Exceeded");
    m_.Polled(now_, false, /*refused=*/false);
    const auto c = Update();
    EXPECT_EQ(c.to, Mode::kStream) << "at " << i << " s";
    EXPECT_FALSE(c.say_down);
  }
  Advance(milliseconds(999));
  EXPECT_EQ(Update().to, Mode::kStream);  // 4.999 s
  Advance(milliseconds(1));
  auto c = Update();  // 5 s: the floor
  EXPECT_EQ(c.from, Mode::kStream);
  EXPECT_EQ(c.to, Mode::kDown);
  EXPECT_TRUE(c.say_down);
  EXPECT_EQ(c.reason, "ExporterGetDataList: 4 Deadline Exceeded");
  Advance(milliseconds(1000));
  m_.Polled(now_, false, false);
  c = Update();
  EXPECT_EQ(c.to, Mode::kDown);
  EXPECT_FALSE(c.say_down);  // once
  Advance(milliseconds(1000));
  m_.Polled(now_, /*fresh=*/true, false);
  c = Update();
  EXPECT_EQ(c.to, Mode::kPoll);
  EXPECT_TRUE(c.say_back);
  EXPECT_TRUE(c.reason.empty());  // fresh data cleared the failure
  Advance(milliseconds(1000));
  m_.Polled(now_, true, false);
  EXPECT_FALSE(Update().say_back);  // once
}

// A killed daemon: the socket refuses. Down at once, well inside the floor.
TEST_F(ModeTest, ARefusingDaemonIsDownAtOnce) {
  StreamUp();
  Update();
  Advance(milliseconds(100));
  StreamBreaks("ExporterDataStream: 14 Socket closed");
  m_.Failed("ExporterGetDataList: 14 failed to connect");
  m_.Polled(now_, false, /*refused=*/true);
  const auto c = Update();
  EXPECT_EQ(c.to, Mode::kDown);
  EXPECT_TRUE(c.say_down);
  EXPECT_EQ(c.reason, "ExporterGetDataList: 14 failed to connect");
}

// The daemon refuses, then only times out (a restarting daemon that does
// not answer yet): still down; the stall rule holds only a mode that was up.
TEST_F(ModeTest, TimeoutsAfterDownDoNotBringTheModeBack) {
  m_.Failed("x: 14");
  m_.Polled(now_, false, true);
  Update();
  Advance(milliseconds(1000));
  m_.Polled(now_, false, false);
  EXPECT_EQ(Update().to, Mode::kDown);
}

TEST_F(ModeTest, TheWatchdogGivesASilentStreamUpAfterThreeIntervalsButNotBeforeTheFloor) {
  m_.StreamOpened(now_);
  Advance(milliseconds(5000));
  EXPECT_FALSE(m_.Silent(now_));  // 3 intervals are 3 s; the floor is 5 s
  Advance(milliseconds(1));
  ASSERT_TRUE(m_.Silent(now_));
  EXPECT_EQ(*m_.Silent(now_), milliseconds(5001));
  // A message resets it.
  m_.StreamDelivered(now_);
  Advance(milliseconds(5000));
  EXPECT_FALSE(m_.Silent(now_));
  // A closed stream is not watched.
  Advance(milliseconds(1000));
  m_.StreamEnded();
  EXPECT_FALSE(m_.Silent(now_));
  // A long interval (XDM's own, 10 s): 3 intervals.
  EXPECT_TRUE(m_.set_interval(milliseconds(10000)));
  EXPECT_FALSE(m_.set_interval(milliseconds(10000)));
  EXPECT_EQ(m_.watchdog(), milliseconds(30000));
  EXPECT_EQ(m_.fresh_window(), milliseconds(15000));
  EXPECT_EQ(m_.poll_deadline(), milliseconds(8000));
}

TEST(ModeOptionsTest, AnExplicitWatchdogIsTakenAsGiven) {
  ModeMachine m(ModeMachine::Options{milliseconds(100), milliseconds(700), milliseconds(5000)});
  const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);
  m.StreamOpened(t0);
  EXPECT_FALSE(m.Silent(t0 + milliseconds(700)));
  EXPECT_TRUE(m.Silent(t0 + milliseconds(701)));
}

// The channel is renewed only once down for a second, and at most once a
// second: during a stall a fresh channel would read as a refusing daemon.
TEST_F(ModeTest, TheChannelIsRenewedOnlyOnceDownForASecond) {
  StreamUp();
  Update();
  Advance(milliseconds(4000));
  EXPECT_FALSE(m_.RenewChannel(now_));  // stalled, not down
  m_.Failed("x: 14");
  m_.StreamEnded();
  m_.Polled(now_, false, true);
  ASSERT_EQ(Update().to, Mode::kDown);
  Advance(milliseconds(999));
  EXPECT_FALSE(m_.RenewChannel(now_));
  Advance(milliseconds(1));
  EXPECT_TRUE(m_.RenewChannel(now_));
  Advance(milliseconds(500));
  EXPECT_FALSE(m_.RenewChannel(now_));  // renewed within the second
  Advance(milliseconds(500));
  EXPECT_TRUE(m_.RenewChannel(now_));
}

// The chaos suite's cycle, in its order: a daemon killed and restarted,
// the stream failing over to polls and back, then one stopped and resumed.
TEST_F(ModeTest, TheChaosSuitesCycle) {
  std::vector<std::pair<Mode, Mode>> changes;
  int downs = 0, backs = 0;
  auto update = [&] {
    const auto c = Update();
    if (c.changed()) changes.emplace_back(c.from, c.to);
    downs += c.say_down;
    backs += c.say_back;
  };
  StreamUp();
  update();
  // Killed: the stream ends, polls are refused for 3 s.
  Advance(milliseconds(200));
  StreamBreaks("ExporterDataStream: 14");
  for (int i = 0; i < 3; ++i) {
    m_.Failed("ExporterGetDataList: 14");
    m_.Polled(now_, false, true);
    update();
    Advance(milliseconds(1000));
  }
  // Restarted: a poll answers first, then the stream re-subscribes.
  m_.Polled(now_, true, false);
  update();
  Advance(milliseconds(300));
  StreamUp();
  update();
  // The stream breaks alone (the daemon is fine): poll, then stream.
  Advance(milliseconds(1000));
  StreamBreaks("ExporterDataStream: 1 cancelled");
  m_.Polled(now_, true, false);
  update();
  Advance(milliseconds(1000));
  StreamUp();
  update();
  // Stopped for 2 s: held. Resumed: stream again, nothing said.
  for (int i = 0; i < 2; ++i) {
    Advance(milliseconds(1000));
    m_.Polled(now_, false, false);
    update();
  }
  Advance(milliseconds(100));
  m_.StreamDelivered(now_);
  update();
  using P = std::pair<Mode, Mode>;
  EXPECT_EQ(changes, (std::vector<P>{{Mode::kDown, Mode::kStream},
                                     {Mode::kStream, Mode::kDown},
                                     {Mode::kDown, Mode::kPoll},
                                     {Mode::kPoll, Mode::kStream},
                                     {Mode::kStream, Mode::kPoll},
                                     {Mode::kPoll, Mode::kStream}}));
  EXPECT_EQ(downs, 1);
  EXPECT_EQ(backs, 1);
}

TEST(EffectiveStaleAfterTest, ThreeIntervalsAtLeastTheFloorUnlessGiven) {
  EXPECT_EQ(EffectiveStaleAfter(milliseconds(0), milliseconds(1000), milliseconds(5000)),
            milliseconds(5000));
  EXPECT_EQ(EffectiveStaleAfter(milliseconds(0), milliseconds(4000), milliseconds(5000)),
            milliseconds(12000));
  EXPECT_EQ(EffectiveStaleAfter(milliseconds(600), milliseconds(4000), milliseconds(5000)),
            milliseconds(600));
}

}  // namespace
}  // namespace xpu::upstream
