#include "test_util.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace xpu::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/xpu-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

namespace {

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

size_t AppendHeader(char* data, size_t size, size_t n, void* out) {
  std::string line(data, size * n);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  if (!line.empty()) static_cast<std::vector<std::string>*>(out)->push_back(line);
  return size * n;
}

// What a failed request did, and when (ms from its start): curl's own
// steps and the TLS records it sent and read, for the failure's message.
// The first 3 KiB and the last 1-2 KiB are kept: a large body's records
// would push the failure itself out.
struct Timeline {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::string text;
  std::string tail;
  bool cut = false;
  std::string Text() const { return cut ? text + "\n  ..." + tail : text; }
};

int Record(CURL* /*curl*/, curl_infotype type, char* data, size_t size, void* out) {
  auto* t = static_cast<Timeline*>(out);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t->start)
                      .count();
  std::string what;
  if (type == CURLINFO_TEXT) {
    what.assign(data, std::min<size_t>(size, 72));
    while (!what.empty() && (what.back() == '\n' || what.back() == '\r')) what.pop_back();
  } else if (type == CURLINFO_SSL_DATA_OUT || type == CURLINFO_SSL_DATA_IN) {
    what = (type == CURLINFO_SSL_DATA_OUT ? "tls out " : "tls in ") + std::to_string(size);
  } else if (type == CURLINFO_HEADER_OUT) {
    what = "head out";
  } else {
    return 0;
  }
  std::string line = "\n  " + std::to_string(ms) + " ms: " + what;
  if (!t->cut && t->text.size() + line.size() <= 3072) {
    t->text += line;
  } else {
    t->cut = true;
    t->tail += line;
    if (t->tail.size() > 2048) {  // from the first whole line of its last 1 KiB
      t->tail.erase(0, t->tail.find('\n', t->tail.size() - 1024));
    }
  }
  return 0;
}

}  // namespace

HttpResponse Http(const HttpRequest& req) {
  static const bool init = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
  (void)init;
  HttpResponse resp;
  CURL* curl = curl_easy_init();
  curl_slist* headers = nullptr;
  for (const auto& h : req.headers) headers = curl_slist_append(headers, h.c_str());
  curl_easy_setopt(curl, CURLOPT_URL, req.url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, req.method.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, req.timeout_ms);
  if (req.insecure) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }
  if (req.method == "POST" || !req.body.empty()) {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, req.body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE, static_cast<long>(req.body.size()));
  }
  if (req.method == "HEAD") curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  if (!req.user_password.empty()) {
    curl_easy_setopt(curl, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
    curl_easy_setopt(curl, CURLOPT_USERPWD, req.user_password.c_str());
  }
  if (headers) curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &resp.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, AppendHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &resp.headers);
  char detail[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, detail);
  Timeline timeline;
  curl_easy_setopt(curl, CURLOPT_DEBUGFUNCTION, Record);
  curl_easy_setopt(curl, CURLOPT_DEBUGDATA, &timeline);
  curl_easy_setopt(curl, CURLOPT_VERBOSE, 1L);
  CURLcode rc = curl_easy_perform(curl);
  if (rc == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp.status);
    char* ct = nullptr;
    curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &ct);
    if (ct) resp.content_type = ct;
  } else {
    // Where it failed: the TCP connect's end (0: never), from the start.
    curl_off_t connected_us = 0;
    curl_easy_getinfo(curl, CURLINFO_CONNECT_TIME_T, &connected_us);
    resp.error = std::string(curl_easy_strerror(rc)) + " (" + detail + "; connected at " +
                 std::to_string(connected_us / 1000) + " ms)" + timeline.Text();
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return resp;
}

HttpResponse HttpGet(const std::string& url) { return Http({"GET", url, "", {}, "", 5000}); }
HttpResponse HttpPost(const std::string& url, const std::string& body) {
  return Http({"POST", url, body, {"Content-Type: application/json"}, "", 5000});
}
HttpResponse HttpDelete(const std::string& url) { return Http({"DELETE", url, "", {}, "", 5000}); }

bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  out.close();
  return static_cast<bool>(out);
}

int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

std::string Exchange(int fd, const std::string& request, std::chrono::milliseconds timeout) {
  std::string out;
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(request.size())) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[65536];
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  return out;
}

std::string RawHttp(int port, const std::string& request, std::chrono::milliseconds timeout) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return {};
  std::string out = Exchange(fd, request, timeout);
  ::close(fd);
  return out;
}

std::string RunCommand(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

std::string Gunzip(const std::string& in) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 16) != Z_OK) return "<init>";
  std::string out;
  char buf[1 << 16];
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof buf;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof buf - zs.avail_out);
  }
  const bool whole = rc == Z_STREAM_END && zs.avail_in == 0;  // one member, nothing after
  inflateEnd(&zs);
  return whole ? out : "<corrupt>";
}

}  // namespace xpu::testing
