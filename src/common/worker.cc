#include "common/worker.h"

namespace xpu {

void Worker::Start(std::function<void()> loop) { threads_.emplace_back(std::move(loop)); }

void Worker::RequestStop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

void Worker::Stop() {
  RequestStop();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

bool Worker::SleepUntil(Clock::time_point deadline, Alarm* alarm) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, deadline, [&] { return stopping() || (alarm != nullptr && alarm->rung_); });
  if (alarm != nullptr) alarm->rung_ = false;
  return !stopping();
}

void Worker::Ring(Alarm* alarm) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    alarm->rung_ = true;
  }
  cv_.notify_all();
}

void Worker::Reset(Alarm* alarm) {
  std::lock_guard<std::mutex> lock(mu_);
  alarm->rung_ = false;
}

bool LogOnce::Raise(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return raised_.insert(key).second;
}

bool LogOnce::Clear(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return raised_.erase(key) > 0;
}

size_t LogOnce::ClearPrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(mu_);
  return std::erase_if(raised_, [&](const std::string& k) { return k.rfind(prefix, 0) == 0; });
}

bool LogLimiter::Allow(const std::string& key, Clock::time_point now, uint64_t* held_back) {
  std::lock_guard<std::mutex> lock(mu_);
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
