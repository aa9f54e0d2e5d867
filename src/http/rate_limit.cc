#include "http/rate_limit.h"

#include <algorithm>
#include <cmath>

namespace xpu::http {

bool RateLimiter::Allow(const RateLimit& limit, std::chrono::steady_clock::time_point now,
                        std::chrono::seconds* retry_after) {
  if (!limit.on()) return true;
  const auto per_token = static_cast<double>(limit.interval.count());  // ns
  MutexLock lock(mu_);
  if (!last_ || !(limit_ == limit)) {
    limit_ = limit;
    tokens_ = limit.burst;
    last_ = now;
  }
  if (now > *last_) {
    const auto elapsed = static_cast<double>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(now - *last_).count());
    tokens_ = std::min<double>(limit.burst, tokens_ + elapsed / per_token);
    last_ = now;
  }
  if (tokens_ >= 1) {
    tokens_ -= 1;
    return true;
  }
  const double wait_s = (1 - tokens_) * per_token / 1e9;
  *retry_after =
      std::chrono::seconds(std::max<int64_t>(1, static_cast<int64_t>(std::ceil(wait_s))));
  return false;
}

}  // namespace xpu::http
