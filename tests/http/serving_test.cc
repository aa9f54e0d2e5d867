// Serving under pressure, over real sockets and real clients (libcurl, raw
// TCP): no ordinary or hostile client may keep the probes from answering
// (docs/reliability.md, "Serving"). Each attack runs on its own threads
// while probes, one at a time, must each be answered within 1 s.
#include <arpa/inet.h>
#include <crypt.h>
#include <curl/curl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "http/web_server.h"
#include "support/metrics_util.h"
#include "support/test_util.h"
#include "tls_test_util.h"

namespace xpu::http {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A probe's budget: 1 s, as the kubelet's timeout. Under ThreadSanitizer
// (5-15x slower) these tests run for their races, with ten times the budget.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define XPU_UNDER_TSAN 1
#endif
#endif
#ifdef XPU_UNDER_TSAN
constexpr long kBudgetMs = 10000;
#else
constexpr long kBudgetMs = 1000;
#endif

// A gauge, or the sum of a counter family's series, as collected.
double Sample(const WebServer& server, const std::string& name,
              const std::map<std::string, std::string>& labels = {}) {
  return xpu::testing::MetricSum(*server.metrics(), name, labels);
}

using xpu::testing::ConnectLoopback;

// A bcrypt hash of `password` at cost 10 (tens of ms a check: a flood of
// wrong passwords is real work).
std::string Bcrypt10(const char* password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (crypt_gensalt_rn("$2y$", 10, nullptr, 0, salt, sizeof salt) == nullptr) return "";
  crypt_data data{};
  return crypt_r(password, salt, &data);
}

// Wrong passwords for `user` at `url`, one request after another, until
// `stop`; counts the 429 answers in `throttled`.
void FloodWrongPasswords(const std::string& url, const std::string& user,
                         std::atomic<int>* throttled, const std::atomic<bool>& stop) {
  for (int i = 0; !stop; ++i) {
    xpu::testing::HttpRequest req;
    req.url = url;
    req.user_password = user + ":wrong" + std::to_string(i);
    if (xpu::testing::Http(req).status == 429) ++*throttled;
  }
}

class ServingTest : public ::testing::Test {
 protected:
  void Start(std::shared_ptr<const WebConfig> web_config = nullptr, int workers = 16,
             milliseconds shed_after = milliseconds(1000)) {
    tls_ = web_config && web_config->tls;
    WebOptions o;
    o.listen_addresses = {"127.0.0.1:0"};
    o.max_connections = workers;
    o.web_config = std::move(web_config);
    o.probe_paths = {"/-/healthy"};
    o.probe_listen_addresses = {"127.0.0.1:0"};
    o.shed_after = shed_after;
    o.response_timeout = response_timeout_;
    o.defer_accept = defer_accept_;
    o.keep_alive_after_pressure = keep_alive_after_pressure_;
    o.keep_alive_timeout = keep_alive_timeout_;
    o.head_timeout = head_timeout_;
    server_ = std::make_unique<WebServer>(o);
    server_->Route("/-/healthy", {"GET"},
                   [](const Request&) { return Response::Text(200, "Healthy\n"); });
    server_->Route("/metrics", {"GET"},
                   [](const Request&) { return Response::Text(200, "up 1\n"); });
    // A large page produced while it is sent (as /metrics at 100k series).
    server_->Route("/big", {"GET"}, [](const Request&) {
      Response r;
      r.stream = [](const BodyWriter& write) {
        const std::string piece(64 * 1024, 'x');
        for (int i = 0; i < 512; ++i)
          if (!write(piece, false)) return;
        write({}, true);
      };
      return r;
    });
    // A handler that enters (its query noted, in order) and computes until
    // the test gives it a ticket: it holds its slot and writes nothing;
    // slots freed one at a time, or all at once (GiveTickets(1000)).
    server_->Route("/ticket", {"GET"}, [this](const Request& r) {
      MutexLock lock(tickets_mu_);
      entered_.push_back(r.query);
      tickets_cv_.NotifyAll();
      while (tickets_ == 0) tickets_cv_.Wait(lock);
      --tickets_;
      return Response::Text(200, r.query + "\n");
    });
    ASSERT_TRUE(server_->Start().ok());
    port_ = server_->ports().at(0);
    probe_port_ = server_->probe_ports().at(0);
  }
  void TearDown() override {
    GiveTickets(1000);
    stop_ = true;
    for (auto& t : attackers_) t.join();
    if (server_) server_->Stop();
  }
  std::string Url(const std::string& path) const {
    return std::string(tls_ ? "https" : "http") + "://127.0.0.1:" + std::to_string(port_) + path;
  }
  // The first byte of a request on the main port: of a TLS record, or of a
  // head.
  std::string FirstByte() const { return tls_ ? "\x16" : "G"; }
  std::string ProbeUrl() const {
    return "http://127.0.0.1:" + std::to_string(probe_port_) + "/-/healthy";
  }
  // `n` requests of `path` on the main port one after the other: how many
  // were answered 200 within 1 s each (their worst time in *worst).
  int ProbesWithinASecond(int n, milliseconds* worst = nullptr,
                          const std::string& path = "/-/healthy",
                          const std::string& user_password = "") {
    return WithinASecond(Url(path), n, worst, user_password);
  }
  // The same on the probe listener.
  int ListenerProbesWithinASecond(int n, milliseconds* worst = nullptr) {
    return WithinASecond(ProbeUrl(), n, worst);
  }
  int WithinASecond(const std::string& url, int n, milliseconds* worst,
                    const std::string& user_password = "") {
    int ok = 0;
    milliseconds slowest{0};
    for (int i = 0; i < n; ++i) {
      xpu::testing::HttpRequest req;
      req.url = url;
      req.timeout_ms = kBudgetMs;
      req.insecure = true;
      req.user_password = user_password;
      const auto t0 = Clock::now();
      const auto r = xpu::testing::Http(req);
      const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
      slowest = std::max(slowest, took);
      if (r.status == 200 && took < milliseconds(kBudgetMs)) {
        ++ok;
      } else {
        PrintMiss(url, r, took);
      }
    }
    if (worst) *worst = slowest;
    return ok;
  }
  // What a failed or slow request did, and when, with the server's load at
  // that moment: for the failure's reader.
  void PrintMiss(const std::string& url, const xpu::testing::HttpResponse& r,
                 milliseconds took) const {
    std::fprintf(stderr, "%s: status %ld after %lld ms (now busy %g, queued %g, heads %g): %s\n",
                 url.c_str(), r.status, static_cast<long long>(took.count()),
                 Sample(*server_, "xpu_exporter_http_workers_busy"),
                 Sample(*server_, "xpu_exporter_http_connections_queued"),
                 Sample(*server_, "xpu_exporter_http_workers_reading_head"), r.error.c_str());
  }
  // Under more keep-alive pinners than slots: the probe listener answers
  // every probe 200 within 1 s; on the main port, where the probes take a
  // slot like any path, each is answered within 1 s too, 200 or, with every
  // slot taken, 503 with Retry-After (never left waiting). Over TLS the
  // listener only: under ASan on two cores, 32 TLS pinners starve the test's
  // own client. Its timeline showed 180 ms between its connect and its
  // ClientHello (patch 0004 now holds such a connection in the kernel) and
  // 208 ms between its handshake and its head, past the 200 ms after which
  // the server, under pressure, rightly cuts a connection whose client says
  // nothing: the server cannot tell it from an idle one.
  void ExpectProbesUnderPinners(bool main_port = true) {
    milliseconds worst;
    EXPECT_EQ(ListenerProbesWithinASecond(8, &worst), 8) << "slowest " << worst.count() << " ms";
    for (int i = 0; main_port && i < 8; ++i) {
      xpu::testing::HttpRequest req;
      req.url = Url("/-/healthy");
      req.timeout_ms = kBudgetMs;
      req.insecure = true;
      const auto t0 = Clock::now();
      const xpu::testing::HttpResponse r = xpu::testing::Http(req);
      const long status = r.status;
      const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
      EXPECT_TRUE(status == 200 || status == 503)
          << status << " after " << took.count() << " ms: " << r.error;
      EXPECT_LT(took.count(), kBudgetMs);
      if (took.count() >= kBudgetMs) PrintMiss(req.url, r, took);
    }
  }
  // The attackers play clients on other machines: their threads run at a
  // lower priority (nice 10), so that on a loaded two-core runner they do
  // not take the CPU from the test's own scraper and probes, as remote
  // clients could not (a scraper starved for 50 ms between its handshake and
  // its request head looks idle, and is rightly cut under pressure). They
  // still hold every connection and worker they would; the server's threads
  // keep their priority.
  template <typename Fn>
  void Attack(int n, Fn fn) {
    for (int i = 0; i < n; ++i)
      attackers_.emplace_back([this, fn] {
        (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), 10);
        fn(stop_);
      });
  }
  void IdleTlsSocketsAgainstProbes(const std::string& first, milliseconds late);
  // Waits until the attack holds `busy` workers (it really is attacking).
  bool Holds(int busy) {
    return xpu::testing::WaitFor(
        [&] { return Sample(*server_, "xpu_exporter_http_workers_busy") >= busy; },
        std::chrono::seconds(10));
  }

