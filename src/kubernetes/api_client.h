#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "common/backoff.h"

namespace xpu::kubernetes {

// The longest wait a server's Retry-After is granted: one that asks for
// more (a proxy's hour) is asked again after this, not silenced for it.
inline constexpr std::chrono::seconds kMaxRetryAfter{60};

// One answer of the API server.
struct HttpResult {
  long status = 0;    // HTTP status; 0: no answer (error says why)
  std::string body;   // Get: the body; Stream: the last partial line, if any
  std::string error;  // transport failure or a limit hit; empty when none
  // What a 429 or 5xx answer's Retry-After asked for (ParseRetryAfter); 0:
  // none, or another status.
  std::chrono::seconds retry_after{0};
  bool ok() const { return error.empty() && status == 200; }
};

// A Retry-After header's value as a wait from `now`: delta-seconds, or an
// HTTP date (RFC 9110), at most kMaxRetryAfter; 0 for a value that is
// neither, a date passed, or one over 64 bytes.
std::chrono::seconds ParseRetryAfter(std::string_view value,
                                     std::chrono::system_clock::time_point now);

// The wait before asking again after a failed answer: the backoff's next
// step, or what the server asked for (HttpResult::retry_after) where that
// is longer, as client-go honours it. The backoff advances either way.
std::chrono::milliseconds RetryWait(Backoff* backoff, std::chrono::seconds retry_after);

// A failed answer for the log: the error, or the status and the start of the
// body; a 403 says that RBAC must allow `needs` ("get nodes").
std::string Describe(const HttpResult& r, const std::string& needs);

// How long one GET or PATCH of the watch and the reporter may take.
inline constexpr std::chrono::seconds kRequestTimeout{30};

// HTTPS requests to the Kubernetes API server with libcurl: the bearer token
// re-read from `token_file` on every request (projected service-account
// tokens rotate), the server checked against `ca_file`. Only https:// is
// spoken unless `insecure_http` (then plain http:// too, token included):
// a request to another scheme fails before anything is sent. Holds no
// connection between calls; one instance per calling thread.
class ApiClient {
 public:
  // `user_agent` names the part in the API server's audit log.
  ApiClient(std::string base_url, std::string token_file, std::string ca_file,
            bool insecure_http = false, std::string user_agent = "xpu-exporter");

  // GET base_url + path; at most max_bytes of body (else an error). Gives
  // up, with an error, when `stop` returns true (checked about once a
  // second, so a hung server cannot hold a shutdown longer than that).
  HttpResult Get(const std::string& path, size_t max_bytes, std::chrono::seconds timeout,
                 const std::function<bool()>& stop) const;

  // `method` (PATCH, POST) base_url + path with `body` of `content_type`;
  // the answer as Get's.
  HttpResult Send(const std::string& method, const std::string& path,
                  const std::string& content_type, const std::string& body, size_t max_bytes,
                  std::chrono::seconds timeout, const std::function<bool()>& stop) const;

  // A watch: GET base_url + path and call on_line with each newline-ended
  // line as it arrives (each at most max_line bytes, else an error). Ends
  // when the server closes the stream, on_line returns false, `stop` returns
  // true (checked about once a second), `timeout` passes, or on an error.
  // `on_status` is told the HTTP status as soon as it arrives (a watch that
  // opened is a working source long before it ends). A non-200 answer's
  // body is in `body`.
  HttpResult Stream(const std::string& path, size_t max_line, std::chrono::seconds timeout,
                    const std::function<void(long)>& on_status,
                    const std::function<bool(std::string_view)>& on_line,
                    const std::function<bool()>& stop) const;

  // `s` escaped for a URL query.
  static std::string Escape(std::string_view s);

  // The retry_after of the last answer this client had (0 after one
  // without): for a caller whose failure reached it through a bool.
  std::chrono::seconds last_retry_after() const { return last_retry_after_; }

 private:
  HttpResult Keep(HttpResult r) const {
    last_retry_after_ = r.retry_after;
    return r;
  }
  const std::string base_url_, token_file_, ca_file_, user_agent_;
  const bool insecure_http_;
  mutable std::chrono::seconds last_retry_after_{0};  // the calling thread's (one instance each)
};

}  // namespace xpu::kubernetes
