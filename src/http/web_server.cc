#include "http/web_server.h"

#include <CivetServer.h>
#include <spdlog/spdlog.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/civet_util.h"
#include "http/gzip.h"
#include "http/headers.h"
#include "http/tls.h"

namespace xpu::http {
namespace {

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

}  // namespace

HeadGuard* GuardOf(const mg_connection* conn) {
  // CivetServer passes itself as the context's user data and keeps the
  // caller's pointer (the guard) as its user context.
  const mg_context* ctx = mg_get_context(conn);
  auto* server = static_cast<const CivetServer*>(mg_get_user_data(ctx));
  if (server == nullptr) return nullptr;
  return static_cast<HeadGuard*>(const_cast<void*>(server->getUserContext()));
}

int OnConnect(const mg_connection* conn, void**) {
  if (HeadGuard* g = GuardOf(conn)) g->OnConnect();
  return 0;
}
int OnHead(mg_connection*) {
  HeadGuard::OnHead();
  return 0;  // civetweb goes on to route the request
}
void OnRequestEnd(const mg_connection* conn, int) {
  if (HeadGuard* g = GuardOf(conn)) g->OnRequestEnd();
}
void OnClose(const mg_connection*) { HeadGuard::OnClose(); }

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

// Sends a streamed body after `head` (its header lines, not yet ended). A
// body that comes as one piece goes out as an ordinary response with
// Content-Length, as Go's net/http does. A longer one goes as HTTP/1.1
// chunks, one write per piece (the head with the first, the terminating
// chunk with the last), so no piece waits on Nagle and the client's delayed
// ACK; for an HTTP/1.0 client unframed, ended by the close.
void SendStream(mg_connection* conn, std::string head, bool chunked,
                const std::function<void(const BodyWriter&)>& stream) {
  std::string frame;
  bool started = false;
  bool ok = true;
  bool ended = false;
  const BodyWriter write = [&](std::string_view piece, bool last) {
    if (!ok || ended) return false;
    if (!started) {
      started = true;
      if (last) {
        head.append("Content-Length: ").append(std::to_string(piece.size())).append("\r\n\r\n");
        head.append(piece);
        ended = true;
        ok = mg_write(conn, head.data(), head.size()) == static_cast<int>(head.size());
        return ok;
      }
      frame = std::move(head);
      frame.append(StreamFraming(conn, chunked));
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
    ok = mg_write(conn, frame.data(), frame.size()) == static_cast<int>(frame.size());
    frame.clear();
    return ok;
  };
  stream(write);
  if (!ended) write({}, true);  // a producer that never said last
}

}  // namespace

class WebServer::Dispatcher : public CivetHandler {
 public:
  explicit Dispatcher(const WebServer* server) : server_(server) {}
  bool handleGet(CivetServer*, mg_connection* c) override { return Dispatch(c); }
  bool handleHead(CivetServer*, mg_connection* c) override { return Dispatch(c); }
  bool handlePost(CivetServer*, mg_connection* c) override { return Dispatch(c); }
  bool handlePut(CivetServer*, mg_connection* c) override { return Dispatch(c); }
  bool handleDelete(CivetServer*, mg_connection* c) override { return Dispatch(c); }
  bool handleOptions(CivetServer*, mg_connection* c) override { return Dispatch(c); }
  bool handlePatch(CivetServer*, mg_connection* c) override { return Dispatch(c); }