  // Takes `n` slots with requests to /ticket, their answers in `held`;
  // whether every handler began within 10 s.
  bool HoldSlots(size_t n, std::vector<std::future<xpu::testing::HttpResponse>>* held) {
    for (size_t i = 0; i < n; ++i) held->push_back(GetAsync("/ticket?held"));
    return xpu::testing::WaitFor(
        [&] {
          MutexLock lock(tickets_mu_);
          return entered_.size() >= n;
        },
        std::chrono::seconds(10));
  }
  // A GET of `path` on the main port, on a thread of its own.
  std::future<xpu::testing::HttpResponse> GetAsync(const std::string& path) {
    xpu::testing::HttpRequest req;
    req.url = Url(path);
    req.timeout_ms = 3 * kBudgetMs;
    req.insecure = true;
    return std::async(std::launch::async, [req] { return xpu::testing::Http(req); });
  }

  void GiveTickets(int n) {
    MutexLock lock(tickets_mu_);
    tickets_ += n;
    tickets_cv_.NotifyAll();
  }
  // The queries of the /ticket handlers entered, in order, once there are n.
  bool Entered(size_t n, std::vector<std::string>* out) {
    const bool ok = xpu::testing::WaitFor([&] {
      MutexLock lock(tickets_mu_);
      return entered_.size() >= n;
    });
    MutexLock lock(tickets_mu_);
    *out = entered_;
    return ok;
  }
  // Gives every /ticket handler its ticket when a test's scope ends, before
  // its futures wait for their answers.
  struct TicketsAtEnd {
    ServingTest* test;
    ~TicketsAtEnd() { test->GiveTickets(1000); }
  };
  bool Waiting(size_t n) {
    return xpu::testing::WaitFor(
        [&] { return Sample(*server_, "xpu_exporter_http_requests_waiting") == n; });
  }

  Mutex tickets_mu_;
  CondVar tickets_cv_;
  int tickets_ XPU_GUARDED_BY(tickets_mu_) = 0;
  std::vector<std::string> entered_ XPU_GUARDED_BY(tickets_mu_);
  std::unique_ptr<WebServer> server_;
  milliseconds response_timeout_{30000};
  std::chrono::seconds defer_accept_{1};  // WebOptions::defer_accept
  milliseconds keep_alive_after_pressure_ = WebOptions{}.keep_alive_after_pressure;
  milliseconds keep_alive_timeout_ = WebOptions{}.keep_alive_timeout;
  milliseconds head_timeout_ = WebOptions{}.head_timeout;
  int port_ = 0;
  int probe_port_ = 0;
  bool tls_ = false;
  // Counted by attackers: members, so that they outlive the threads even
  // when an assertion ends a test early (TearDown joins them).
  std::atomic<int> throttled_{0}, failed_{0}, done_{0}, connects_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> attackers_;
};

// One keep-alive connection each (libcurl reuses it), a cheap request every
// 20 ms: civetweb keeps a worker on a connection for its life, so 16 of
// them held every worker. Under pressure each answer now ends with
// "Connection: close" and the client queues again behind the probes.
// A libcurl handle for `url` that takes any certificate and drops the body.
CURL* AttackerCurl(const std::string& url, long timeout_ms) {
  CURL* c = curl_easy_init();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 0L);
  curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 0L);
  curl_easy_setopt(
      c, CURLOPT_WRITEFUNCTION, +[](char*, size_t size, size_t n, void*) { return size * n; });
  return c;
}

// `connects`, if given, counts the connections it had to make.
void PinWithKeepAlive(const std::string& url, const std::atomic<bool>& stop,
                      std::atomic<int>* connects = nullptr) {
  CURL* c = AttackerCurl(url, 2000L);
  while (!stop) {
    curl_easy_perform(c);
    long made = 0;
    if (connects && curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &made) == CURLE_OK)
      *connects += static_cast<int>(made);
    std::this_thread::sleep_for(milliseconds(20));  // the client's own pace
  }
  curl_easy_cleanup(c);
}

// One request over TLS on `fd`, a connection made already (curl 7.88 cannot
// take one): the answer until the server closes, or "" and *error.
std::string TlsExchange(int fd, const std::string& request, std::string* error) {
  timeval wait{static_cast<time_t>(2 * kBudgetMs / 1000), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  if (!ctx) {
    *error = "SSL_CTX_new failed";
    return "";
  }
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  SSL_set_fd(ssl.get(), fd);
  if (const int rc = SSL_connect(ssl.get()); rc != 1) {
    const int why = SSL_get_error(ssl.get(), rc);
    *error = "handshake failed: SSL_get_error " + std::to_string(why) +
             (why == SSL_ERROR_SYSCALL ? std::string(", ") + std::strerror(errno) : "") + ", " +
             ERR_error_string(ERR_get_error(), nullptr);
    return "";
  }
  if (SSL_write(ssl.get(), request.data(), static_cast<int>(request.size())) <= 0) {
    *error = "write failed";
    return "";
  }
  std::string got;
  char buf[4096];
  for (int n; (n = SSL_read(ssl.get(), buf, sizeof buf)) > 0;) got.append(buf, n);
  return got;
}

// Opens an idle connection every `every`, holding at most 16, the oldest
// closed first. Each sends `first` and no more: a head or ClientHello begun
// ("G", "\x16"; the main port hands a connection to a worker only once its
// client speaks), or nothing ("").
void OpenIdleConnections(int port, const std::string& first, milliseconds every,
                         const std::atomic<bool>& stop) {
  std::vector<int> held;
  while (!stop) {
    const int fd = ConnectLoopback(port);
    if (fd >= 0) {
      held.push_back(fd);
      (void)::send(fd, first.data(), first.size(), MSG_NOSIGNAL);
    }
    if (held.size() > 16) {
      ::close(held.front());
      held.erase(held.begin());
    }
    std::this_thread::sleep_for(every);  // the attacker's pace
  }
  for (int fd : held) ::close(fd);
}

TEST_F(ServingTest, KeepAlivePinnersDoNotStarveProbes) {
  Start();
  const std::string url = Url("/nope");
  // More pinners than workers (16 + 3): the reserved ones alone cannot help.
  Attack(32,
         [url, this](const std::atomic<bool>& stop) { PinWithKeepAlive(url, stop, &connects_); });
  // Every pinner is past its first requests, and the server ended their
  // connections: under pressure, and for keep_alive_after_pressure after
  // it, each answer says "Connection: close", and a new connection holds no
  // worker until it speaks (so they hold only a few at once: no Holds(16)).
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] {
        return Sample(*server_, "xpu_exporter_http_requests_total", {{"handler", "other"}}) >
                   4 * 32 &&
               connects_ > 4 * 32;
      },
      std::chrono::seconds(30)))
      << "requests " << Sample(*server_, "xpu_exporter_http_requests_total", {{"handler", "other"}})
      << ", connections " << connects_;
  ExpectProbesUnderPinners();
  milliseconds worst;
  EXPECT_EQ(ProbesWithinASecond(2, &worst, "/metrics"), 2) << "slowest " << worst.count() << " ms";
}

TEST_F(ServingTest, KeepAlivePinnersDoNotStarveProbesOverTls) {
  xpu::testing::TempDir dir;
  ASSERT_TRUE(MakeCert(dir.path(), "a"));
  Start(TlsConfigFor(dir.path(), "a"));
  const std::string url = Url("/nope");
  // More pinners than workers (16 + 3): the reserved ones alone cannot help.
  Attack(32, [url](const std::atomic<bool>& stop) { PinWithKeepAlive(url, stop); });
  ASSERT_TRUE(Holds(12));
  ExpectProbesUnderPinners(/*main_port=*/false);
}

