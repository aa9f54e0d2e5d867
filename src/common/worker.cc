#include "common/worker.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>

namespace xpu {

void Worker::Start(std::function<void()> loop, std::string name) {
  threads_.emplace_back([loop = std::move(loop), name = std::move(name)] {
    if (!name.empty()) NameThisThread(name.c_str());
    loop();
  });
}

void NameThisThread(const char* name) {
  char truncated[16];
  std::snprintf(truncated, sizeof(truncated), "%s", name);
  (void)pthread_setname_np(pthread_self(), truncated);
}

void Worker::RequestStop() {
  {
    MutexLock lock(mu_);
    stopping_.store(true, std::memory_order_release);
  }
  cv_.NotifyAll();
}

void Worker::Stop() {
  RequestStop();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

bool Worker::SleepUntil(Clock::time_point deadline, Alarm* alarm) {
  MutexLock lock(mu_);
  while (!stopping() && (alarm == nullptr || !RungOf(alarm))) {
    if (!cv_.WaitUntil(lock, deadline)) break;
  }
  if (alarm != nullptr) RungOf(alarm) = false;
  return !stopping();
}

bool Worker::SleepToTick(Clock::time_point* tick, Clock::duration period, Alarm* alarm) {
  const Clock::time_point next = NextTick(*tick, Clock::now(), period);
  const bool go_on = SleepUntil(next, alarm);
  *tick = std::min(next, Clock::now());  // woken early: reckoned from the wake
  return go_on;
}

Worker::Clock::time_point OnGrid(Worker::Clock::time_point earliest,
                                 Worker::Clock::duration period) {
  if (period <= Worker::Clock::duration::zero()) return earliest;
  const Worker::Clock::time_point below(period * (earliest.time_since_epoch() / period));
  return below < earliest ? below + period : below;
}

Worker::Clock::time_point NextTick(Worker::Clock::time_point last, Worker::Clock::time_point now,
                                   Worker::Clock::duration period) {
  const Worker::Clock::time_point next = OnGrid(last + period / 2, period);
  // Fallen behind: a quarter period from now, off the grid, as before the
  // grid (a long tick costs no whole period); the tick after is on it again.
  return next < now + period / 4 ? now + period / 4 : next;
}

void Worker::Ring(Alarm* alarm) {
  {
    MutexLock lock(mu_);
    RungOf(alarm) = true;
  }
  cv_.NotifyAll();
}

void Worker::Reset(Alarm* alarm) {
  MutexLock lock(mu_);
  RungOf(alarm) = false;
}

bool LogOnce::Raise(const std::string& key) {
  MutexLock lock(mu_);
  return raised_.insert(key).second;
}

bool LogOnce::Clear(const std::string& key) {
  MutexLock lock(mu_);
  return raised_.erase(key) > 0;
}

size_t LogOnce::ClearPrefix(const std::string& prefix) {
  MutexLock lock(mu_);
  return std::erase_if(raised_, [&](const std::string& k) { return k.rfind(prefix, 0) == 0; });
}

size_t LogOnce::ClearPrefixIf(const std::string& prefix,
                              const std::function<bool(std::string_view)>& clear) {
  MutexLock lock(mu_);
  return std::erase_if(raised_, [&](const std::string& k) {
    return k.rfind(prefix, 0) == 0 && clear(std::string_view(k).substr(prefix.size()));
  });
}

size_t LogOnce::CountPrefix(const std::string& prefix) const {
  MutexLock lock(mu_);
  return static_cast<size_t>(
      std::count_if(raised_.begin(), raised_.end(),
                    [&](const std::string& k) { return k.rfind(prefix, 0) == 0; }));
}

bool LogLimiter::Allow(const std::string& key, Clock::time_point now, uint64_t* held_back) {
  MutexLock lock(mu_);
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    const std::string& k = keys_.size() < kMaxKeys ? key : std::string("(other keys)");
    it = keys_.find(k);
    if (it == keys_.end()) {
      keys_.emplace(k, Entry{now, 0});
      *held_back = 0;
      return true;
    }
  }
  Entry& e = it->second;
  if (now - e.last < period_) {
    ++e.held_back;
    return false;
  }
  *held_back = e.held_back;
  e = Entry{now, 0};
  return true;
}

}  // namespace xpu
