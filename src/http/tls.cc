#include "http/tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "common/file_util.h"

namespace xpu::http {
namespace {

// Sessions cached under client-certificate verification need a context id,
// or OpenSSL refuses to resume them (TLS 1.2 clients then fail).
constexpr unsigned char kSessionIdContext[] = "xpu-exporter";

// Go's cipher-suite names (crypto/tls CipherSuites(), and the RSA key
// exchange ones older Go versions listed there) and OpenSSL's; null: a TLS
// 1.3 suite, which neither Go nor exporter-toolkit lets one configure.
constexpr std::pair<const char*, const char*> kCipherSuites[] = {
    {"TLS_AES_128_GCM_SHA256", nullptr},
    {"TLS_AES_256_GCM_SHA384", nullptr},
    {"TLS_CHACHA20_POLY1305_SHA256", nullptr},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA", "ECDHE-ECDSA-AES128-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA", "ECDHE-ECDSA-AES256-SHA"},
    {"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"},
    {"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"},
    {"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256"},
    {"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"},
    {"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"},
    {"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384", "ECDHE-RSA-AES256-GCM-SHA384"},
    {"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"},
    {"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"},
    {"TLS_RSA_WITH_AES_128_CBC_SHA", "AES128-SHA"},
    {"TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA"},
    {"TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"},
    {"TLS_RSA_WITH_AES_256_GCM_SHA384", "AES256-GCM-SHA384"},
};
// Go's default TLS 1.2 suites (no cipher_suites given): ECDHE only, AEAD
// first then CBC with SHA-1, no RSA key exchange and no DHE (Go has none),
// so that a config means what it means under exporter-toolkit: a client
// without a common curve is refused rather than served finite-field DH.
constexpr const char* kGoDefaultCiphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305:"
    "ECDHE-ECDSA-AES128-SHA:ECDHE-RSA-AES128-SHA:ECDHE-ECDSA-AES256-SHA:ECDHE-RSA-AES256-SHA";
// Go's default curves (no curve_preferences): no X448 and no finite-field
// groups, which OpenSSL would offer.
constexpr const char* kGoDefaultGroups = "X25519:P-256:P-384:P-521";
constexpr std::pair<const char*, const char*> kCurves[] = {
    {"CurveP256", "P-256"}, {"CurveP384", "P-384"}, {"CurveP521", "P-521"}, {"X25519", "X25519"}};

}  // namespace

// What a handshake needs of its config beyond what OpenSSL keeps in the
// context. Shared, never changed once published: the context's ex_data
// holds one reference (for contexts used without a TlsContextSwitch),
// TlsContextSwitch another for the context in force, and each SSL one for
// its handshake. Readers hold a reference of their own while they read, so
// the Policy's end is ordered by shared_ptr's counts, which ThreadSanitizer
// sees (not by SSL_CTX's, kept inside libcrypto, which it cannot).
struct TlsPolicy {
  std::string ciphers;  // OpenSSL's list for TLS 1.2 and below
  std::string groups;   // OpenSSL's list of groups
  bool server_order = true;
  bool verify_chain = false;  // Verify*: OpenSSL's verdict on the chain counts
  std::vector<std::string> allowed_sans;
  // The session id context of this context (kSessionIdContext, then a
  // generation per TlsContextSwitch::Load): a session made under an
  // earlier config is not resumed under a later one, whose client-auth
  // rules its client never passed.
  std::string session_context = reinterpret_cast<const char*>(kSessionIdContext);
};

namespace {

using Policy = TlsPolicy;
using PolicyRef = std::shared_ptr<const Policy>;

void FreeCtxPolicy(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<std::shared_ptr<Policy>*>(ptr);
}
void FreeSslPolicy(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
  delete static_cast<PolicyRef*>(ptr);
}

int CtxPolicyIndex() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, FreeCtxPolicy);
  return index;
}
int SslPolicyIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, FreeSslPolicy);
  return index;
}