// TCP connections that send `first` (nothing, or a ClientHello begun) `late`
// after their connect and then nothing until the server cuts them, again and again, 32 at once:
// probes on the main port are answered within 1 s each. The head deadline
// covers the TLS handshake, and is short once half the workers wait for
// heads; a connection that sends nothing reaches a worker only after the
// kernel's defer (1 s), then is cut as any idle one (no round trips of
// grace on a deferred listener: the kernel's RTT for it is the defer's
// wait; with them a probe waited 1 s).
void ServingTest::IdleTlsSocketsAgainstProbes(const std::string& first, milliseconds late) {
  xpu::testing::TempDir dir;
  ASSERT_TRUE(MakeCert(dir.path(), "a"));
  Start(TlsConfigFor(dir.path(), "a"));
  const int port = port_;
  Attack(32, [port, first, late](const std::atomic<bool>& stop) {
    while (!stop) {
      const int fd = ConnectLoopback(port);
      if (fd < 0) continue;
      std::this_thread::sleep_for(late);  // the attacker's pace
      (void)::send(fd, first.data(), first.size(), MSG_NOSIGNAL);
      pollfd p{fd, POLLIN, 0};
      char c;
      while (!stop && (::poll(&p, 1, 100) == 0 || ::recv(fd, &c, 1, 0) > 0)) {
      }  // until the server cuts it; then again
      ::close(fd);
    }
  });
  ASSERT_TRUE(Holds(12));
  milliseconds worst;
  EXPECT_EQ(ProbesWithinASecond(8, &worst), 8) << "slowest " << worst.count() << " ms";
  // The idle sockets are cut at their handshake deadline: waited for, not
  // read at once (the probes can pass before the first deadline is due:
  // a fresh run's plain suite read 0 here after 1.3 s).
  EXPECT_TRUE(xpu::testing::WaitFor(
      [&] {
        return Sample(*server_, "xpu_exporter_http_connections_cut_total",
                      {{"reason", "handshake"}}) > 0;
      },
      std::chrono::seconds(10)));
}

TEST_F(ServingTest, IdleTlsSocketsDoNotStarveProbes) {
  IdleTlsSocketsAgainstProbes("", milliseconds(0));
}

TEST_F(ServingTest, BegunClientHellosDoNotStarveProbes) {
  IdleTlsSocketsAgainstProbes("\x16", milliseconds(0));
}

// Begun 300 ms after the connect: on a deferred listener the kernel's RTT
// is then 300 ms (the wait for the first bytes), which as grace (four RTTs,
// at most 250 ms each) held every worker a second per connection.
TEST_F(ServingTest, LateBegunClientHellosDoNotStarveProbes) {
  IdleTlsSocketsAgainstProbes("\x16", milliseconds(300));
}

// Clients that ask for a large page and read 256 bytes every 2 s.
void ReadSlowly(int port, const std::atomic<bool>& stop) {
  while (!stop) {
    const int fd = ConnectLoopback(port);
    if (fd < 0) continue;
    int small = 4096;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    const std::string req = "GET /big HTTP/1.1\r\nHost: x\r\n\r\n";
    (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    char buf[256];
    while (!stop && ::recv(fd, buf, sizeof buf, 0) > 0) {
      for (int i = 0; i < 20 && !stop; ++i) std::this_thread::sleep_for(milliseconds(100));
    }
    ::close(fd);
  }
}

// Each response has a whole deadline, the probes' reserved workers are never
// the readers', and when a scrape finds every other worker taken the oldest
// slow response is shed for it.
TEST_F(ServingTest, SlowReadersOfALargePageStarveNeitherProbesNorAScrape) {
  // Sheddable after 100 ms, so that the readers of this test are at once.
  Start(nullptr, 16, milliseconds(100));
  const int port = port_;
  Attack(16, [port](const std::atomic<bool>& stop) { ReadSlowly(port, stop); });
  ASSERT_TRUE(Holds(16));
  milliseconds worst;
  EXPECT_EQ(ProbesWithinASecond(8, &worst), 8) << "slowest " << worst.count() << " ms";
  // The first scrape found every slot held: a reader was shed for it (the
  // next ones may find the slot its reader has not taken back yet).
  EXPECT_EQ(ProbesWithinASecond(4, &worst, "/metrics"), 4) << "slowest " << worst.count() << " ms";
  EXPECT_GE(Sample(*server_, "xpu_exporter_http_connections_cut_total", {{"reason", "response"}}),
            1);
}

// A request that finds every slot held by handlers still computing waits
// for them rather than getting 503 after a slot's short wait: they are this
// process's own work, slow perhaps because the node is loaded or the VM
// stalled, not clients holding a worker (e2e_load saw 503s to fast clients
// when the exporter was stopped for 80 ms). Within a bound: held past it,
// the request is refused.
TEST_F(ServingTest, ARequestWaitsForHandlersStillComputingThenIsRefusedPastTheBound) {
  Start(nullptr, 2);
  std::vector<std::future<xpu::testing::HttpResponse>> held;
  const TicketsAtEnd go{this};  // before the futures wait, whatever fails
  ASSERT_TRUE(HoldSlots(2, &held));
  // Served once they return: still waiting well past the 100 ms a slot's
  // wait once was.
  auto waiter = GetAsync("/metrics");
  ASSERT_EQ(waiter.wait_for(milliseconds(250)), std::future_status::timeout)
      << "answered " << waiter.get().status << " while both slots computed";
  GiveTickets(1000);
  EXPECT_EQ(waiter.get().status, 200);
  for (auto& h : held) EXPECT_EQ(h.get().status, 200);
  EXPECT_EQ(Sample(*server_, "xpu_exporter_http_requests_refused_total", {{"reason", "capacity"}}),
            0);
}

TEST_F(ServingTest, HandlersComputingPastTheBoundLeaveA503) {
  Start(nullptr, 2);
  std::vector<std::future<xpu::testing::HttpResponse>> held;
  const TicketsAtEnd go{this};  // before the futures wait, whatever fails
  ASSERT_TRUE(HoldSlots(2, &held));
  const auto t0 = Clock::now();
  const xpu::testing::HttpResponse r = GetAsync("/metrics").get();
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
  EXPECT_EQ(r.status, 503) << r.error;
  EXPECT_GE(took.count(), 1000) << "refused before the bound";
  GiveTickets(1000);
  for (auto& h : held) EXPECT_EQ(h.get().status, 200);
}

// What `fd` receives until it has received `end` (or the connection ends,
// or a receive timeout set on it passes).
std::string ReadUntil(int fd, const std::string& end) {
  std::string got;
  char buf[4096];
  for (ssize_t n; got.find(end) == std::string::npos && (n = ::recv(fd, buf, sizeof buf, 0)) > 0;)
    got.append(buf, static_cast<size_t>(n));
  return got;
}

// Whether the server has closed its side of `fd` (nothing more to read),
// without waiting.
bool ClosedByServer(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) != 1) return false;
  char c;
  return (p.revents & (POLLRDHUP | POLLHUP)) != 0 || ::recv(fd, &c, 1, MSG_PEEK) <= 0;
}

// Under pressure only as many idle connections are cut as wait for a
// worker, the longest idle first (civetweb patch 0003): a client that is
// late with its head for a moment (its machine busy) keeps its worker while
// older idle connections hold others. Before, one waiting connection ended
// every idle connection past the short wait at once, the late one with them.
TEST_F(ServingTest, UnderPressureOnlyTheLongestIdleConnectionIsCut) {
  Start(nullptr, 4);  // 4 slots + 3 workers: 7 workers
  std::vector<std::future<xpu::testing::HttpResponse>> held;
  const TicketsAtEnd go{this};  // before the futures wait, whatever fails
  ASSERT_TRUE(HoldSlots(4, &held));
  // Three idle connections (a head begun: a worker takes a connection once
  // its client speaks), each taken by a worker 15 ms after the one before
  // (three of seven workers in heads: no short deadline for any).
  std::vector<int> idle;
  Clock::time_point taken;
  for (int i = 0; i < 3; ++i) {
    if (i > 0) std::this_thread::sleep_for(milliseconds(15));  // the clients' pace
    idle.push_back(ConnectLoopback(port_));
    ASSERT_GE(idle.back(), 0);
    ASSERT_EQ(::send(idle.back(), "G", 1, MSG_NOSIGNAL), 1);
    // When its worker took it, to a millisecond or so (Holds looks every 5).
    const auto until = Clock::now() + std::chrono::seconds(10);
    while (Sample(*server_, "xpu_exporter_http_workers_busy") < 5 + i && Clock::now() < until)
      std::this_thread::sleep_for(milliseconds(1));
    ASSERT_TRUE(Holds(5 + i));
    taken = Clock::now();
  }
  const int oldest = idle[0], older = idle[1], late = idle[2];
  // The late client's pace: past the 50 ms after which a silent connection
  // may be cut under pressure, within the head's own deadline (5 s). Each
  // worker looks every 50 ms from when it took its connection: the new one
  // comes 9 ms before the late one's look, after the others' (before 0003
  // the first to look after it came was cut: here the late one).
  std::this_thread::sleep_until(taken + milliseconds(141));
  const int waiting = ConnectLoopback(port_);  // every worker is taken: it waits
  ASSERT_GE(waiting, 0);
  ASSERT_EQ(::send(waiting, "G", 1, MSG_NOSIGNAL), 1);
  ASSERT_TRUE(
      xpu::testing::WaitFor([&] { return ClosedByServer(oldest); }, std::chrono::seconds(10)))
      << "the longest idle connection was not cut for the waiting one";
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] { return Sample(*server_, "xpu_exporter_http_connections_queued") == 0; },
      std::chrono::seconds(10)));
  EXPECT_FALSE(ClosedByServer(older)) << "a second idle connection was cut for one waiting";
  GiveTickets(1000);
  const std::string get = "ET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(xpu::testing::Exchange(late, get).rfind("HTTP/1.1 200", 0), 0U)
      << "the late client was cut";
  EXPECT_EQ(xpu::testing::Exchange(waiting, get).rfind("HTTP/1.1 200", 0), 0U);
  EXPECT_EQ(Sample(*server_, "xpu_exporter_http_connections_cut_total", {{"reason", "head"}}), 1);
  for (int fd : idle) ::close(fd);
  ::close(waiting);
  for (auto& h : held) EXPECT_EQ(h.get().status, 200);
}

