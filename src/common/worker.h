#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace xpu {

// The threads of one background service (the XDM client, the HAL sampler,
// the kubelet poller): owns them, their stop flag and the condition variable
// they sleep on between rounds, so that Stop() wakes every sleeper at once.
// An Alarm ends one sleep early when another thread rings it (a returning
// daemon, a stream that just ended).
//
// Thread-safe, except that Start() and Stop() are for the owning thread.
class Worker {
 public:
  using Clock = std::chrono::steady_clock;

  // A wake-up reason, set by Ring() and consumed by the sleep that sees it.
  // Read and written only under the worker's mutex (Worker::RungOf); owned
  // by whoever declares it.
  class Alarm {
   private:
    friend class Worker;
    bool rung_ = false;
  };

  Worker() = default;
  ~Worker() { Stop(); }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Starts one thread running `loop`, which returns once stopping(). `name`
  // (at most 15 characters: the kernel's limit) is what top, perf and
  // /proc/PID/task/*/comm show for it.
  void Start(std::function<void()> loop, std::string name = {});
  // Makes stopping() true and wakes every sleeper; returns at once.
  void RequestStop();
  // RequestStop(), then joins every thread. Idempotent.
  void Stop();
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  // Sleeps until `deadline`, RequestStop(), or `alarm` rings (then resets it);
  // false if stopping.
  bool SleepUntil(Clock::time_point deadline, Alarm* alarm = nullptr);
  bool SleepFor(Clock::duration d, Alarm* alarm = nullptr) {
    return SleepUntil(Clock::now() + d, alarm);
  }
  // Sleeps to the next tick of a loop run every `period` (NextTick): `*tick`
  // is the last tick's instant, and the next's once it returns (the wake's,
  // if `alarm` ended the sleep early). False if stopping.
  bool SleepToTick(Clock::time_point* tick, Clock::duration period, Alarm* alarm = nullptr);
  void Ring(Alarm* alarm);
  void Reset(Alarm* alarm);

 private:
  std::atomic<bool> stopping_{false};
  // Every Alarm's rung_, reached only through RungOf; the sleepers wait on cv_.
  bool& RungOf(Alarm* alarm) XPU_REQUIRES(mu_) { return alarm->rung_; }
  Mutex mu_;
  CondVar cv_;
  std::vector<std::thread> threads_;  // owner thread only
};

// The first instant at or after `earliest` on the process's grid of
// `period`: a whole number of periods past the steady clock's epoch. Every
// loop that runs at the same period (the HAL's samplers, the kernel log's
// publish, the XDM poller: 1 s by default) wakes at the same
// instants, so an idle node's CPU leaves its idle state once a period for
// all of them, not once for each: on the 2-core VM a bare wake-up cost
// 71 us when six threads were staggered and 34 us when aligned
// (docs/benchmarks.md, "Issue 51, eighth pass"). A period that is a multiple
// of another lies on the other's grid. A period not positive: `earliest`.
Worker::Clock::time_point OnGrid(Worker::Clock::time_point earliest,
                                 Worker::Clock::duration period);

// A loop's next tick on the grid of its `period`, its last at `last`, now
// `now`: the first grid instant at least half a period after `last` (one
// period after a tick on the grid; half a period to one and a half after a
// start or an early wake), unless that is less than a quarter period from
// now: then a quarter period from now, off the grid, so that a loop fallen
// behind neither bursts, nor runs back to back, nor loses a whole period
// (the tick after comes back to the grid). A fixed rate, not a fixed rest:
// for loops whose work is a local read (the HAL's samplers, the kernel
// log, the XDM poller); a loop that calls a server that may be struggling
// rests a whole period after each round instead (SleepFor).
Worker::Clock::time_point NextTick(Worker::Clock::time_point last, Worker::Clock::time_point now,
                                   Worker::Clock::duration period);

// Names the calling thread (truncated to the kernel's 15 characters).
void NameThisThread(const char* name);

// Remembers which problems have been logged, so that a condition that
// persists is logged once, and its end can be logged once too. Thread-safe.
class LogOnce {
 public:
  // True the first time `key` is raised since it last cleared: log it then.
  bool Raise(const std::string& key);
  // True if `key` was raised: the problem is over, log that if useful.
  bool Clear(const std::string& key);
  // Clears every key starting with `prefix`; how many were raised.
  size_t ClearPrefix(const std::string& prefix);
  // Clears the keys starting with `prefix` for whose rest `clear` is true
  // (called under the lock: it must not call back); how many.
  size_t ClearPrefixIf(const std::string& prefix,
                       const std::function<bool(std::string_view)>& clear);
  // How many keys starting with `prefix` are raised.
  size_t CountPrefix(const std::string& prefix) const;

 private:
  mutable Mutex mu_;
  std::set<std::string> raised_ XPU_GUARDED_BY(mu_);
};

// Rate-limits a log line that may repeat (a fault code that flaps): per key,
// one line per `period`; the lines held back in between are counted and
// reported with the next one that goes out. At most kMaxKeys keys are
// tracked; further ones share one. Thread-safe.
class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxKeys = 1024;
  explicit LogLimiter(Clock::duration period = std::chrono::minutes(1)) : period_(period) {}

  // True if a line for `key` may go out at `now`; then `*held_back` is how
  // many were not logged since the last one that was.
  bool Allow(const std::string& key, Clock::time_point now, uint64_t* held_back);
  Clock::duration period() const { return period_; }

 private:
  struct Entry {
    Clock::time_point last;
    uint64_t held_back = 0;
  };
  const Clock::duration period_;
  Mutex mu_;
  std::map<std::string, Entry> keys_ XPU_GUARDED_BY(mu_);
};

// The calls a service has in flight (anything with TryCancel(), such as
// grpc::ClientContext), so that stopping can cancel them: each call is held
// by a Scope for as long as it may block. Once CancelAll() ran, every Scope
// is refused (ok() false) and the caller makes no call. Thread-safe.
template <typename Call>
class InFlightCalls {
 public:
  class Scope {
   public:
    // Declare right after the call's context, so that it ends first.
    Scope(InFlightCalls* calls, Call* call) : calls_(calls), call_(call) {
      MutexLock lock(calls_->mu_);
      ok_ = !calls_->cancelled_;
      if (ok_) calls_->calls_.push_back(call_);
    }
    ~Scope() {
      if (!ok_) return;
      MutexLock lock(calls_->mu_);
      std::erase(calls_->calls_, call_);
    }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    bool ok() const { return ok_; }

   private:
    InFlightCalls* calls_;
    Call* call_;
    bool ok_;
  };

  void CancelAll() {
    MutexLock lock(mu_);
    cancelled_ = true;
    for (Call* c : calls_) c->TryCancel();
  }

 private:
  Mutex mu_;
  bool cancelled_ XPU_GUARDED_BY(mu_) = false;
  std::vector<Call*> calls_ XPU_GUARDED_BY(mu_);
};

}  // namespace xpu
