#include "http/web_server.h"

#include <CivetServer.h>
#include <openssl/ssl.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>
#include <spdlog/spdlog.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <list>
#include <optional>

#include "common/civet_util.h"
#include "common/file_util.h"
#include "common/mutex.h"
#include "http/buffer_pool.h"
#include "http/gzip.h"
#include "http/headers.h"
#include "http/tls.h"

namespace xpu::http {

// Whether the request announces a body. No route reads one, so the body is
// refused unread and the connection closed: civetweb would otherwise read
// (and discard) all of it after the handler, a gigabyte at a byte a second.
bool HasBody(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  if (info->content_length > 0) return true;
  const char* te = mg_get_header(conn, "Transfer-Encoding");
  return te != nullptr && *te != '\0';
}

namespace {

// The framing header a streamed body ends its head with: chunks, or for an
// HTTP/1.0 client (which knows no chunks) the closing connection.
std::string StreamFraming(mg_connection* conn, bool chunked) {
  if (chunked) return "Transfer-Encoding: chunked\r\n\r\n";
  mg_disable_connection_keep_alive(conn);
  return "Connection: close\r\n\r\n";
}

// Where a response's writes are seen from other workers (AcquireSlot): the
// steady clock's nanoseconds at which the write going on began, 0 between
// writes. One that stays set is waiting for its reader. May be null.
using WriteMark = std::atomic<int64_t>;
int64_t SteadyNs(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
// SteadyNs, never 0: for atomics where 0 means "none".
int64_t SetNs(std::chrono::steady_clock::time_point t) { return std::max<int64_t>(1, SteadyNs(t)); }
// mg_write of all of `s`, marked in `mark` while it runs; false if the
// connection failed.
bool WriteAll(mg_connection* conn, std::string_view s, WriteMark* mark) {
  if (mark != nullptr)
    mark->store(SetNs(std::chrono::steady_clock::now()), std::memory_order_relaxed);
  const bool ok = mg_write(conn, s.data(), s.size()) == static_cast<int>(s.size());
  if (mark != nullptr) mark->store(0, std::memory_order_relaxed);
  return ok;
}

// Sends a response whose body is whole: `head` (ended, with its
// Content-Length), then the body unless `with_body` is false (HEAD). A body
// under 256 KiB goes in the same write: two small writes meet Nagle and the
// client's delayed ACK and stall ~40 ms. False if the connection failed.
bool SendWhole(mg_connection* conn, std::string head, std::string_view body, bool with_body,
               WriteMark* mark) {
  const auto put = [conn, mark](std::string_view s) { return WriteAll(conn, s, mark); };
  if (!with_body || body.empty()) return put(head);
  if (body.size() < size_t{256} * 1024) return put(head.append(body));
  return put(head) && put(body);
}

// Sends a streamed body after `head` (its header lines, not yet ended). A
// body that comes as one piece goes out as an ordinary response with
// Content-Length, as Go's net/http does. A longer one goes as HTTP/1.1
// chunks, one write per piece (the head with the first, the terminating
// chunk with the last), so no piece waits on Nagle and the client's delayed
// ACK; for an HTTP/1.0 client unframed, ended by the close.
void SendStream(mg_connection* conn, std::string head, bool chunked,
                const std::function<void(const BodyWriter&)>& stream, WriteMark* mark) {
  // A frame is a piece and its chunk's head: from the kept buffers, as the
  // piece's own, so that a large page's frames are not faulted in anew.
  std::string frame = BufferPool::Batches().Take(0);
  bool started = false;
  bool ok = true;
  bool ended = false;
  const BodyWriter write = [&](std::string_view piece, bool last) {
    if (!ok || ended) return false;
    if (!started) {
      started = true;
      if (last) {
        ended = true;
        head.append("Content-Length: ").append(std::to_string(piece.size())).append("\r\n\r\n");
        ok = SendWhole(conn, std::move(head), piece, /*with_body=*/true, mark);
        return ok;
      }
      frame.append(head).append(StreamFraming(conn, chunked));
    }
    if (!chunked) {
      frame.append(piece);
    } else if (!piece.empty()) {
      char len[24];
      const int n = std::snprintf(len, sizeof len, "%zx\r\n", piece.size());
      frame.append(len, static_cast<size_t>(n)).append(piece).append("\r\n");
    }
    if (last) {
      if (chunked) frame.append("0\r\n\r\n");
      ended = true;
    }
    if (frame.empty()) return true;
    ok = WriteAll(conn, frame, mark);
    frame.clear();
    return ok;
  };
  stream(write);
  if (!ended) write({}, true);  // a producer that never said last
  BufferPool::Batches().Give(std::move(frame));
}

}  // namespace

// xpu_exporter_http_*: what the server did and what its workers are doing.
// Requests and durations are recorded by the workers under one short lock
// (ours: prometheus-cpp's Histogram and Family locks live in its library,
// where ThreadSanitizer sees the unlock but not the lock); the worker and
// deadline figures are read from civetweb at each collection
// (mg_get_server_load). Any thread.
class WebServer::Metrics : public prometheus::Collectable {
 public:
  // A handler's series appear with its first request: a node's page
  // carries those of the paths actually asked for (the scrape's, the
  // probes'), not one histogram per route.
  Metrics() = default;
  void Observe(const std::string& handler, int status, double seconds) {
    const size_t bucket = static_cast<size_t>(
        std::lower_bound(kBounds.begin(), kBounds.end(), seconds) - kBounds.begin());
    MutexLock lock(mu_);
    PerHandler& h = handlers_[handler];
    ++h.buckets[bucket];
    ++h.count;
    h.sum += seconds;
    ++h.codes[status];
  }
  enum class Refusal { kCapacity, kAuthThrottle, kRateLimit };
  void Refused(Refusal why) {
    MutexLock lock(mu_);
    ++(why == Refusal::kCapacity       ? capacity_
       : why == Refusal::kAuthThrottle ? throttled_
                                       : limited_);
  }
  void CertificateReload(bool ok) {
    MutexLock lock(mu_);
    ++(ok ? cert_loaded_ : cert_failed_);
  }
  // The certificate files are followed (TLS on): their counter is shown.
  void FollowsCertificates() {
    MutexLock lock(mu_);
    certs_followed_ = true;
  }
  void WebConfigReload(bool ok) {
    MutexLock lock(mu_);
    web_followed_ = true;
    ++(ok ? web_loaded_ : web_failed_);
  }
  // A web config file is followed: its counter is shown.
  void FollowsWebConfig() {
    MutexLock lock(mu_);
    web_followed_ = true;
  }
  // The civetweb context to read the load of; null before Start and once
  // Stop begins (the context is freed after).
  // `waiting`: how many requests wait for a slot (Dispatcher), called
  // under ctx_mu_ (before slots_mu_).
  void Serve(const mg_context* ctx, const ProbeServer* probes, std::function<size_t()> waiting) {
    MutexLock lock(ctx_mu_);
    ctx_ = ctx;
    probes_ = probes;
    waiting_ = std::move(waiting);
  }

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> out;
    using prometheus::ClientMetric;
    using prometheus::MetricFamily;
    using prometheus::MetricType;
    {
      MutexLock lock(mu_);
      MetricFamily requests{"xpu_exporter_http_requests_total",
                            "HTTP requests answered, by handler (route; \"other\" for unknown "
                            "paths) and status code.",
                            MetricType::Counter,
                            {}};
      MetricFamily durations{"xpu_exporter_http_request_duration_seconds",
                             "Time from a request's head to the end of its answer, by handler.",
                             MetricType::Histogram,
                             {}};
      for (const auto& [name, h] : handlers_) {
        for (const auto& [code, n] : h.codes) {
          ClientMetric m;
          m.label = {{"code", std::to_string(code)}, {"handler", name}};
          m.counter.value = static_cast<double>(n);
          requests.metric.push_back(std::move(m));
        }
        ClientMetric m;
        m.label = {{"handler", name}};
        m.histogram.sample_count = h.count;
        m.histogram.sample_sum = h.sum;
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= kBounds.size(); ++i) {
          cumulative += h.buckets[i];
          m.histogram.bucket.push_back({cumulative, i < kBounds.size()
                                                        ? kBounds[i]
                                                        : std::numeric_limits<double>::infinity()});
        }
        durations.metric.push_back(std::move(m));
      }
      out.push_back(std::move(requests));
      out.push_back(RefusedLocked());
      if (certs_followed_) out.push_back(CertificatesLocked());
      if (web_followed_) out.push_back(WebConfigLocked());
      out.push_back(std::move(durations));
    }
    mg_server_load load{};
    std::optional<ProbeServer::Counts> probes;
    size_t waiting = 0;
    {
      MutexLock lock(ctx_mu_);
      if (ctx_ == nullptr || mg_get_server_load(ctx_, &load) != 0) return out;
      if (probes_ != nullptr) probes = probes_->counts();
      if (waiting_) waiting = waiting_();
    }
    auto gauge = [&out](const char* name, const char* help, double v) {
      MetricFamily f{name, help, MetricType::Gauge, {}};
      ClientMetric m;
      m.gauge.value = v;
      f.metric.push_back(std::move(m));
      out.push_back(std::move(f));
    };
    gauge("xpu_exporter_http_workers",
          "HTTP worker threads (--web.max-connections plus --web.reserved-probe-connections).",
          load.workers);
    gauge("xpu_exporter_http_workers_busy",
          "HTTP workers holding a connection (reading a head, running a handler or writing).",
          load.busy);
    gauge("xpu_exporter_http_workers_reading_head",
          "HTTP workers waiting for a TLS handshake or a request head.", load.heads_waiting);
    gauge("xpu_exporter_http_connections_queued", "Accepted connections waiting for a worker.",
          load.queued);
    gauge("xpu_exporter_http_requests_waiting",
          "Requests waiting for one of --web.max-connections slots (at most "
          "--web.reserved-probe-connections, or 1; a freed slot goes to the oldest).",
          static_cast<double>(waiting));
    MetricFamily cut{
        "xpu_exporter_http_connections_cut_total",
        "Connections closed at a deadline, by reason: handshake (TLS handshake), "
        "head (request head), response (whole response, or shed for a waiting "
        "request), keepalive (an idle keep-alive connection closed by a deadline before "
        "--web.keep-alive-timeout: for a waiting connection, under pressure, or at "
        "a shorter --web.head-timeout).",
        MetricType::Counter,
        {}};
    for (const auto& [reason, n] :
         {std::pair<const char*, long long>{"handshake", load.handshake_timeouts},
          {"head", load.head_timeouts},
          {"keepalive", load.keepalive_timeouts},
          {"response", load.response_timeouts}}) {
      ClientMetric m;
      m.label = {{"reason", reason}};
      m.counter.value = static_cast<double>(n);
      cut.metric.push_back(std::move(m));
    }
    out.push_back(std::move(cut));
    if (probes) out.push_back(ProbeFamily(*probes));
    return out;
  }