// The context's own Policy (from the thread that built the context, or one
// that holds it for as long as it reads).
std::shared_ptr<Policy> PolicyOf(const SSL_CTX* ctx) {
  const auto* held =
      ctx == nullptr
          ? nullptr
          : static_cast<const std::shared_ptr<Policy>*>(SSL_CTX_get_ex_data(ctx, CtxPolicyIndex()));
  return held == nullptr ? nullptr : *held;
}

void SetPolicy(SSL_CTX* ctx, std::shared_ptr<Policy> policy) {
  delete static_cast<std::shared_ptr<Policy>*>(SSL_CTX_get_ex_data(ctx, CtxPolicyIndex()));
  SSL_CTX_set_ex_data(ctx, CtxPolicyIndex(), new std::shared_ptr<Policy>(std::move(policy)));
}

// The Policy of this SSL's handshake (set by the ClientHello callback on the
// worker that runs it, freed with the SSL on the same worker).
void SetSslPolicy(SSL* ssl, PolicyRef policy) {
  delete static_cast<PolicyRef*>(SSL_get_ex_data(ssl, SslPolicyIndex()));
  SSL_set_ex_data(ssl, SslPolicyIndex(), new PolicyRef(std::move(policy)));
}

void SetSessionContext(SSL_CTX* ctx, const std::string& text) {
  const std::shared_ptr<Policy> policy = PolicyOf(ctx);
  if (policy == nullptr) return;
  policy->session_context = text;
  SSL_CTX_set_session_id_context(ctx, reinterpret_cast<const unsigned char*>(text.data()),
                                 static_cast<unsigned int>(text.size()));
}

// A SAN as Go's crypto/x509 writes it (what client_allowed_sans is matched
// against): DNS names, e-mail addresses and URIs as written, IP addresses
// in net.IP's form (IPv4-mapped IPv6 as dotted IPv4).
std::string SanText(const GENERAL_NAME* name) {
  int type = 0;
  const void* value = GENERAL_NAME_get0_value(name, &type);
  const auto* str = static_cast<const ASN1_STRING*>(value);
  if (type == GEN_DNS || type == GEN_EMAIL || type == GEN_URI)
    return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(str)),
                       static_cast<size_t>(ASN1_STRING_length(str)));
  if (type != GEN_IPADD) return "";
  const unsigned char* ip = ASN1_STRING_get0_data(str);
  const int len = ASN1_STRING_length(str);
  static constexpr unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char buf[INET6_ADDRSTRLEN] = "";
  if (len == 4 || (len == 16 && std::memcmp(ip, kMapped, 12) == 0))
    inet_ntop(AF_INET, ip + (len - 4), buf, sizeof buf);
  else if (len == 16)
    inet_ntop(AF_INET6, ip, buf, sizeof buf);
  return buf;
}

bool HasAllowedSan(X509* cert, const std::vector<std::string>& allowed) {
  if (cert == nullptr) return false;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  bool found = false;
  for (int i = 0; names != nullptr && !found && i < sk_GENERAL_NAME_num(names); ++i) {
    const std::string san = SanText(sk_GENERAL_NAME_value(names, i));
    found = !san.empty() && std::find(allowed.begin(), allowed.end(), san) != allowed.end();
  }
  GENERAL_NAMES_free(names);
  return found;
}

// Every client-certificate check: the chain's verdict where the type
// verifies (else any certificate is taken), and the leaf's SANs against
// client_allowed_sans (a certificate without one fails the handshake).
int VerifyClient(int ok, X509_STORE_CTX* store) {
  auto* ssl =
      static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  if (ssl == nullptr) return ok;
  // The handshake's own (ClientHello), else the context's (no switch).
  const auto* held = static_cast<const PolicyRef*>(SSL_get_ex_data(ssl, SslPolicyIndex()));
  const PolicyRef policy = held != nullptr ? *held : PolicyOf(SSL_get_SSL_CTX(ssl));
  if (policy == nullptr) return ok;
  if (!policy->verify_chain) ok = 1;
  if (ok != 0 && !policy->allowed_sans.empty() &&
      !HasAllowedSan(X509_STORE_CTX_get0_cert(store), policy->allowed_sans)) {
    X509_STORE_CTX_set_error(store, X509_V_ERR_APPLICATION_VERIFICATION);
    return 0;
  }
  return ok;
}

