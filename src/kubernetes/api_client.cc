#include "kubernetes/api_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>

#include "common/file_util.h"
#include "common/label.h"

namespace xpu::kubernetes {
namespace {

constexpr size_t kMaxTokenBytes = size_t{64} * 1024;
constexpr long kConnectTimeoutSeconds = 5;
// A Retry-After value longer than any date or number of seconds is not one.
constexpr size_t kMaxHeaderValue = 64;

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Transfer {
  size_t max = 0;  // Get: body cap; Stream: line cap
  bool streaming = false;
  std::string data;  // Get: the body; Stream: the line in progress
  const std::function<bool(std::string_view)>* on_line = nullptr;
  const std::function<bool()>* stop = nullptr;
  const std::function<void(long)>* on_status = nullptr;
  long status = 0;
  std::string limit_error;  // set when a cap was hit
  std::string retry_after;  // the last answer's Retry-After, as sent (at most kMaxHeaderValue)
  const std::string* user_agent = nullptr;
  // Send: the method and what it sends; null for a GET.
  const std::string* method = nullptr;
  const std::string* content_type = nullptr;
  const std::string* request_body = nullptr;
};

size_t OnData(char* ptr, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  std::string_view in(ptr, len);
  if (!t->streaming) {
    if (t->data.size() + len > t->max) {
      t->limit_error = "answer larger than " + std::to_string(t->max) + " bytes";
      return 0;  // aborts the transfer
    }
    t->data.append(in);
    return len;
  }
  // A watch: only 200 answers are events; anything else is kept as a body.
  while (!in.empty()) {
    const size_t nl = in.find('\n');
    const std::string_view part = in.substr(0, nl);
    if (t->data.size() + part.size() > t->max) {
      t->limit_error = "watch event larger than " + std::to_string(t->max) + " bytes";
      return 0;
    }
    t->data.append(part);
    if (nl == std::string_view::npos) break;
    in.remove_prefix(nl + 1);
    if (t->status == 200 && !t->data.empty() && !(*t->on_line)(t->data)) return 0;
    if (t->status == 200)
      t->data.clear();
    else
      t->data += '\n';
  }
  return len;
}

int OnProgress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  return t->stop != nullptr && (*t->stop)() ? 1 : 0;
}

size_t OnHeader(char* ptr, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  std::string_view h(ptr, size * n);
  // "HTTP/1.1 200 OK": the status, known before the body arrives.
  if (h.substr(0, 5) == "HTTP/") {
    const size_t sp = h.find(' ');
    if (sp != std::string_view::npos) t->status = std::strtol(h.data() + sp + 1, nullptr, 10);
    t->retry_after.clear();  // an interim answer's (100 Continue) is not the last one's
  } else if (constexpr std::string_view kName = "retry-after:";
             h.size() >= kName.size() &&
             std::equal(kName.begin(), kName.end(), h.begin(), [](char a, char b) {
               return a == std::tolower(static_cast<unsigned char>(b));
             })) {
    std::string_view v = h.substr(kName.size());
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() &&
           (v.back() == '\r' || v.back() == '\n' || v.back() == ' ' || v.back() == '\t'))
      v.remove_suffix(1);
    t->retry_after = v.size() <= kMaxHeaderValue ? std::string(v) : std::string();
  } else if (h == "\r\n" && t->on_status != nullptr) {  // the end of the headers
    (*t->on_status)(t->status);
  }
  return size * n;
}

}  // namespace

std::chrono::seconds ParseRetryAfter(std::string_view value,
                                     std::chrono::system_clock::time_point now) {
  if (value.empty() || value.size() > kMaxHeaderValue) return std::chrono::seconds(0);
  if (std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    // Past ten digits it is more than the cap whatever it says.
    if (value.size() > 10) return kMaxRetryAfter;
    const auto n = std::chrono::seconds(std::stoll(std::string(value)));
    return std::min(n, kMaxRetryAfter);
  }
  // An HTTP date ("Sun, 06 Nov 1994 08:49:37 GMT"; curl_getdate also takes
  // the obsolete forms RFC 9110 says to accept).
  const std::string date(value);
  const time_t at = curl_getdate(date.c_str(), nullptr);
  if (at == -1) return std::chrono::seconds(0);
  const auto wait = std::chrono::duration_cast<std::chrono::seconds>(
      std::chrono::system_clock::from_time_t(at) - now);
  return std::clamp(wait, std::chrono::seconds(0), kMaxRetryAfter);
}

std::chrono::milliseconds RetryWait(Backoff* backoff, std::chrono::seconds retry_after) {
  const std::chrono::milliseconds next = backoff->Next();
  return std::max<std::chrono::milliseconds>(next, std::min(retry_after, kMaxRetryAfter));
}

std::string Describe(const HttpResult& r, const std::string& needs) {
  if (!r.error.empty()) return r.error;
  std::string body = r.body.substr(0, 200);
  SanitizeLabelValue(&body, 200);
  std::string hint;
  if (r.status == 401) hint = " (the service-account token was refused)";
  if (r.status == 403) hint = " (RBAC must allow " + needs + ")";
  if (r.retry_after.count() > 0)
    hint += " (asked to wait " + std::to_string(r.retry_after.count()) + " s)";
  return "HTTP " + std::to_string(r.status) + hint + ": " + body;
}

