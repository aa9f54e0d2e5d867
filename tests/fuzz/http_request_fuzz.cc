// HTTP requests: the header parsers on their own (Accept-Encoding,
// Authorization, listen addresses), and whole requests sent as raw bytes to a
// real WebServer on loopback with basic auth on, and to its probe listener
// (ProbeServer), whose answers must be well-formed or nothing (at most one
// from the probe listener, which answers one request per connection).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "exposition/negotiate.h"
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
    o.probe_listen_addresses = {"127.0.0.1:0"};
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

[[noreturn]] void Bad(const char* why, const std::string& answer) {
  fprintf(stderr, "bad answer (%s):\n%s\n", why, answer.c_str());
  abort();
}

// Every answer on the connection, one after the other (pipelined requests
// get one each), must be a well-formed HTTP/1.x response: status line and
// header lines free of control bytes and bare CR or LF (no injected header,
// no echo), then a body framed as its head says. A HEAD answer has a length
// but no body: a next "HTTP/" or the end where its body would start is one.
void CheckAnswers(const std::string& answer) {
  size_t at = 0;
  while (at < answer.size()) {
    const size_t end = answer.find("\r\n\r\n", at);
    if (end == std::string::npos) Bad("head without its end", answer);
    const std::string head = answer.substr(at, end - at);
    if (head.size() < 13 || (head.rfind("HTTP/1.1 ", 0) != 0 && head.rfind("HTTP/1.0 ", 0) != 0) ||
        !isdigit(static_cast<unsigned char>(head[9])) ||
        !isdigit(static_cast<unsigned char>(head[10])) ||
        !isdigit(static_cast<unsigned char>(head[11])) || head[12] != ' ')
      Bad("status line", answer);
    long long length = -1;
    bool chunked = false;
    size_t line = 0;
    while (line <= head.size()) {
      size_t eol = head.find("\r\n", line);
      if (eol == std::string::npos) eol = head.size();
      const std::string l = head.substr(line, eol - line);
      for (char c : l)
        if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f)
          Bad("control byte", answer);
      if (line > 0) {
        const size_t colon = l.find(':');
        if (colon == std::string::npos || colon == 0) Bad("header line", answer);
        const std::string name = l.substr(0, colon);
        if (strcasecmp(name.c_str(), "Content-Length") == 0) length = atoll(l.c_str() + colon + 1);
        if (strcasecmp(name.c_str(), "Transfer-Encoding") == 0) chunked = true;
      }
      line = eol + 2;
    }
    at = end + 4;
    if (chunked) {
      for (;;) {
        const size_t eol = answer.find("\r\n", at);
        if (eol == std::string::npos) Bad("chunk size", answer);
        const unsigned long long n = strtoull(answer.c_str() + at, nullptr, 16);
        if (n > answer.size() || eol + 4 + n > answer.size()) Bad("chunk", answer);
        at = eol + 2 + static_cast<size_t>(n) + 2;
        if (n == 0) break;
      }
    } else if (length >= 0) {
      const size_t after = at + static_cast<size_t>(length);
      if (after <= answer.size() &&
          (after == answer.size() || answer.compare(after, 5, "HTTP/") == 0))
        at = after;
      else if (at != answer.size() && answer.compare(at, 5, "HTTP/") != 0)
        Bad("body length", answer);  // neither the body nor a HEAD answer's nothing
    } else {
      break;  // ended by the close
    }
  }
  // Our own answers are exact.
  if (answer.rfind("HTTP/1.1 200 OK\r\n", 0) == 0 &&
      answer.find("\r\n\r\nok\n") == std::string::npos &&
      answer.find("Content-Encoding: gzip") == std::string::npos)
    abort();
}

// What one connection got, and how its own side went.
struct Exchanged {
  std::string answer;      // every byte (checked)
  long long send_ms = 0;   // from the connect's end to the request sent and half-closed
  bool timed_out = false;  // the server neither answered nor closed within 8 s
};

// Sends `request` and returns every byte of the answer (checked).
Exchanged SendRaw(int port, const std::string& request) {
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
  const auto connected = std::chrono::steady_clock::now();
  (void)send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  shutdown(fd, SHUT_WR);
  Exchanged out;
  out.send_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - connected)
                    .count();
  std::string& answer = out.answer;
  char buf[4096];
  // The servers close each connection themselves (the probe listener at its
  // 1 s deadline, civetweb at its head timeout), so they decide what is
  // answered; the client's wait only outlasts them, with room for a loaded
  // machine running the sanitizer build at -O0 (2 s once cut an answer).
  // Niced beside the TSan suite this process was starved past 5 s (4 inputs
  // a second): once, the wait goes 3 s on, and says so if that helped.
  pollfd p{fd, POLLIN, 0};
  bool waited_on = false;
  for (;;) {
    if (poll(&p, 1, 5000) <= 0) {
      const auto t0 = std::chrono::steady_clock::now();
      if (!waited_on && poll(&p, 1, 3000) > 0) {
        waited_on = true;
        fprintf(stderr, "an answer or close came %lld ms past a 5 s wait (this process starved)\n",
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                           std::chrono::steady_clock::now() - t0)
                                           .count()));
      } else {
        out.timed_out = true;
        break;
      }
    }
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  CheckAnswers(answer);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = xpu::fuzz::AsString(data, size);
  (void)xpu::http::AcceptsGzip(text);
  (void)xpu::http::NegotiateContentCoding(text);
  (void)xpu::exposition::NegotiateFormat(text);
  std::string user, password;
  (void)xpu::http::ParseBasicAuth(text, &user, &password);
  (void)xpu::http::Base64Decode(text);
  std::string civet;
  (void)xpu::http::WebServer::ToCivetPort(text, &civet);
  SendRaw(Server()->ports().at(0), text);
  // A whole head (or 4 KiB without its end) is answered, even when the
  // client half-closes right after it (SendRaw does), if it came within the
  // probe listener's deadline (1 s from its accept): this process, niced
  // beside a sanitizer suite, may itself send it later (then it is tried
  // again).
  const bool whole = text.find("\r\n\r\n") != std::string::npos ||
                     text.find("\n\n") != std::string::npos || text.size() > 4096;
  Exchanged got = SendRaw(Server()->probe_ports().at(0), text);
  for (int again = 0; whole && got.answer.empty() && got.send_ms >= 900 && again < 3; ++again)
    got = SendRaw(Server()->probe_ports().at(0), text);
  const std::string& probe = got.answer;
  if (probe.empty() && whole) {
    fprintf(stderr, "sent %lld ms after the connect; %s\n", got.send_ms,
            got.timed_out ? "no answer and no close within 8 s" : "closed without an answer");
    Bad("no probe answer to a whole head", text);
  }
  if (probe.find("HTTP/", 1) != std::string::npos) Bad("more than one probe answer", probe);
  if (!probe.empty() && probe.find("Connection: close\r\n") == std::string::npos)
    Bad("probe answer without Connection: close", probe);
  return 0;
}
