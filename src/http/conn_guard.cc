#include "http/conn_guard.h"

#include <dlfcn.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>

namespace xpu::http {
namespace {

using Clock = std::chrono::steady_clock;

// The calling worker thread's head phase; null/zero outside one.
thread_local HeadGuard* t_guard = nullptr;
thread_local bool t_in_head = false;
thread_local Clock::time_point t_deadline{};

bool Expired() { return t_in_head && Clock::now() >= t_deadline; }

}  // namespace

struct HeadGuardAccess {
  static void Leave() {
    if (!t_in_head) return;
    t_in_head = false;
    if (t_guard != nullptr) t_guard->in_head_.fetch_sub(1);
  }
  static void CountTimeout() {
    if (t_guard != nullptr) t_guard->timeouts_.fetch_add(1);
  }
};

HeadGuard::HeadGuard(std::chrono::milliseconds head_timeout,
                     std::chrono::milliseconds busy_head_timeout, int workers)
    : head_timeout_(head_timeout),
      busy_head_timeout_(busy_head_timeout),
      busy_threshold_(workers / 2 > 0 ? workers / 2 : 1) {
  if (head_timeout.count() <= 0 || busy_head_timeout.count() <= 0 || workers <= 0)
    throw std::invalid_argument("HeadGuard: timeouts and workers must be > 0");
}

void HeadGuard::EnterHead() {
  HeadGuardAccess::Leave();  // a phase never nests; keep the count exact
  t_guard = this;
  t_in_head = true;
  const int waiting = in_head_.fetch_add(1) + 1;
  t_deadline = Clock::now() + (waiting > busy_threshold_ ? busy_head_timeout_ : head_timeout_);
}

void HeadGuard::OnConnect() { EnterHead(); }
void HeadGuard::OnHead() { HeadGuardAccess::Leave(); }
void HeadGuard::OnRequestEnd() { EnterHead(); }
void HeadGuard::OnClose() { HeadGuardAccess::Leave(); }

}  // namespace xpu::http

// ---- the wrapped libc calls ----
// Defined in the executable, these take precedence over libc's for every
// shared library (civetweb, libcrypto's socket BIO); each forwards at once
// unless the calling thread is a civetweb worker in a head phase.

namespace xpu::http {
namespace {

template <typename Fn>
Fn Real(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) abort();  // a libc without poll/recv/read: cannot happen
  return reinterpret_cast<Fn>(f);
}

// Shuts `fd` for reading: civetweb then reads EOF and closes the connection.
void CutOff(int fd) {
  ::shutdown(fd, SHUT_RD);
  HeadGuardAccess::CountTimeout();
  HeadGuardAccess::Leave();
}

int GuardedPoll(struct pollfd* fds, nfds_t nfds, int timeout) {
  using Fn = int (*)(struct pollfd*, nfds_t, int);
  static const Fn real = Real<Fn>("poll");
  if (!t_in_head) return real(fds, nfds, timeout);
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(t_deadline - Clock::now()).count() + 1;
  if (left > 1) {
    const int capped = timeout < 0 || timeout > left ? static_cast<int>(left) : timeout;
    const int n = real(fds, nfds, capped);
    if (n != 0 || !Expired()) return n;
  }
  for (nfds_t i = 0; i < nfds; ++i) CutOff(fds[i].fd);
  return real(fds, nfds, 0);
}

template <typename Fn, typename... Args>
ssize_t GuardedRead(const char* name, int fd, Args... args) {
  static const Fn real = Real<Fn>(name);
  if (Expired()) {
    CutOff(fd);
    return 0;
  }
  return real(fd, args...);
}

}  // namespace
}  // namespace xpu::http

extern "C" {

__attribute__((visibility("default"))) int poll(struct pollfd* fds, nfds_t nfds, int timeout) {
  return xpu::http::GuardedPoll(fds, nfds, timeout);
}

__attribute__((visibility("default"))) ssize_t recv(int fd, void* buf, size_t len, int flags) {
  return xpu::http::GuardedRead<ssize_t (*)(int, void*, size_t, int)>("recv", fd, buf, len, flags);
}

__attribute__((visibility("default"))) ssize_t read(int fd, void* buf, size_t len) {
  return xpu::http::GuardedRead<ssize_t (*)(int, void*, size_t)>("read", fd, buf, len);
}

}  // extern "C"
