#include "http/web_server.h"

#include <CivetServer.h>
#include <zlib.h>

#include <cstring>

#include <spdlog/spdlog.h>

#include "common/civet_util.h"

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
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

bool AcceptsGzip(const std::string& accept) {
  // "gzip", "deflate, gzip;q=0.5", "*;q=1"; a q of 0 refuses.
  size_t start = 0;
  while (start <= accept.size()) {
    size_t end = accept.find(',', start);
    if (end == std::string::npos) end = accept.size();
    std::string token = accept.substr(start, end - start);
    start = end + 1;
    const size_t semi = token.find(';');
    std::string name = token.substr(0, semi);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name != "gzip" && name != "*") continue;
    if (semi == std::string::npos) return true;
    const size_t q = token.find("q=", semi);
    if (q == std::string::npos) return true;
    return std::strtod(token.c_str() + q + 2, nullptr) > 0;
  }
  return false;
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
    auto it = server_->routes_.find(req.path);
    if (it == server_->routes_.end()) {
      resp.status = 404;
      resp.body = "404 page not found\n";
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

WebServer::WebServer(WebOptions options) : options_(std::move(options)) {}

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

Status WebServer::Start() {
  std::string ports;
  for (const std::string& a : options_.listen_addresses) {
    std::string p;
    Status s = ToCivetPort(a, &p);
    if (!s.ok()) return s;
    ports += (ports.empty() ? "" : ",") + p;
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
  try {
    server_ = std::make_unique<CivetServer>(opts);
  } catch (const CivetException& e) {
    return Status::IoError("cannot listen on " + ports + ": " + e.what());
  }
  server_->addHandler("/", dispatcher_.get());
  return Status::Ok();
}

void WebServer::Stop() {
  if (!server_) return;
  CloseCivetServer(*server_);
  server_.reset();
}

std::vector<int> WebServer::ports() const {
  return server_ ? server_->getListeningPorts() : std::vector<int>{};
}

}  // namespace xpu::http
