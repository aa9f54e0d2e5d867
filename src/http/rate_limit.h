#pragma once

#include <chrono>
#include <optional>

#include "common/mutex.h"
#include "http/web_config.h"

namespace xpu::http {

// The web config's `rate_limit`: one token bucket over the main port's
// requests (the probes' paths excepted), as exporter-toolkit's Go
// rate.Limiter: it starts full with `burst` tokens, gains one every
// `interval`, holds at most `burst`, and each request takes one. A reload
// that changes the limit starts a full bucket. Thread-safe: the workers call
// Allow, the clock is theirs to pass (tests pass a fake one).
class RateLimiter {
 public:
  // Whether a request at `now` may pass under `limit` (an off limit always
  // passes, and takes no lock). If not, *retry_after is when a token will
  // be there, in whole seconds rounded up, at least 1 (Retry-After).
  bool Allow(const RateLimit& limit, std::chrono::steady_clock::time_point now,
             std::chrono::seconds* retry_after);

 private:
  Mutex mu_;
  RateLimit limit_ XPU_GUARDED_BY(mu_);
  double tokens_ XPU_GUARDED_BY(mu_) = 0;
  std::optional<std::chrono::steady_clock::time_point> last_ XPU_GUARDED_BY(mu_);
};

}  // namespace xpu::http
