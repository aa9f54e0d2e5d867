#include "http/headers.h"

#include <openssl/evp.h>

#include <cctype>
#include <charconv>
#include <cstdlib>

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

namespace {

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

}  // namespace

bool PrefersOpenMetrics(std::string_view accept) {
  constexpr int kMaxRanges = 64;
  double best_om = -1, best_other = -1;
  size_t start = 0;
  for (int n = 0; n < kMaxRanges && start <= accept.size(); ++n) {
    size_t end = accept.find(',', start);
    if (end == std::string_view::npos) end = accept.size();
    std::string_view range = accept.substr(start, end - start);
    start = end + 1;
    // type/subtype *(; param=value)
    size_t semi = range.find(';');
    const std::string_view type = Trim(range.substr(0, semi));
    if (type.empty()) continue;
    double q = 1;
    std::string_view version;
    while (semi != std::string_view::npos) {
      const size_t next = range.find(';', semi + 1);
      const std::string_view param = Trim(range.substr(semi + 1, next - semi - 1));
      semi = next;
      const size_t eq = param.find('=');
      if (eq == std::string_view::npos) continue;
      const std::string_view key = Trim(param.substr(0, eq));
      const std::string_view value = Trim(param.substr(eq + 1));
      if (EqualsNoCase(key, "q")) {
        double v = 0;
        auto res = std::from_chars(value.data(), value.data() + value.size(), v);
        q = res.ec == std::errc() && v >= 0 && v <= 1 ? v : 0;
      } else if (EqualsNoCase(key, "version")) {
        version = value;
      }
    }
    if (q <= 0) continue;
    const bool om = EqualsNoCase(type, "application/openmetrics-text") &&
                    (version.empty() || version == "1.0.0" || version == "0.0.1");
    double& best = om ? best_om : best_other;
    if (q > best) best = q;
  }
  return best_om > 0 && best_om >= best_other;
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

bool ValidRequestLine(std::string_view line) {
  const size_t sp1 = line.find(' ');
  if (sp1 == 0 || sp1 == std::string_view::npos || sp1 > 16) return false;
  for (size_t i = 0; i < sp1; ++i)
    if (line[i] < 'A' || line[i] > 'Z') return false;
  const size_t sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp2 == sp1 + 1) return false;
  for (size_t i = sp1 + 1; i < sp2; ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    if (c <= 0x20 || c == 0x7f) return false;
  }
  const std::string_view version = line.substr(sp2 + 1);
  return version == "HTTP/1.1" || version == "HTTP/1.0";
}

}  // namespace xpu::http
