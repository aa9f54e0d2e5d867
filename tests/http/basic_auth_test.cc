#include "http/basic_auth.h"

#include <crypt.h>
#include <gtest/gtest.h>

#include "http/headers.h"

namespace xpu::http {
namespace {

// A cheap bcrypt hash (cost 4) of `password`, as xpu-passwd would make it.
std::string Bcrypt(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  EXPECT_NE(crypt_gensalt_rn("$2y$", 4, nullptr, 0, salt, sizeof salt), nullptr);
  crypt_data data{};
  return crypt_r(password.c_str(), salt, &data);
}

std::string Header(const std::string& user_password) {
  static const char* b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  const std::string& in = user_password;
  for (; i + 2 < in.size(); i += 3) {
    const unsigned v = (static_cast<unsigned char>(in[i]) << 16) |
                       (static_cast<unsigned char>(in[i + 1]) << 8) |
                       static_cast<unsigned char>(in[i + 2]);
    for (int k = 18; k >= 0; k -= 6) out += b64[(v >> k) & 63];
  }
  if (i < in.size()) {
    unsigned v = static_cast<unsigned char>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<unsigned char>(in[i + 1]) << 8;
    out += b64[(v >> 18) & 63];
    out += b64[(v >> 12) & 63];
    out += i + 1 < in.size() ? b64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return "Basic " + out;
}

TEST(BasicAuthTest, AcceptsOnlyTheRightPasswordOfAKnownUser) {
  const std::map<std::string, std::string> users = {{"prom", Bcrypt("s3cret")}};
  BasicAuth auth;
  EXPECT_TRUE(auth.Check(users, Header("prom:s3cret")));
  EXPECT_TRUE(auth.Check(users, Header("prom:s3cret")));  // remembered
  EXPECT_FALSE(auth.Check(users, Header("prom:wrong")));
  EXPECT_FALSE(auth.Check(users, Header("eve:s3cret")));
  EXPECT_FALSE(auth.Check(users, "Bearer x"));
  EXPECT_FALSE(auth.Check(users, ""));
}

TEST(BasicAuthTest, RememberedCredentialsDoNotOutliveAChangedPassword) {
  BasicAuth auth;
  ASSERT_TRUE(auth.Check({{"prom", Bcrypt("old")}}, Header("prom:old")));
  // The cache key covers the hash: a new hash verifies afresh.
  EXPECT_FALSE(auth.Check({{"prom", Bcrypt("new")}}, Header("prom:old")));
  auth.Clear();
  EXPECT_FALSE(auth.Check({}, Header("prom:old")));
}

}  // namespace
}  // namespace xpu::http