// An idle keep-alive connection closed for a waiting connection is counted
// (cut_total{reason="keepalive"}, civetweb patch 0005): its client, sending
// its next request at that moment, meets a closed connection, and the
// operator can now see how often. It is no cut head: its client had sent
// nothing. Before 0005 it was counted nowhere.
TEST_F(ServingTest, UnderPressureAnIdleKeepAliveClosedEarlyIsCounted) {
  // Neither its own keep-alive timeout nor the head deadline (which also
  // bounds a keep-alive wait) ends it within the test: only the squeeze.
  keep_alive_timeout_ = std::chrono::seconds(60);
  head_timeout_ = std::chrono::seconds(60);
  Start(nullptr, 4);  // 4 slots + 3 workers: 7 workers
  // Answered in an idle pool, keep-alive offered: it stays, idle, on its
  // worker.
  const int kept = ConnectLoopback(port_);
  ASSERT_GE(kept, 0);
  const std::string get = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  timeval wait{5, 0};  // an answer that never comes whole ends the read
  ::setsockopt(kept, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  ASSERT_EQ(::send(kept, get.data(), get.size(), MSG_NOSIGNAL), static_cast<ssize_t>(get.size()));
  const std::string answer = ReadUntil(kept, "up 1\n");
  ASSERT_NE(answer.find("up 1\n"), std::string::npos) << answer;
  ASSERT_EQ(answer.find("Connection: close"), std::string::npos) << answer;
  // Every other worker taken: the slots by held handlers, two by idle
  // heads (three of seven workers in heads: no short deadline for any).
  std::vector<std::future<xpu::testing::HttpResponse>> held;
  const TicketsAtEnd go{this};
  ASSERT_TRUE(HoldSlots(4, &held));
  std::vector<int> idle;
  for (int i = 0; i < 2; ++i) {
    idle.push_back(ConnectLoopback(port_));
    ASSERT_GE(idle.back(), 0);
    ASSERT_EQ(::send(idle.back(), "G", 1, MSG_NOSIGNAL), 1);
    ASSERT_TRUE(Holds(6 + i));
  }
  // One more waits: the longest idle, the keep-alive one, is closed for it.
  const int waiting = ConnectLoopback(port_);
  ASSERT_GE(waiting, 0);
  ASSERT_EQ(::send(waiting, "G", 1, MSG_NOSIGNAL), 1);
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return ClosedByServer(kept); }, std::chrono::seconds(10)))
      << "the idle keep-alive connection was not closed for the waiting one";
  EXPECT_TRUE(xpu::testing::WaitFor([&] {
    return Sample(*server_, "xpu_exporter_http_connections_cut_total", {{"reason", "keepalive"}}) ==
           1;
  })) << Sample(*server_, "xpu_exporter_http_connections_cut_total", {{"reason", "keepalive"}});
  EXPECT_EQ(Sample(*server_, "xpu_exporter_http_connections_cut_total", {{"reason", "head"}}), 0);
  GiveTickets(1000);
  const std::string rest = "ET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(xpu::testing::Exchange(waiting, rest).rfind("HTTP/1.1 200", 0), 0U);
  ::close(kept);
  ::close(waiting);
  for (int fd : idle) ::close(fd);
  for (auto& h : held) EXPECT_EQ(h.get().status, 200);
}

// A connection reaches a worker only once its client speaks (civetweb patch
// 0004, TCP_DEFER_ACCEPT): while one sits silent, another client is
// answered and no worker waits for the silent one; once it speaks it is
// answered at once. Before, a worker took it at its connect and waited out
// the head deadline (5 s) for it.
TEST_F(ServingTest, AConnectionHoldsNoWorkerUntilItsClientSpeaks) {
  defer_accept_ = std::chrono::seconds(10);  // however slow the machine, within it
  Start();
  const int silent = ConnectLoopback(port_);
  ASSERT_GE(silent, 0);
  const std::string get = "GET /-/healthy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(xpu::testing::RawHttp(port_, get).rfind("HTTP/1.1 200", 0), 0U);
  // The other's worker is done (its connection closed); none waits for a head.
  EXPECT_EQ(Sample(*server_, "xpu_exporter_http_workers_reading_head"), 0);
  EXPECT_EQ(xpu::testing::Exchange(silent, get).rfind("HTTP/1.1 200", 0), 0U);
  ::close(silent);
}

// Under pressure (connections waiting for a worker while every worker holds
// one), a TLS client whose ClientHello comes 500 ms after its connect (its
// own machine busy: in CI a scraper's thread took 109 ms) is served. Before
// patch 0004 a worker took it at its connect, and once it was the longest
// idle of them it was cut for a waiting connection before it had said
// anything.
TEST_F(ServingTest, UnderPressureATlsClientLateToSpeakIsServed) {
  xpu::testing::TempDir dir;
  ASSERT_TRUE(MakeCert(dir.path(), "a"));
  defer_accept_ = std::chrono::seconds(10);  // the client is late by 500 ms, within it
  Start(TlsConfigFor(dir.path(), "a"), 1);   // 1 slot + 3 workers: 4 workers
  // Pressure: a ClientHello begun and never finished every 30 ms; each
  // waits until the longest idle one is cut for it.
  const int port = port_;
  Attack(1, [port](const std::atomic<bool>& stop) {
    OpenIdleConnections(port, "\x16", milliseconds(30), stop);
  });
  ASSERT_TRUE(Holds(4));
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] {
        return Sample(*server_, "xpu_exporter_http_connections_cut_total",
                      {{"reason", "handshake"}}) >= 2;
      },
      std::chrono::seconds(10)));
  const int late = ConnectLoopback(port_);
  ASSERT_GE(late, 0);
  std::this_thread::sleep_for(milliseconds(500));  // the client's own pace: late to speak
  std::string error;
  const std::string got =
      TlsExchange(late, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &error);
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0U) << error << got;
  ::close(late);
}

// A slot freed while requests wait goes to the oldest of them, and a
// request that comes while one waits queues behind it: one slot, two
// requests waiting for it in turn, freed one at a time. (Quick: a waiter
// waits at most 1 s while the holder computes.)
TEST_F(ServingTest, AFreedSlotGoesToTheOldestWaiter) {
  Start(nullptr, 1);  // one slot; three more workers may wait
  std::vector<std::future<xpu::testing::HttpResponse>> answers;
  const TicketsAtEnd tickets{this};  // before the futures wait, whatever fails
  answers.push_back(GetAsync("/ticket?holder"));
  std::vector<std::string> order;
  ASSERT_TRUE(Entered(1, &order));
  for (const char* who : {"first", "second"}) {
    answers.push_back(GetAsync(std::string("/ticket?") + who));
    ASSERT_TRUE(Waiting(answers.size() - 1)) << who << " is not waiting";
  }
  // Each ticket ends one handler: its slot goes to the oldest waiter, whose
  // handler enters before the next ticket.
  for (size_t i = 1; i <= 2; ++i) {
    GiveTickets(1);
    ASSERT_TRUE(Entered(i + 1, &order)) << "no waiter got the slot freed " << i;
  }
  GiveTickets(1);
  EXPECT_EQ(order, (std::vector<std::string>{"holder", "first", "second"}));
  for (auto& a : answers) EXPECT_EQ(a.get().status, 200);
  EXPECT_EQ(Sample(*server_, "xpu_exporter_http_requests_refused_total", {{"reason", "capacity"}}),
            0);
}