 private:
  // xpu_exporter_tls_certificate_reloads_total.
  prometheus::MetricFamily CertificatesLocked() const XPU_REQUIRES(mu_) {
    using prometheus::ClientMetric;
    using prometheus::MetricFamily;
    using prometheus::MetricType;
    MetricFamily certs{"xpu_exporter_tls_certificate_reloads_total",
                       "Certificate files that changed on disk and were loaded for new "
                       "handshakes without a reload, by result (failure: they did not "
                       "load, the ones in force were kept).",
                       MetricType::Counter,
                       {}};
    for (const auto& [result, n] :
         {std::pair<const char*, uint64_t>{"failure", cert_failed_}, {"success", cert_loaded_}}) {
      ClientMetric m;
      m.label = {{"result", result}};
      m.counter.value = static_cast<double>(n);
      certs.metric.push_back(std::move(m));
    }
    return certs;
  }
  // xpu_exporter_http_requests_refused_total.
  prometheus::MetricFamily RefusedLocked() const XPU_REQUIRES(mu_) {
    prometheus::MetricFamily refused{
        "xpu_exporter_http_requests_refused_total",
        "Requests answered without their handler: capacity (503, "
        "--web.max-connections requests in progress, none freed after a "
        "short wait), auth_throttle (429, no password check free within "
        "about two runs, 0.5 to 4 s, or displaced by a newer waiting one) or "
        "rate_limit (429, the "
        "web config's rate_limit).",
        prometheus::MetricType::Counter,
        {}};
    for (const auto& [reason, n] : {std::pair<const char*, uint64_t>{"auth_throttle", throttled_},
                                    {"capacity", capacity_},
                                    {"rate_limit", limited_}}) {
      prometheus::ClientMetric m;
      m.label = {{"reason", reason}};
      m.counter.value = static_cast<double>(n);
      refused.metric.push_back(std::move(m));
    }
    return refused;
  }
  // xpu_exporter_web_config_reloads_total.
  prometheus::MetricFamily WebConfigLocked() const XPU_REQUIRES(mu_) {
    prometheus::MetricFamily f{"xpu_exporter_web_config_reloads_total",
                               "Changes of the web config file applied without a reload, by "
                               "result (failure: the file did not load, the config in force was "
                               "kept).",
                               prometheus::MetricType::Counter,
                               {}};
    for (const auto& [result, n] :
         {std::pair<const char*, uint64_t>{"failure", web_failed_}, {"success", web_loaded_}}) {
      prometheus::ClientMetric m;
      m.label = {{"result", result}};
      m.counter.value = static_cast<double>(n);
      f.metric.push_back(std::move(m));
    }
    return f;
  }
  // xpu_exporter_http_probe_connections_closed_total.
  static prometheus::MetricFamily ProbeFamily(const ProbeServer::Counts& probes) {
    using prometheus::ClientMetric;
    using prometheus::MetricFamily;
    using prometheus::MetricType;
    MetricFamily closed{"xpu_exporter_http_probe_connections_closed_total",
                        "Connections to the probe listener, by how they ended: answered, "
                        "bad (answered 400 or 431), deadline (head or answer not done within "
                        "1 s), evicted (the oldest, dropped for a new one), closed (by the "
                        "client before its answer was out).",
                        MetricType::Counter,
                        {}};
    for (const auto& [reason, n] : {std::pair<const char*, uint64_t>{"answered", probes.answered},
                                    {"bad", probes.bad},
                                    {"closed", probes.closed},
                                    {"deadline", probes.deadline},
                                    {"evicted", probes.evicted}}) {
      ClientMetric m;
      m.label = {{"reason", reason}};
      m.counter.value = static_cast<double>(n);
      closed.metric.push_back(std::move(m));
    }
    return closed;
  }

