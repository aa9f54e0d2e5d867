#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace xpu::http {

// TLS protocol versions the exporter can serve: OpenSSL 3 at its default
// security level refuses older ones whatever is configured, so those are
// configuration errors.
enum class TlsVersion { kTls12, kTls13 };
// exporter-toolkit's client_auth_type values.
enum class ClientAuth {
  kNoClientCert,
  kRequestClientCert,
  kRequireAnyClientCert,
  kVerifyClientCertIfGiven,
  kRequireAndVerifyClientCert,
};
// The names as written in the file (TLS12, RequireAnyClientCert, ...).
const char* Name(TlsVersion v);
const char* Name(ClientAuth a);

// TLS settings of --web.config.file (Prometheus exporter-toolkit names),
// parsed and checked: the files were readable and formed a usable pair.
// Relative file names are taken from the web config file's folder, as
// exporter-toolkit does.
struct TlsConfig {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
  // Inline PEM (`cert`, `key`, `client_ca`): each in place of its file.
  std::string cert_pem;
  std::string key_pem;
  std::string client_ca_pem;
  ClientAuth client_auth = ClientAuth::kNoClientCert;
  TlsVersion min_version = TlsVersion::kTls12;
  TlsVersion max_version = TlsVersion::kTls13;
  // Go's cipher-suite names as written (TLS 1.2 and below; TLS 1.3's are
  // accepted and, as in Go, not configurable); empty: Go's defaults.
  std::vector<std::string> cipher_suites;
  bool prefer_server_cipher_suites = true;
  // Go's curve names (CurvePreferences), in order; empty: Go's defaults.
  std::vector<std::string> curve_preferences;
  // The client certificate must carry one of these SANs (DNS, IP, e-mail
  // or URI, exact match); empty: no SAN check.
  std::vector<std::string> client_allowed_sans;
  // SHA-256 of the certificate, key and CA files' contents when loaded: a
  // certificate rotated under the same path is a change (SIGHUP re-applies).
  std::string files_digest;
  bool operator==(const TlsConfig&) const = default;
};

// `rate_limit`: a token bucket over the requests (Go's rate.Limiter: one
// token every `interval`, at most `burst` saved); interval 0: off.
struct RateLimit {
  std::chrono::nanoseconds interval{0};
  int burst = 0;
  bool on() const { return interval.count() > 0; }
  bool operator==(const RateLimit&) const = default;
};

// The exporter-toolkit web configuration (its docs/web-configuration.md,
// key by key in docs/http-api.md): TLS, basic-auth users (bcrypt hashes),
// extra response headers, the rate limit and the HTTP/2 switch. Immutable
// once parsed.
struct WebConfig {
  std::optional<TlsConfig> tls;
  std::map<std::string, std::string> users;  // user -> bcrypt hash
  std::vector<std::pair<std::string, std::string>> headers;
  RateLimit rate_limit;
  // http_server_config.http2 (default true): accepted; civetweb serves
  // HTTP/1.1 only, which the server logs once at start.
  bool http2 = true;
  std::string path;  // where it came from, for messages
  std::string file;  // the file it was read from (Load): the server follows it; "" if parsed
  bool operator==(const WebConfig&) const = default;

  // Parses and checks the file: files named in it must be readable, hashes
  // must be bcrypt, unknown keys are errors naming the key and line.
  static Status Load(const std::string& path, std::shared_ptr<const WebConfig>* out);
  static Status Parse(const std::string& yaml_text, const std::string& origin,
                      std::shared_ptr<const WebConfig>* out);
};

}  // namespace xpu::http