// The same readers plus clients that open a new connection for /metrics as
// fast as they can: while connections queue a request waits only 50 ms for
// a slot (or sheds a reader), so the queue, probes in it, keeps moving.
TEST_F(ServingTest, SlowReadersAndAConnectionFloodDoNotStarveProbes) {
  Start();
  const int port = port_;
  Attack(16, [port](const std::atomic<bool>& stop) { ReadSlowly(port, stop); });
  ASSERT_TRUE(Holds(16));
  const std::string url = Url("/metrics");
  Attack(8, [url](const std::atomic<bool>& stop) {
    while (!stop) {
      xpu::testing::HttpRequest req;
      req.url = url;
      req.timeout_ms = 2000;
      (void)xpu::testing::Http(req);
    }
  });
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] {
        return Sample(*server_, "xpu_exporter_http_requests_refused_total",
                      {{"reason", "capacity"}}) > 10;
      },
      std::chrono::seconds(60)));
  // The main port refuses past its capacity, probes included (the same
  // limits as any path); the probe listener answers whatever the load.
  milliseconds worst;
  EXPECT_EQ(ListenerProbesWithinASecond(8, &worst), 8) << "slowest " << worst.count() << " ms";
}

// Asks for the large page with `header_seconds` as the scrape timeout (none
// if empty), reads nothing, and returns how long the server took to cut the
// response (counted, and the connection closed).
milliseconds TimeToCut(const WebServer& server, int port, const std::string& header_seconds) {
  const double before =
      Sample(server, "xpu_exporter_http_connections_cut_total", {{"reason", "response"}});
  const int fd = ConnectLoopback(port);
  if (fd < 0) return milliseconds::max();
  int small = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  std::string req = "GET /big HTTP/1.1\r\nHost: x\r\n";
  if (!header_seconds.empty())
    req += "X-Prometheus-Scrape-Timeout-Seconds: " + header_seconds + "\r\n";
  req += "\r\n";
  const auto t0 = Clock::now();
  (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  const bool cut = xpu::testing::WaitFor(
      [&] {
        return Sample(server, "xpu_exporter_http_connections_cut_total", {{"reason", "response"}}) >
               before;
      },
      std::chrono::seconds(150));
  const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
  ::close(fd);
  return cut ? took : milliseconds::max();
}

// The cut comes near the 0.5 s asked, not at civetweb's 10 s per-write wait.
TEST_F(ServingTest, ResponseDeadlineFollowsThePrometheusScrapeTimeout) {
  Start();
  const milliseconds took = TimeToCut(*server_, port_, "0.5");
  EXPECT_GE(took.count(), 500);
  EXPECT_LT(took.count(), 500 + 2 * kBudgetMs);
}

// The header only shortens the operator's deadline: 120 s asked of a 1 s
// --web.response-timeout is still cut at 1 s.
TEST_F(ServingTest, ScrapeTimeoutHeaderCannotLengthenTheResponseDeadline) {
  response_timeout_ = milliseconds(1000);
  Start();
  const milliseconds took = TimeToCut(*server_, port_, "120");
  EXPECT_GE(took.count(), 1000);
  EXPECT_LT(took.count(), 1000 + 2 * kBudgetMs);
  EXPECT_EQ(ResponseDeadlineMs("120", milliseconds(3000)), 3000);
  EXPECT_EQ(ResponseDeadlineMs("0.5", milliseconds(3000)), 500);
  EXPECT_EQ(ResponseDeadlineMs("junk", milliseconds(3000)), 3000);
  EXPECT_EQ(ResponseDeadlineMs("-1", milliseconds(3000)), 3000);
  EXPECT_EQ(ResponseDeadlineMs("inf", milliseconds(3000)), 3000);
  EXPECT_EQ(ResponseDeadlineMs(nullptr, milliseconds(3000)), 3000);
}

// Wrong passwords cost a bcrypt run each: at most two run at once, a check
// waits briefly for one (the newest first), the oldest waiters are refused
// with 429, and verified credentials need none. Credentials never seen
// before, from the flood's own address, are checked within 1 s.
TEST_F(ServingTest, BadCredentialsFloodIsThrottledAndValidScrapesPass) {
  const std::string hash = Bcrypt10("s3cret");
  const std::string fresh = Bcrypt10("n3w");
  ASSERT_FALSE(hash.empty());
  std::shared_ptr<const WebConfig> cfg;
  ASSERT_TRUE(
      WebConfig::Parse("basic_auth_users:\n  prom: '" + hash + "'\n  fresh: '" + fresh + "'\n",
                       "test", &cfg)
          .ok());
  Start(cfg);
  // Verified once, before the flood: remembered.
  ASSERT_EQ(ProbesWithinASecond(1, nullptr, "/metrics", "prom:s3cret"), 1);
  const std::string url = Url("/metrics");
  std::atomic<int>& throttled = throttled_;
  Attack(16, [this, url](const std::atomic<bool>& stop) {
    FloodWrongPasswords(url, "prom", &throttled_, stop);
  });
  ASSERT_TRUE(
      xpu::testing::WaitFor([&] { return throttled.load() > 0; }, std::chrono::seconds(60)));
  milliseconds worst;
  EXPECT_EQ(ProbesWithinASecond(1, &worst, "/metrics", "fresh:n3w"), 1)
      << "slowest " << worst.count() << " ms";
  EXPECT_EQ(ProbesWithinASecond(6, &worst, "/metrics", "prom:s3cret"), 6)
      << "slowest " << worst.count() << " ms";
  EXPECT_EQ(ProbesWithinASecond(4, &worst), 4) << "slowest " << worst.count() << " ms";
  EXPECT_GT(
      Sample(*server_, "xpu_exporter_http_requests_refused_total", {{"reason", "auth_throttle"}}),
      0);
}

// With --web.probes-require-auth, a flood of wrong passwords on the probe
// path itself, right after a reload that kept the users: the kubelet's
// probe (verified before) is remembered and never throttled.
TEST_F(ServingTest, ProbesBehindAuthAreNotThrottledByAFloodAfterAReload) {
  const std::string hash = Bcrypt10("s3cret");
  ASSERT_FALSE(hash.empty());
  std::shared_ptr<const WebConfig> cfg, same;
  const std::string text = "basic_auth_users:\n  kubelet: '" + hash + "'\n";
  ASSERT_TRUE(WebConfig::Parse(text, "test", &cfg).ok());
  ASSERT_TRUE(WebConfig::Parse(text, "test", &same).ok());
  WebOptions o;
  o.listen_addresses = {"127.0.0.1:0"};
  o.web_config = cfg;
  o.probe_paths = {"/-/healthy"};
  o.protect_probes = true;
  server_ = std::make_unique<WebServer>(o);
  server_->Route("/-/healthy", {"GET"}, [](const Request&) { return Response::Text(200, "ok\n"); });
  ASSERT_TRUE(server_->Start().ok());
  port_ = server_->ports().at(0);
  ASSERT_EQ(ProbesWithinASecond(1, nullptr, "/-/healthy", "kubelet:s3cret"), 1);
  ASSERT_TRUE(server_->Reload(same).ok());
  const std::string url = Url("/-/healthy");
  std::atomic<int>& throttled = throttled_;
  Attack(16, [this, url](const std::atomic<bool>& stop) {
    FloodWrongPasswords(url, "kubelet", &throttled_, stop);
  });
  ASSERT_TRUE(
      xpu::testing::WaitFor([&] { return throttled.load() > 0; }, std::chrono::seconds(60)));
  milliseconds worst;
  EXPECT_EQ(ProbesWithinASecond(6, &worst, "/-/healthy", "kubelet:s3cret"), 6)
      << "slowest " << worst.count() << " ms";
}

// A pipelined second request whose head arrives in two reads is one request.
TEST_F(ServingTest, PipelinedRequestSplitAcrossReadsIsServed) {
  Start();
  const int fd = ConnectLoopback(port_);
  ASSERT_GE(fd, 0);
  const std::string first = "GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\nGET /-/hea";
  ASSERT_EQ(::send(fd, first.data(), first.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(first.size()));
  timeval wait{5, 0};  // an answer that never comes ends the read
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  // The first answer comes while the second head is incomplete.
  std::string got = ReadUntil(fd, "Healthy\n");
  ASSERT_NE(got.find("Healthy\n"), std::string::npos) << got;
  const std::string rest = "lthy HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, rest.data(), rest.size(), MSG_NOSIGNAL), static_cast<ssize_t>(rest.size()));
  got += ReadUntil(fd, "Healthy\n");
  EXPECT_TRUE(xpu::testing::WaitFor([&] { return ClosedByServer(fd); })) << "asked to close";
  ::close(fd);
  size_t answers = 0;
  for (size_t at = got.find("HTTP/1.1 "); at != std::string::npos;
       at = got.find("HTTP/1.1 ", at + 1)) {
    EXPECT_EQ(got.compare(at, 12, "HTTP/1.1 200"), 0) << got;
    ++answers;
  }
  EXPECT_EQ(answers, 2u) << got;
  EXPECT_NE(got.find("Connection: close\r\n"), std::string::npos) << got;
}

// The head of the answer to one keep-alive GET /metrics on a new
// connection (its body, "up 1\n", read too).
std::string KeepAliveAnswerHead(int port) {
  const int fd = xpu::testing::ConnectLoopback(port);
  if (fd < 0) return "no connection";
  timeval wait{5, 0};  // an answer that never comes whole ends the read
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
  const std::string get = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  std::string got;
  if (::send(fd, get.data(), get.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(get.size()))
    got = ReadUntil(fd, "up 1\n");
  ::close(fd);
  return got.substr(0, got.find("\r\n\r\n"));
}

// A keep-alive promised in a lull of a load was broken moments later: once
// connections queued again the idle connection was squeezed as its client
// (wrk, its own thread busy) sent its next request on it, which met a
// closed connection. After the pool was seen pressed, answers say
// "Connection: close" for keep_alive_after_pressure, then offer keep-alive
// again.
TEST_F(ServingTest, KeepAliveIsOfferedAgainOnlyAWhileAfterPressure) {
  // Longer than the default 1 s: time enough to free a slot on a loaded
  // machine before the memory passes.
  keep_alive_after_pressure_ = std::chrono::seconds(3);
  Start(nullptr, 2);
  const milliseconds memory = keep_alive_after_pressure_;
  EXPECT_EQ(KeepAliveAnswerHead(port_).find("Connection: close"), std::string::npos)
      << "an idle pool offers keep-alive";
  std::vector<std::future<xpu::testing::HttpResponse>> held;
  const TicketsAtEnd go{this};
  ASSERT_TRUE(HoldSlots(1, &held));
  const auto pressed_sent = Clock::now();
  // Its own and the held one: every slot taken.
  EXPECT_NE(KeepAliveAnswerHead(port_).find("Connection: close"), std::string::npos);
  GiveTickets(1000);
  ASSERT_EQ(held[0].get().status, 200);
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] { return Sample(*server_, "xpu_exporter_http_workers_busy") == 0; }));
  const std::string lull = KeepAliveAnswerHead(port_);
  const auto lull_at = Clock::now();
  if (lull_at - pressed_sent < memory) {
    EXPECT_NE(lull.find("Connection: close"), std::string::npos)
        << "keep-alive offered " << (lull_at - pressed_sent) / milliseconds(1)
        << " ms after pressure: " << lull;
  } else {
    ADD_FAILURE() << "this machine took past the memory (3 s) to free one slot; nothing seen";
  }
  Clock::time_point offered{};
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] {
        // One at a time: a connection just closed whose worker has not yet
        // seen it would make two busy workers, pressure.
        if (Sample(*server_, "xpu_exporter_http_workers_busy") != 0) return false;
        if (KeepAliveAnswerHead(port_).find("Connection: close") != std::string::npos) return false;
        offered = Clock::now();
        return true;
      },
      memory + std::chrono::seconds(5)))
      << "keep-alive never offered again";
  EXPECT_GE(offered - pressed_sent, memory);
}

