#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace xpu::testing {

// A fresh directory under $TMPDIR (short, so Unix socket paths fit in 108
// bytes), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

struct HttpResponse {
  long status = 0;  // 0: no response (connection failed); see `error`
  std::string body;
  std::string content_type;
  std::vector<std::string> headers;  // raw "Name: value" lines
  std::string error;
};

// One HTTP request with libcurl (a real client). Thread-compatible.
struct HttpRequest {
  std::string method = "GET";
  std::string url;
  std::string body;
  std::vector<std::string> headers;
  std::string user_password;  // "user:pass" for basic auth, empty for none
  long timeout_ms = 5000;
  bool insecure = false;  // HTTPS without verifying the server's certificate
};
HttpResponse Http(const HttpRequest& req);
HttpResponse HttpGet(const std::string& url);
HttpResponse HttpPost(const std::string& url, const std::string& body = "");
HttpResponse HttpDelete(const std::string& url);

// A TCP connection to 127.0.0.1:`port`: its descriptor, or -1.
int ConnectLoopback(int port);

// Sends `request` on the connected socket `fd` and returns what comes back
// until the peer closes it or `timeout` passes; `fd` stays open.
std::string Exchange(int fd, const std::string& request,
                     std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Sends `request` as is on a new TCP connection to 127.0.0.1:`port` and
// returns every byte received until the peer closes or `timeout` passes: for
// what a client library would hide (a body after HEAD, say).
std::string RawHttp(int port, const std::string& request,
                    std::chrono::milliseconds timeout = std::chrono::seconds(5));

// Polls `cond` every few milliseconds until it holds or `timeout` passes.
// Returns whether it held. This is waiting for a condition, not a sleep.
bool WaitFor(const std::function<bool()>& cond,
             std::chrono::milliseconds timeout = std::chrono::seconds(5));

std::string ReadFile(const std::string& path);
// Writes `content` to `path` (created or truncated); false on failure.
bool WriteFile(const std::string& path, const std::string& content);

// Inflates `in` with zlib: exactly one gzip member and nothing after it,
// else "<corrupt>".
std::string Gunzip(const std::string& in);

// Runs `command` with /bin/sh and returns what it wrote to stdout.
std::string RunCommand(const std::string& command);

}  // namespace xpu::testing
