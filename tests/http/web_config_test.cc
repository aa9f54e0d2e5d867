// exporter-toolkit's web configuration, key by key (issue 36): each key
// accepted as that format writes it, refused with one line naming file, line
// and key where it calls a value invalid, and its effect seen on a real
// OpenSSL handshake in memory (server context from ApplyTls, an OpenSSL
// client) or on the parsed values. The end-to-end checks with openssl
// s_client and curl are in tests/e2e/web_config_test.sh.
#include "http/web_config.h"

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "http/rate_limit.h"
#include "http/tls.h"
#include "support/test_util.h"

namespace xpu::http {
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A YAML block scalar holding `text`, indented for a key at two spaces.
std::string Block(const std::string& text) {
  std::string out = "|\n";
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) out += "    " + line + "\n";
  return out;
}

class WebConfigTest : public ::testing::Test {
 protected:
  // One RSA server pair and EC client certificates with SANs, made once.
  static void SetUpTestSuite() {
    dir_ = new xpu::testing::TempDir();
    const std::string d = dir_->path();
    auto run = [](const std::string& cmd) {
      ASSERT_EQ(std::system((cmd + " 2>/dev/null").c_str()), 0) << cmd;
    };
    run("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -keyout " + d +
        "/srv.key -out " + d + "/srv.crt");
    for (const auto& [name, san] :
         {std::pair{"dns", "DNS:scraper.example"}, std::pair{"ip", "IP:10.1.2.3"},
          std::pair{"ip6", "IP:fd00::7"}, std::pair{"uri", "URI:spiffe://cluster/sa/prometheus"},
          std::pair{"mail", "email:ops@example.com"}, std::pair{"other", "DNS:other.example"}}) {
      run(std::string(
              "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
              "-subj /CN=client -addext subjectAltName=") +
          san + " -keyout " + d + "/" + name + ".key -out " + d + "/" + name + ".crt");
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string F(const std::string& name) { return dir_->File(name); }

  // A web config whose tls_server_config is the server pair plus `extra`
  // lines (two-space indented); `rest` is more top-level text.
  static Status Tls(const std::string& extra, std::shared_ptr<const WebConfig>* out,
                    const std::string& rest = "") {
    return WebConfig::Parse("tls_server_config:\n  cert_file: " + F("srv.crt") +
                                "\n  key_file: " + F("srv.key") + "\n" + extra + rest,
                            "web.yml", out);
  }
  static std::shared_ptr<const WebConfig> TlsOk(const std::string& extra) {
    std::shared_ptr<const WebConfig> cfg;
    const Status s = Tls(extra, &cfg);
    EXPECT_TRUE(s.ok()) << s.message();
    return cfg;
  }
  static std::string Error(const std::string& yaml) {
    std::shared_ptr<const WebConfig> cfg;
    const Status s = WebConfig::Parse(yaml, "web.yml", &cfg);
    EXPECT_FALSE(s.ok()) << yaml;
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << "one line: " << s.message();
    return s.message();
  }
  static std::string TlsError(const std::string& extra) {
    return Error("tls_server_config:\n  cert_file: " + F("srv.crt") +
                 "\n  key_file: " + F("srv.key") + "\n" + extra);
  }

  // A client handshake, in memory, against a server context built from
  // `cfg` by ApplyTls. `client` sets up the client's context. Returns
  // whether both ends finished it.
  template <typename ClientSetup>
  static bool Handshake(const WebConfig& cfg, ClientSetup client, std::string* cipher = nullptr) {
    SSL_CTX* sctx = SSL_CTX_new(TLS_server_method());
    SSL_CTX* cctx = SSL_CTX_new(TLS_client_method());
    EXPECT_TRUE(ApplyTls(*cfg.tls, sctx).ok());
    SSL_CTX_set_verify(cctx, SSL_VERIFY_NONE, nullptr);
    client(cctx);
    SSL* s = SSL_new(sctx);
    SSL* c = SSL_new(cctx);
    BIO* sb = nullptr;
    BIO* cb = nullptr;
    BIO_new_bio_pair(&sb, 0, &cb, 0);
    SSL_set_bio(s, sb, sb);
    SSL_set_bio(c, cb, cb);
    SSL_set_accept_state(s);
    SSL_set_connect_state(c);
    bool done = false;
    bool failed = false;
    for (int i = 0; i < 50 && !done && !failed; ++i) {
      const int rc = SSL_do_handshake(c);
      const int rs = SSL_do_handshake(s);
      const auto stuck = [](SSL* ssl, int r) {
        const int e = SSL_get_error(ssl, r);
        return r != 1 && e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE;
      };
      failed = stuck(c, rc) || stuck(s, rs);
      // TLS 1.3: the server judges the client's certificate after the
      // client's Finished; a read makes the client see the verdict.
      done = rc == 1 && rs == 1;
    }
    if (done) {
      // The server's verdict reaches a TLS 1.3 client with its next read.
      char byte = 0;
      SSL_write(s, "x", 1);
      done = SSL_read(c, &byte, 1) == 1;
      if (cipher != nullptr) *cipher = SSL_CIPHER_get_name(SSL_get_current_cipher(c));
    }
    SSL_free(s);
    SSL_free(c);
    SSL_CTX_free(sctx);
    SSL_CTX_free(cctx);
    ERR_clear_error();
    return done;
  }
  static auto WithCert(const std::string& name) {
    return [name](SSL_CTX* c) {
      ASSERT_EQ(SSL_CTX_use_certificate_file(c, F(name + ".crt").c_str(), SSL_FILETYPE_PEM), 1);
      ASSERT_EQ(SSL_CTX_use_PrivateKey_file(c, F(name + ".key").c_str(), SSL_FILETYPE_PEM), 1);
    };
  }

  static xpu::testing::TempDir* dir_;
};
xpu::testing::TempDir* WebConfigTest::dir_ = nullptr;

TEST_F(WebConfigTest, InlinePemIsServedLikeTheFiles) {
  std::shared_ptr<const WebConfig> cfg;
  const Status s = WebConfig::Parse("tls_server_config:\n  cert: " + Block(Slurp(F("srv.crt"))) +
                                        "  key: " + Block(Slurp(F("srv.key"))) +
                                        "  client_ca: " + Block(Slurp(F("dns.crt"))) +
                                        "  client_auth_type: RequireAndVerifyClientCert\n",
                                    "web.yml", &cfg);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_TRUE(cfg->tls->cert_file.empty());
  // The certificate served is the inline one.
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  ASSERT_TRUE(ApplyTls(*cfg->tls, ctx).ok());
  BIO* bio = BIO_new_file(F("srv.crt").c_str(), "r");
  X509* want = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
  EXPECT_EQ(X509_cmp(SSL_CTX_get0_certificate(ctx), want), 0);
  X509_free(want);
  BIO_free(bio);
  SSL_CTX_free(ctx);
  // The inline CA verifies: its own certificate passes, another does not.
  EXPECT_TRUE(Handshake(*cfg, WithCert("dns")));
  EXPECT_FALSE(Handshake(*cfg, WithCert("ip")));
  EXPECT_FALSE(Handshake(*cfg, [](SSL_CTX*) {}));
}

TEST_F(WebConfigTest, InlineAndFileOfOneItemAreExclusiveAndEachIsNeeded) {
  EXPECT_NE(TlsError("  cert: " + Block(Slurp(F("srv.crt"))))
                .find("web.yml:4: tls_server_config.cert and cert_file are both set"),
            std::string::npos);
  EXPECT_NE(Error("tls_server_config:\n  cert_file: " + F("srv.crt") + "\n")
                .find("needs key_file or key"),
            std::string::npos);
  EXPECT_NE(Error("tls_server_config:\n  key_file: " + F("srv.key") + "\n")
                .find("needs cert_file or cert"),
            std::string::npos);
  EXPECT_NE(Error("tls_server_config:\n  cert: not pem\n  key_file: " + F("srv.key") + "\n")
                .find("cert (inline) is not a PEM certificate"),
            std::string::npos);
  EXPECT_NE(Error("tls_server_config:\n  cert_file: " + F("srv.crt") +
                  "\n  key: " + Block(Slurp(F("dns.key"))))
                .find("key (inline)"),
            std::string::npos);
  EXPECT_NE(TlsError("  client_auth_type: RequireAndVerifyClientCert\n  client_ca: nothing\n")
                .find("client_ca (inline) has no PEM certificate"),
            std::string::npos);
}

TEST_F(WebConfigTest, RelativeFilesAreTakenFromTheConfigFilesFolder) {
  std::ofstream(F("web.yml")) << "tls_server_config:\n  cert_file: srv.crt\n  key_file: srv.key\n";
  std::shared_ptr<const WebConfig> cfg;
  const Status s = WebConfig::Load(F("web.yml"), &cfg);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(cfg->tls->cert_file, F("srv.crt"));
  EXPECT_EQ(cfg->tls->key_file, F("srv.key"));
}

TEST_F(WebConfigTest, CipherSuitesAreGoNamesServedInTheServersOrder) {
  auto cfg = TlsOk(
      "  max_version: TLS12\n  cipher_suites:\n    - TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384\n"
      "    - TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256\n");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->tls->cipher_suites.size(), 2u);
  EXPECT_TRUE(cfg->tls->prefer_server_cipher_suites);
  // A suite outside the list is refused, one inside served.
  EXPECT_FALSE(Handshake(
      *cfg, [](SSL_CTX* c) { SSL_CTX_set_cipher_list(c, "ECDHE-RSA-CHACHA20-POLY1305"); }));
  EXPECT_TRUE(Handshake(
      *cfg, [](SSL_CTX* c) { SSL_CTX_set_cipher_list(c, "ECDHE-RSA-AES128-GCM-SHA256"); }));
  // The server's order wins over the client's, unless told otherwise.
  const auto chosen = [](const WebConfig& w) {
    std::string name;
    EXPECT_TRUE(Handshake(
        w,
        [](SSL_CTX* c) {
          SSL_CTX_set_max_proto_version(c, TLS1_2_VERSION);
          SSL_CTX_set_cipher_list(c, "ECDHE-RSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384");
        },
        &name));
    return name;
  };
  EXPECT_EQ(chosen(*cfg), "ECDHE-RSA-AES256-GCM-SHA384");
  auto client_order = TlsOk(
      "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384, "
      "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]\n"
      "  prefer_server_cipher_suites: false\n");
  ASSERT_TRUE(client_order);
  EXPECT_FALSE(client_order->tls->prefer_server_cipher_suites);
  EXPECT_EQ(chosen(*client_order), "ECDHE-RSA-AES128-GCM-SHA256");
}

TEST_F(WebConfigTest, WithoutCipherSuitesGosDefaultsAreServed) {
  auto cfg = TlsOk("");
  ASSERT_TRUE(cfg);
  // Go offers no finite-field DH and, by default, no RSA key exchange.
  for (const char* outside : {"DHE-RSA-AES128-GCM-SHA256", "AES128-GCM-SHA256"}) {
    EXPECT_FALSE(Handshake(*cfg, [outside](SSL_CTX* c) {
      SSL_CTX_set_max_proto_version(c, TLS1_2_VERSION);
      SSL_CTX_set_cipher_list(c, outside);
    })) << outside;
  }
  EXPECT_TRUE(Handshake(*cfg, [](SSL_CTX* c) {
    SSL_CTX_set_max_proto_version(c, TLS1_2_VERSION);
    SSL_CTX_set_cipher_list(c, "ECDHE-RSA-CHACHA20-POLY1305");
  }));
}

TEST_F(WebConfigTest, CipherSuiteNamesOutsideGosListAreRefused) {
  EXPECT_NE(TlsError("  cipher_suites: [ECDHE-RSA-AES128-GCM-SHA256]\n")
                .find("web.yml:4: unknown cipher suite 'ECDHE-RSA-AES128-GCM-SHA256'"),
            std::string::npos);
  EXPECT_NE(TlsError("  cipher_suites: TLS_AES_128_GCM_SHA256\n").find("must be a list"),
            std::string::npos);
  // Only TLS 1.3 suites: nothing is left for TLS 1.2, as in Go.
  EXPECT_NE(TlsError("  max_version: TLS12\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n")
                .find("no TLS 1.2 suite"),
            std::string::npos);
  auto only13 = TlsOk("  cipher_suites: [TLS_AES_128_GCM_SHA256]\n");
  ASSERT_TRUE(only13);
  EXPECT_FALSE(
      Handshake(*only13, [](SSL_CTX* c) { SSL_CTX_set_max_proto_version(c, TLS1_2_VERSION); }));
  EXPECT_TRUE(Handshake(*only13, [](SSL_CTX*) {}));
  EXPECT_NE(TlsError("  prefer_server_cipher_suites: perhaps\n").find("must be true or false"),
            std::string::npos);
}

TEST_F(WebConfigTest, CurvePreferencesLimitTheKeyExchange) {
  auto cfg = TlsOk("  curve_preferences: [CurveP384, CurveP521]\n");
  ASSERT_TRUE(cfg);
  for (const int max : {TLS1_2_VERSION, TLS1_3_VERSION}) {
    EXPECT_FALSE(Handshake(*cfg, [max](SSL_CTX* c) {
      SSL_CTX_set_max_proto_version(c, max);
      SSL_CTX_set1_groups_list(c, "P-256:X25519");
    })) << max;
    EXPECT_TRUE(Handshake(*cfg, [max](SSL_CTX* c) {
      SSL_CTX_set_max_proto_version(c, max);
      SSL_CTX_set1_groups_list(c, "X25519:P-384");
    })) << max;
  }
  EXPECT_TRUE(TlsOk("  curve_preferences: [CurveP256, CurveP384, CurveP521, X25519]\n"));
  EXPECT_NE(TlsError("  curve_preferences: [P-256]\n").find("unknown curve 'P-256'"),
            std::string::npos);
}

TEST_F(WebConfigTest, ClientAllowedSansMatchEveryKindOfSan) {
  auto cfg = TlsOk(
      "  client_auth_type: RequireAnyClientCert\n  client_allowed_sans:\n"
      "    - scraper.example\n    - 10.1.2.3\n    - fd00::7\n    - spiffe://cluster/sa/prometheus\n"
      "    - ops@example.com\n");
  ASSERT_TRUE(cfg);
  for (const char* name : {"dns", "ip", "ip6", "uri", "mail"})
    EXPECT_TRUE(Handshake(*cfg, WithCert(name))) << name;
  EXPECT_FALSE(Handshake(*cfg, WithCert("other")));
  EXPECT_FALSE(Handshake(*cfg, [](SSL_CTX*) {}));
  // TLS 1.2 refuses it too.
  EXPECT_FALSE(Handshake(*cfg, [](SSL_CTX* c) {
    SSL_CTX_set_max_proto_version(c, TLS1_2_VERSION);
    WithCert("other")(c);
  }));
  // With verification: the chain must verify and the SAN match.
  auto verified =
      TlsOk("  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: " + F("dns.crt") +
            "\n  client_allowed_sans: [scraper.example]\n");
  ASSERT_TRUE(verified);
  EXPECT_TRUE(Handshake(*verified, WithCert("dns")));
  EXPECT_FALSE(Handshake(*verified, WithCert("ip")));
}

TEST_F(WebConfigTest, ClientAllowedSansNeedAClientCertificateRequired) {
  for (const char* type : {"NoClientCert", "RequestClientCert", "VerifyClientCertIfGiven"}) {
    EXPECT_NE(TlsError(std::string("  client_auth_type: ") + type +
                       "\n  client_allowed_sans: [a.example]\n")
                  .find("client_allowed_sans needs client_auth_type RequireAnyClientCert or "
                        "RequireAndVerifyClientCert"),
              std::string::npos)
        << type;
  }
}

TEST_F(WebConfigTest, VerifyingWithoutACaUsesTheSystemTrustStore) {
  auto cfg = TlsOk("  client_auth_type: VerifyClientCertIfGiven\n");
  ASSERT_TRUE(cfg);
  EXPECT_TRUE(cfg->tls->client_ca_file.empty());
  EXPECT_TRUE(Handshake(*cfg, [](SSL_CTX*) {}));   // none given: served
  EXPECT_FALSE(Handshake(*cfg, WithCert("dns")));  // self-signed: not trusted
  // A client certificate from a CA the system trusts passes (the store is
  // read when the context is built: SSL_CERT_FILE names it here).
  setenv("SSL_CERT_FILE", F("dns.crt").c_str(), 1);
  auto trusting = TlsOk("  client_auth_type: VerifyClientCertIfGiven\n");
  ASSERT_TRUE(trusting);
  EXPECT_TRUE(Handshake(*trusting, WithCert("dns")));
  EXPECT_FALSE(Handshake(*trusting, WithCert("ip")));
  unsetenv("SSL_CERT_FILE");
  auto required = TlsOk("  client_auth_type: RequireAndVerifyClientCert\n");
  ASSERT_TRUE(required);
  EXPECT_FALSE(Handshake(*required, [](SSL_CTX*) {}));
  // The old name of RequireAnyClientCert, as exporter-toolkit keeps it.
  auto old_name = TlsOk("  client_auth_type: RequireClientCert\n");
  ASSERT_TRUE(old_name);
  EXPECT_EQ(old_name->tls->client_auth, ClientAuth::kRequireAnyClientCert);
  EXPECT_NE(TlsError("  client_ca_file: " + F("dns.crt") + "\n")
                .find("a client CA is set but client_auth_type is NoClientCert"),
            std::string::npos);
}

TEST_F(WebConfigTest, TlsVersionsAsExporterToolkitWritesThem) {
  // TLS10/TLS11 as a minimum: served from TLS 1.2 (OpenSSL 3 refuses less).
  auto old = TlsOk("  min_version: TLS10\n");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->tls->min_version, TlsVersion::kTls12);
  EXPECT_NE(TlsError("  max_version: TLS11\n").find("max_version TLS11 leaves no version"),
            std::string::npos);
  EXPECT_NE(TlsError("  min_version: TLS14\n").find("unknown TLS version 'TLS14'"),
            std::string::npos);
}

