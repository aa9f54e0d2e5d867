// HTTP requests: the header parsers on their own (Accept-Encoding,
// Authorization, listen addresses), and whole requests sent as raw bytes to a
// real WebServer on loopback with basic auth on, whose answer must be a
// well-formed status line or nothing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "http/headers.h"
#include "http/web_server.h"

namespace {

xpu::http::WebServer* Server() {
  static xpu::http::WebServer* server = [] {
    xpu::http::WebOptions o;
    o.listen_addresses = {"127.0.0.1:0"};
    o.max_connections = 4;
    o.head_timeout = std::chrono::milliseconds(100);
    std::shared_ptr<const xpu::http::WebConfig> cfg;
    // bcrypt of "pw" at cost 4: cheap enough to verify per input.
    if (!xpu::http::WebConfig::Parse(
             "basic_auth_users:\n  u: "
             "'$2y$04$hCY/TE81PAgtcUdDz2BLAeHrhzQ55YtujRxpQBvx2VBNwL/6PQbcO'\n",
             "fuzz", &cfg)
             .ok())
      abort();
    o.web_config = cfg;
    o.probe_paths = {"/-/healthy"};
    auto* s = new xpu::http::WebServer(o);  // lives for the process
    auto ok = [](const xpu::http::Request&) {
      return xpu::http::Response{200, "text/plain", "ok\n", {}};
    };
    s->Route("/metrics", {"GET"}, ok, /*gzip=*/true);
    s->Route("/-/healthy", {"GET"}, ok);
    if (!s->Start().ok()) abort();
    return s;
  }();
  return server;
}

void SendRaw(int port, const std::string& request) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Thousands of connections a second can briefly exhaust loopback's
  // ephemeral ports or the accept backlog on a loaded machine (seen in CI:
  // connect failed, the input alone does not reproduce): retry for up to
  // 5 s; a server that stays unreachable is still a failure.
  int fd = -1;
  for (int attempt = 0;; ++attempt) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) break;
    if (fd >= 0) close(fd);
    if (attempt == 500) abort();
    poll(nullptr, 0, 10);
  }
  (void)send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[4096];
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 2000) > 0) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  // A status line or nothing. civetweb answers malformed requests itself and
  // echoes the request's version text in them ("HTTP/HTTP: 10000/1.1 400
  // Bad Request", docs/reliability.md), so only this holds: the answer starts
  // with HTTP/ and its first line has no control byte (no injected header).
  if (answer.empty()) return;
  const size_t eol = answer.find("\r\n");
  if (answer.rfind("HTTP/", 0) != 0 || eol == std::string::npos) abort();
  for (size_t i = 0; i < eol; ++i)
    if (static_cast<unsigned char>(answer[i]) < 0x20 || answer[i] == 0x7f) abort();
  // Our own answers are exact.
  if (answer.rfind("HTTP/1.1 200 OK\r\n", 0) == 0 &&
      answer.find("\r\n\r\nok\n") == std::string::npos &&
      answer.find("Content-Encoding: gzip") == std::string::npos)
    abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = xpu::fuzz::AsString(data, size);
  (void)xpu::http::AcceptsGzip(text);
  (void)xpu::http::PrefersOpenMetrics(text);
  std::string user, password;
  (void)xpu::http::ParseBasicAuth(text, &user, &password);
  (void)xpu::http::Base64Decode(text);
  std::string civet;
  (void)xpu::http::WebServer::ToCivetPort(text, &civet);
  SendRaw(Server()->ports().at(0), text);
  return 0;
}
