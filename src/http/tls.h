#pragma once

#include <string>

#include "common/status.h"
#include "http/web_config.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace xpu::http {

// Applies a parsed TLS config to an OpenSSL server context: protocol
// versions, certificate chain, key (checked against the certificate), client
// CA, session id context and client-certificate verification. The one place
// these settings meet OpenSSL: the config check and the server both use it.
// InvalidArgument names the file that failed and OpenSSL's reason.
Status ApplyTls(const TlsConfig& tls, SSL_CTX* ctx);

// Applies `tls` to a throwaway context: whether the server could use it.
Status CheckTls(const TlsConfig& tls);

// SHA-256 over the certificate, key and CA files' contents (raw bytes), so
// a certificate rotated under the same path counts as a change.
Status DigestTlsFiles(const TlsConfig& tls, std::string* out);

// civetweb's init_ssl callback, for a server constructed inside a
// TlsForConstruction scope on the same thread (civetweb asks for the context
// from within CivetServer's constructor and has no user pointer for it).
int CivetInitSsl(void* ssl_ctx, void* user);

// Makes `tls` the config CivetInitSsl applies on this thread while it lives;
// error() is what went wrong there, if anything.
class TlsForConstruction {
 public:
  explicit TlsForConstruction(const TlsConfig* tls);
  ~TlsForConstruction();
  TlsForConstruction(const TlsForConstruction&) = delete;
  TlsForConstruction& operator=(const TlsForConstruction&) = delete;
  const std::string& error() const;
};

}  // namespace xpu::http
