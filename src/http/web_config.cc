#include "http/web_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include "common/file_util.h"
#include "common/yaml_util.h"
#include "http/tls.h"

namespace xpu::http {
namespace {

using yaml::CheckKeys;
using yaml::Where;

bool Readable(const std::string& path) { return std::ifstream(path).good(); }

constexpr std::pair<TlsVersion, const char*> kVersionNames[] = {{TlsVersion::kTls12, "TLS12"},
                                                                {TlsVersion::kTls13, "TLS13"}};
constexpr std::pair<ClientAuth, const char*> kClientAuthNames[] = {
    {ClientAuth::kNoClientCert, "NoClientCert"},
    {ClientAuth::kRequestClientCert, "RequestClientCert"},
    {ClientAuth::kRequireAnyClientCert, "RequireAnyClientCert"},
    {ClientAuth::kVerifyClientCertIfGiven, "VerifyClientCertIfGiven"},
    {ClientAuth::kRequireAndVerifyClientCert, "RequireAndVerifyClientCert"}};

template <typename E, size_t N>
const char* NameIn(const std::pair<E, const char*> (&table)[N], E e) {
  for (const auto& [value, name] : table)
    if (value == e) return name;
  return "?";
}

template <typename E, size_t N>
bool ParseIn(const std::pair<E, const char*> (&table)[N], const std::string& name, E* out) {
  for (const auto& [value, n] : table) {
    if (name == n) {
      *out = value;
      return true;
    }
  }
  return false;
}

// TLS10 and TLS11 are exporter-toolkit values that Debian's OpenSSL 3
// refuses to negotiate at its default security level: as a minimum they
// mean what they can (TLS 1.2 up, which docs/http-api.md says), as a
// maximum they would leave no version to serve.
Status ParseVersion(const YAML::Node& node, const std::string& where, const char* key,
                    TlsVersion* out) {
  const std::string v = node.as<std::string>();
  if (ParseIn(kVersionNames, v, out)) return Status::Ok();
  if ((v == "TLS10" || v == "TLS11") && std::string_view(key) == "min_version") {
    *out = TlsVersion::kTls12;
    return Status::Ok();
  }
  if (v == "TLS10" || v == "TLS11")
    return Status::InvalidArgument(where + ": max_version " + v +
                                   " leaves no version to serve (OpenSSL 3 refuses TLS 1.0 and "
                                   "1.1); use TLS12 or TLS13");
  return Status::InvalidArgument(where + ": unknown TLS version '" + v +
                                 "' (TLS10, TLS11, TLS12, TLS13)");
}

// exporter-toolkit joins relative file names with the config file's folder.
std::string JoinDir(const std::string& dir, const std::string& path) {
  if (path.empty() || path[0] == '/' || dir.empty()) return path;
  return dir + "/" + path;
}

std::string DirOf(const std::string& origin) {
  const size_t slash = origin.rfind('/');
  return slash == std::string::npos ? "" : origin.substr(0, slash == 0 ? 1 : slash);
}

// A list of strings (a YAML sequence of scalars); an absent or null key is
// an empty list.
Status StringList(const YAML::Node& node, const std::string& origin, const char* key,
                  std::vector<std::string>* out) {
  if (!node || node.IsNull()) return Status::Ok();
  if (!node.IsSequence())
    return Status::InvalidArgument(Where(origin, node) + ": " + key + " must be a list");
  for (const auto& item : node) {
    if (!item.IsScalar())
      return Status::InvalidArgument(Where(origin, item) + ": " + key +
                                     " must be a list of strings");
    out->push_back(item.as<std::string>());
  }
  return Status::Ok();
}

Status Bool(const YAML::Node& node, const std::string& origin, const char* key, bool* out) {
  if (!node || node.IsNull()) return Status::Ok();
  const std::string v = node.as<std::string>();
  // YAML 1.1's spellings, as Go's yaml.v2 reads a bool.
  static const std::set<std::string> yes = {"true", "True", "TRUE", "yes", "Yes", "YES",
                                            "on",   "On",   "ON",   "y",   "Y"};
  static const std::set<std::string> no = {"false", "False", "FALSE", "no", "No", "NO",
                                           "off",   "Off",   "OFF",   "n",  "N"};
  if (yes.count(v) > 0) {
    *out = true;
  } else if (no.count(v) > 0) {
    *out = false;
  } else {
    return Status::InvalidArgument(Where(origin, node) + ": " + key +
                                   " must be true or false, not '" + v + "'");
  }
  return Status::Ok();
}

// Go's time.ParseDuration ("1s", "1.5s", "100ms", "1m30s", "0"; units ns,
// us, µs, ms, s, m, h), or an integer (nanoseconds, as yaml.v2 reads a
// time.Duration). Negative and overflowing values are refused.
std::optional<std::chrono::nanoseconds> GoDuration(const std::string& text) {
  if (text.empty()) return std::nullopt;
  if (text.find_first_not_of("0123456789") == std::string::npos) {
    if (text.size() > 18) return std::nullopt;
    return std::chrono::nanoseconds(std::stoll(text));
  }
  static const std::pair<const char*, double> units[] = {
      {"ns", 1},   {"us", 1e3}, {"\u00b5s", 1e3}, {"\u03bcs", 1e3},
      {"ms", 1e6}, {"s", 1e9},  {"m", 60e9},      {"h", 3600e9}};
  double total = 0;
  size_t i = 0;
  while (i < text.size()) {
    const size_t number = text.find_first_not_of("0123456789.", i);
    if (number == i || number == std::string::npos) return std::nullopt;
    const std::string digits = text.substr(i, number - i);
    // 30 digits are beyond any duration int64 nanoseconds hold; strtod
    // never throws (std::stod would, out of range, past every handler).
    if (digits == "." || digits.size() > 30 || std::count(digits.begin(), digits.end(), '.') > 1)
      return std::nullopt;
    const double value = std::strtod(digits.c_str(), nullptr);
    const std::pair<const char*, double>* unit = nullptr;
    for (const auto& u : units) {
      const size_t n = std::char_traits<char>::length(u.first);
      // The longest unit that matches here ("ms" before "m").
      if (text.compare(number, n, u.first) == 0 &&
          (unit == nullptr || n > std::char_traits<char>::length(unit->first)))
        unit = &u;
    }
    if (unit == nullptr) return std::nullopt;
    total += value * unit->second;
    i = number + std::char_traits<char>::length(unit->first);
  }
  if (total > 9.2e18) return std::nullopt;
  return std::chrono::nanoseconds(static_cast<int64_t>(total));
}

// The file or the inline PEM of one TLS item (cert/cert_file, ...):
// at most one of the two, as exporter-toolkit documents.
Status FileOrPem(const YAML::Node& t, const std::string& origin, const std::string& dir,
                 const char* pem_key, const char* file_key, std::string* pem, std::string* file) {
  const YAML::Node p = t[pem_key];
  const YAML::Node f = t[file_key];
  if (p && !p.IsNull()) *pem = p.as<std::string>();
  if (f && !f.IsNull()) *file = JoinDir(dir, f.as<std::string>());
  if (!pem->empty() && !file->empty())
    return Status::InvalidArgument(Where(origin, p) + ": tls_server_config." + pem_key + " and " +
                                   file_key + " are both set; give one of them");
  if (!file->empty() && !Readable(*file))
    return Status::InvalidArgument(Where(origin, f) + ": cannot read " + *file + " (" + file_key +
                                   ")");
  return Status::Ok();
}

Status ParseTlsLists(const YAML::Node& t, const std::string& origin, TlsConfig* tls) {
  if (Status s = StringList(t["cipher_suites"], origin, "cipher_suites", &tls->cipher_suites);
      !s.ok())
    return s;
  for (const std::string& name : tls->cipher_suites) {
    const char* openssl = nullptr;
    if (!GoCipherSuite(name, &openssl))
      return Status::InvalidArgument(Where(origin, t["cipher_suites"]) +
                                     ": unknown cipher suite '" + name +
                                     "' (Go's names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)");
  }
  if (Status s = Bool(t["prefer_server_cipher_suites"], origin, "prefer_server_cipher_suites",
                      &tls->prefer_server_cipher_suites);
      !s.ok())
    return s;
  if (Status s =
          StringList(t["curve_preferences"], origin, "curve_preferences", &tls->curve_preferences);
      !s.ok())
    return s;
  for (const std::string& name : tls->curve_preferences) {
    if (GoCurveGroup(name) == nullptr)
      return Status::InvalidArgument(Where(origin, t["curve_preferences"]) + ": unknown curve '" +
                                     name + "' (CurveP256, CurveP384, CurveP521, X25519)");
  }
  return StringList(t["client_allowed_sans"], origin, "client_allowed_sans",
                    &tls->client_allowed_sans);
}

// The cross-key rules, as exporter-toolkit's ConfigToTLSConfig.
Status CheckTlsRules(const TlsConfig& tls, const std::string& where) {
  if (tls.cert_file.empty() && tls.cert_pem.empty())
    return Status::InvalidArgument(where + ": tls_server_config needs cert_file or cert");
  if (tls.key_file.empty() && tls.key_pem.empty())
    return Status::InvalidArgument(where + ": tls_server_config needs key_file or key");
  const bool has_ca = !tls.client_ca_file.empty() || !tls.client_ca_pem.empty();
  if (has_ca && tls.client_auth == ClientAuth::kNoClientCert)
    return Status::InvalidArgument(where +
                                   ": a client CA is set but client_auth_type is "
                                   "NoClientCert (set RequireAndVerifyClientCert)");
  if (!tls.client_allowed_sans.empty() && tls.client_auth != ClientAuth::kRequireAnyClientCert &&
      tls.client_auth != ClientAuth::kRequireAndVerifyClientCert)
    return Status::InvalidArgument(where +
                                   ": client_allowed_sans needs client_auth_type "
                                   "RequireAnyClientCert or RequireAndVerifyClientCert");
  if (tls.min_version > tls.max_version)
    return Status::InvalidArgument(where + ": min_version above max_version");
  if (!tls.cipher_suites.empty() && tls.max_version == TlsVersion::kTls12) {
    bool any12 = false;
    for (const std::string& name : tls.cipher_suites) {
      const char* openssl = nullptr;
      any12 = any12 || (GoCipherSuite(name, &openssl) && openssl != nullptr);
    }
    if (!any12)
      return Status::InvalidArgument(where +
                                     ": cipher_suites has no TLS 1.2 suite and "
                                     "max_version is TLS12: no handshake could succeed");
  }
  return Status::Ok();
}

// exporter-toolkit's TLSConfig.IsEnabled: a section naming no certificate,
// key, client CA or client_auth_type (only versions, suites or curves)
// leaves TLS off, and plain HTTP is served. Its keys and values are still
// checked, as exporter-toolkit's strict parse does.
bool TlsEnabled(const YAML::Node& t) {
  if (!t.IsMap()) return true;  // ParseTls says what is wrong with it
  for (const char* key : {"cert", "key", "client_ca", "cert_file", "key_file", "client_ca_file",
                          "client_auth_type"}) {
    const YAML::Node v = t[key];
    if (v && !v.IsNull() && !(v.IsScalar() && v.Scalar().empty())) return true;
  }
  return false;
}

Status ParseTls(const YAML::Node& t, const std::string& origin, TlsConfig* out) {
  if (Status s = CheckKeys(t,
                           {"cert", "key", "client_ca", "cert_file", "key_file", "client_ca_file",
                            "client_auth_type", "client_allowed_sans", "min_version", "max_version",
                            "cipher_suites", "prefer_server_cipher_suites", "curve_preferences"},
                           origin, "tls_server_config");
      !s.ok())
    return s;
  const std::string dir = DirOf(origin);
  TlsConfig tls;
  for (const auto& [pem_key, file_key, pem, file] :
       {std::tuple{"cert", "cert_file", &tls.cert_pem, &tls.cert_file},
        std::tuple{"key", "key_file", &tls.key_pem, &tls.key_file},
        std::tuple{"client_ca", "client_ca_file", &tls.client_ca_pem, &tls.client_ca_file}}) {
    if (Status s = FileOrPem(t, origin, dir, pem_key, file_key, pem, file); !s.ok()) return s;
  }
  if (YAML::Node a = t["client_auth_type"]; a && !a.IsNull()) {
    std::string v = a.as<std::string>();
    if (v == "RequireClientCert") v = "RequireAnyClientCert";  // exporter-toolkit's old name
    if (!v.empty() && !ParseIn(kClientAuthNames, v, &tls.client_auth))
      return Status::InvalidArgument(Where(origin, a) + ": unknown client_auth_type '" + v +
                                     "' (NoClientCert, RequestClientCert, RequireAnyClientCert, "
                                     "VerifyClientCertIfGiven, RequireAndVerifyClientCert)");
  }
  for (const auto& [key, version] :
       {std::pair{"min_version", &tls.min_version}, std::pair{"max_version", &tls.max_version}}) {
    if (YAML::Node v = t[key]; v && !v.IsNull()) {
      if (Status s = ParseVersion(v, Where(origin, v), key, version); !s.ok()) return s;
    }
  }
  if (Status s = ParseTlsLists(t, origin, &tls); !s.ok()) return s;
  if (!TlsEnabled(t)) return Status::Ok();  // plain HTTP; the values were checked
  if (Status s = CheckTlsRules(tls, Where(origin, t)); !s.ok()) return s;
  // Loads the pair the way the server will, so that a bad one is a config
  // error (exit 2, or a refused reload), not a late one.
  if (Status s = CheckTls(tls); !s.ok())
    return Status::InvalidArgument(Where(origin, t) + ": " + s.message());
  if (Status s = DigestTlsFiles(tls, &tls.files_digest); !s.ok())
    return Status::InvalidArgument(Where(origin, t) + ": " + s.message());
  *out = std::move(tls);
  return Status::Ok();
}

// As exporter-toolkit: only security headers may be set, and the two with
// an enumeration only to its values. A blank value sets nothing, as the
// format's documentation says ("Unset if blank"; its code refuses a blank
// X-Frame-Options or X-Content-Type-Options: docs/http-api.md).
Status ParseHeaders(const YAML::Node& hs, const std::string& origin, WebConfig* cfg) {
  if (!hs.IsMap())
    return Status::InvalidArgument(Where(origin, hs) + ": headers must be a mapping");
  static const std::map<std::string, std::set<std::string>> allowed = {
      {"Strict-Transport-Security", {}},
      {"X-Content-Type-Options", {"nosniff"}},
      {"X-Frame-Options", {"deny", "sameorigin"}},
      {"X-XSS-Protection", {}},
      {"Content-Security-Policy", {}}};
  for (const auto& kv : hs) {
    const std::string name = kv.first.as<std::string>();
    const std::string value = kv.second.IsNull() ? "" : kv.second.as<std::string>();
    auto it = allowed.find(name);
    if (it == allowed.end())
      return Status::InvalidArgument(Where(origin, kv.first) + ": header '" + name +
                                     "' may not be set (allowed: Strict-Transport-Security, "
                                     "X-Content-Type-Options, X-Frame-Options, "
                                     "X-XSS-Protection, Content-Security-Policy)");
    if (value.empty()) continue;
    if (!it->second.empty() && it->second.count(value) == 0) {
      std::string expected;
      for (const std::string& v : it->second) expected += (expected.empty() ? "" : " or ") + v;
      return Status::InvalidArgument(Where(origin, kv.second) + ": invalid value '" + value +
                                     "' for " + name + " (expected " + expected + ")");
    }
    if (value.find_first_of("\r\n") != std::string::npos || value.find('\0') != std::string::npos)
      return Status::InvalidArgument(Where(origin, kv.second) + ": header value has a newline");
    cfg->headers.emplace_back(name, value);
  }
  return Status::Ok();
}

Status ParseHttpServer(const YAML::Node& h, const std::string& origin, WebConfig* cfg) {
  if (Status s = CheckKeys(h, {"headers", "http2"}, origin, "http_server_config"); !s.ok())
    return s;
  if (Status s = Bool(h["http2"], origin, "http2", &cfg->http2); !s.ok()) return s;
  if (YAML::Node hs = h["headers"]; hs && !hs.IsNull()) return ParseHeaders(hs, origin, cfg);
  return Status::Ok();
}

Status ParseRateLimit(const YAML::Node& r, const std::string& origin, RateLimit* out) {
  if (Status s = CheckKeys(r, {"interval", "burst"}, origin, "rate_limit"); !s.ok()) return s;
  RateLimit limit;
  if (YAML::Node i = r["interval"]; i && !i.IsNull()) {
    const std::optional<std::chrono::nanoseconds> d = GoDuration(i.as<std::string>());
    if (!d)
      return Status::InvalidArgument(Where(origin, i) + ": rate_limit.interval '" +
                                     i.as<std::string>() +
                                     "' is not a duration (e.g. 100ms, 1s, 1m; 0 turns it off)");
    limit.interval = *d;
  }
  if (YAML::Node b = r["burst"]; b && !b.IsNull()) {
    const std::string v = b.as<std::string>();
    if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos)
      return Status::InvalidArgument(Where(origin, b) + ": rate_limit.burst '" + v +
                                     "' is not a count (0 to 999999999)");
    limit.burst = std::stoi(v);
  }
  if (limit.on() && limit.burst == 0)
    return Status::InvalidArgument(Where(origin, r) +
                                   ": rate_limit.burst is 0 with an interval: every request "
                                   "would be refused (set burst to 1 or more, or interval to 0)");
  *out = limit;
  return Status::Ok();
}

Status ParseUsers(const YAML::Node& u, const std::string& origin, WebConfig* cfg) {
  if (!u.IsMap())
    return Status::InvalidArgument(Where(origin, u) + ": basic_auth_users must be a mapping");
  for (const auto& kv : u) {
    const std::string user = kv.first.as<std::string>();
    const std::string hash = kv.second.IsNull() ? "" : kv.second.as<std::string>();
    if (user.empty() || user.find(':') != std::string::npos)
      return Status::InvalidArgument(Where(origin, kv.first) + ": bad user name '" + user + "'");
    if (hash.size() != 60 || hash[0] != '$' || hash[1] != '2' || hash[3] != '$')
      return Status::InvalidArgument(Where(origin, kv.second) + ": password of user '" + user +
                                     "' is not a bcrypt hash ($2y$...)");
    cfg->users[user] = hash;
  }
  return Status::Ok();
}

}  // namespace

