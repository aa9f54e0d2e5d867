#include "upstream/mode_machine.h"

#include <algorithm>
#include <stdexcept>

namespace xpu::upstream {

using std::chrono::milliseconds;

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kStream:
      return "stream";
    case Mode::kPoll:
      return "poll";
    case Mode::kDown:
      return "down";
  }
  return "down";
}

milliseconds EffectiveStaleAfter(milliseconds configured, milliseconds interval,
                                 milliseconds floor) {
  return configured.count() > 0 ? configured
                                : std::max(interval * ModeMachine::kIntervalsUntilGivenUp, floor);
}

ModeMachine::ModeMachine(Options options) : options_(options), interval_(options.interval) {
  if (interval_.count() <= 0) throw std::invalid_argument("interval must be > 0");
}

bool ModeMachine::set_interval(milliseconds interval) {
  if (interval.count() <= 0) throw std::invalid_argument("interval must be > 0");
  if (interval == interval_) return false;
  interval_ = interval;
  return true;
}

milliseconds ModeMachine::watchdog() const {
  return options_.watchdog.count() > 0
             ? options_.watchdog
             : std::max(interval_ * kIntervalsUntilGivenUp, options_.stall_floor);
}

void ModeMachine::StreamOpened(Clock::time_point now) {
  stream_open_ = true;
  stream_opened_ = now;
}

void ModeMachine::StreamDelivered(Clock::time_point now) {
  last_stream_msg_ = now;
  last_fresh_ = now;
  // A poll's answer from before says nothing once the stream delivers: when
  // the stream ends, only a poll after it makes the mode `poll`.
  last_poll_ok_ = false;
  refused_ = false;
  last_error_.clear();
}

void ModeMachine::StreamEnded() { stream_open_ = false; }

void ModeMachine::Polled(Clock::time_point now, bool fresh, bool refused) {
  last_poll_ok_ = fresh;
  last_poll_ = now;
  if (fresh) {
    last_error_.clear();
    last_fresh_ = now;
  }
  refused_ = refused;
}

bool ModeMachine::StreamFresh(Clock::time_point now) const {
  return stream_open_ && last_stream_msg_ >= stream_opened_ &&
         now - last_stream_msg_ < fresh_window();
}

std::optional<milliseconds> ModeMachine::Silent(Clock::time_point now) const {
  const Clock::time_point quiet_since = std::max(last_stream_msg_, stream_opened_);
  if (!stream_open_ || now - quiet_since <= watchdog()) return std::nullopt;
  return std::chrono::duration_cast<milliseconds>(now - quiet_since);
}

bool ModeMachine::RenewChannel(Clock::time_point now) {
  if (mode_ != Mode::kDown || now - down_since_ < kRenewChannelAfter ||
      now - channel_renewed_ < kRenewChannelAfter)
    return false;
  channel_renewed_ = now;
  return true;
}

ModeMachine::Change ModeMachine::Update(Clock::time_point now) {
  // Neither way delivers now. A daemon that refuses calls is down; one whose
  // answers stop coming (or repeat) is stalled, and keeps its mode until the
  // stall floor: a short pause is not an outage.
  const bool stalled =
      mode_ != Mode::kDown && !refused_ && now - last_fresh_ < options_.stall_floor;
  Change c;
  c.from = mode_;
  c.to = StreamFresh(now) ? Mode::kStream
         : last_poll_ok_  ? Mode::kPoll
         : stalled        ? mode_
                          : Mode::kDown;
  mode_ = c.to;
  if (c.to == Mode::kDown && c.from != Mode::kDown) down_since_ = now;
  // Down is said once, when a call has failed (not while the first answer is
  // awaited at start), and back once.
  c.say_down = c.to == Mode::kDown && !said_down_ && !last_error_.empty();
  c.say_back = c.to != Mode::kDown && said_down_;
  if (c.say_down) said_down_ = true;
  if (c.say_back) said_down_ = false;
  c.reason = last_error_;
  return c;
}

std::optional<ModeMachine::Clock::time_point> ModeMachine::last_stream_message() const {
  if (last_stream_msg_ == Clock::time_point{}) return std::nullopt;
  return last_stream_msg_;
}

}  // namespace xpu::upstream