  // From a probe's answer (well under 1 ms) to a scrape cut at its deadline;
  // few, as every handler asked for carries them on the page.
  static constexpr std::array<double, 7> kBounds = {0.001, 0.005, 0.025, 0.1, 0.5, 2.5, 10};
  struct PerHandler {
    std::array<uint64_t, kBounds.size() + 1> buckets{};  // the last: above every bound
    uint64_t count = 0;
    double sum = 0;
    std::map<int, uint64_t> codes;
  };

  mutable Mutex mu_;
  std::map<std::string, PerHandler> handlers_ XPU_GUARDED_BY(mu_);  // never erased
  uint64_t capacity_ XPU_GUARDED_BY(mu_) = 0;
  uint64_t throttled_ XPU_GUARDED_BY(mu_) = 0;
  uint64_t limited_ XPU_GUARDED_BY(mu_) = 0;
  uint64_t cert_loaded_ XPU_GUARDED_BY(mu_) = 0;
  uint64_t cert_failed_ XPU_GUARDED_BY(mu_) = 0;
  bool certs_followed_ XPU_GUARDED_BY(mu_) = false;
  uint64_t web_loaded_ XPU_GUARDED_BY(mu_) = 0;
  uint64_t web_failed_ XPU_GUARDED_BY(mu_) = 0;
  bool web_followed_ XPU_GUARDED_BY(mu_) = false;
  mutable Mutex ctx_mu_;
  const mg_context* ctx_ XPU_GUARDED_BY(ctx_mu_) = nullptr;
  const ProbeServer* probes_ XPU_GUARDED_BY(ctx_mu_) = nullptr;
  std::function<size_t()> waiting_ XPU_GUARDED_BY(ctx_mu_);
};

namespace {}  // namespace

// The response deadline: the operator's flag, shortened to
// X-Prometheus-Scrape-Timeout-Seconds when that is sent and shorter
// (Prometheus gives up then anyway); a client can never lengthen it.
int ResponseDeadlineMs(const char* scrape_timeout_header, std::chrono::milliseconds flag) {
  const double flag_ms = static_cast<double>(flag.count());
  if (scrape_timeout_header != nullptr) {
    char* end = nullptr;
    const double seconds = std::strtod(scrape_timeout_header, &end);
    if (end != scrape_timeout_header && std::isfinite(seconds) && seconds > 0)
      return static_cast<int>(std::min(flag_ms, std::max(1.0, seconds * 1000.0)));
  }
  return static_cast<int>(flag.count());
}

namespace {

bool HeaderHasToken(const mg_connection* conn, const char* name, const char* token) {
  const char* v = mg_get_header(conn, name);
  if (v == nullptr) return false;
  const size_t n = std::strlen(token);
  for (const char* p = v; *p != '\0'; ++p)
    if (strncasecmp(p, token, n) == 0) return true;
  return false;
}

}  // namespace

