#include "http/web_server.h"

#include <CivetServer.h>
#include <crypt.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <zlib.h>

#include <cstring>

#include <spdlog/spdlog.h>

#include "common/civet_util.h"
#include "http/headers.h"

namespace xpu::http {
namespace {

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Payload Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

// WebConfig::Parse admits only these two.
int TlsVersion(const std::string& v) { return v == "TLS12" ? TLS1_2_VERSION : TLS1_3_VERSION; }

// Sessions cached under client-certificate verification need a context id,
// or OpenSSL refuses to resume them (TLS 1.2 clients then fail).
constexpr unsigned char kSessionIdContext[] = "xpu-exporter";

// Accepts any client certificate (RequestClientCert, RequireAnyClientCert).
int AcceptAnyCert(int, X509_STORE_CTX*) { return 1; }

std::string OpenSslError() {
  char buf[256] = "unknown error";
  if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

// The TLS settings for the server being constructed on this thread: civetweb
// asks for the SSL_CTX from inside the CivetServer constructor.
thread_local const TlsConfig* g_tls_in_construction = nullptr;
thread_local std::string g_tls_error;

// civetweb init_ssl callback: civetweb creates the SSL_CTX, we load the
// certificate and key and apply every exporter-toolkit setting directly with
// OpenSSL (returning 1 tells civetweb not to load certificates itself).
int InitSsl(void* ssl_ctx, void*) {
  const TlsConfig* tls = g_tls_in_construction;
  if (tls == nullptr) return -1;
  SSL_CTX* ctx = static_cast<SSL_CTX*>(ssl_ctx);
  auto fail = [&](const std::string& what) {
    g_tls_error = what + ": " + OpenSslError();
    return -1;
  };
  SSL_CTX_set_min_proto_version(ctx, TlsVersion(tls->min_version));
  SSL_CTX_set_max_proto_version(ctx, TlsVersion(tls->max_version));
  if (SSL_CTX_use_certificate_chain_file(ctx, tls->cert_file.c_str()) != 1)
    return fail("cert_file " + tls->cert_file);
  if (SSL_CTX_use_PrivateKey_file(ctx, tls->key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    return fail("key_file " + tls->key_file);
  if (SSL_CTX_check_private_key(ctx) != 1) return fail("key_file does not match cert_file");
  if (!tls->client_ca_file.empty() &&
      SSL_CTX_load_verify_locations(ctx, tls->client_ca_file.c_str(), nullptr) != 1)
    return fail("client_ca_file " + tls->client_ca_file);
  SSL_CTX_set_session_id_context(ctx, kSessionIdContext, sizeof kSessionIdContext - 1);
  const std::string& a = tls->client_auth_type;
  if (a == "RequestClientCert") {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, AcceptAnyCert);
  } else if (a == "RequireAnyClientCert") {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, AcceptAnyCert);
  } else if (a == "VerifyClientCertIfGiven") {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  } else if (a == "RequireAndVerifyClientCert") {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  return 1;
}

std::string Sha256Hex(const std::string& in) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(in.data(), in.size(), md, &len, EVP_sha256(), nullptr);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

bool ConstantTimeEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

}  // namespace

std::string Gzip(const std::string& in) {
  z_stream zs{};
  if (deflateInit2(&zs, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return {};
  std::string out;
  out.resize(deflateBound(&zs, in.size()));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return rc == Z_STREAM_END ? out : std::string();
}

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
    Response resp;
    bool gzip = false;
    const bool body_unread = HasBody(conn);
    if (body_unread) mg_disable_connection_keep_alive(conn);
    const std::shared_ptr<const WebConfig> cfg = server_->config();
    const bool needs_auth = cfg && !cfg->users.empty() &&
                            (server_->options_.protect_probes ||
                             server_->options_.probe_paths.count(req.path) == 0);
    const char* authz = mg_get_header(conn, "Authorization");
    auto it = server_->routes_.find(req.path);
    if (needs_auth && !server_->Authorized(authz ? authz : "")) {
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
    std::string body = std::move(resp.body);
    if (gzip && !body.empty()) {
      std::string z = Gzip(body);
      if (!z.empty()) {
        body = std::move(z);
        resp.headers.emplace_back("Content-Encoding", "gzip");
      }
    }
    std::string head = "HTTP/1.1 " + std::to_string(resp.status) + " " + Reason(resp.status) +
                       "\r\nContent-Type: " + resp.content_type +
                       "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    for (const auto& [k, v] : resp.headers) head += k + ": " + v + "\r\n";
    if (cfg) {
      for (const auto& [k, v] : cfg->headers) head += k + ": " + v + "\r\n";
    }
    if (body_unread) head += "Connection: close\r\n";
    head += "\r\n";
    const bool with_body = req.method != "HEAD" && !body.empty();
    if (with_body && body.size() < 256 * 1024) {
      // One write for header and body: two small writes meet Nagle and the
      // client's delayed ACK and stall ~40 ms.
      head += body;
      mg_write(conn, head.data(), head.size());
    } else {
      mg_write(conn, head.data(), head.size());
      if (with_body) mg_write(conn, body.data(), body.size());
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

bool WebServer::Authorized(const std::string& authorization) const {
  const std::shared_ptr<const WebConfig> cfg = config();
  std::string user, password;
  if (!ParseBasicAuth(authorization, &user, &password)) return false;
  auto it = cfg->users.find(user);
  // Unknown users still cost one bcrypt, so timing does not reveal names.
  static const std::string kDummy = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";
  const std::string& hash = it == cfg->users.end() ? kDummy : it->second;
  const std::string key = Sha256Hex(user + '\0' + password + '\0' + hash);
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (auth_cache_.count(key)) return it != cfg->users.end();
  }
  crypt_data data{};
  const char* out = crypt_r(password.c_str(), hash.c_str(), &data);
  const bool ok = out != nullptr && out[0] != '*' && ConstantTimeEqual(out, hash) &&
                  it != cfg->users.end();
  if (ok) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (auth_cache_.size() > 1024) auth_cache_.clear();  // bounded
    auth_cache_.insert(key);
  }
  return ok;
}

Status WebServer::Reload(std::shared_ptr<const WebConfig> config) {
  std::shared_ptr<const WebConfig> old = this->config();
  const bool tls_changed = (old && old->tls) != (config && config->tls) ||
                           (old && config && old->tls && config->tls && !(*old->tls == *config->tls));
  {
    std::lock_guard<std::mutex> lock(config_mu_);
    config_ = config;
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auth_cache_.clear();
  }
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
  if (colon == std::string::npos) return Status::InvalidArgument("listen address '" + address + "' lacks :port");
  const std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) > 65535)
    return Status::InvalidArgument("listen address '" + address + "': bad port '" + port + "'");
  if (host.find_first_of(",; \t") != std::string::npos)
    return Status::InvalidArgument("listen address '" + address + "': bad host");
  // civetweb: "9445" (all interfaces), "127.0.0.1:9445", "[::1]:9445".
  *out = host.empty() ? port : host + ":" + port;
  return Status::Ok();
}

extern "C" int xpu_ssl_compat_present(void);  // sslcompat/ssl_compat.cc

namespace {

// The shim is code loaded into a process that may run as root: it must come
// from an absolute path that only root can change (docs/reliability.md,
// threat model), not from a writable build tree.
Status CheckShim() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&xpu_ssl_compat_present), &info) == 0 ||
      info.dli_fname == nullptr)
    return Status::IoError("cannot locate the libssl.so shim");
  const std::string path = info.dli_fname;
  if (path.empty() || path[0] != '/')
    return Status::IoError("libssl.so shim loaded from a relative path: " + path);
  for (std::string p = path; !p.empty() && p != "/"; p = p.substr(0, p.rfind('/'))) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return Status::IoError("cannot stat " + p);
    // A sticky directory (/tmp) lets nobody replace another user's entry.
    const bool sticky_dir = S_ISDIR(st.st_mode) && (st.st_mode & S_ISVTX) != 0;
    if ((!sticky_dir && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) ||
        (st.st_uid != 0 && st.st_uid != ::geteuid()))
      return Status::IoError("libssl.so shim " + path + ": " + p +
                             " is writable by another user; install it root-owned");
    if (p.rfind('/') == 0) break;
  }
  return Status::Ok();
}

}  // namespace

