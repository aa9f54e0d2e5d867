#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "http/web_config.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace xpu::http {

struct TlsPolicy;  // tls.cc: what a handshake needs beyond OpenSSL's context

// Go's name of a TLS cipher suite (exporter-toolkit's cipher_suites): true
// if known, with OpenSSL's name of it in *openssl, or null for TLS 1.3's
// suites (accepted, and as in Go not configurable).
bool GoCipherSuite(const std::string& go_name, const char** openssl);
// OpenSSL's group for Go's curve name (CurveP256, ...), or null.
const char* GoCurveGroup(const std::string& go_name);

// Applies a parsed TLS config to an OpenSSL server context: protocol
// versions, certificate chain and key (files or inline PEM; the key checked
// against the certificate), client CA (the system's trust store when
// verification is asked for without one, as Go does), cipher suites, curves
// and order, session id context, client-certificate verification and the
// SAN allow-list. The one place these settings meet OpenSSL: the config
// check and the server both use it. InvalidArgument names the item that
// failed and OpenSSL's reason.
Status ApplyTls(const TlsConfig& tls, SSL_CTX* ctx);

// Applies `tls` to a throwaway context: whether the server could use it.
Status CheckTls(const TlsConfig& tls);

// SHA-256 over the certificate, key and CA files' contents (raw bytes), so
// a certificate rotated under the same path counts as a change. Inline PEM
// is part of the config itself and compared with it.
Status DigestTlsFiles(const TlsConfig& tls, std::string* out);

// A cheap signature of the TLS files as they are now, no file read: for each
// of the certificate, key and CA paths, the device, inode, size and change
// times of what it leads to (symlinks followed, so a Kubernetes Secret's
// `..data` swap, a rename onto it and a write in place all change it), or
// the error of stat.
std::string TlsFilesSignature(const TlsConfig& tls);

// The TLS context every new handshake of a server takes. civetweb builds one
// SSL_CTX at start; a reload builds a new one from the re-read files (Load)
// and each later handshake moves its SSL onto it when its ClientHello
// arrives: protocol versions, cipher suites, curves and their order first
// (before any is chosen), then certificate, key, client CA and verification
// (in place of civetweb's SNI callback, which would move it back; we serve
// one domain). So certificates
// rotate without new listeners, and handshakes under way finish on the
// context they began with. Thread-safe: Load from the owner, the callbacks on
// civetweb's workers.
class TlsContextSwitch {
 public:
  TlsContextSwitch() = default;
  ~TlsContextSwitch();
  TlsContextSwitch(const TlsContextSwitch&) = delete;
  TlsContextSwitch& operator=(const TlsContextSwitch&) = delete;

  // Builds a context from `tls`; on success every later handshake uses it.
  // On error nothing changes (InvalidArgument, as ApplyTls).
  Status Load(const TlsConfig& tls);
  // Installs the callbacks on civetweb's context (from its init_ssl).
  void Install(SSL_CTX* civet_ctx);

 private:
  // A reference to the context in force (caller frees), or null, and its
  // Policy, taken together.
  SSL_CTX* Take(std::shared_ptr<const TlsPolicy>* policy);
  static int ClientHello(SSL* ssl, int* alert, void* arg);
  static int ServerName(SSL* ssl, int* alert, void* arg);

  Mutex mu_;
  SSL_CTX* current_ XPU_GUARDED_BY(mu_) = nullptr;  // one reference owned
  std::shared_ptr<const TlsPolicy> current_policy_ XPU_GUARDED_BY(mu_);
  // civetweb's context's Policy: what each SSL starts with (set by Install,
  // before any worker runs; read-only after).
  std::shared_ptr<const TlsPolicy> civet_policy_;
  // Loads so far: each context's session id context carries its number.
  // Load's callers are serialised by their owner (WebServer::cert_mu_).
  uint64_t generation_ = 0;
};

// civetweb's init_ssl callback, for a server constructed inside a
// TlsForConstruction scope on the same thread (civetweb asks for the context
// from within CivetServer's constructor and has no user pointer for it).
int CivetInitSsl(void* ssl_ctx, void* user);

// Makes `tls` the config CivetInitSsl applies on this thread while it lives,
// and `contexts` (if any) the switch it installs; error() is what went wrong
// there, if anything.
class TlsForConstruction {
 public:
  explicit TlsForConstruction(const TlsConfig* tls, TlsContextSwitch* contexts = nullptr);
  ~TlsForConstruction();
  TlsForConstruction(const TlsForConstruction&) = delete;
  TlsForConstruction& operator=(const TlsForConstruction&) = delete;
  const std::string& error() const;
};

}  // namespace xpu::http
