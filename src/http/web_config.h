#pragma once

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
struct TlsConfig {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
  ClientAuth client_auth = ClientAuth::kNoClientCert;
  TlsVersion min_version = TlsVersion::kTls12;
  TlsVersion max_version = TlsVersion::kTls13;
  // SHA-256 of the certificate, key and CA files' contents when loaded: a
  // certificate rotated under the same path is a change (SIGHUP re-applies).
  std::string files_digest;
  bool operator==(const TlsConfig&) const = default;
};

// The exporter-toolkit web configuration: TLS, basic-auth users (bcrypt
// hashes) and extra response headers. Immutable once parsed.
struct WebConfig {
  std::optional<TlsConfig> tls;
  std::map<std::string, std::string> users;  // user -> bcrypt hash
  std::vector<std::pair<std::string, std::string>> headers;
  std::string path;  // where it came from, for messages

  // Parses and checks the file: files named in it must be readable, hashes
  // must be bcrypt, unknown keys are errors naming the key and line.
  static Status Load(const std::string& path, std::shared_ptr<const WebConfig>* out);
  static Status Parse(const std::string& yaml_text, const std::string& origin,
                      std::shared_ptr<const WebConfig>* out);
};

}  // namespace xpu::http