Status WebServer::Start() { return StartOn(options_.listen_addresses); }

Status WebServer::StartOn(const std::vector<std::string>& addresses) {
  // Keeps the libssl.so shim a dependency: civetweb's TLS needs it.
  if (xpu_ssl_compat_present() != 1) return Status::IoError("TLS compatibility shim missing");
  if (Status s = CheckShim(); !s.ok()) return s;
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
      "listening_ports", ports,
      "num_threads", std::to_string(options_.max_connections),
      "request_timeout_ms", std::to_string(options_.request_timeout_ms),
      "enable_keep_alive", "yes",
      "tcp_nodelay", "1",
      // Nothing is served from disk: no document_root at all.
  };
  dispatcher_ = std::make_unique<Dispatcher>(this);
  guard_ = std::make_unique<HeadGuard>(options_.head_timeout, options_.busy_head_timeout,
                                       options_.max_connections);
  CivetCallbacks callbacks{};
  callbacks.init_ssl = InitSsl;
  callbacks.init_connection = OnConnect;
  callbacks.begin_request = OnHead;
  callbacks.end_request = OnRequestEnd;
  callbacks.connection_close = OnClose;
  g_tls_in_construction = tls ? &*cfg->tls : nullptr;
  g_tls_error.clear();
  try {
    server_ = std::make_unique<CivetServer>(opts, &callbacks, guard_.get());
  } catch (const CivetException& e) {
    g_tls_in_construction = nullptr;
    if (!g_tls_error.empty()) return Status::InvalidArgument("TLS: " + g_tls_error);
    return Status::IoError("cannot listen on " + ports + ": " + e.what());
  }
  g_tls_in_construction = nullptr;
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
