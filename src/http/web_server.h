#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "http/basic_auth.h"
#include "http/conn_guard.h"
#include "http/web_config.h"

class CivetServer;

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
  int max_connections = 16;  // concurrent requests (civetweb worker threads)
  int request_timeout_ms = 10000;
  // Deadline for a request's head (also for an idle keep-alive connection),
  // and the shorter one applied once half the workers wait for heads
  // (HeadGuard, docs/reliability.md).
  std::chrono::milliseconds head_timeout{5000};
  std::chrono::milliseconds busy_head_timeout{50};
  std::shared_ptr<const WebConfig> web_config;  // TLS, basic auth, headers; may be null
  // Paths exempt from basic auth (kubelet probes) unless protect_probes.
  std::set<std::string> probe_paths;
  bool protect_probes = false;
};

// The HTTP front: exact-path routing over civetweb, 404 for unknown paths,
// 405 (with Allow) for other methods, gzip for bodies when the client asks.
// Routes are added before Start(); handlers run on civetweb's worker threads
// and must be thread-safe. Start()/Stop() from the owning thread.
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
  // Applies a re-read web config (SIGHUP): auth and headers at once; a TLS
  // change (also new contents under the same file names) restarts the
  // listeners on the same ports. On error the server keeps (or restores) the
  // old config: InvalidArgument. IoError means even the old config could not
  // listen again and the server has no listener (see listening()).
  Status Reload(const std::shared_ptr<const WebConfig>& config);
  // Whether Reload(config) would restart the listeners (TLS changes).
  bool NeedsRestart(const std::shared_ptr<const WebConfig>& config) const;
  bool listening() const;
  // Bound ports, in the order of listen_addresses (after Start).
  std::vector<int> ports() const;
  // Request heads cut off at their deadline (slow or idle clients).
  uint64_t head_timeouts() const;

  // Converts a Prometheus-style listen address into civetweb's
  // listening_ports syntax; InvalidArgument if malformed.
  static Status ToCivetPort(const std::string& address, std::string* out);

 private:
  class Dispatcher;
  struct RouteEntry {
    std::set<std::string> methods;
    Handler handler;
    bool gzip;
  };
  Status StartOn(const std::vector<std::string>& addresses);
  bool Authorized(const WebConfig& cfg, const std::string& authorization) const;
  std::shared_ptr<const WebConfig> config() const;

  const WebOptions options_;                  // read by worker threads: never assigned
  std::map<std::string, RouteEntry> routes_;  // immutable after Start
  mutable std::mutex config_mu_;
  std::shared_ptr<const WebConfig> config_;  // guarded by config_mu_
  mutable BasicAuth auth_;
  std::unique_ptr<HeadGuard> guard_;
  std::unique_ptr<Dispatcher> dispatcher_;
  std::unique_ptr<CivetServer> server_;
};

}  // namespace xpu::http