// A reload with a new certificate: later handshakes get it, the port stays
// and no handshake fails meanwhile.
TEST_F(ServingTest, CertificateRotatesWithoutRestartingTheListener) {
  xpu::testing::TempDir dir;
  ASSERT_TRUE(MakeCert(dir.path(), "a"));
  ASSERT_TRUE(MakeCert(dir.path(), "b"));
  Start(TlsConfigFor(dir.path(), "a"));
  const auto fingerprint = [&](const std::string& cmd_tail) {
    return xpu::testing::RunCommand(
        "echo | openssl s_client -connect 127.0.0.1:" + std::to_string(port_) + cmd_tail +
        " 2>/dev/null | openssl x509 -noout -fingerprint -sha256");
  };
  const auto of_file = [&](const std::string& name) {
    return xpu::testing::RunCommand("openssl x509 -noout -fingerprint -sha256 -in " + dir.path() +
                                    "/" + name + ".crt");
  };
  ASSERT_FALSE(of_file("a").empty());
  EXPECT_EQ(fingerprint(""), of_file("a"));
  const int port = port_;
  std::atomic<int>& failed = failed_;
  std::atomic<int>& done = done_;
  const std::string url = Url("/-/healthy");
  Attack(2, [url, &failed, &done](const std::atomic<bool>& stop) {
    while (!stop) {
      xpu::testing::HttpRequest req;
      req.url = url;
      req.insecure = true;
      if (xpu::testing::Http(req).status != 200) ++failed;
      ++done;
    }
  });
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return done.load() > 5; }, std::chrono::seconds(60)));
  ASSERT_TRUE(server_->Reload(TlsConfigFor(dir.path(), "b")).ok());
  EXPECT_EQ(server_->ports().at(0), port);
  EXPECT_EQ(fingerprint(""), of_file("b"));
  // TLS 1.2 and 1.3 clients alike.
  EXPECT_EQ(fingerprint(" -tls1_2"), of_file("b"));
  const int after = done.load();
  ASSERT_TRUE(
      xpu::testing::WaitFor([&] { return done.load() > after + 5; }, std::chrono::seconds(60)));
  EXPECT_EQ(failed.load(), 0);
  // A certificate that does not load keeps the one in force.
  ASSERT_TRUE(MakeCert(dir.path(), "c"));
  const auto c = TlsConfigFor(dir.path(), "c");
  ASSERT_TRUE(c);
  xpu::testing::RunCommand("echo garbage > " + dir.path() + "/c.crt");
  EXPECT_FALSE(server_->Reload(c).ok());
  EXPECT_TRUE(server_->listening());
  EXPECT_EQ(fingerprint(""), of_file("b"));
}

// A Kubernetes Secret rotated the way the kubelet rotates it (a new
// timestamped directory, then the `..data` symlink swapped onto it): new
// handshakes get the new certificate within 5 s, with no reload. A broken
// pair (a new certificate with the old key) keeps the one in force and is
// counted once; the next good pair, and a write in place, are served.
TEST_F(ServingTest, CertificateFollowsItsFilesWithoutAReload) {
  xpu::testing::TempDir dir;
  const std::string d = dir.path();
  for (const char* n : {"a", "b", "c"}) ASSERT_TRUE(MakeCert(d, n));
  const auto sh = [](const std::string& cmd) {
    return xpu::testing::RunCommand(cmd + " && echo ok");
  };
  // The kubelet's layout: tls.crt -> ..data/tls.crt, ..data -> ..<version>.
  const auto publish = [&](const std::string& version, const std::string& crt,
                           const std::string& key) {
    return sh("mkdir " + d + "/.." + version + " && cp " + d + "/" + crt + ".crt " + d + "/.." +
              version + "/tls.crt && cp " + d + "/" + key + ".key " + d + "/.." + version +
              "/tls.key && ln -sfn .." + version + " " + d + "/..data_tmp && mv -T " + d +
              "/..data_tmp " + d + "/..data");
  };
  ASSERT_EQ(publish("v1", "a", "a"), "ok\n");
  ASSERT_EQ(sh("ln -s ..data/tls.crt " + d + "/tls.crt && ln -s ..data/tls.key " + d + "/tls.key"),
            "ok\n");
  std::shared_ptr<const WebConfig> cfg;
  ASSERT_TRUE(WebConfig::Parse("tls_server_config:\n  cert_file: " + d +
                                   "/tls.crt\n  key_file: " + d + "/tls.key\n",
                               "test", &cfg)
                  .ok());
  Start(cfg);
  const auto served = [&] {
    return xpu::testing::RunCommand(
        "echo | openssl s_client -connect 127.0.0.1:" + std::to_string(port_) +
        " 2>/dev/null | openssl x509 -noout -fingerprint -sha256");
  };
  const auto of_file = [&](const std::string& name) {
    return xpu::testing::RunCommand("openssl x509 -noout -fingerprint -sha256 -in " + d + "/" +
                                    name + ".crt");
  };
  ASSERT_FALSE(of_file("a").empty());
  EXPECT_EQ(served(), of_file("a"));
  const auto reloads = [&](const char* result) {
    return Sample(*server_, "xpu_exporter_tls_certificate_reloads_total", {{"result", result}});
  };
  EXPECT_EQ(reloads("success"), 0);

  ASSERT_EQ(publish("v2", "b", "b"), "ok\n");
  EXPECT_TRUE(
      xpu::testing::WaitFor([&] { return served() == of_file("b"); }, std::chrono::seconds(5)));
  EXPECT_TRUE(xpu::testing::WaitFor([&] { return reloads("success") == 1; }));

  // A certificate without its key: refused, b still served, counted once.
  ASSERT_EQ(publish("v3", "c", "b"), "ok\n");
  ASSERT_TRUE(
      xpu::testing::WaitFor([&] { return reloads("failure") >= 1; }, std::chrono::seconds(5)));
  EXPECT_EQ(served(), of_file("b"));
  EXPECT_EQ(reloads("failure"), 1);  // not retried while the files stay as they are

  ASSERT_EQ(publish("v4", "c", "c"), "ok\n");
  EXPECT_TRUE(
      xpu::testing::WaitFor([&] { return served() == of_file("c"); }, std::chrono::seconds(5)));
  // A write in place (no symlink swap), key first then certificate.
  ASSERT_EQ(sh("cat " + d + "/a.key > " + d + "/..v4/tls.key && cat " + d + "/a.crt > " + d +
               "/..v4/tls.crt"),
            "ok\n");
  EXPECT_TRUE(
      xpu::testing::WaitFor([&] { return served() == of_file("a"); }, std::chrono::seconds(5)));
}