TEST_F(WebConfigTest, HeadersTakeOnlyTheValuesExporterToolkitTakes) {
  std::shared_ptr<const WebConfig> cfg;
  ASSERT_TRUE(WebConfig::Parse("http_server_config:\n  headers:\n    X-Frame-Options: sameorigin\n"
                               "    X-Content-Type-Options: nosniff\n    X-XSS-Protection: ''\n"
                               "    Content-Security-Policy: default-src 'self'\n",
                               "web.yml", &cfg)
                  .ok());
  // A blank value sets nothing.
  ASSERT_EQ(cfg->headers.size(), 3u);
  EXPECT_EQ(cfg->headers[0],
            (std::pair<std::string, std::string>{"X-Frame-Options", "sameorigin"}));
  EXPECT_NE(Error("http_server_config:\n  headers:\n    X-Frame-Options: allow-from x\n")
                .find("web.yml:3: invalid value 'allow-from x' for X-Frame-Options (expected deny "
                      "or sameorigin)"),
            std::string::npos);
  EXPECT_NE(
      Error("http_server_config:\n  headers:\n    X-Frame-Options: DENY\n").find("invalid value"),
      std::string::npos);
  EXPECT_NE(Error("http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n")
                .find("expected nosniff"),
            std::string::npos);
  EXPECT_NE(Error("http_server_config:\n  headers:\n    Server: x\n").find("may not be set"),
            std::string::npos);
}