// An encrypted key is refused rather than prompted for on the terminal
// (OpenSSL's default password callback reads one).
int NoPassword(char*, int, int, void*) { return 0; }

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;

BioPtr MemoryBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

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

bool GoCipherSuite(const std::string& go_name, const char** openssl) {
  for (const auto& [go, ossl] : kCipherSuites) {
    if (go_name == go) {
      *openssl = ossl;
      return true;
    }
  }
  return false;
}

const char* GoCurveGroup(const std::string& go_name) {
  for (const auto& [go, group] : kCurves)
    if (go_name == go) return group;
  return nullptr;
}

namespace {

Status UseCertificate(const TlsConfig& tls, SSL_CTX* ctx) {
  if (!tls.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx, tls.cert_file.c_str()) != 1)
      return OpenSslError("cert_file " + tls.cert_file + " is not a PEM certificate");
    return Status::Ok();
  }
  BioPtr bio = MemoryBio(tls.cert_pem);
  X509* leaf = PEM_read_bio_X509_AUX(bio.get(), nullptr, NoPassword, nullptr);
  if (leaf == nullptr || SSL_CTX_use_certificate(ctx, leaf) != 1) {
    X509_free(leaf);
    return OpenSslError("cert (inline) is not a PEM certificate");
  }
  X509_free(leaf);
  SSL_CTX_clear_chain_certs(ctx);
  while (X509* c = PEM_read_bio_X509(bio.get(), nullptr, NoPassword, nullptr)) {
    if (SSL_CTX_add0_chain_cert(ctx, c) != 1) {
      X509_free(c);
      return OpenSslError("cert (inline): a chain certificate is refused");
    }
  }
  ERR_clear_error();  // the end of the PEM text
  return Status::Ok();
}

Status UseKey(const TlsConfig& tls, SSL_CTX* ctx) {
  const std::string cert = tls.cert_file.empty() ? "cert (inline)" : "cert_file " + tls.cert_file;
  const std::string key = tls.key_file.empty() ? "key (inline)" : "key_file " + tls.key_file;
  if (!tls.key_file.empty()) {
    if (SSL_CTX_use_PrivateKey_file(ctx, tls.key_file.c_str(), SSL_FILETYPE_PEM) != 1)
      return OpenSslError(key + " is not a PEM private key for " + cert);
  } else {
    BioPtr bio = MemoryBio(tls.key_pem);
    EVP_PKEY* pkey = PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassword, nullptr);
    const bool used = pkey != nullptr && SSL_CTX_use_PrivateKey(ctx, pkey) == 1;
    EVP_PKEY_free(pkey);
    if (!used) return OpenSslError(key + " is not a PEM private key for " + cert);
  }
  if (SSL_CTX_check_private_key(ctx) != 1) return OpenSslError(key + " does not match " + cert);
  return Status::Ok();
}

Status UseClientCa(const TlsConfig& tls, SSL_CTX* ctx) {
  if (!tls.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx, tls.client_ca_file.c_str(), nullptr) != 1)
      return OpenSslError("client_ca_file " + tls.client_ca_file +
                          " is not a PEM certificate bundle");
    // The CAs' names in the CertificateRequest, as Go sends its ClientCAs'
    // subjects: a client with several certificates picks by them.
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca_file.c_str()))
      SSL_CTX_set_client_CA_list(ctx, names);
    ERR_clear_error();
    return Status::Ok();
  }
  if (!tls.client_ca_pem.empty()) {
    BioPtr bio = MemoryBio(tls.client_ca_pem);
    X509_STORE* store = SSL_CTX_get_cert_store(ctx);
    int added = 0;
    while (X509* c = PEM_read_bio_X509(bio.get(), nullptr, NoPassword, nullptr)) {
      added += X509_STORE_add_cert(store, c) == 1 ? 1 : 0;
      SSL_CTX_add_client_CA(ctx, c);
      X509_free(c);
    }
    ERR_clear_error();
    if (added == 0) return Status::InvalidArgument("client_ca (inline) has no PEM certificate");
    return Status::Ok();
  }
  // No CA, yet certificates are to be verified: the system's trust store,
  // as Go's crypto/tls uses with no ClientCAs.
  if ((tls.client_auth == ClientAuth::kVerifyClientCertIfGiven ||
       tls.client_auth == ClientAuth::kRequireAndVerifyClientCert) &&
      SSL_CTX_set_default_verify_paths(ctx) != 1)
    return OpenSslError("the system's trust store does not load");
  return Status::Ok();
}