class WebServer::Dispatcher : public CivetHandler {
 public:
  explicit Dispatcher(const WebServer* server) : server_(server) {}
  // How many requests wait for a slot. Any thread.
  size_t Waiting() const {
    MutexLock lock(slots_mu_);
    return waiting_.size();
  }
  bool handleGet(CivetServer*, mg_connection* c) override { return Dispatch(c); }
  bool handleHead(CivetServer*, mg_connection* c) override { return Dispatch(c); }
  bool handlePost(CivetServer*, mg_connection* c) override { return Dispatch(c); }
  bool handlePut(CivetServer*, mg_connection* c) override { return Dispatch(c); }
  bool handleDelete(CivetServer*, mg_connection* c) override { return Dispatch(c); }
  bool handleOptions(CivetServer*, mg_connection* c) override { return Dispatch(c); }
  bool handlePatch(CivetServer*, mg_connection* c) override { return Dispatch(c); }

 private:
  bool Dispatch(mg_connection* conn) {
    const auto start = std::chrono::steady_clock::now();
    const WebOptions& opt = server_->options_;
    mg_set_response_deadline(
        conn, ResponseDeadlineMs(mg_get_header(conn, "X-Prometheus-Scrape-Timeout-Seconds"),
                                 opt.response_timeout));
    const mg_request_info* info = mg_get_request_info(conn);
    Request req;
    req.method = info->request_method ? info->request_method : "";
    req.path = info->local_uri ? info->local_uri : "";
    req.query = info->query_string ? info->query_string : "";
    const char* ae = mg_get_header(conn, "Accept-Encoding");
    req.accept_encoding = ae ? ae : "";
    const char* accept = mg_get_header(conn, "Accept");
    req.accept = accept ? accept : "";
    const bool probe = opt.probe_paths.count(req.path) > 0;
    auto it = server_->routes_.find(req.path);
    const std::string& handler = it == server_->routes_.end() ? kOtherHandler : it->first;
    const std::shared_ptr<const WebConfig> cfg = server_->config();
    // The rate limit first, as exporter-toolkit's: a refused request costs
    // no password check and holds no slot. The probes are never limited.
    std::chrono::seconds retry_after{0};
    const bool limited =
        cfg && !probe && !server_->limiter_.Allow(cfg->rate_limit, start, &retry_after);
    // Credentials next: a check waiting for a bcrypt run (BasicAuth) holds
    // no slot, so a flood of wrong passwords cannot fill the slots that a
    // valid client, once checked, needs.
    const bool needs_auth =
        !limited && cfg && !cfg->users.empty() && (opt.protect_probes || !probe);
    const char* authz = mg_get_header(conn, "Authorization");
    const BasicAuth::Result auth =
        !needs_auth
            ? BasicAuth::Result::kOk
            : server_->auth_.Verify(cfg->users, authz ? authz : "", info->remote_addr, probe);
    // Capacity: every request, the probes' included, takes one of
    // max_connections slots (AcquireSlot); the probe listener is where the
    // probes are answered whatever the load.
    std::list<Slot>::iterator slot;
    const bool over = !limited && !AcquireSlot(conn, opt, &slot);
    struct Release {
      Dispatcher* d;
      std::list<Slot>::iterator slot;
      bool held;
      ~Release() {
        if (held) d->ReleaseSlot(slot);
      }
    } release{this, slot, !over && !limited};
    Response resp;
    bool gzip = false;
    // A keep-alive connection answers a bounded number of requests, so that
    // pipelined requests whose answers are never read stop with it.
    bool close = over || mg_get_connection_requests(conn) + 1 >= kMaxRequestsPerConnection;
    const bool body_unread = HasBody(conn);
    if (body_unread) close = true;
    if (limited) {
      resp = Response::Text(429, "429 too many requests (rate_limit); retry\n");
      resp.headers.emplace_back("Retry-After", std::to_string(retry_after.count()));
      server_->metrics_->Refused(Metrics::Refusal::kRateLimit);
    } else if (over) {
      resp = Response::Text(503, "503 server busy: every worker is in use; retry\n");
      resp.headers.emplace_back("Retry-After", "1");
      server_->metrics_->Refused(Metrics::Refusal::kCapacity);
    } else if (auth == BasicAuth::Result::kThrottled) {
      resp = Response::Text(429, "429 too many password checks; retry\n");
      resp.headers.emplace_back("Retry-After", "1");
      close = true;
      server_->metrics_->Refused(Metrics::Refusal::kAuthThrottle);
    } else if (auth == BasicAuth::Result::kDenied) {
      resp.status = 401;
      resp.body = "401 unauthorized\n";
      resp.headers.emplace_back("WWW-Authenticate", "Basic realm=\"xpu-exporter\"");
    } else if (it == server_->routes_.end()) {
      resp.status = 404;
      resp.body = "404 page not found\n";
    } else if (body_unread && it->second.methods.count(req.method) > 0) {
      resp.status = 413;
      resp.body = "413 this endpoint takes no request body\n";
    } else if (it->second.methods.count(req.method) == 0) {
      resp.status = 405;
      resp.body = "405 method not allowed\n";
      std::string allow;
      for (const auto& m : it->second.methods) allow += (allow.empty() ? "" : ", ") + m;
      resp.headers.emplace_back("Allow", allow);
    } else {
      Request inner = req;
      if (inner.method == "HEAD") inner.method = "GET";
      resp = it->second.handler(inner);
      gzip = it->second.gzip && AcceptsGzip(req.accept_encoding);
    }
    // Keep-alive only while the pool has room and has had it a while: a
    // connection that stays holds its worker; else the answer ends it, and
    // the client queues again behind those waiting (probes included).
    if (!close) close = PressedOfLate(conn, opt) || HeaderHasToken(conn, "Connection", "close");
    const int status = resp.status;
    WriteMark* const mark = release.held ? Writing(slot) : nullptr;
    Send(conn, req, std::move(resp), gzip, close, cfg.get(), mark);
    server_->metrics_->Observe(
        handler, status,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return true;
  }

  // A request in progress.
  struct Slot {
    explicit Slot(mg_connection* c) : conn(c) {}
    mg_connection* conn;
    // When its answer began to be sent; unset while the handler computes
    // (cutting then would free nothing: the slot goes when it returns).
    std::optional<std::chrono::steady_clock::time_point> writing_since;
    bool cut = false;
    // The write going on, set by its own worker without slots_mu_ (WriteAll).
    WriteMark in_write{0};
  };

  // Takes one of the max_connections slots for `conn`; false: refuse it.
  // One that finds them all taken waits briefly (a burst passes), 100 ms
  // (50 ms while connections queue), and again while a holder was at work
  // on our side in that wait (HoldersAtWork), up to kBusyWaitCap: a slot
  // that did not free because this process was slow (a loaded node, a
  // stalled VM, sixteen renders of a large page) is not the client's fault.
  // Then, if none freed, the oldest response older than shed_after is cut
  // (a slow reader, shed so that this request, a scrape perhaps, is served)
  // and it waits 250 ms more (in practice the cut one ends at once); else
  // 503. Only the workers beyond the slots can wait.
  bool AcquireSlot(mg_connection* conn, const WebOptions& opt, std::list<Slot>::iterator* out) {
    const auto max = static_cast<size_t>(opt.max_connections);
    MutexLock lock(slots_mu_);
    // A free slot goes to a newcomer only while nobody waits: a slot freed
    // while requests wait is handed to the oldest of them (ReleaseSlot), so
    // a waiter is never overtaken by requests that came after it (a worker
    // that just answered, taking its next connection, would otherwise win
    // every race against a waiter still being woken).
    if (slots_.size() < max && waiting_.empty()) {
      *out = slots_.emplace(slots_.end(), conn);
      return true;
    }
    NotePressure(std::chrono::steady_clock::now());
    if (waiting_.size() >= static_cast<size_t>(std::max(1, opt.reserved_probe_workers)))
      return false;
    Waiter me{conn};
    const auto pos = waiting_.insert(waiting_.end(), &me);
    // Briefly while connections queue (a probe may be among them): under a
    // burst a slot frees within milliseconds; under an attack the queue
    // keeps moving.
    const auto began = std::chrono::steady_clock::now();
    auto round = began;
    bool got = WaitGranted(lock, me, Queued(conn) ? kQueuedWait : kSlotWait);
    while (!got && HoldersAtWork(round, opt.shed_after)) {
      const auto now = std::chrono::steady_clock::now();
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(kBusyWaitCap - (now - began));
      if (left.count() <= 0) break;
      round = now;
      got = WaitGranted(lock, me, std::min(left, Queued(conn) ? kQueuedWait : kSlotWait));
    }
    if (!got) {
      // The response that has been sending longest, if longer than
      // shed_after: a reader too slow for its share of the workers.
      const auto now = std::chrono::steady_clock::now();
      Slot* oldest = nullptr;
      for (Slot& s : slots_) {
        if (s.cut || !s.writing_since || now - *s.writing_since < opt.shed_after) continue;
        if (oldest == nullptr || *s.writing_since < *oldest->writing_since) oldest = &s;
      }
      if (oldest != nullptr) {
        oldest->cut = true;
        mg_cut_response(oldest->conn);  // its handler cannot return: we hold slots_mu_
        got = WaitGranted(lock, me, kShedWait);
      }
    }
    if (!got) {
      waiting_.erase(pos);  // not granted: still queued
      return false;
    }
    *out = me.slot;
    return true;
  }
  // Whether a holder worked on our side since `since`, so that a slot may
  // free soon: its handler still computing, or its answer, sending for less
  // than shed_after, not blocked in a write that began before `since`
  // (between writes it renders; a write that stays is waiting for its
  // reader, who may be slow). One sending longer is the shed's to judge: a
  // reader that keeps up only just must not keep every waiter waiting.
  bool HoldersAtWork(std::chrono::steady_clock::time_point since,
                     std::chrono::milliseconds shed_after) const XPU_REQUIRES(slots_mu_) {
    const auto now = std::chrono::steady_clock::now();
    const int64_t since_ns = SteadyNs(since);
    return std::any_of(slots_.begin(), slots_.end(), [&](const Slot& s) {
      if (s.cut) return false;
      if (!s.writing_since) return true;
      if (now - *s.writing_since >= shed_after) return false;
      const int64_t w = s.in_write.load(std::memory_order_relaxed);
      return w == 0 || w >= since_ns;
    });
  }
  // A request waiting for a slot; ReleaseSlot grants it one.
  struct Waiter {
    mg_connection* conn;
    bool granted = false;
    std::list<Slot>::iterator slot{};
  };
  // Waits up to `d` for a slot to be handed to `me`; whether it was.
  bool WaitGranted(MutexLock& lock, Waiter& me, std::chrono::milliseconds d)
      XPU_REQUIRES(slots_mu_) {
    const auto deadline = std::chrono::steady_clock::now() + d;
    while (!me.granted) {
      if (!slots_cv_.WaitUntil(lock, deadline)) return me.granted;
    }
    return true;
  }
  static bool Queued(const mg_connection* conn) {
    mg_server_load load{};
    return mg_get_server_load(mg_get_context(conn), &load) == 0 && load.queued > 0;
  }
  // The answer begins to be sent: where its writes are marked.
  WriteMark* Writing(std::list<Slot>::iterator slot) {
    MutexLock lock(slots_mu_);
    slot->writing_since = std::chrono::steady_clock::now();
    return &slot->in_write;
  }
  void ReleaseSlot(std::list<Slot>::iterator slot) {
    {
      MutexLock lock(slots_mu_);
      slots_.erase(slot);
      if (waiting_.empty()) return;
      // Handed over, never left free: the oldest waiter has it.
      Waiter* w = waiting_.front();
      waiting_.pop_front();
      w->slot = slots_.emplace(slots_.end(), w->conn);
      w->granted = true;
    }
    slots_cv_.NotifyAll();  // at most reserved_probe_workers wait
  }
  // Whether connections wait for a worker, or every worker but the spare
  // ones holds a connection.
  static bool Pressed(const mg_connection* conn, const WebOptions& opt) {
    mg_server_load load{};
    if (mg_get_server_load(mg_get_context(conn), &load) != 0) return false;
    return load.queued > 0 || load.busy >= opt.max_connections;
  }
  // Whether the pool is pressed now, or was seen pressed (here or by a
  // request that waited for a slot) within keep_alive_after_pressure. A
  // keep-alive promised in a lull of a load is broken moments later: once
  // connections queue again the idle one is squeezed (civetweb patch 0003)
  // while its client, busy itself, may be sending its next request, which
  // then meets a closed connection. "Connection: close" says it first.
  bool PressedOfLate(const mg_connection* conn, const WebOptions& opt) {
    const auto now = std::chrono::steady_clock::now();
    if (Pressed(conn, opt)) {
      NotePressure(now);
      return true;
    }
    const int64_t seen = pressed_at_ns_.load(std::memory_order_relaxed);
    return seen != 0 &&
           SteadyNs(now) - seen < std::chrono::nanoseconds(opt.keep_alive_after_pressure).count();
  }
  void NotePressure(std::chrono::steady_clock::time_point now) {
    pressed_at_ns_.store(SetNs(now), std::memory_order_relaxed);
  }

  void Send(mg_connection* conn, const Request& req, Response resp, bool gzip, bool close,
            const WebConfig* cfg, WriteMark* mark) {
    if (close) mg_disable_connection_keep_alive(conn);
    const bool encoded = std::any_of(resp.headers.begin(), resp.headers.end(), [](const auto& h) {
      return strcasecmp(h.first.c_str(), "Content-Encoding") == 0;
    });
    std::string owned = std::move(resp.body);
    const std::string* body = resp.shared_body ? resp.shared_body.get() : &owned;
    if (gzip && !encoded && !resp.stream && !body->empty()) {
      std::string z = Gzip(*body);
      if (!z.empty()) {
        owned = std::move(z);
        body = &owned;
        resp.headers.emplace_back("Content-Encoding", "gzip");
      }
    }
    std::string head = "HTTP/1.1 " + std::to_string(resp.status) + " " + ReasonPhrase(resp.status) +
                       "\r\nContent-Type: " + resp.content_type + "\r\n";
    // HTTP/1.0 has no chunks: a stream goes to it unframed, ended by close.
    const char* version = mg_get_request_info(conn)->http_version;
    const bool chunked = version == nullptr || std::strcmp(version, "1.0") != 0;
    if (!resp.stream) head += "Content-Length: " + std::to_string(body->size()) + "\r\n";
    const auto add_header = [&head](const std::string& k, const std::string& v) {
      head.append(k).append(": ").append(v).append("\r\n");
    };
    for (const auto& [k, v] : resp.headers) add_header(k, v);
    if (cfg) {
      for (const auto& [k, v] : cfg->headers) add_header(k, v);
    }
    // A stream to HTTP/1.0 says it in its framing (StreamFraming).
    if (close && !(resp.stream && !chunked)) head += "Connection: close\r\n";
    if (resp.stream) {  // the framing follows from the body: SendStream ends the head
      if (req.method == "HEAD") {
        head += StreamFraming(conn, chunked);
        WriteAll(conn, head, mark);
      } else {
        SendStream(conn, std::move(head), chunked, resp.stream, mark);
      }
      return;
    }
    head += "\r\n";
    SendWhole(conn, std::move(head), *body, req.method != "HEAD", mark);
  }

  static inline const std::string kOtherHandler = "other";
  static constexpr int kMaxRequestsPerConnection = 100;
  static constexpr std::chrono::milliseconds kSlotWait{100};
  static constexpr std::chrono::milliseconds kQueuedWait{50};
  static constexpr std::chrono::milliseconds kShedWait{250};
  // The longest a request waits for holders at work (AcquireSlot).
  static constexpr std::chrono::milliseconds kBusyWaitCap{1000};
  const WebServer* server_;
  mutable Mutex slots_mu_;
  CondVar slots_cv_;
  // Requests in progress, oldest first.
  std::list<Slot> slots_ XPU_GUARDED_BY(slots_mu_);
  std::list<Waiter*> waiting_ XPU_GUARDED_BY(slots_mu_);  // oldest first
  // When the pool was last seen pressed (SteadyNs; 0: never). Any worker.
  std::atomic<int64_t> pressed_at_ns_{0};
};

WebServer::WebServer(WebOptions options)
    : options_(std::move(options)),
      config_(options_.web_config),
      // Waiting checks hold workers: fewer than those beyond the bcrypt runs
      // and two more, so a flood of wrong passwords never parks them all.
      auth_(options_.max_auth_checks,
            std::max(1, options_.max_connections + std::max(0, options_.reserved_probe_workers) -
                            options_.max_auth_checks - 2)),
      tls_(std::make_unique<TlsContextSwitch>()),
      metrics_(std::make_unique<Metrics>()) {}

std::shared_ptr<const WebConfig> WebServer::config() const {
  MutexLock lock(config_mu_);
  return config_;
}

bool WebServer::NeedsRestart(const std::shared_ptr<const WebConfig>& config) const {
  return server_ != nullptr && tls_listeners_ != (config && config->tls);
}

Status WebServer::Reload(const std::shared_ptr<const WebConfig>& config) {
  Status s;
  {
    // Held to the end: the watcher must not load the old config's files
    // over the new ones between the load and the swap.
    MutexLock certs(cert_mu_);
    s = ReloadLocked(config);
  }
  if (s.ok() && server_) StartWatching();
  return s;
}

Status WebServer::ReloadLocked(const std::shared_ptr<const WebConfig>& config) {
  std::shared_ptr<const WebConfig> old = this->config();
  const bool tls_now = server_ ? tls_listeners_ : (old && old->tls);
  std::shared_ptr<const WebConfig> apply = config;
  if (tls_now != (config && config->tls)) {
    // New listeners would leave a moment with none: TLS stays as it is
    // (on with its old settings, or off) until a restart; the rest applies.
    auto kept = std::make_shared<WebConfig>(config ? *config : WebConfig{});
    kept->tls = old ? old->tls : std::nullopt;
    apply = kept;
  } else if (config && config->tls && server_ && !(old && old->tls && *old->tls == *config->tls)) {
    const std::string signature = TlsFilesSignature(*config->tls);
    if (Status s = tls_->Load(*config->tls); !s.ok())
      return Status::InvalidArgument("TLS: " + s.message() + "; kept the old TLS settings");
    cert_signature_ = signature;
    cert_failed_signature_.clear();
  }
  {
    MutexLock lock(config_mu_);
    config_ = apply;
  }
  // Remembered credentials stay valid while the users do (a reload that
  // forgot them would hand a password flood every scraper's next check).
  if (!old || !apply || old->users != apply->users) auth_.Clear();
  return Status::Ok();
}

bool WebServer::listening() const { return server_ != nullptr; }

WebServer::~WebServer() { Stop(); }

void WebServer::Route(const std::string& path, std::set<std::string> methods, Handler handler,
                      bool gzip) {
  if (methods.count("GET")) methods.insert("HEAD");
  routes_[path] = RouteEntry{std::move(methods), std::move(handler), gzip};
}

Status WebServer::ToCivetPort(const std::string& address, std::string* out) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos)
    return Status::InvalidArgument("listen address '" + address + "' lacks :port");
  const std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535)
    return Status::InvalidArgument("listen address '" + address + "': bad port '" + port + "'");
  if (host.find_first_of(",; \t") != std::string::npos)
    return Status::InvalidArgument("listen address '" + address + "': bad host");
  // An IPv6 address goes in brackets ("[::1]:9445"), as in a URL.
  const bool bracketed = !host.empty() && host.front() == '[';
  if (bracketed && (host.size() < 3 || host.back() != ']' ||
                    host.find_first_not_of("0123456789abcdefABCDEF:.", 1) != host.size() - 1))
    return Status::InvalidArgument("listen address '" + address + "': bad IPv6 address");
  if (!bracketed && host.find(':') != std::string::npos)
    return Status::InvalidArgument("listen address '" + address +
                                   "': an IPv6 address needs brackets, e.g. [::1]:9445");
  // civetweb: "+9445" (every interface, IPv6 and IPv4: what ":9445" means to
  // Prometheus and node_exporter), "127.0.0.1:9445", "[::1]:9445".
  *out = host.empty() ? "+" + port : host + ":" + port;
  return Status::Ok();
}