const char* Name(TlsVersion v) { return NameIn(kVersionNames, v); }
const char* Name(ClientAuth a) { return NameIn(kClientAuthNames, a); }

Status WebConfig::Load(const std::string& path, std::shared_ptr<const WebConfig>* out) {
  std::string text;
  if (Status s = ReadTextFile(path, "--web.config.file", &text); !s.ok())
    return Status::InvalidArgument(s.message());
  std::shared_ptr<const WebConfig> parsed;
  if (Status s = Parse(text, path, &parsed); !s.ok()) return s;
  auto cfg = std::make_shared<WebConfig>(*parsed);
  cfg->file = path;
  *out = std::move(cfg);
  return Status::Ok();
}

Status WebConfig::Parse(const std::string& text, const std::string& origin,
                        std::shared_ptr<const WebConfig>* out) {
  auto cfg = std::make_shared<WebConfig>();
  cfg->path = origin;
  Status parsed = yaml::ParseDocument(text, origin, [&](const YAML::Node& root) {
    if (root.IsNull()) return Status::Ok();  // an empty file: plain HTTP, no auth
    if (Status s = CheckKeys(
            root, {"tls_server_config", "http_server_config", "basic_auth_users", "rate_limit"},
            origin, "");
        !s.ok())
      return s;
    if (YAML::Node t = root["tls_server_config"]; t && !t.IsNull()) {
      TlsConfig tls;
      if (Status s = ParseTls(t, origin, &tls); !s.ok()) return s;
      if (TlsEnabled(t)) cfg->tls = std::move(tls);
    }
    if (YAML::Node h = root["http_server_config"]; h && !h.IsNull()) {
      if (Status s = ParseHttpServer(h, origin, cfg.get()); !s.ok()) return s;
    }
    if (YAML::Node r = root["rate_limit"]; r && !r.IsNull()) {
      if (Status s = ParseRateLimit(r, origin, &cfg->rate_limit); !s.ok()) return s;
    }
    if (YAML::Node u = root["basic_auth_users"]; u && !u.IsNull())
      return ParseUsers(u, origin, cfg.get());
    return Status::Ok();
  });
  if (parsed.ok()) *out = std::move(cfg);
  return parsed;
}

}  // namespace xpu::http