TEST_F(WebConfigTest, Http2IsAcceptedAsABoolean) {
  std::shared_ptr<const WebConfig> cfg;
  ASSERT_TRUE(WebConfig::Parse("http_server_config:\n  http2: false\n", "web.yml", &cfg).ok());
  EXPECT_FALSE(cfg->http2);
  ASSERT_TRUE(WebConfig::Parse("http_server_config:\n  http2: true\n", "web.yml", &cfg).ok());
  EXPECT_TRUE(cfg->http2);
  ASSERT_TRUE(WebConfig::Parse("", "web.yml", &cfg).ok());
  EXPECT_TRUE(cfg->http2);  // exporter-toolkit's default
  EXPECT_NE(
      Error("http_server_config:\n  http2: h2c\n").find("web.yml:2: http2 must be true or false"),
      std::string::npos);
}

TEST_F(WebConfigTest, RateLimitTakesGoDurationsAndACount) {
  std::shared_ptr<const WebConfig> cfg;
  for (const auto& [text, want] :
       {std::pair{"1s", nanoseconds(1'000'000'000)}, std::pair{"100ms", nanoseconds(100'000'000)},
        std::pair{"1.5s", nanoseconds(1'500'000'000)},
        std::pair{"1m30s", nanoseconds(90'000'000'000)}, std::pair{"250us", nanoseconds(250'000)},
        std::pair{"2h", nanoseconds(7'200'000'000'000)},
        std::pair{"1000000", nanoseconds(1'000'000)}, std::pair{"0", nanoseconds(0)}}) {
    const Status s = WebConfig::Parse(
        std::string("rate_limit:\n  interval: ") + text + "\n  burst: 5\n", "web.yml", &cfg);
    ASSERT_TRUE(s.ok()) << text << ": " << s.message();
    EXPECT_EQ(cfg->rate_limit.interval, want) << text;
    EXPECT_EQ(cfg->rate_limit.burst, 5);
  }
  EXPECT_FALSE(cfg->rate_limit.on());  // interval 0: off
  const Status micro =
      WebConfig::Parse("rate_limit:\n  interval: 250\u00b5s\n  burst: 1\n", "web.yml", &cfg);
  ASSERT_TRUE(micro.ok()) << micro.message();
  EXPECT_EQ(cfg->rate_limit.interval, nanoseconds(250'000));
  const std::string huge = "1" + std::string(400, '0') + "s";
  const std::string tiny = "0." + std::string(400, '0') + "1s";
  for (const std::string& bad :
       {std::string("-1s"), std::string("1d"), std::string("soon"), std::string("1.2.3s"),
        std::string(".s"), std::string("1s2"), huge, tiny, std::string("99999999999h")}) {
    EXPECT_NE(
        Error(std::string("rate_limit:\n  interval: ") + bad + "\n  burst: 1\n")
            .find("web.yml:2: rate_limit.interval '" + std::string(bad) + "' is not a duration"),
        std::string::npos)
        << bad;
  }
  EXPECT_NE(Error("rate_limit:\n  interval: 1s\n  burst: -1\n").find("rate_limit.burst '-1'"),
            std::string::npos);
  EXPECT_NE(
      Error("rate_limit:\n  interval: 1s\n  burst: 0\n").find("every request would be refused"),
      std::string::npos);
  EXPECT_NE(Error("rate_limit:\n  rate: 1\n").find("unknown key 'rate_limit.rate'"),
            std::string::npos);
}

TEST(RateLimiterTest, ATokenBucketAsGosRateLimiter) {
  RateLimiter limiter;
  const RateLimit limit{seconds(2), 3};
  auto t = std::chrono::steady_clock::time_point{} + seconds(100);
  seconds retry{0};
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Allow(limit, t, &retry)) << i;  // the burst
  EXPECT_FALSE(limiter.Allow(limit, t, &retry));
  EXPECT_EQ(retry, seconds(2));
  t += milliseconds(1500);  // three quarters of a token
  EXPECT_FALSE(limiter.Allow(limit, t, &retry));
  EXPECT_EQ(retry, seconds(1));
  t += milliseconds(500);
  EXPECT_TRUE(limiter.Allow(limit, t, &retry));
  EXPECT_FALSE(limiter.Allow(limit, t, &retry));
  t += seconds(60);  // a long pause saves no more than the burst
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(limiter.Allow(limit, t, &retry)) << i;
  EXPECT_FALSE(limiter.Allow(limit, t, &retry));
  // A reload with another limit starts a full bucket; an off one passes all.
  EXPECT_TRUE(limiter.Allow(RateLimit{seconds(2), 1}, t, &retry));
  EXPECT_FALSE(limiter.Allow(RateLimit{seconds(2), 1}, t, &retry));
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(limiter.Allow(RateLimit{}, t, &retry));
}

TEST_F(WebConfigTest, ATlsSectionWithoutCertificateOrClientAuthLeavesTlsOff) {
  std::shared_ptr<const WebConfig> cfg;
  // As exporter-toolkit's TLSConfig.IsEnabled: plain HTTP, values checked.
  ASSERT_TRUE(WebConfig::Parse("tls_server_config:\n  min_version: TLS13\n  cipher_suites: "
                               "[TLS_AES_128_GCM_SHA256]\n",
                               "web.yml", &cfg)
                  .ok());
  EXPECT_FALSE(cfg->tls);
  ASSERT_TRUE(WebConfig::Parse("tls_server_config: {}\n", "web.yml", &cfg).ok());
  EXPECT_FALSE(cfg->tls);
  EXPECT_NE(Error("tls_server_config:\n  cipher_suites: [RC4]\n").find("unknown cipher suite"),
            std::string::npos);
  EXPECT_NE(Error("tls_server_config:\n  colour: red\n").find("unknown key"), std::string::npos);
  // A client_auth_type alone turns it on, and then a certificate is needed.
  EXPECT_NE(Error("tls_server_config:\n  client_auth_type: NoClientCert\n")
                .find("needs cert_file or cert"),
            std::string::npos);
}

TEST_F(WebConfigTest, TheClientCasAreNamedInTheCertificateRequest) {
  for (const std::string& ca :
       {"  client_ca_file: " + F("dns.crt") + "\n", "  client_ca: " + Block(Slurp(F("dns.crt")))}) {
    auto cfg = TlsOk("  client_auth_type: RequireAndVerifyClientCert\n" + ca);
    ASSERT_TRUE(cfg);
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    ASSERT_TRUE(ApplyTls(*cfg->tls, ctx).ok());
    const STACK_OF(X509_NAME)* names = SSL_CTX_get_client_CA_list(ctx);
    ASSERT_NE(names, nullptr) << ca;
    EXPECT_EQ(sk_X509_NAME_num(names), 1) << ca;
    SSL_CTX_free(ctx);
  }
}

TEST_F(WebConfigTest, WithoutCurvePreferencesGosDefaultCurvesAreServed) {
  auto cfg = TlsOk("");
  ASSERT_TRUE(cfg);
  // Go offers neither X448 nor finite-field groups.
  for (const char* outside : {"X448", "ffdhe2048"}) {
    EXPECT_FALSE(Handshake(*cfg, [outside](SSL_CTX* c) { SSL_CTX_set1_groups_list(c, outside); }))
        << outside;
  }
  for (const char* inside : {"X25519", "P-256", "P-384", "P-521"}) {
    EXPECT_TRUE(Handshake(*cfg, [inside](SSL_CTX* c) { SSL_CTX_set1_groups_list(c, inside); }))
        << inside;
  }
}

// The format's own examples (exporter-toolkit's docs and test data), with
// this test's files in place of theirs: each accepted.
TEST_F(WebConfigTest, ExporterToolkitsExamplesAreAccepted) {
  const std::string pair = "  cert_file: " + F("srv.crt") + "\n  key_file: " + F("srv.key") + "\n";
  const std::string users =
      "basic_auth_users:\n  alice: $2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze\n"
      "  bob: $2y$10$hLqFl9jSjoAAy95Z/zw8Ye8wkdMBM8c5Bn1ptYqP/AXyV0.oy0S8m\n";
  for (const std::string& yaml : {
           "tls_server_config:\n" + pair + users,
           "tls_server_config :\n" + pair +
               "  client_auth_type : \"VerifyClientCertIfGiven\"\n  curve_preferences:\n"
               "    - CurveP256\n    - CurveP384\n    - CurveP521\n    - X25519\n",
           "tls_server_config:\n" + pair + "  client_auth_type: RequireAnyClientCert\n" +
               "http_server_config:\n  http2: false\n",
           "tls_server_config:\n" + pair +
               "  min_version: TLS12\n  max_version: TLS13\n  cipher_suites:\n"
               "    - TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256\n"
               "    - TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256\n"
               "  prefer_server_cipher_suites: true\n",
           "tls_server_config:\n" + pair + "  client_ca_file: " + F("dns.crt") +
               "\n  client_auth_type: RequireAndVerifyClientCert\n"
               "  client_allowed_sans: [scraper.example]\n",
           std::string("rate_limit:\n  interval: 1s\n  burst: 10\n") + users,
           std::string("http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
                       "    Strict-Transport-Security: max-age=31536000\n"),
       }) {
    std::shared_ptr<const WebConfig> cfg;
    const Status s = WebConfig::Parse(yaml, "web.yml", &cfg);
    EXPECT_TRUE(s.ok()) << yaml << "\n" << s.message();
  }
}

}  // namespace
}  // namespace xpu::http