Status WebServer::Start() {
  const std::shared_ptr<const WebConfig> cfg = config();
  const bool tls = cfg && cfg->tls;
  std::string ports;
  for (const std::string& a : options_.listen_addresses) {
    std::string p;
    Status s = ToCivetPort(a, &p);
    if (!s.ok()) return s;
    ports += (ports.empty() ? "" : ",") + p + (tls ? "s" : "");
  }
  if (ports.empty()) return Status::InvalidArgument("no listen address");
  if (tls) {
    const std::string signature = TlsFilesSignature(*cfg->tls);
    if (Status s = tls_->Load(*cfg->tls); !s.ok())
      return Status::InvalidArgument("TLS: " + s.message());
    MutexLock lock(cert_mu_);
    cert_signature_ = signature;
  }
  const auto ms = [](std::chrono::milliseconds d) { return std::to_string(d.count()); };
  std::vector<std::string> opts = {
      "listening_ports", ports, "num_threads",
      // The spare workers come on top (Dispatcher::AcquireSlot).
      std::to_string(options_.max_connections + std::max(0, options_.reserved_probe_workers)),
      "request_timeout_ms", std::to_string(options_.request_timeout_ms),
      // civetweb patch 0001: the head deadlines (docs/reliability.md).
      "request_header_timeout_ms", ms(options_.head_timeout), "request_header_busy_timeout_ms",
      ms(options_.busy_head_timeout), "keep_alive_timeout_ms", ms(options_.keep_alive_timeout),
      // civetweb patch 0002: a slow reader gives its worker up under pressure.
      "response_shed_timeout_ms", ms(options_.shed_after), "enable_keep_alive", "yes",
      // civetweb patch 0004: handed over once the client speaks. A silent
      // connection waits in the listen queue meanwhile: room for 1024
      // (the kernel caps it at net.core.somaxconn) before the kernel falls
      // back to syncookies, which hand connections over at once.
      "tcp_defer_accept_seconds", std::to_string(options_.defer_accept.count()), "listen_backlog",
      "1024", "tcp_nodelay", "1",
      // Nothing is served from disk: no document_root at all.
  };
  dispatcher_ = std::make_unique<Dispatcher>(this);
  CivetCallbacks callbacks{};
  callbacks.init_ssl = CivetInitSsl;
  const TlsForConstruction with_tls(tls ? &*cfg->tls : nullptr, tls_.get());
  try {
    server_ = std::make_unique<CivetServer>(opts, &callbacks, nullptr);
  } catch (const CivetException& e) {
    if (!with_tls.error().empty()) return Status::InvalidArgument("TLS: " + with_tls.error());
    // A kernel without IPv6 refuses the dual-stack socket of ":port": such
    // a node listens on IPv4 only, as before.
    std::string v4 = ports;
    for (size_t at = v4.find('+'); at != std::string::npos; at = v4.find('+', at)) v4.erase(at, 1);
    if (v4 == ports) return Status::IoError("cannot listen on " + ports + ": " + e.what());
    opts[1] = v4;
    try {
      server_ = std::make_unique<CivetServer>(opts, &callbacks, nullptr);
    } catch (const CivetException&) {
      return Status::IoError("cannot listen on " + ports + ": " + e.what());
    }
    spdlog::warn("cannot listen on IPv6 ({}); listening on IPv4 only: {}", e.what(), v4);
  }
  tls_listeners_ = tls;
  server_->addHandler("/", dispatcher_.get());
  if (!options_.probe_listen_addresses.empty()) {
    if (Status s = StartProbes(); !s.ok()) {
      Stop();
      return s;
    }
  }
  metrics_->Serve(server_->getContext(), probes_.get(),
                  [d = dispatcher_.get()] { return d->Waiting(); });
  // exporter-toolkit offers HTTP/2 over TLS unless http2 is false; civetweb
  // speaks HTTP/1.1 only, which Prometheus scrapes with either way.
  if (tls && cfg->http2)
    spdlog::info(
        "web config: http_server_config.http2 is on but HTTP/2 is not offered; serving "
        "HTTP/1.1 over TLS");
  if (tls) metrics_->FollowsCertificates();
  StartWatching();
  return Status::Ok();
}

