#include "http/tls.h"

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <sys/stat.h>

#include <cerrno>
#include <memory>

#include "common/file_util.h"

namespace xpu::http {
namespace {

// Sessions cached under client-certificate verification need a context id,
// or OpenSSL refuses to resume them (TLS 1.2 clients then fail).
constexpr unsigned char kSessionIdContext[] = "xpu-exporter";

// Accepts any client certificate (RequestClientCert, RequireAnyClientCert).
int AcceptAnyCert(int, X509_STORE_CTX*) { return 1; }

int ProtocolVersion(TlsVersion v) {
  switch (v) {
    case TlsVersion::kTls12:
      return TLS1_2_VERSION;
    case TlsVersion::kTls13:
      return TLS1_3_VERSION;
  }
  return TLS1_3_VERSION;
}

Status OpenSslError(const std::string& what) {
  char buf[256] = "";
  if (unsigned long e = ERR_get_error()) ERR_error_string_n(e, buf, sizeof buf);
  ERR_clear_error();
  return Status::InvalidArgument(what + (buf[0] ? std::string(": ") + buf : ""));
}

// The config CivetInitSsl applies: set by TlsForConstruction on this thread.
thread_local const TlsConfig* g_tls = nullptr;
thread_local TlsContextSwitch* g_contexts = nullptr;
thread_local std::string g_tls_error;

}  // namespace

Status ApplyTls(const TlsConfig& tls, SSL_CTX* ctx) {
  SSL_CTX_set_min_proto_version(ctx, ProtocolVersion(tls.min_version));
  SSL_CTX_set_max_proto_version(ctx, ProtocolVersion(tls.max_version));
  if (SSL_CTX_use_certificate_chain_file(ctx, tls.cert_file.c_str()) != 1)
    return OpenSslError("cert_file " + tls.cert_file + " is not a PEM certificate");
  if (SSL_CTX_use_PrivateKey_file(ctx, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
    return OpenSslError("key_file " + tls.key_file + " is not a PEM private key for cert_file " +
                        tls.cert_file);
  if (SSL_CTX_check_private_key(ctx) != 1)
    return OpenSslError("key_file " + tls.key_file + " does not match cert_file " + tls.cert_file);
  if (!tls.client_ca_file.empty() &&
      SSL_CTX_load_verify_locations(ctx, tls.client_ca_file.c_str(), nullptr) != 1)
    return OpenSslError("client_ca_file " + tls.client_ca_file +
                        " is not a PEM certificate bundle");
  SSL_CTX_set_session_id_context(ctx, kSessionIdContext, sizeof kSessionIdContext - 1);
  switch (tls.client_auth) {
    case ClientAuth::kNoClientCert:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
      break;
    case ClientAuth::kRequestClientCert:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, AcceptAnyCert);
      break;
    case ClientAuth::kRequireAnyClientCert:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, AcceptAnyCert);
      break;
    case ClientAuth::kVerifyClientCertIfGiven:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
      break;
    case ClientAuth::kRequireAndVerifyClientCert:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
      break;
  }
  return Status::Ok();
}

Status CheckTls(const TlsConfig& tls) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_server_method()),
                                                        SSL_CTX_free);
  if (!ctx) return Status::IoError("cannot create a TLS context");
  return ApplyTls(tls, ctx.get());
}

Status DigestTlsFiles(const TlsConfig& tls, std::string* out) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  EVP_DigestInit_ex(md.get(), EVP_sha256(), nullptr);
  for (const std::string* path : {&tls.cert_file, &tls.key_file, &tls.client_ca_file}) {
    if (path->empty()) continue;
    std::string text;
    if (Status s = ReadTextFile(*path, "TLS file", &text); !s.ok()) return s;
    EVP_DigestUpdate(md.get(), text.data(), text.size());
    EVP_DigestUpdate(md.get(), "", 1);  // separator
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(md.get(), digest, &len);
  out->assign(reinterpret_cast<const char*>(digest), len);
  return Status::Ok();
}

