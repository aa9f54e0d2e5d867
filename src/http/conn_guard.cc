#include "http/conn_guard.h"

#include <dlfcn.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <string>
#include <string_view>

#include "http/headers.h"

namespace xpu::http {
namespace {

using Clock = std::chrono::steady_clock;

// The calling worker thread's head phase; null/zero outside one.
thread_local HeadGuard* t_guard = nullptr;
thread_local bool t_in_head = false;
thread_local Clock::time_point t_deadline{};
// The request line as far as read in this head phase, until checked.
thread_local bool t_line_checked = false;
thread_local std::string t_line;
constexpr size_t kMaxRequestLine = 8192;

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
  t_line_checked = false;
  t_line.clear();
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

// Plain HTTP only (TLS records arrive through read() and are opaque here):
// checks the first line of each request head as it arrives, and answers a
// malformed one with 400 before civetweb can echo it back (headers.h).
ssize_t GuardedRecv(int fd, void* buf, size_t len, int flags) {
  const ssize_t n = GuardedRead<ssize_t (*)(int, void*, size_t, int)>("recv", fd, buf, len, flags);
  if (n < 0 || !t_in_head || t_line_checked || (flags & MSG_PEEK) != 0) return n;
  // Shut both ways after our answer: civetweb must not add its own (echoing)
  // error page behind it.
  auto refuse = [fd] {
    static const char kBadRequest[] =
        "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
        "Content-Length: 20\r\nConnection: close\r\n\r\n400 bad request line\n";
    (void)::send(fd, kBadRequest, sizeof kBadRequest - 1, MSG_NOSIGNAL);
    ::shutdown(fd, SHUT_RDWR);
    HeadGuardAccess::Leave();
    return ssize_t{0};
  };
  // The client stopped sending inside an unchecked line: civetweb would parse
  // and echo the fragment.
  if (n == 0) return t_line.empty() ? n : refuse();
  const std::string_view got(static_cast<const char*>(buf), static_cast<size_t>(n));
  size_t pos = 0;
  while (pos < got.size()) {
    const size_t nl = got.find('\n', pos);
    t_line.append(got.substr(pos, (nl == std::string_view::npos ? got.size() : nl) - pos));
    if (t_line.size() > kMaxRequestLine) return refuse();
    if (nl == std::string_view::npos) return n;  // the line goes on in the next read
    pos = nl + 1;
    std::string_view line = t_line;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    // RFC 9112 2.2 lets a server skip blank lines before a request, but
    // civetweb takes them for an empty request and echoes what follows into
    // its error page; no real client sends them.
    if (!ValidRequestLine(line)) return refuse();
    t_line_checked = true;
    return n;
  }
  return n;
}

}  // namespace
}  // namespace xpu::http

extern "C" {

__attribute__((visibility("default"))) int poll(struct pollfd* fds, nfds_t nfds, int timeout) {
  return xpu::http::GuardedPoll(fds, nfds, timeout);
}

__attribute__((visibility("default"))) ssize_t recv(int fd, void* buf, size_t len, int flags) {
  return xpu::http::GuardedRecv(fd, buf, len, flags);
}

__attribute__((visibility("default"))) ssize_t read(int fd, void* buf, size_t len) {
  return xpu::http::GuardedRead<ssize_t (*)(int, void*, size_t)>("read", fd, buf, len);
}

}  // extern "C"