void WebServer::StartWatching() {
  const std::shared_ptr<const WebConfig> cfg = config();
  if (watching_ || !cfg || (cfg->file.empty() && !cfg->tls)) return;
  watching_ = true;
  if (!cfg->file.empty()) metrics_->FollowsWebConfig();
  watch_.Start(
      [this] {
        while (watch_.SleepFor(kCertificatePoll)) {
          FollowWebConfig();
          FollowCertificates();
        }
      },
      "web-config");
}

void WebServer::FollowWebConfig() {
  MutexLock lock(cert_mu_);  // one step with a reload's load and swap
  const std::shared_ptr<const WebConfig> cfg = config();
  if (!cfg || cfg->file.empty()) return;
  const std::string signature = FileSignature(cfg->file);
  if (signature == web_signature_) return;
  // A file that failed is tried again every 5 rounds, quietly: the files
  // it names may come after it (a Secret written after its ConfigMap).
  const bool retry = signature == web_failed_signature_;
  if (retry && ++web_failed_rounds_ % 5 != 0) return;
  std::shared_ptr<const WebConfig> fresh;
  // Empty is taken as a writer caught between its truncation and its write
  // (it would also mean no users at all): "{}" says "no settings".
  std::error_code size_error;
  Status s = std::filesystem::file_size(cfg->file, size_error) == 0 && !size_error
                 ? Status::InvalidArgument("the file is empty (write {} for no settings)")
                 : WebConfig::Load(cfg->file, &fresh);
  // Written while it was read: the next round reads it again, so one
  // change is judged, and counted, once.
  if (FileSignature(cfg->file) != signature) return;
  if (s.ok() && *fresh == *cfg) {  // touched, or applied already (a SIGHUP)
    web_signature_ = signature;
    web_failed_signature_.clear();
    return;
  }
  if (s.ok()) {
    if (NeedsRestart(fresh))
      spdlog::warn("web config {}: TLS switched on or off; that takes a restart, the rest applies",
                   cfg->file);
    s = ReloadLocked(fresh);
  }
  if (s.ok()) {
    web_signature_ = signature;
    web_failed_signature_.clear();
    spdlog::info("web config {} changed; in force for the next request and handshake", cfg->file);
  } else if (retry) {
    return;  // said and counted once already
  } else {
    web_failed_signature_ = signature;
    web_failed_rounds_ = 0;
    spdlog::error("web config {} changed but does not load; kept the config in force: {}",
                  cfg->file, s.message());
  }
  metrics_->WebConfigReload(s.ok());
}