std::string TlsFilesSignature(const TlsConfig& tls) {
  std::string out;
  for (const std::string* path : {&tls.cert_file, &tls.key_file, &tls.client_ca_file}) {
    if (path->empty()) continue;
    struct stat st {};
    if (stat(path->c_str(), &st) != 0) {
      out += "!" + std::to_string(errno) + ";";
      continue;
    }
    for (const long long v :
         {static_cast<long long>(st.st_dev), static_cast<long long>(st.st_ino),
          static_cast<long long>(st.st_size), static_cast<long long>(st.st_mtim.tv_sec),
          static_cast<long long>(st.st_mtim.tv_nsec), static_cast<long long>(st.st_ctim.tv_sec),
          static_cast<long long>(st.st_ctim.tv_nsec)})
      out += std::to_string(v) + ",";
    out += ";";
  }
  return out;
}

TlsContextSwitch::~TlsContextSwitch() {
  if (current_ != nullptr) SSL_CTX_free(current_);
}

Status TlsContextSwitch::Load(const TlsConfig& tls) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  if (ctx == nullptr) return Status::IoError("cannot create a TLS context");
  if (Status s = ApplyTls(tls, ctx); !s.ok()) {
    SSL_CTX_free(ctx);
    return s;
  }
  {
    MutexLock lock(mu_);
    std::swap(current_, ctx);
  }
  // Handshakes that took the old one hold their own reference.
  if (ctx != nullptr) SSL_CTX_free(ctx);
  return Status::Ok();
}

void TlsContextSwitch::Install(SSL_CTX* civet_ctx) {
  SSL_CTX_set_client_hello_cb(civet_ctx, ClientHello, this);
  SSL_CTX_set_tlsext_servername_callback(civet_ctx, ServerName);
  SSL_CTX_set_tlsext_servername_arg(civet_ctx, this);
}

SSL_CTX* TlsContextSwitch::Take() {
  MutexLock lock(mu_);
  if (current_ != nullptr) SSL_CTX_up_ref(current_);
  return current_;
}

int TlsContextSwitch::ClientHello(SSL* ssl, int*, void* arg) {
  SSL_CTX* ctx = static_cast<TlsContextSwitch*>(arg)->Take();
  if (ctx == nullptr) return SSL_CLIENT_HELLO_SUCCESS;
  SSL_set_min_proto_version(ssl, SSL_CTX_get_min_proto_version(ctx));
  SSL_set_max_proto_version(ssl, SSL_CTX_get_max_proto_version(ctx));
  SSL_CTX_free(ctx);
  return SSL_CLIENT_HELLO_SUCCESS;
}

int TlsContextSwitch::ServerName(SSL* ssl, int*, void* arg) {
  SSL_CTX* ctx = static_cast<TlsContextSwitch*>(arg)->Take();
  if (ctx == nullptr) return SSL_TLSEXT_ERR_OK;
  SSL_set_SSL_CTX(ssl, ctx);
  SSL_set_verify(ssl, SSL_CTX_get_verify_mode(ctx), SSL_CTX_get_verify_callback(ctx));
  SSL_CTX_free(ctx);
  return SSL_TLSEXT_ERR_OK;
}

// Returning 1 tells civetweb not to load certificates itself.
int CivetInitSsl(void* ssl_ctx, void*) {
  if (g_tls == nullptr) return -1;
  auto* ctx = static_cast<SSL_CTX*>(ssl_ctx);
  Status s = ApplyTls(*g_tls, ctx);
  if (!s.ok()) {
    g_tls_error = s.message();
    return -1;
  }
  if (g_contexts != nullptr) g_contexts->Install(ctx);
  return 1;
}

TlsForConstruction::TlsForConstruction(const TlsConfig* tls, TlsContextSwitch* contexts) {
  g_tls = tls;
  g_contexts = contexts;
  g_tls_error.clear();
}

TlsForConstruction::~TlsForConstruction() {
  g_tls = nullptr;
  g_contexts = nullptr;
}

const std::string& TlsForConstruction::error() const { return g_tls_error; }

}  // namespace xpu::http
