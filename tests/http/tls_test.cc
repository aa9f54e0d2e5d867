// TLS settings: parsed once into enums, applied to OpenSSL by one function.
#include "http/tls.h"

#include <gtest/gtest.h>
#include <openssl/ssl.h>

#include "support/test_util.h"
#include "tls_test_util.h"

namespace xpu::http {
namespace {

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(MakeCert(dir_.path(), "a")); }
  // Parses a tls_server_config with cert "a" plus `extra` lines.
  Status Parse(const std::string& extra, std::shared_ptr<const WebConfig>* out) {
    return WebConfig::Parse("tls_server_config:\n  cert_file: " + dir_.File("a.crt") +
                                "\n  key_file: " + dir_.File("a.key") + "\n" + extra,
                            "web.yml", out);
  }
  xpu::testing::TempDir dir_;
};

TEST_F(TlsTest, VersionsAndClientAuthAreParsedIntoEnums) {
  std::shared_ptr<const WebConfig> cfg;
  ASSERT_TRUE(Parse("  min_version: TLS13\n  client_auth_type: RequireAnyClientCert\n", &cfg).ok());
  EXPECT_EQ(cfg->tls->min_version, TlsVersion::kTls13);
  EXPECT_EQ(cfg->tls->max_version, TlsVersion::kTls13);
  EXPECT_EQ(cfg->tls->client_auth, ClientAuth::kRequireAnyClientCert);
  EXPECT_STREQ(Name(cfg->tls->client_auth), "RequireAnyClientCert");
  EXPECT_STREQ(Name(TlsVersion::kTls12), "TLS12");
}

TEST_F(TlsTest, UnknownOrUnservableValuesAreErrorsNotDefaults) {
  std::shared_ptr<const WebConfig> cfg;
  Status s = Parse("  client_auth_type: RequireSomeCert\n", &cfg);
  EXPECT_NE(s.message().find("web.yml:4: unknown client_auth_type"), std::string::npos)
      << s.message();
  s = Parse("  max_version: TLS11\n", &cfg);
  EXPECT_NE(s.message().find("OpenSSL 3 refuses TLS 1.0 and 1.1"), std::string::npos)
      << s.message();
  s = Parse("  max_version: TLS14\n", &cfg);
  EXPECT_NE(s.message().find("unknown TLS version 'TLS14'"), std::string::npos) << s.message();
  s = Parse("  min_version: TLS13\n  max_version: TLS12\n", &cfg);
  EXPECT_NE(s.message().find("min_version above max_version"), std::string::npos) << s.message();
}

TEST_F(TlsTest, ApplyTlsSetsVersionsAndVerification) {
  std::shared_ptr<const WebConfig> cfg;
  ASSERT_TRUE(Parse("  min_version: TLS13\n  client_auth_type: RequireAndVerifyClientCert\n"
                    "  client_ca_file: " +
                        dir_.File("a.crt") + "\n",
                    &cfg)
                  .ok());
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  ASSERT_TRUE(ApplyTls(*cfg->tls, ctx).ok());
  EXPECT_EQ(SSL_CTX_get_min_proto_version(ctx), TLS1_3_VERSION);
  EXPECT_EQ(SSL_CTX_get_verify_mode(ctx), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT);
  SSL_CTX_free(ctx);
}

TEST_F(TlsTest, CheckNamesTheFileThatFails) {
  ASSERT_TRUE(MakeCert(dir_.path(), "b"));
  TlsConfig tls;
  tls.cert_file = dir_.File("a.crt");
  tls.key_file = dir_.File("b.key");  // another certificate's key
  const Status s = CheckTls(tls);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  // OpenSSL 3 finds the mismatch while loading the key.
  EXPECT_NE(s.message().find("key_file " + dir_.File("b.key")), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("key values mismatch"), std::string::npos) << s.message();
  tls.key_file = dir_.File("a.crt");  // not a key at all
  EXPECT_NE(CheckTls(tls).message().find("is not a PEM private key"), std::string::npos);
}

TEST_F(TlsTest, DigestChangesWhenAFileIsRotatedUnderTheSameName) {
  TlsConfig tls;
  tls.cert_file = dir_.File("a.crt");
  tls.key_file = dir_.File("a.key");
  std::string before, after;
  ASSERT_TRUE(DigestTlsFiles(tls, &before).ok());
  ASSERT_TRUE(MakeCert(dir_.path(), "a"));  // new key pair, same paths
  ASSERT_TRUE(DigestTlsFiles(tls, &after).ok());
  EXPECT_EQ(before.size(), 32u);
  EXPECT_NE(before, after);
}

}  // namespace
}  // namespace xpu::http