void WebServer::FollowCertificates() {
  MutexLock lock(cert_mu_);  // a reload's load and swap are one step to us
  const std::shared_ptr<const WebConfig> cfg = config();
  if (!cfg || !cfg->tls) return;
  const std::string signature = TlsFilesSignature(*cfg->tls);
  if (signature == cert_signature_ || signature == cert_failed_signature_) return;
  const Status s = tls_->Load(*cfg->tls);
  // Files that changed while they were read (a swap between the stats of
  // the certificate and the key): the next round reads them again, so one
  // change is judged, and counted, once.
  if (TlsFilesSignature(*cfg->tls) != signature) return;
  if (s.ok()) {
    cert_signature_ = signature;
    cert_failed_signature_.clear();
    spdlog::info("TLS: the certificate files changed; new handshakes use them");
  } else {
    cert_failed_signature_ = signature;
    spdlog::error("TLS: the certificate files changed but do not load; kept the ones in force: {}",
                  s.message());
  }
  metrics_->CertificateReload(s.ok());
}

Status WebServer::StartProbes() {
  std::map<std::string, ProbeServer::Route> routes;
  for (const std::string& path : options_.probe_paths) {
    auto it = routes_.find(path);
    if (it == routes_.end()) continue;
    const Handler& handler = it->second.handler;
    routes[path] = [&handler, path] {
      Request req;
      req.method = "GET";
      req.path = path;
      Response r = handler(req);
      ProbeServer::Answer a{r.status, std::move(r.body)};
      if (r.shared_body) a.body = *r.shared_body;
      return a;
    };
  }
  ProbeServer::Options po;
  po.listen_addresses = options_.probe_listen_addresses;
  probes_ = std::make_unique<ProbeServer>(
      po, std::move(routes),
      [this] {
        const std::shared_ptr<const WebConfig> cfg = config();
        return cfg ? cfg->headers : std::vector<std::pair<std::string, std::string>>{};
      },
      [this](const std::string& path, int status, double seconds) {
        metrics_->Observe(path, status, seconds);
      });
  return probes_->Start();
}

void WebServer::Stop() {
  watch_.Stop();
  if (metrics_) metrics_->Serve(nullptr, nullptr, {});
  if (probes_) probes_->Stop();
  probes_.reset();
  if (!server_) return;
  CloseCivetServer(*server_);
  server_.reset();
}

uint64_t WebServer::head_timeouts() const {
  mg_server_load load{};
  if (!server_ || mg_get_server_load(server_->getContext(), &load) != 0) return 0;
  return static_cast<uint64_t>(load.head_timeouts + load.handshake_timeouts);
}

prometheus::Collectable* WebServer::metrics() const { return metrics_.get(); }

std::vector<int> WebServer::ports() const {
  return server_ ? server_->getListeningPorts() : std::vector<int>{};
}

std::vector<int> WebServer::probe_ports() const {
  return probes_ ? probes_->ports() : std::vector<int>{};
}

}  // namespace xpu::http
