#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"

namespace xpu::http {

// The kubelet's probes on a listener of their own (--web.probe-listen-address),
// as the kubelet's own :10248 and kube-proxy's :10256. civetweb gives each
// connection a worker until its head is read, so any mix of idle, slow,
// pipelining or handshaking clients can hold every worker; here no
// connection holds anything but a row in a bounded table. One thread reads
// every connection's head from non-blocking sockets (epoll, nginx's model),
// answers GET and HEAD of `routes` (404 and 405 otherwise), and closes:
// - a connection lives at most `deadline` from its accept, head and answer
//   together; the oldest is dropped for a new one when `max_connections` are
//   open, so opening connections cannot lock a probe out;
// - one request per connection ("Connection: close"): pipelined requests
//   after the first are never read, so answers that are not read cannot pile
//   up; a head over 4 KiB is answered 431;
// - plain HTTP without auth (what the probes ask tells nothing), as the
//   kubelet's own health port. Each answer also carries `headers`.
// Handlers run on the loop thread and must not block (a probe answer is a
// few atomic reads). Start/Stop from the owner thread; `observe` is called
// on the loop thread after each answer.
class ProbeServer {
 public:
  struct Options {
    std::vector<std::string> listen_addresses;  // Prometheus-style: ":9446"
    size_t max_connections = 256;
    std::chrono::milliseconds deadline{1000};
  };
  // A probe's answer: status and text body.
  struct Answer {
    int status = 200;
    std::string body;
  };
  using Route = std::function<Answer()>;
  using Observe = std::function<void(const std::string& path, int status, double seconds)>;
  // How connections ended, one reason each: counted for the metrics.
  struct Counts {
    uint64_t answered = 0;  // their answer all sent
    uint64_t deadline = 0;  // head or answer not done within the deadline
    uint64_t evicted = 0;   // dropped for a newer one (the table full, or no descriptors)
    uint64_t bad = 0;       // answered 400 or 431: not an HTTP request, or a head over 4 KiB
    uint64_t closed = 0;    // the client closed or failed before its answer was out
  };

  // Header lines every answer carries (the web config's, which a reload
  // may change): called on the loop thread for each answer.
  using Headers = std::function<std::vector<std::pair<std::string, std::string>>()>;

  ProbeServer(Options options, std::map<std::string, Route> routes, Headers headers,
              Observe observe);
  ~ProbeServer();
  ProbeServer(const ProbeServer&) = delete;
  ProbeServer& operator=(const ProbeServer&) = delete;

  // Binds every address (IoError / InvalidArgument naming it) and starts the
  // loop thread.
  Status Start();
  void Stop();
  std::vector<int> ports() const;  // bound ports, in the order of the addresses
  Counts counts() const;           // any thread

 private:
  class Loop;
  const Options options_;
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

// Parses a Prometheus-style listen address (":9446", "127.0.0.1:9446",
// "[::1]:9446") into host ("" for every interface) and port.
Status SplitListenAddress(const std::string& address, std::string* host, int* port);

}  // namespace xpu::http
