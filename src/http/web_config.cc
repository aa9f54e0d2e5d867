#include "http/web_config.h"

#include "common/file_util.h"

#include <fstream>
#include <set>
#include <sstream>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <yaml-cpp/yaml.h>

namespace xpu::http {
namespace {

std::string Where(const std::string& origin, const YAML::Node& n) {
  return origin + ":" + std::to_string(n.Mark().line + 1);
}

Status CheckKeys(const YAML::Node& map, const std::set<std::string>& known,
                 const std::string& origin, const std::string& section) {
  if (!map.IsMap()) return Status::InvalidArgument(Where(origin, map) + ": " + section + " must be a mapping");
  for (const auto& kv : map) {
    const std::string k = kv.first.as<std::string>();
    if (known.count(k) == 0)
      return Status::InvalidArgument(Where(origin, kv.first) + ": unknown key '" +
                                     (section.empty() ? k : section + "." + k) + "'");
  }
  return Status::Ok();
}

bool Readable(const std::string& path) { return std::ifstream(path).good(); }

// Loads the certificate chain, key and CA the way the server will, so that a
// bad pair is a config error (exit 2, or a refused reload), not a late one.
Status CheckTlsFiles(const TlsConfig& tls) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return Status::IoError("cannot create a TLS context");
  auto error = [&](const std::string& what) {
    char buf[256] = "";
    if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    SSL_CTX_free(ctx);
    return Status::InvalidArgument(what + (buf[0] ? std::string(": ") + buf : ""));
  };
  if (SSL_CTX_use_certificate_chain_file(ctx, tls.cert_file.c_str()) != 1)
    return error("cert_file " + tls.cert_file + " is not a PEM certificate");
  if (SSL_CTX_use_PrivateKey_file(ctx, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    return error("key_file " + tls.key_file + " is not a PEM private key for cert_file " + tls.cert_file);
  if (SSL_CTX_check_private_key(ctx) != 1)
    return error("key_file " + tls.key_file + " does not match cert_file " + tls.cert_file);
  if (!tls.client_ca_file.empty() &&
      SSL_CTX_load_verify_locations(ctx, tls.client_ca_file.c_str(), nullptr) != 1)
    return error("client_ca_file " + tls.client_ca_file + " is not a PEM certificate bundle");
  SSL_CTX_free(ctx);
  return Status::Ok();
}

// Fingerprints the TLS files' contents, so a rotated certificate counts as a
// change even when its path does not.
Status DigestFiles(const TlsConfig& tls, std::string* out) {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  EVP_DigestInit_ex(md, EVP_sha256(), nullptr);
  for (const std::string* path : {&tls.cert_file, &tls.key_file, &tls.client_ca_file}) {
    if (path->empty()) continue;
    std::string text;
    if (Status s = ReadTextFile(*path, "TLS file", &text); !s.ok()) {
      EVP_MD_CTX_free(md);
      return s;
    }
    EVP_DigestUpdate(md, text.data(), text.size());
    EVP_DigestUpdate(md, "", 1);  // separator
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(md, digest, &len);
  EVP_MD_CTX_free(md);
  out->assign(reinterpret_cast<const char*>(digest), len);
  return Status::Ok();
}

}  // namespace

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
  try {
    YAML::Node root = YAML::Load(text);
    if (root.IsNull()) {  // an empty file: plain HTTP, no auth
      *out = cfg;
      return Status::Ok();
    }
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
      if (t["client_auth_type"]) tls.client_auth_type = t["client_auth_type"].as<std::string>();
      if (t["min_version"]) tls.min_version = t["min_version"].as<std::string>();
      if (t["max_version"]) tls.max_version = t["max_version"].as<std::string>();
      if (tls.cert_file.empty() || tls.key_file.empty())
        return Status::InvalidArgument(Where(origin, t) +
                                       ": tls_server_config needs cert_file and key_file");
      for (const std::string* f : {&tls.cert_file, &tls.key_file}) {
        if (!Readable(*f)) return Status::InvalidArgument(Where(origin, t) + ": cannot read " + *f);
      }
      static const std::set<std::string> auth_types = {
          "NoClientCert", "RequestClientCert", "RequireAnyClientCert", "VerifyClientCertIfGiven",
          "RequireAndVerifyClientCert"};
      if (auth_types.count(tls.client_auth_type) == 0)
        return Status::InvalidArgument(Where(origin, t["client_auth_type"]) +
                                       ": unknown client_auth_type '" + tls.client_auth_type + "'");
      const bool verifies = tls.client_auth_type == "VerifyClientCertIfGiven" ||
                            tls.client_auth_type == "RequireAndVerifyClientCert";
      if (verifies && tls.client_ca_file.empty())
        return Status::InvalidArgument(Where(origin, t) + ": client_auth_type " +
                                       tls.client_auth_type + " needs client_ca_file");
      if (!tls.client_ca_file.empty() && !Readable(tls.client_ca_file))
        return Status::InvalidArgument(Where(origin, t) + ": cannot read " + tls.client_ca_file);
      // Ranked once; older versions cannot be served with OpenSSL 3's defaults.
      auto rank = [](const std::string& v) {
        return v == "TLS12" ? 12 : v == "TLS13" ? 13 : v == "TLS10" || v == "TLS11" ? -1 : 0;
      };
      for (const std::string* v : {&tls.min_version, &tls.max_version}) {
        if (rank(*v) < 0)
          return Status::InvalidArgument(Where(origin, t) + ": TLS version '" + *v +
                                         "' is not supported (OpenSSL 3 refuses it); use TLS12 "
                                         "or TLS13");
        if (rank(*v) == 0)
          return Status::InvalidArgument(Where(origin, t) + ": unknown TLS version '" + *v +
                                         "' (TLS12, TLS13)");
      }
      if (rank(tls.min_version) > rank(tls.max_version))
        return Status::InvalidArgument(Where(origin, t) + ": min_version above max_version");
      if (Status s = CheckTlsFiles(tls); !s.ok())
        return Status::InvalidArgument(Where(origin, t) + ": " + s.message());
      if (Status s = DigestFiles(tls, &tls.files_digest); !s.ok())
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
            return Status::InvalidArgument(Where(origin, kv.second) + ": header value has a newline");
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
          return Status::InvalidArgument(Where(origin, kv.first) + ": bad user name '" + user + "'");
        if (hash.size() != 60 || hash[0] != '$' || hash[1] != '2' || hash[3] != '$')
          return Status::InvalidArgument(Where(origin, kv.second) + ": password of user '" + user +
                                         "' is not a bcrypt hash ($2y$...)");
        cfg->users[user] = hash;
      }
    }
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(origin + ": " + e.what());
  }
  *out = std::move(cfg);
  return Status::Ok();
}

}  // namespace xpu::http