// Cipher suites, curves and their order, checked here (a list OpenSSL
// cannot use is a config error) and kept for the ClientHello callback.
Status UsePolicy(const TlsConfig& tls, SSL_CTX* ctx) {
  auto policy = std::make_shared<Policy>();
  for (const std::string& name : tls.cipher_suites) {
    const char* openssl = nullptr;
    if (GoCipherSuite(name, &openssl) && openssl != nullptr)
      policy->ciphers += (policy->ciphers.empty() ? "" : ":") + std::string(openssl);
  }
  if (!tls.cipher_suites.empty() && policy->ciphers.empty()) {
    // Only TLS 1.3 suites: as in Go, nothing is left for TLS 1.2.
    SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  }
  if (policy->ciphers.empty()) policy->ciphers = kGoDefaultCiphers;
  if (SSL_CTX_set_cipher_list(ctx, policy->ciphers.c_str()) != 1)
    return OpenSslError("cipher_suites: OpenSSL offers none of them");
  for (const std::string& name : tls.curve_preferences) {
    if (const char* group = GoCurveGroup(name))
      policy->groups += (policy->groups.empty() ? "" : ":") + std::string(group);
  }
  if (policy->groups.empty()) policy->groups = kGoDefaultGroups;
  if (SSL_CTX_set1_groups_list(ctx, policy->groups.c_str()) != 1)
    return OpenSslError("curve_preferences: OpenSSL refuses them");
  policy->server_order = tls.prefer_server_cipher_suites;
  SSL_CTX_set_session_id_context(
      ctx, reinterpret_cast<const unsigned char*>(policy->session_context.data()),
      static_cast<unsigned int>(policy->session_context.size()));
  if (policy->server_order)
    SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
  else
    SSL_CTX_clear_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE);
  policy->verify_chain = tls.client_auth == ClientAuth::kVerifyClientCertIfGiven ||
                         tls.client_auth == ClientAuth::kRequireAndVerifyClientCert;
  policy->allowed_sans = tls.client_allowed_sans;
  SetPolicy(ctx, std::move(policy));
  return Status::Ok();
}

}  // namespace

Status ApplyTls(const TlsConfig& tls, SSL_CTX* ctx) {
  SSL_CTX_set_min_proto_version(ctx, ProtocolVersion(tls.min_version));
  SSL_CTX_set_max_proto_version(ctx, ProtocolVersion(tls.max_version));
  SSL_CTX_set_default_passwd_cb(ctx, NoPassword);
  if (Status s = UseCertificate(tls, ctx); !s.ok()) return s;
  if (Status s = UseKey(tls, ctx); !s.ok()) return s;
  if (Status s = UseClientCa(tls, ctx); !s.ok()) return s;
  if (Status s = UsePolicy(tls, ctx); !s.ok()) return s;
  switch (tls.client_auth) {
    case ClientAuth::kNoClientCert:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
      break;
    case ClientAuth::kRequestClientCert:
    case ClientAuth::kVerifyClientCertIfGiven:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, VerifyClient);
      break;
    case ClientAuth::kRequireAnyClientCert:
    case ClientAuth::kRequireAndVerifyClientCert:
      SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, VerifyClient);
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
    if (!path->empty()) out += FileSignature(*path) + ";";
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
  SetSessionContext(ctx, std::string(reinterpret_cast<const char*>(kSessionIdContext)) + "/" +
                             std::to_string(++generation_));
  PolicyRef policy = PolicyOf(ctx);
  {
    MutexLock lock(mu_);
    std::swap(current_, ctx);
    current_policy_ = std::move(policy);
  }
  // Handshakes that took the old one hold their own reference.
  if (ctx != nullptr) SSL_CTX_free(ctx);
  return Status::Ok();
}

