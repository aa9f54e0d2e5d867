#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace xpu::upstream {

// How metric data currently arrives: `stream` (ExporterDataStream delivering),
// `poll` (stream down, ExporterGetDataList answering) or `down` (neither).
enum class Mode { kDown, kPoll, kStream };
const char* ModeName(Mode m);

// The stall floor's default (docs/reliability.md, "A short stall is not an
// outage"): a pause of the daemon shorter than this, whatever its interval,
// neither withdraws series nor turns the mode down.
inline constexpr std::chrono::milliseconds kStallFloor{5000};

// Stale-after in force: `configured` when set (> 0), else 3 intervals but
// no less than `floor`.
std::chrono::milliseconds EffectiveStaleAfter(std::chrono::milliseconds configured,
                                              std::chrono::milliseconds interval,
                                              std::chrono::milliseconds floor);

// The XDM client's decisions, without its I/O (docs/architecture.md,
// "Upstream modes"): which mode the data is in (stream, poll, down), when
// the stream is fresh, when to poll, when the watchdog gives a silent stream
// up, when to renew the channel, and when "XDM down" and "XDM back" are
// said. It is told what happened (a stream opened, delivered or ended, a
// poll's outcome, a failure) with the time it happened, and has no clock of
// its own, so its tests run in virtual time (tests/upstream/mode_test.cc).
//
// Thread-compatible: XdmClient holds it under its mu_.
class ModeMachine {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    // The collection interval until XDM reports its own (set_interval).
    std::chrono::milliseconds interval{1000};
    // A stream silent this long is given up; 0: 3 intervals, at least the floor.
    std::chrono::milliseconds watchdog{0};
    // Silence (answers time out, or repeat) shorter than this keeps the mode.
    std::chrono::milliseconds stall_floor = kStallFloor;
  };
  // A mode change and what to say about it.
  struct Change {
    Mode from = Mode::kDown;
    Mode to = Mode::kDown;
    bool say_down = false;  // the one "XDM down" line, with `reason`
    bool say_back = false;  // the one "XDM back" line after it
    std::string reason;     // the last failure
    bool changed() const { return from != to; }
  };

  explicit ModeMachine(Options options);

  std::chrono::milliseconds interval() const { return interval_; }
  // Whether it changed.
  bool set_interval(std::chrono::milliseconds interval);
  // Data is current for 1.5 intervals after it arrives: one interval plus
  // room for jitter, short of the next-but-one.
  std::chrono::milliseconds fresh_window() const { return interval_ * 3 / 2; }
  // A poll must answer within 0.8 intervals, so polls never overlap.
  std::chrono::milliseconds poll_deadline() const { return interval_ * 4 / 5; }
  std::chrono::milliseconds watchdog() const;
  std::chrono::milliseconds stall_floor() const { return options_.stall_floor; }

  // The stream: subscribed, a message with fresh data, ended.
  void StreamOpened(Clock::time_point now);
  void StreamDelivered(Clock::time_point now);
  void StreamEnded();
  // A poll's outcome: `fresh` when it brought data not stored yet;
  // `refused` when it failed other than by timing out (the daemon is not
  // there to answer, rather than stalled).
  void Polled(Clock::time_point now, bool fresh, bool refused);
  // Why data last failed to come ("ExporterDataStream: 14 ..."), for the
  // down line; fresh data clears it.
  void Failed(std::string why) { last_error_ = std::move(why); }

  bool stream_open() const { return stream_open_; }
  // The open stream delivered fresh data within the fresh window.
  bool StreamFresh(Clock::time_point now) const;
  // How long the open stream has been silent, once longer than the
  // watchdog (then the caller cancels it).
  std::optional<std::chrono::milliseconds> Silent(Clock::time_point now) const;
  // Whether to replace the gRPC channel now: only once down for a while,
  // and not again within that while (during a stall a fresh channel's
  // connection attempt to the stopped daemon would read as a refusal).
  // True marks it renewed.
  bool RenewChannel(Clock::time_point now);

  // The mode at `now`: stream if fresh, else poll if the last poll brought
  // fresh data, else (a stall) the mode held until the stall floor, unless
  // the daemon refused, else down.
  Change Update(Clock::time_point now);
  Mode mode() const { return mode_; }
  std::optional<Clock::time_point> last_stream_message() const;
  std::optional<Clock::time_point> last_poll() const { return last_poll_; }

  static constexpr int kIntervalsUntilGivenUp = 3;
  static constexpr std::chrono::seconds kRenewChannelAfter{1};

 private:
  const Options options_;
  std::chrono::milliseconds interval_;
  Mode mode_ = Mode::kDown;
  std::string last_error_;
  bool said_down_ = false;  // the down line was said; the back line is owed
  bool stream_open_ = false;
  Clock::time_point stream_opened_{};
  Clock::time_point last_stream_msg_{};
  bool last_poll_ok_ = false;
  bool refused_ = false;
  std::optional<Clock::time_point> last_poll_;
  Clock::time_point last_fresh_{};  // the last fresh data, either way
  Clock::time_point down_since_{};
  Clock::time_point channel_renewed_{};
};

}  // namespace xpu::upstream
