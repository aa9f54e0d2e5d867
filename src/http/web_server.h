#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/status.h"
#include "common/worker.h"
#include "http/basic_auth.h"
#include "http/probe_server.h"
#include "http/rate_limit.h"
#include "http/tls.h"
#include "http/web_config.h"

class CivetServer;
struct mg_connection;
typedef struct ssl_ctx_st SSL_CTX;

namespace prometheus {
class Collectable;
}

namespace xpu::http {

struct Request {
  std::string method;
  std::string path;
  std::string query;
  std::string accept_encoding;
  std::string accept;  // the Accept header (format negotiation)
};

// Receives a streamed body piece by piece; `last` ends it. Returns false
// once the client is gone (later pieces are dropped).
using BodyWriter = std::function<bool(std::string_view piece, bool last)>;

struct Response {
  // A plain-text answer.
  static Response Text(int status, std::string body) {
    Response r;
    r.status = status;
    r.body = std::move(body);
    return r;
  }
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // A "Content-Encoding" header here means the body is already encoded: the
  // server does not gzip it again.
  std::vector<std::pair<std::string, std::string>> headers;
  // A body shared with other responses (one page for concurrent scrapes):
  // sent instead of `body` when set.
  std::shared_ptr<const std::string> shared_body;
  // A body produced while it is sent: called once (not for HEAD) with a
  // writer that sends each piece as an HTTP/1.1 chunk, so the whole body is
  // never held. Sent instead of `body`; never gzipped by the server.
  std::function<void(const BodyWriter& write)> stream;
};

using Handler = std::function<Response(const Request&)>;

struct WebOptions {
  // Prometheus-style addresses: ":9445", "127.0.0.1:0".
  std::vector<std::string> listen_addresses;
  // Requests served at once (one civetweb worker each); one more waits
  // briefly, may shed the longest-sending response (shed_after), else gets
  // 503 (Dispatcher::AcquireSlot).
  int max_connections = 16;
  // Workers on top of max_connections, where a request that finds every
  // slot taken waits briefly for one or is answered 503 (rather than
  // queueing unanswered). The flag's name is older than the probe listener.
  int reserved_probe_workers = 3;
  // The probes' own listener (ProbeServer): "/-/healthy" and "/-/ready"
  // answered off the worker pool. Empty: none (the probes are answered on
  // the main port only, within its limits).
  std::vector<std::string> probe_listen_addresses;
  int request_timeout_ms = 10000;  // civetweb's per-read/per-write wait
  // Deadline for a connection's TLS handshake plus request head (also for the
  // wait for the next request on a keep-alive connection), and the shorter
  // one applied once half the workers wait for heads (civetweb patch 0001,
  // docs/reliability.md).
  std::chrono::milliseconds head_timeout{5000};
  std::chrono::milliseconds busy_head_timeout{50};
  // A connection reaches a worker only once its client has sent something,
  // or after this long silent (TCP_DEFER_ACCEPT, civetweb patch 0004; as
  // nginx's `deferred`): a client slow to speak holds no worker and is not
  // cut as idle meanwhile. Whole seconds, which the kernel rounds up to its
  // SYN-ACK retransmits (1, 3, 7, 15 s: 10 is about 15); 0: a worker takes
  // it at once.
  std::chrono::seconds defer_accept{1};
  // Idle time allowed between two requests on a keep-alive connection.
  std::chrono::milliseconds keep_alive_timeout{2000};
  // Keep-alive is offered again only this long after the pool was last
  // seen pressed (Dispatcher::PressedOfLate): answers say "Connection:
  // close" through a lull of a load rather than promise a connection the
  // squeeze would close under a client about to send on it.
  std::chrono::milliseconds keep_alive_after_pressure{1000};
  // Deadline for a whole response when the client sends no
  // X-Prometheus-Scrape-Timeout-Seconds (that header, when sent, can only
  // shorten it).
  std::chrono::milliseconds response_timeout{30000};
  // A response older than this may be cut for a request that finds every
  // slot taken (the oldest first: a slow reader is shed for a scrape), and
  // is cut while it waits for its reader and connections wait for a worker
  // (civetweb patch 0002).
  std::chrono::milliseconds shed_after{1000};
  // Basic-auth password checks (bcrypt) running at once; more are refused
  // with 429 at once.
  int max_auth_checks = 2;
  std::shared_ptr<const WebConfig> web_config;  // TLS, basic auth, headers; may be null
  // The probes' paths: exempt from basic auth unless protect_probes, and
  // the paths the probe listener answers. On the main port they take a
  // slot like any path.
  std::set<std::string> probe_paths;
  bool protect_probes = false;
};

// The HTTP front: exact-path routing over civetweb, 404 for unknown paths,
// 405 (with Allow) for other methods, gzip for bodies when the client asks.
// Routes are added before Start(); handlers run on civetweb's worker threads
// and must be thread-safe. Start()/Stop()/Reload() from the owning thread.
//
// Serving model (docs/reliability.md, "Serving"): the probes have a
// listener of their own (ProbeServer, one thread reading every head off
// non-blocking sockets), so no mix of clients of the main port can keep
// them waiting. civetweb gives each main-port connection a worker for its
// life, within limits: the head (TLS handshake included) has a deadline
// inside civetweb, short once half the workers wait for heads, and cut
// once it is older than busy_head_timeout while a connection waits for a
// worker (only as many as wait, the longest idle first); each response
// has a whole-response deadline and is cut after shed_after if it waits
// for its reader while connections wait; requests use at most
// max_connections workers (one more waits up to 100 ms for a
// slot, longer while the holders are at work on our side, then 503);
// keep-alive ends ("Connection: close") whenever connections wait for a
// worker or the pool is nearly full, for keep_alive_after_pressure after
// either was last seen, or once a connection has had
// kMaxRequestsPerConnection; bcrypt checks are capped and shared fairly
// (BasicAuth). Owns its metrics (xpu_exporter_http_*, metrics()).
class WebServer {
 public:
  explicit WebServer(WebOptions options);
  ~WebServer();
  WebServer(const WebServer&) = delete;
  WebServer& operator=(const WebServer&) = delete;