ApiClient::ApiClient(std::string base_url, std::string token_file, std::string ca_file,
                     bool insecure_http, std::string user_agent)
    : base_url_(std::move(base_url)),
      token_file_(std::move(token_file)),
      ca_file_(std::move(ca_file)),
      user_agent_(std::move(user_agent)),
      insecure_http_(insecure_http) {
  GlobalInit();
}

std::string ApiClient::Escape(std::string_view s) {
  GlobalInit();
  std::unique_ptr<char, decltype(&curl_free)> e(
      curl_easy_escape(nullptr, s.data(), static_cast<int>(s.size())), &curl_free);
  return e ? std::string(e.get()) : std::string();
}

namespace {

HttpResult Perform(const std::string& url, const std::string& token_file,
                   const std::string& ca_file, bool insecure_http, std::chrono::seconds timeout,
                   Transfer* t) {
  HttpResult r;
  // The token goes only where TLS protects it, unless plain HTTP was asked
  // for by name; libcurl is held to the same schemes below.
  if (url.rfind("https://", 0) != 0 && !(insecure_http && url.rfind("http://", 0) == 0)) {
    r.error = "refusing to send the service-account token to " + url.substr(0, url.find('/', 8)) +
              ": not https:// (--kubernetes.insecure-http allows http://)";
    return r;
  }
  std::string token;
  if (!token_file.empty()) {
    Status s = ReadTextFile(token_file, "service-account token", &token, kMaxTokenBytes);
    if (!s.ok()) {
      r.error = s.message();
      return r;
    }
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' '))
      token.pop_back();
  }
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), &curl_easy_cleanup);
  if (!curl) {
    r.error = "curl_easy_init failed";
    return r;
  }
  CURL* c = curl.get();
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  const std::string auth = "Authorization: Bearer " + token;
  if (!token.empty()) headers = curl_slist_append(headers, auth.c_str());
  const std::string type = t->content_type ? "Content-Type: " + *t->content_type : "";
  if (!type.empty()) headers = curl_slist_append(headers, type.c_str());
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> hold(headers, &curl_slist_free_all);
  char err[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, err);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, kConnectTimeoutSeconds);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, static_cast<long>(timeout.count()));
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, insecure_http ? "https,http" : "https");
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
  if (t->user_agent != nullptr) curl_easy_setopt(c, CURLOPT_USERAGENT, t->user_agent->c_str());
  if (t->method != nullptr) {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, t->method->c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, t->request_body->data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(t->request_body->size()));
  }
  if (!ca_file.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, ca_file.c_str());
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &OnData);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, t);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, t);
  curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, &OnProgress);
  curl_easy_setopt(c, CURLOPT_XFERINFODATA, t);
  const CURLcode rc = curl_easy_perform(c);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  r.status = status;
  r.body = std::move(t->data);
  // The server says when to ask again where it is throttled or in trouble.
  if (status == 429 || status >= 500)
    r.retry_after = ParseRetryAfter(t->retry_after, std::chrono::system_clock::now());
  if (!t->limit_error.empty()) {
    r.error = t->limit_error;
  } else if (rc == CURLE_ABORTED_BY_CALLBACK) {
    r.error = "stopped";
  } else if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && t->streaming)) {
    r.error = err[0] != '\0' ? err : curl_easy_strerror(rc);
  }
  return r;
}

}  // namespace

HttpResult ApiClient::Get(const std::string& path, size_t max_bytes, std::chrono::seconds timeout,
                          const std::function<bool()>& stop) const {
  Transfer t;
  t.max = max_bytes;
  t.stop = &stop;
  t.user_agent = &user_agent_;
  return Keep(Perform(base_url_ + path, token_file_, ca_file_, insecure_http_, timeout, &t));
}

HttpResult ApiClient::Send(const std::string& method, const std::string& path,
                           const std::string& content_type, const std::string& body,
                           size_t max_bytes, std::chrono::seconds timeout,
                           const std::function<bool()>& stop) const {
  Transfer t;
  t.max = max_bytes;
  t.stop = &stop;
  t.method = &method;
  t.content_type = &content_type;
  t.request_body = &body;
  t.user_agent = &user_agent_;
  return Keep(Perform(base_url_ + path, token_file_, ca_file_, insecure_http_, timeout, &t));
}

HttpResult ApiClient::Stream(const std::string& path, size_t max_line, std::chrono::seconds timeout,
                             const std::function<void(long)>& on_status,
                             const std::function<bool(std::string_view)>& on_line,
                             const std::function<bool()>& stop) const {
  Transfer t;
  t.on_status = &on_status;
  t.max = max_line;
  t.streaming = true;
  t.on_line = &on_line;
  t.stop = &stop;
  t.user_agent = &user_agent_;
  return Keep(Perform(base_url_ + path, token_file_, ca_file_, insecure_http_, timeout, &t));
}

}  // namespace xpu::kubernetes