// exporter-toolkit reads its web config for every request: a user deleted
// from the mounted file (a Secret's `..data` swap, or an editor's rename) is
// refused within 2 s, no signal sent. An edit that does not load keeps the
// config in force, counted and logged once; the file fixed is applied.
TEST_F(ServingTest, WebConfigFollowsItsFileWithoutAReload) {
  xpu::testing::TempDir dir;
  const std::string file = dir.path() + "/web.yml";
  const std::string alice = "  alice: " + Bcrypt10("a-pass") + "\n";
  const std::string bob = "  bob: " + Bcrypt10("b-pass") + "\n";
  int version = 0;
  const auto publish = [&](const std::string& yaml) {  // a new file renamed over the old
    const std::string tmp = file + ".v" + std::to_string(++version);
    xpu::testing::WriteFile(tmp, yaml);
    return std::rename(tmp.c_str(), file.c_str()) == 0;
  };
  ASSERT_TRUE(publish("basic_auth_users:\n" + alice + bob));
  std::shared_ptr<const WebConfig> cfg;
  ASSERT_TRUE(WebConfig::Load(file, &cfg).ok());
  Start(cfg);
  const auto status = [&](const std::string& user_password) {
    xpu::testing::HttpRequest req;
    req.url = Url("/metrics");
    req.user_password = user_password;
    return xpu::testing::Http(req).status;
  };
  const auto reloads = [&](const char* result) {
    return Sample(*server_, "xpu_exporter_web_config_reloads_total", {{"result", result}});
  };
  EXPECT_EQ(status("bob:b-pass"), 200);
  EXPECT_EQ(reloads("success"), 0);

  ASSERT_TRUE(publish("basic_auth_users:\n" + alice +
                      "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"));
  const Clock::time_point edited = Clock::now();
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return status("bob:b-pass") == 401; }));
  EXPECT_LE(Clock::now() - edited, milliseconds(2 * kBudgetMs + 500));
  EXPECT_EQ(status("alice:a-pass"), 200);
  EXPECT_EQ(reloads("success"), 1);
  ASSERT_TRUE(server_->config());
  EXPECT_EQ(server_->config()->headers.size(), 1U);

  // Not YAML, then empty (a truncating writer caught between its writes):
  // the config in force stays, each change counted once.
  ASSERT_TRUE(publish("basic_auth_users: [\n"));
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return reloads("failure") == 1; }));
  ASSERT_TRUE(publish(""));
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return reloads("failure") == 2; }));
  EXPECT_EQ(status("alice:a-pass"), 200);
  EXPECT_EQ(status("bob:b-pass"), 401);
  EXPECT_EQ(status(""), 401);  // never a config without users
  // Both users back: the file loads again.
  ASSERT_TRUE(publish("basic_auth_users:\n" + alice + bob));
  EXPECT_TRUE(xpu::testing::WaitFor([&] { return status("bob:b-pass") == 200; }));
  EXPECT_EQ(reloads("failure"), 2);
  EXPECT_EQ(reloads("success"), 2);
  // A file naming a certificate that is not there yet (a Secret written
  // after its ConfigMap): refused once, then applied once the files come,
  // the file itself unchanged.
  ASSERT_TRUE(MakeCert(dir.path(), "late"));
  std::rename((dir.path() + "/late.key").c_str(), (dir.path() + "/late.key.later").c_str());
  ASSERT_TRUE(publish("basic_auth_users:\n" + alice + "tls_server_config:\n  cert_file: " +
                      dir.path() + "/late.crt\n  key_file: " + dir.path() + "/late.key\n"));
  ASSERT_TRUE(xpu::testing::WaitFor([&] { return reloads("failure") == 3; }));
  EXPECT_EQ(status("bob:b-pass"), 200);
  std::rename((dir.path() + "/late.key.later").c_str(), (dir.path() + "/late.key").c_str());
  EXPECT_TRUE(
      xpu::testing::WaitFor([&] { return status("bob:b-pass") == 401; }, std::chrono::seconds(15)));
  EXPECT_EQ(reloads("failure"), 3);
  EXPECT_EQ(reloads("success"), 3);
}

// client_auth_type raised to RequireAndVerifyClientCert in the file: the
// next handshake of a client without a certificate fails, one with a
// certificate the CA signed is served; no signal sent.
TEST_F(ServingTest, ClientAuthFollowsTheWebConfigFile) {
  xpu::testing::TempDir dir;
  const std::string d = dir.path();
  ASSERT_TRUE(MakeCert(d, "srv"));
  ASSERT_TRUE(MakeCert(d, "client"));
  const std::string file = d + "/web.yml";
  const std::string pair =
      "tls_server_config:\n  cert_file: " + d + "/srv.crt\n  key_file: " + d + "/srv.key\n";
  xpu::testing::WriteFile(file, pair);
  std::shared_ptr<const WebConfig> cfg;
  ASSERT_TRUE(WebConfig::Load(file, &cfg).ok());
  Start(cfg);
  const auto curl = [&](const std::string& args) {
    return xpu::testing::RunCommand("curl -sk -o /dev/null -w '%{http_code}' --max-time 5 " + args +
                                    " " + Url("/metrics"));
  };
  const std::string with_cert = "--cert " + d + "/client.crt --key " + d + "/client.key";
  EXPECT_EQ(curl(""), "200");
  const std::string tmp = file + ".new";
  xpu::testing::WriteFile(tmp, pair + "  client_auth_type: RequireAndVerifyClientCert\n" +
                                   "  client_ca_file: " + d + "/client.crt\n");
  ASSERT_EQ(std::rename(tmp.c_str(), file.c_str()), 0);
  EXPECT_TRUE(xpu::testing::WaitFor([&] { return curl("") == "000"; }));
  EXPECT_EQ(curl(with_cert), "200");
}

// --- Mixes of attackers (issue 37): every kind at once, plain and TLS, with
// a probe of the probe listener every 250 ms for 10 s, each answered within
// 1 s, and a scrape with credentials never seen before within 2 s.

// A slow reader through libcurl (plain or TLS): the large page at 256 B/s.
void ReadSlowlyOver(const std::string& url, const std::string& user_password,
                    const std::atomic<bool>& stop) {
  while (!stop) {
    CURL* c = AttackerCurl(url, 3000L);
    curl_easy_setopt(c, CURLOPT_BUFFERSIZE, 1024L);
    curl_easy_setopt(c, CURLOPT_MAX_RECV_SPEED_LARGE, static_cast<curl_off_t>(256));
    if (!user_password.empty()) curl_easy_setopt(c, CURLOPT_USERPWD, user_password.c_str());
    curl_easy_perform(c);
    curl_easy_cleanup(c);
  }
}

// Pipelines 200 probe requests on one connection and never reads; again
// once the server closes it.
void PipelineProbesNeverRead(int port, const std::atomic<bool>& stop) {
  std::string reqs;
  for (int i = 0; i < 200; ++i) reqs += "GET /-/healthy HTTP/1.1\r\nHost: x\r\n\r\n";
  while (!stop) {
    const int fd = ConnectLoopback(port);
    if (fd < 0) continue;
    (void)::send(fd, reqs.data(), reqs.size(), MSG_NOSIGNAL);
    pollfd p{fd, POLLRDHUP, 0};
    while (!stop && ::poll(&p, 1, 100) == 0) {
    }  // until the server closes its side
    ::close(fd);
    std::this_thread::sleep_for(milliseconds(10));  // the attacker's pace
  }
}