  // `methods` e.g. {"GET", "HEAD"}; HEAD is answered like GET without a body.
  void Route(const std::string& path, std::set<std::string> methods, Handler handler,
             bool gzip = false);

  Status Start();
  void Stop();
  // While a web config is in force, a thread looks at its file every second
  // (FileSignature: stat only) and, when it changed, reads it again and
  // applies it as Reload does, as exporter-toolkit re-reads it per request:
  // a deleted user, a new client_auth_type or allowed SAN, headers, the
  // rate limit or other certificate files are in force within a second or
  // two, no signal needed. A file that does not load keeps the config in
  // force, logged and counted once until the file changes again.
  // While TLS is on, the same thread looks at the certificate, key and CA
  // files (TlsFilesSignature) and loads them when they changed, as
  // exporter-toolkit re-reads them per handshake: a rotated Secret is served
  // to new handshakes within a second or two; a pair that does not load
  // (half written, mismatched) keeps the one in force, counted and logged
  // once until the files change again.
  // Applies a re-read web config (SIGHUP, or the file followed): auth and
  // headers at once; new TLS
  // settings (also new contents under the same file names) are loaded into a
  // new TLS context that every later handshake uses; the listeners are never
  // restarted. On error (a file that does not load) the old config stays in
  // force: InvalidArgument. Switching TLS on or off cannot be done without
  // new listeners: the rest is applied and NeedsRestart(config) says so.
  Status Reload(const std::shared_ptr<const WebConfig>& config);
  // Whether `config` switches TLS on or off (only a restart applies that).
  bool NeedsRestart(const std::shared_ptr<const WebConfig>& config) const;
  // The web config in force (may be null). Any thread.
  std::shared_ptr<const WebConfig> config() const;
  bool listening() const;
  // Bound ports, in the order of listen_addresses (after Start).
  std::vector<int> ports() const;
  // The probe listener's bound ports, in the order of
  // probe_listen_addresses (after Start; empty without one).
  std::vector<int> probe_ports() const;
  // Request heads (TLS handshakes included) cut off at their deadline.
  uint64_t head_timeouts() const;
  // xpu_exporter_http_*: requests, durations, workers, connections cut or
  // refused by reason. Lives as long as the server; any thread may collect.
  prometheus::Collectable* metrics() const;

  // Converts a Prometheus-style listen address into civetweb's
  // listening_ports syntax; InvalidArgument if malformed.
  static Status ToCivetPort(const std::string& address, std::string* out);

 private:
  class Dispatcher;
  Status StartProbes();       // the probe listener, from Start
  void FollowCertificates();  // the watcher's round: the TLS files
  void FollowWebConfig();     // the watcher's round: the web config file
  void StartWatching();       // the watcher, once a config is in force (owner thread)
  Status ReloadLocked(const std::shared_ptr<const WebConfig>& config) XPU_REQUIRES(cert_mu_);
  static constexpr std::chrono::seconds kCertificatePoll{1};
  class Metrics;
  struct RouteEntry {
    std::set<std::string> methods;
    Handler handler;
    bool gzip;
  };
  const WebOptions options_;                  // read by worker threads: never assigned
  std::map<std::string, RouteEntry> routes_;  // immutable after Start
  mutable Mutex config_mu_;
  std::shared_ptr<const WebConfig> config_ XPU_GUARDED_BY(config_mu_);
  bool tls_listeners_ = false;  // whether the listeners speak TLS (owner thread)
  mutable BasicAuth auth_;
  mutable RateLimiter limiter_;            // the web config's rate_limit (workers)
  std::unique_ptr<TlsContextSwitch> tls_;  // the context each handshake takes
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<CivetServer> server_;
  std::unique_ptr<ProbeServer> probes_;
  // The file watcher (FollowWebConfig, FollowCertificates) and what it last
  // saw: the web config file's and the TLS files' signatures in force, and
  // ones that failed to load (not retried until the files change again).
  // cert_mu_ is held across a load and the config swap (Reload) or the
  // config read (the watcher); taken before config_mu_, never after.
  Worker watch_;
  bool watching_ = false;  // watch_ started (owner thread)
  Mutex cert_mu_;
  std::string cert_signature_ XPU_GUARDED_BY(cert_mu_);
  std::string cert_failed_signature_ XPU_GUARDED_BY(cert_mu_);
  std::string web_signature_ XPU_GUARDED_BY(cert_mu_);
  std::string web_failed_signature_ XPU_GUARDED_BY(cert_mu_);
  int web_failed_rounds_ XPU_GUARDED_BY(cert_mu_) = 0;  // since it failed
};

// The whole-response deadline in ms for a request that sent
// X-Prometheus-Scrape-Timeout-Seconds as `scrape_timeout_header` (null: not
// sent): the operator's `flag`, shortened by the header, never lengthened.
int ResponseDeadlineMs(const char* scrape_timeout_header, std::chrono::milliseconds flag);

}  // namespace xpu::http