 private:
  bool Dispatch(mg_connection* conn) {
    const mg_request_info* info = mg_get_request_info(conn);
    Request req;
    req.method = info->request_method ? info->request_method : "";
    req.path = info->local_uri ? info->local_uri : "";
    req.query = info->query_string ? info->query_string : "";
    const char* ae = mg_get_header(conn, "Accept-Encoding");
    req.accept_encoding = ae ? ae : "";
    const char* accept = mg_get_header(conn, "Accept");
    req.accept = accept ? accept : "";
    Response resp;
    bool gzip = false;
    const bool body_unread = HasBody(conn);
    if (body_unread) mg_disable_connection_keep_alive(conn);
    const std::shared_ptr<const WebConfig> cfg = server_->config();
    const bool needs_auth =
        cfg && !cfg->users.empty() &&
        (server_->options_.protect_probes || server_->options_.probe_paths.count(req.path) == 0);
    const char* authz = mg_get_header(conn, "Authorization");
    auto it = server_->routes_.find(req.path);
    if (needs_auth && !server_->Authorized(*cfg, authz ? authz : "")) {
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
    std::string head = "HTTP/1.1 " + std::to_string(resp.status) + " " + Reason(resp.status) +
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
    if (body_unread) head += "Connection: close\r\n";
    if (resp.stream) {  // the framing follows from the body: SendStream ends the head
      if (req.method == "HEAD") {
        head += StreamFraming(conn, chunked);
        mg_write(conn, head.data(), head.size());
      } else {
        SendStream(conn, std::move(head), chunked, resp.stream);
      }
      return true;
    }
    head += "\r\n";
    const bool with_body = req.method != "HEAD" && !body->empty();
    if (with_body && body->size() < size_t{256} * 1024) {
      // One write for header and body: two small writes meet Nagle and the
      // client's delayed ACK and stall ~40 ms.
      head += *body;
      mg_write(conn, head.data(), head.size());
    } else {
      mg_write(conn, head.data(), head.size());
      if (with_body) mg_write(conn, body->data(), body->size());
    }
    return true;
  }
  const WebServer* server_;
};

WebServer::WebServer(WebOptions options)
    : options_(std::move(options)), config_(options_.web_config) {}

std::shared_ptr<const WebConfig> WebServer::config() const {
  std::lock_guard<std::mutex> lock(config_mu_);
  return config_;
}

bool WebServer::Authorized(const WebConfig& cfg, const std::string& authorization) const {
  return auth_.Check(cfg.users, authorization);
}

bool WebServer::NeedsRestart(const std::shared_ptr<const WebConfig>& config) const {
  std::shared_ptr<const WebConfig> old = this->config();
  return (old && old->tls) != (config && config->tls) ||
         (old && config && old->tls && config->tls && !(*old->tls == *config->tls));
}

Status WebServer::Reload(const std::shared_ptr<const WebConfig>& config) {
  std::shared_ptr<const WebConfig> old = this->config();
  const bool tls_changed = NeedsRestart(config);
  {
    std::lock_guard<std::mutex> lock(config_mu_);
    config_ = config;
  }
  auth_.Clear();
  if (!tls_changed || !server_) return Status::Ok();
  // Rebind the same ports (those chosen for port 0 too) with the new TLS.
  // options_ is never written after construction: worker threads read it.
  std::vector<int> bound = ports();
  std::vector<std::string> addrs = options_.listen_addresses;
  for (size_t i = 0; i < addrs.size() && i < bound.size(); ++i) {
    const size_t colon = addrs[i].rfind(':');
    addrs[i] = addrs[i].substr(0, colon + 1) + std::to_string(bound[i]);
  }
  Stop();
  Status s = StartOn(addrs);
  if (s.ok()) return Status::Ok();
  {
    std::lock_guard<std::mutex> lock(config_mu_);
    config_ = old;
  }
  Status again = StartOn(addrs);
  if (!again.ok()) {
    return Status::IoError(s.message() + "; restarting with the old TLS settings failed too (" +
                           again.message() + "): no listener");
  }
  return Status::InvalidArgument(s.message() + "; kept the old TLS settings");
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

Status WebServer::Start() { return StartOn(options_.listen_addresses); }

Status WebServer::StartOn(const std::vector<std::string>& addresses) {
  const std::shared_ptr<const WebConfig> cfg = config();
  const bool tls = cfg && cfg->tls;
  std::string ports;
  for (const std::string& a : addresses) {
    std::string p;
    Status s = ToCivetPort(a, &p);
    if (!s.ok()) return s;
    ports += (ports.empty() ? "" : ",") + p + (tls ? "s" : "");
  }
  if (ports.empty()) return Status::InvalidArgument("no listen address");
  std::vector<std::string> opts = {
      "listening_ports",    ports,
      "num_threads",        std::to_string(options_.max_connections),
      "request_timeout_ms", std::to_string(options_.request_timeout_ms),
      "enable_keep_alive",  "yes",
      "tcp_nodelay",        "1",
      // Nothing is served from disk: no document_root at all.
  };
  dispatcher_ = std::make_unique<Dispatcher>(this);
  guard_ = std::make_unique<HeadGuard>(options_.head_timeout, options_.busy_head_timeout,
                                       options_.max_connections);
  CivetCallbacks callbacks{};
  callbacks.init_ssl = CivetInitSsl;
  callbacks.init_connection = OnConnect;
  callbacks.begin_request = OnHead;
  callbacks.end_request = OnRequestEnd;
  callbacks.connection_close = OnClose;
  const TlsForConstruction with_tls(tls ? &*cfg->tls : nullptr);
  try {
    server_ = std::make_unique<CivetServer>(opts, &callbacks, guard_.get());
  } catch (const CivetException& e) {
    if (!with_tls.error().empty()) return Status::InvalidArgument("TLS: " + with_tls.error());
    // A kernel without IPv6 refuses the dual-stack socket of ":port": such
    // a node listens on IPv4 only, as before.
    std::string v4 = ports;
    for (size_t at = v4.find('+'); at != std::string::npos; at = v4.find('+', at)) v4.erase(at, 1);
    if (v4 == ports) return Status::IoError("cannot listen on " + ports + ": " + e.what());
    opts[1] = v4;
    try {
      server_ = std::make_unique<CivetServer>(opts, &callbacks, guard_.get());
    } catch (const CivetException&) {
      return Status::IoError("cannot listen on " + ports + ": " + e.what());
    }
    spdlog::warn("cannot listen on IPv6 ({}); listening on IPv4 only: {}", e.what(), v4);
  }
  server_->addHandler("/", dispatcher_.get());
  return Status::Ok();
}

void WebServer::Stop() {
  if (!server_) return;
  CloseCivetServer(*server_);
  server_.reset();
}

uint64_t WebServer::head_timeouts() const { return guard_ ? guard_->timeouts() : 0; }

std::vector<int> WebServer::ports() const {
  return server_ ? server_->getListeningPorts() : std::vector<int>{};
}

}  // namespace xpu::http
