#pragma once

#include <atomic>
#include <chrono>

struct mg_connection;

namespace xpu::http {

// Read deadlines for the head of every request civetweb serves.
//
// civetweb 1.15 reads a request's head on the worker thread that will serve
// it, bounded only by request_timeout_ms (10 s here), which also bounds
// writes. Clients that send a head slowly, or hold idle keep-alive
// connections, can therefore occupy every worker and starve /-/healthy,
// /-/ready and /metrics (docs/reliability.md). HeadGuard gives each head phase
// (from accept, or from the end of the previous request on a keep-alive
// connection, to the end of the head) its own deadline: `head_timeout`
// normally, `busy_head_timeout` once half the workers are waiting for heads,
// so that half the pool keeps cycling and a probe waits at most a few short
// deadlines.
//
// The deadline is enforced where civetweb waits: poll(), recv() and read()
// are wrapped (conn_guard.cc) and, on a civetweb worker thread whose head
// deadline has passed, the socket is shut for reading, so civetweb sees the
// client leave and closes the connection. Calls on every other thread, and on
// worker threads outside a head phase (our handlers), go straight to libc.
//
// Thread-safety: the callbacks run on civetweb's worker threads; the counter
// is atomic and the options are fixed before the server starts.
class HeadGuard {
 public:
  HeadGuard(std::chrono::milliseconds head_timeout, std::chrono::milliseconds busy_head_timeout,
            int workers);
  HeadGuard(const HeadGuard&) = delete;
  HeadGuard& operator=(const HeadGuard&) = delete;

  // civetweb callbacks, by the guard of the connection's server.
  void OnConnect();       // init_connection: the head of the first request
  static void OnHead();   // begin_request: the head is in; the handler runs
  void OnRequestEnd();    // end_request: a keep-alive connection waits again
  static void OnClose();  // connection_close

  // Workers waiting for a head right now.
  int in_head() const { return in_head_.load(); }
  // Heads cut off at their deadline since start.
  uint64_t timeouts() const { return timeouts_.load(); }

 private:
  friend struct HeadGuardAccess;
  void EnterHead();

  const std::chrono::milliseconds head_timeout_;
  const std::chrono::milliseconds busy_head_timeout_;
  const int busy_threshold_;
  std::atomic<int> in_head_{0};
  std::atomic<uint64_t> timeouts_{0};
};

}  // namespace xpu::http