// Full TLS handshakes on new connections, as fast as they go.
void HandshakeFlood(const std::string& url, const std::atomic<bool>& stop) {
  while (!stop) {
    xpu::testing::HttpRequest req;
    req.url = url;
    req.insecure = true;
    req.timeout_ms = 2000;
    (void)xpu::testing::Http(req);
  }
}

class ServingMixTest : public ServingTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(MakeCert(dir_.path(), "a"));
    const std::string known = Bcrypt10("s3cret");
    const std::string fresh = Bcrypt10("n3w");
    ASSERT_FALSE(known.empty());
    std::string text = "basic_auth_users:\n  prom: '" + known + "'\n  fresh: '" + fresh + "'\n";
    std::shared_ptr<const WebConfig> cfg;
    if (GetParam()) {
      cfg = TlsConfigFor(dir_.path(), "a", text);
    } else {
      ASSERT_TRUE(WebConfig::Parse(text, "test", &cfg).ok());
    }
    ASSERT_TRUE(cfg);
    Start(cfg);
  }
  // Probes the listener every 250 ms for `seconds` (by default 10, or
  // XPU_SERVING_MIX_SECONDS: a sanitizer suite's 5); each must be answered
  // 200 within 1 s. Then one scrape with credentials not yet verified.
  void ExpectProbesAndAScrape(int seconds = 0) {
    if (seconds <= 0) {
      const char* env = std::getenv("XPU_SERVING_MIX_SECONDS");
      seconds = env != nullptr ? std::max(1, std::atoi(env)) : 10;
    }
    int ok = 0, total = 0;
    milliseconds worst{0};
    const auto end = Clock::now() + std::chrono::seconds(seconds);
    while (Clock::now() < end) {
      const auto t0 = Clock::now();
      milliseconds took;
      ok += ListenerProbesWithinASecond(1, &took);
      ++total;
      worst = std::max(worst, took);
      std::this_thread::sleep_until(t0 + milliseconds(250));  // the kubelet's period
    }
    EXPECT_EQ(ok, total) << "slowest " << worst.count() << " ms";
    xpu::testing::HttpRequest req;
    req.url = Url("/metrics");
    req.insecure = true;
    req.user_password = "fresh:n3w";
    req.timeout_ms = 2 * kBudgetMs;
    const auto t0 = Clock::now();
    const auto r = xpu::testing::Http(req);
    const auto took = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
    EXPECT_EQ(r.status, 200)
        << r.error << " after " << took.count() << " ms; busy "
        << Sample(*server_, "xpu_exporter_http_workers_busy") << ", queued "
        << Sample(*server_, "xpu_exporter_http_connections_queued") << ", heads "
        << Sample(*server_, "xpu_exporter_http_workers_reading_head") << ", refused "
        << Sample(*server_, "xpu_exporter_http_requests_refused_total")
        << ", cut (handshake, head, response) "
        << Sample(*server_, "xpu_exporter_http_connections_cut_total", {{"reason", "handshake"}})
        << ", " << Sample(*server_, "xpu_exporter_http_connections_cut_total", {{"reason", "head"}})
        << ", "
        << Sample(*server_, "xpu_exporter_http_connections_cut_total", {{"reason", "response"}});
  }
  xpu::testing::TempDir dir_;
};

TEST_P(ServingMixTest, SlowReadersAndIdleConnectionsAtTenPerSecond) {
  const std::string big = Url("/big");
  Attack(16, [big](const std::atomic<bool>& stop) { ReadSlowlyOver(big, "prom:s3cret", stop); });
  const int port = port_;
  // Idle connections at 10 a second, as issue 37 measured (two openers).
  // At 160 a second over TLS on two loaded cores the probes still pass (the
  // listener), but a new main-port connection can wait over 2 s in the
  // queue behind them: every idle one holds a worker 50-100 ms.
  Attack(2, [port, first = FirstByte()](const std::atomic<bool>& stop) {
    OpenIdleConnections(port, first, milliseconds(200), stop);
  });
  ASSERT_TRUE(Holds(12));
  ExpectProbesAndAScrape();
}

TEST_P(ServingMixTest, PipelinedProbesThatAreNeverRead) {
  const int port = port_, probe_port = probe_port_;
  Attack(12, [port](const std::atomic<bool>& stop) { PipelineProbesNeverRead(port, stop); });
  Attack(12, [probe_port](const std::atomic<bool>& stop) {
    PipelineProbesNeverRead(probe_port, stop);
  });
  // The attack is under way: the probe listener has ended a dozen of its
  // connections (over TLS the main port's pipeliners, plain bytes, fail
  // their handshakes at once and hold no worker to count).
  ASSERT_TRUE(xpu::testing::WaitFor(
      [&] { return Sample(*server_, "xpu_exporter_http_probe_connections_closed_total") >= 12; },
      std::chrono::seconds(30)));
  ExpectProbesAndAScrape();
}

TEST_P(ServingMixTest, PinnersAHandshakeFloodAndSlowReaders) {
  const std::string nope = Url("/nope"), big = Url("/big"), metrics = Url("/metrics");
  Attack(16, [nope](const std::atomic<bool>& stop) { PinWithKeepAlive(nope, stop); });
  Attack(8, [metrics](const std::atomic<bool>& stop) { HandshakeFlood(metrics, stop); });
  const int port = port_;
  Attack(2, [port, first = FirstByte()](const std::atomic<bool>& stop) {
    OpenIdleConnections(port, first, milliseconds(200), stop);
  });
  Attack(8, [big](const std::atomic<bool>& stop) { ReadSlowlyOver(big, "prom:s3cret", stop); });
  ASSERT_TRUE(Holds(12));
  ExpectProbesAndAScrape();
}

// A seeded random schedule of every attacker kind at once, for 20 s (the
// slow tier runs it: `http_probe_mix`, XPU_PROBE_MIX_SECONDS): each round
// starts a random attacker (pinner, idle-connection opener, pipeliner on
// either port, handshake flooder, slow reader, wrong-password flooder) until
// 48 run, while probes go every 250 ms; the same verdict as the mixes.
TEST_P(ServingMixTest, SeededScheduleOfEveryAttackerKind) {
  const char* seconds_env = std::getenv("XPU_PROBE_MIX_SECONDS");
  if (seconds_env == nullptr) GTEST_SKIP() << "slow tier: set XPU_PROBE_MIX_SECONDS";
  const int seconds = std::max(10, std::atoi(seconds_env));
  const char* seed_env = std::getenv("XPU_PROBE_MIX_SEED");  // to replay a failed run
  const unsigned seed = seed_env != nullptr
                            ? static_cast<unsigned>(std::strtoul(seed_env, nullptr, 10))
                            : static_cast<unsigned>(std::time(nullptr));
  std::printf("seed %u (XPU_PROBE_MIX_SEED replays it)\n", seed);
  std::srand(seed);
  const std::string nope = Url("/nope"), big = Url("/big"), metrics = Url("/metrics");
  const int port = port_, probe_port = probe_port_;
  for (int i = 0; i < 48; ++i) {
    switch (std::rand() % 7) {
      case 0:
        Attack(1, [nope](const std::atomic<bool>& stop) { PinWithKeepAlive(nope, stop); });
        break;
      case 1:
        // Half of them silent: the kernel holds those (patch 0004).
        Attack(1, [port, first = std::rand() % 2 ? FirstByte() : std::string(),
                   every = milliseconds(20 + std::rand() % 200)](const std::atomic<bool>& stop) {
          OpenIdleConnections(port, first, every, stop);
        });
        break;
      case 2:
        Attack(1, [target = std::rand() % 2 ? port : probe_port](const std::atomic<bool>& stop) {
          PipelineProbesNeverRead(target, stop);
        });
        break;
      case 3:
        Attack(1, [metrics](const std::atomic<bool>& stop) { HandshakeFlood(metrics, stop); });
        break;
      case 4:
        Attack(1,
               [big](const std::atomic<bool>& stop) { ReadSlowlyOver(big, "prom:s3cret", stop); });
        break;
      case 5:
        Attack(1, [metrics, this](const std::atomic<bool>& stop) {
          FloodWrongPasswords(metrics, "prom", &throttled_, stop);
        });
        break;
      default:
        Attack(1, [probe_port](const std::atomic<bool>& stop) {
          OpenIdleConnections(probe_port, "", milliseconds(5), stop);
        });
        break;
    }
  }
  ExpectProbesAndAScrape(seconds);
}

INSTANTIATE_TEST_SUITE_P(PlainAndTls, ServingMixTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? std::string("Tls") : std::string("Plain");
                         });

}  // namespace
}  // namespace xpu::http
