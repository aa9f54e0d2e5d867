#include "http/web_config.h"

#include <yaml-cpp/yaml.h>

#include <fstream>
#include <set>

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

Status ParseVersion(const YAML::Node& node, const std::string& where, TlsVersion* out) {
  const std::string v = node.as<std::string>();
  if (ParseIn(kVersionNames, v, out)) return Status::Ok();
  if (v == "TLS10" || v == "TLS11")
    return Status::InvalidArgument(where + ": TLS version '" + v +
                                   "' is not supported (OpenSSL 3 refuses it); use TLS12 or TLS13");
  return Status::InvalidArgument(where + ": unknown TLS version '" + v + "' (TLS12, TLS13)");
}

}  // namespace

const char* Name(TlsVersion v) { return NameIn(kVersionNames, v); }
const char* Name(ClientAuth a) { return NameIn(kClientAuthNames, a); }

Status WebConfig::Load(const std::string& path, std::shared_ptr<const WebConfig>* out) {
  std::string text;
  if (Status s = ReadTextFile(path, "--web.config.file", &text); !s.ok())
    return Status::InvalidArgument(s.message());
  return Parse(text, path, out);
}

Status WebConfig::Parse(const std::string& text, const std::string& origin,
                        std::shared_ptr<const WebConfig>* out) {
  auto cfg = std::make_shared<WebConfig>();
  cfg->path = origin;
  Status parsed = yaml::ParseDocument(text, origin, [&](const YAML::Node& root) {
    if (root.IsNull()) return Status::Ok();  // an empty file: plain HTTP, no auth
    if (Status s = CheckKeys(root, {"tls_server_config", "http_server_config", "basic_auth_users"},
                             origin, "");
        !s.ok())
      return s;
    if (YAML::Node t = root["tls_server_config"]; t && !t.IsNull()) {
      if (Status s = CheckKeys(t,
                               {"cert_file", "key_file", "client_ca_file", "client_auth_type",
                                "min_version", "max_version"},
                               origin, "tls_server_config");
          !s.ok())
        return s;
      TlsConfig tls;
      if (t["cert_file"]) tls.cert_file = t["cert_file"].as<std::string>();
      if (t["key_file"]) tls.key_file = t["key_file"].as<std::string>();
      if (t["client_ca_file"]) tls.client_ca_file = t["client_ca_file"].as<std::string>();
      if (YAML::Node a = t["client_auth_type"];
          a && !ParseIn(kClientAuthNames, a.as<std::string>(), &tls.client_auth))
        return Status::InvalidArgument(Where(origin, a) + ": unknown client_auth_type '" +
                                       a.as<std::string>() + "'");
      if (YAML::Node v = t["min_version"]) {
        if (Status s = ParseVersion(v, Where(origin, t), &tls.min_version); !s.ok()) return s;
      }
      if (YAML::Node v = t["max_version"]) {
        if (Status s = ParseVersion(v, Where(origin, t), &tls.max_version); !s.ok()) return s;
      }
      if (tls.cert_file.empty() || tls.key_file.empty())
        return Status::InvalidArgument(Where(origin, t) +
                                       ": tls_server_config needs cert_file and key_file");
      for (const std::string* f : {&tls.cert_file, &tls.key_file}) {
        if (!Readable(*f)) return Status::InvalidArgument(Where(origin, t) + ": cannot read " + *f);
      }
      const bool verifies = tls.client_auth == ClientAuth::kVerifyClientCertIfGiven ||
                            tls.client_auth == ClientAuth::kRequireAndVerifyClientCert;
      if (verifies && tls.client_ca_file.empty())
        return Status::InvalidArgument(Where(origin, t) + ": client_auth_type " +
                                       Name(tls.client_auth) + " needs client_ca_file");
      if (!tls.client_ca_file.empty() && !Readable(tls.client_ca_file))
        return Status::InvalidArgument(Where(origin, t) + ": cannot read " + tls.client_ca_file);
      if (tls.min_version > tls.max_version)
        return Status::InvalidArgument(Where(origin, t) + ": min_version above max_version");
      // Loads the files the way the server will, so that a bad pair is a
      // config error (exit 2, or a refused reload), not a late one.
      if (Status s = CheckTls(tls); !s.ok())
        return Status::InvalidArgument(Where(origin, t) + ": " + s.message());
      if (Status s = DigestTlsFiles(tls, &tls.files_digest); !s.ok())
        return Status::InvalidArgument(Where(origin, t) + ": " + s.message());
      cfg->tls = tls;
    }
    if (YAML::Node h = root["http_server_config"]; h && !h.IsNull()) {
      if (Status s = CheckKeys(h, {"headers", "http2"}, origin, "http_server_config"); !s.ok())
        return s;
      if (YAML::Node hs = h["headers"]; hs && !hs.IsNull()) {
        if (!hs.IsMap())
          return Status::InvalidArgument(Where(origin, hs) + ": headers must be a mapping");
        // As exporter-toolkit: only security headers may be set.
        static const std::set<std::string> allowed = {
            "Strict-Transport-Security", "X-Content-Type-Options", "X-Frame-Options",
            "X-XSS-Protection", "Content-Security-Policy"};
        for (const auto& kv : hs) {
          const std::string name = kv.first.as<std::string>();
          const std::string value = kv.second.as<std::string>();
          if (allowed.count(name) == 0)
            return Status::InvalidArgument(Where(origin, kv.first) + ": header '" + name +
                                           "' may not be set (allowed: Strict-Transport-Security, "
                                           "X-Content-Type-Options, X-Frame-Options, "
                                           "X-XSS-Protection, Content-Security-Policy)");
          if (value.find_first_of("\r\n") != std::string::npos)
            return Status::InvalidArgument(Where(origin, kv.second) +
                                           ": header value has a newline");
          cfg->headers.emplace_back(name, value);
        }
      }
    }
    if (YAML::Node u = root["basic_auth_users"]; u && !u.IsNull()) {
      if (!u.IsMap())
        return Status::InvalidArgument(Where(origin, u) + ": basic_auth_users must be a mapping");
      for (const auto& kv : u) {
        const std::string user = kv.first.as<std::string>();
        const std::string hash = kv.second.as<std::string>();
        if (user.empty() || user.find(':') != std::string::npos)
          return Status::InvalidArgument(Where(origin, kv.first) + ": bad user name '" + user +
                                         "'");
        if (hash.size() != 60 || hash[0] != '$' || hash[1] != '2' || hash[3] != '$')
          return Status::InvalidArgument(Where(origin, kv.second) + ": password of user '" + user +
                                         "' is not a bcrypt hash ($2y$...)");
        cfg->users[user] = hash;
      }
    }
    return Status::Ok();
  });
  if (parsed.ok()) *out = std::move(cfg);
  return parsed;
}

}  // namespace xpu::http