void TlsContextSwitch::Install(SSL_CTX* civet_ctx) {
  civet_policy_ = PolicyOf(civet_ctx);
  SSL_CTX_set_client_hello_cb(civet_ctx, ClientHello, this);
  SSL_CTX_set_tlsext_servername_callback(civet_ctx, ServerName);
  SSL_CTX_set_tlsext_servername_arg(civet_ctx, this);
}

SSL_CTX* TlsContextSwitch::Take(std::shared_ptr<const TlsPolicy>* policy) {
  MutexLock lock(mu_);
  if (current_ != nullptr) SSL_CTX_up_ref(current_);
  *policy = current_policy_;
  return current_;
}

// The one place a handshake takes the context in force, once (a Load
// between two looks could mix two configs in one handshake), before any
// version, suite, curve or session is chosen.
int TlsContextSwitch::ClientHello(SSL* ssl, int* alert, void* arg) {
  // Once per connection: the callback is installed on civetweb's context
  // only, and the SSL leaves it here, so a HelloRetryRequest's second
  // ClientHello does not come back. Should it ever, the first one's
  // decisions stand (a second Take could mix two configs).
  if (SSL_get_ex_data(ssl, SslPolicyIndex()) != nullptr) return SSL_CLIENT_HELLO_SUCCESS;
  auto* self = static_cast<TlsContextSwitch*>(arg);
  PolicyRef policy;
  SSL_CTX* ctx = self->Take(&policy);
  if (ctx == nullptr) return SSL_CLIENT_HELLO_SUCCESS;
  bool ok = SSL_set_min_proto_version(ssl, SSL_CTX_get_min_proto_version(ctx)) == 1 &&
            SSL_set_max_proto_version(ssl, SSL_CTX_get_max_proto_version(ctx)) == 1;
  if (policy != nullptr) {
    // The SSL was made from civetweb's context, with the first config's
    // suites and curves; parsing a list costs about as much as the rest of
    // this callback, so only a context in force with other ones (after a
    // reload that changed them) sets its own.
    const Policy* made_from = self->civet_policy_.get();
    if (ok && (made_from == nullptr || made_from->ciphers != policy->ciphers))
      ok = SSL_set_cipher_list(ssl, policy->ciphers.c_str()) == 1;
    if (ok && (made_from == nullptr || made_from->groups != policy->groups))
      ok = SSL_set1_groups_list(ssl, policy->groups.c_str()) == 1;
    if (policy->server_order)
      SSL_set_options(ssl, SSL_OP_CIPHER_SERVER_PREFERENCE);
    else
      SSL_clear_options(ssl, SSL_OP_CIPHER_SERVER_PREFERENCE);
    // Certificate, key, CA store and verification: the context in force.
    // Sessions: before one is looked up (TLS 1.2 ids and tickets, TLS 1.3
    // PSKs), so only sessions of this context resume.
    ok = ok && SSL_set_SSL_CTX(ssl, ctx) != nullptr &&
         SSL_set_session_id_context(
             ssl, reinterpret_cast<const unsigned char*>(policy->session_context.data()),
             static_cast<unsigned int>(policy->session_context.size())) == 1;
    SSL_set_verify(ssl, SSL_CTX_get_verify_mode(ctx), SSL_CTX_get_verify_callback(ctx));
    SetSslPolicy(ssl, std::move(policy));
  }
  SSL_CTX_free(ctx);
  if (ok) return SSL_CLIENT_HELLO_SUCCESS;
  // Fail closed: OpenSSL ends the handshake with this alert (and queues its
  // own "callback failed"; civetweb clears the queue before its next call).
  ERR_clear_error();
  *alert = SSL_AD_INTERNAL_ERROR;
  return SSL_CLIENT_HELLO_ERROR;
}

// In place of civetweb's SNI callback, which would move the SSL back to its
// own context: one domain is served, the context was chosen at ClientHello.
int TlsContextSwitch::ServerName(SSL*, int*, void*) { return SSL_TLSEXT_ERR_OK; }

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
