#include "http/headers.h"

#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <tuple>

namespace xpu::http {

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

std::string_view Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

// A q parameter's value: wholly a number in [0, 1], else 0 (refused).
double QValue(std::string_view value) {
  double v = 0;
  const auto res = std::from_chars(value.data(), value.data() + value.size(), v);
  const bool whole = res.ec == std::errc() && res.ptr == value.data() + value.size();
  return whole && v >= 0 && v <= 1 ? v : 0;
}

ContentCoding NegotiateContentCoding(std::string_view accept_encoding) {
  constexpr int kMaxEntries = 64;
  double q_gzip = -1, q_zstd = -1, q_identity = -1, q_any = -1;
  size_t start = 0;
  for (int n = 0; n < kMaxEntries && start <= accept_encoding.size(); ++n) {
    size_t end = accept_encoding.find(',', start);
    if (end == std::string_view::npos) end = accept_encoding.size();
    const std::string_view entry = accept_encoding.substr(start, end - start);
    start = end + 1;
    const size_t semi = entry.find(';');
    const std::string_view name = Trim(entry.substr(0, semi));
    if (name.empty()) continue;
    // The first q parameter counts, wherever it stands; a value that is
    // not wholly a number in [0, 1] refuses.
    double q = 1;
    for (size_t at = semi; at != std::string_view::npos;) {
      const size_t next = entry.find(';', at + 1);
      const std::string_view param = Trim(entry.substr(at + 1, next - at - 1));
      at = next;
      const size_t eq = param.find('=');
      if (eq == std::string_view::npos || !EqualsNoCase(Trim(param.substr(0, eq)), "q")) continue;
      const std::string_view value = Trim(param.substr(eq + 1));
      q = QValue(value);
      break;
    }
    double* slot = EqualsNoCase(name, "gzip") || EqualsNoCase(name, "x-gzip") ? &q_gzip
                   : EqualsNoCase(name, "zstd")                               ? &q_zstd
                   : EqualsNoCase(name, "identity")                           ? &q_identity
                   : name == "*"                                              ? &q_any
                                                                              : nullptr;
    if (slot != nullptr && *slot < 0) *slot = q;  // the first entry for a name counts
  }
  if (q_gzip < 0) q_gzip = q_any;
  if (q_zstd < 0) q_zstd = q_any;
  const double best = std::max(q_gzip, q_zstd);
  if (best <= 0 || q_identity > best) return ContentCoding::kIdentity;
  return q_zstd >= q_gzip ? ContentCoding::kZstd : ContentCoding::kGzip;
}

std::string Base64Decode(const std::string& in) {
  if (in.empty() || in.size() % 4 != 0 || in.size() > 4096) return {};
  std::string out(in.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(in.data()),
                                static_cast<int>(in.size()));
  if (n < 0) return {};
  size_t len = static_cast<size_t>(n);
  if (in.size() >= 1 && in[in.size() - 1] == '=') --len;  // EVP_DecodeBlock keeps padding bytes
  if (in.size() >= 2 && in[in.size() - 2] == '=') --len;
  out.resize(len);
  return out;
}

bool ParseBasicAuth(const std::string& authorization, std::string* user, std::string* password) {
  if (authorization.rfind("Basic ", 0) != 0) return false;
  const std::string decoded = Base64Decode(authorization.substr(6));
  const size_t colon = decoded.find(':');
  if (colon == std::string::npos) return false;
  *user = decoded.substr(0, colon);
  *password = decoded.substr(colon + 1);
  return true;
}

const char* ReasonPhrase(int status) {
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
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

}  // namespace xpu::http
