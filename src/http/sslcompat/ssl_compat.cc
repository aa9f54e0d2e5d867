// Debian 12's civetweb 1.15 loads OpenSSL with dlopen("libssl.so") and looks
// up SSL_get_peer_certificate, an OpenSSL 1.1 function that OpenSSL 3 only
// has as a macro (for SSL_get1_peer_certificate). dlsym returns NULL and
// civetweb calls it after every TLS handshake: a segfault. This tiny library
// carries the SONAME "libssl.so", depends on the real libssl.so.3 and adds the
// missing function. xpu-exporter links it, so when civetweb asks for
// "libssl.so" the dynamic loader hands back this already-loaded library, and
// dlsym finds every other SSL function in its dependency, the real libssl.
// See docs/http-api.md ("TLS").
#include <openssl/ssl.h>

#undef SSL_get_peer_certificate

extern "C" {

__attribute__((visibility("default"))) X509* SSL_get_peer_certificate(const SSL* s) {
  return SSL_get1_peer_certificate(s);  // same contract: a new reference
}

// Referenced by the exporter so the linker keeps this library as a dependency.
__attribute__((visibility("default"))) int xpu_ssl_compat_present(void) { return 1; }

}  // extern "C"
