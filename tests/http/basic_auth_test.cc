#include "http/basic_auth.h"

#include <crypt.h>
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "http/headers.h"
#include "support/test_util.h"

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

// A cost-15 bcrypt hash of "s3cret": a check takes 2^15 key expansions,
// over a second on this machine and at least several hundred milliseconds
// on any, more than BasicAuth's shortest wait (500 ms), as every check does
// on a node whose CPU is slow, throttled by its cgroup limit or shared.
const char kSlowHash[] = "$2b$15$m9hVgAf2IGfJU/8zcpCirO0igtTXCanPLokgv6msdgKoyzNQWejNe";

// Runs `n` checks of wrong passwords for "slow" at once, in threads, and
// returns once all of them hold a bcrypt run.
std::vector<std::thread> OccupyEveryRun(BasicAuth* auth,
                                        const std::map<std::string, std::string>& users, int n) {
  std::vector<std::thread> runs;
  for (int i = 0; i < n; ++i) {
    runs.emplace_back([auth, &users, i] {
      EXPECT_EQ(auth->Verify(users, Header("slow:wrong" + std::to_string(i)), "10.0.0.1"),
                BasicAuth::Result::kDenied);
    });
  }
  EXPECT_TRUE(xpu::testing::WaitFor([&] { return auth->running() == n; }));
  return runs;
}

// The probe mix (http_probe_mix) on a loaded TSan run: a scrape with credentials
// never seen got 429 after 543 ms. Every bcrypt run was slower than the
// fixed 500 ms a check waited, so none came free in time. A valid client
// that is next in line waits for the run, however slow the machine.
TEST(BasicAuthTest, AValidClientWaitsOutARunSlowerThanTheShortestWait) {
  const std::map<std::string, std::string> users = {{"slow", kSlowHash}, {"fresh", Bcrypt("n3w")}};
  // A ceiling far above a run here, so that only the wait's measure of
  // the runs decides, however loaded the machine.
  BasicAuth auth(2, 15, std::chrono::seconds(60));
  std::vector<std::thread> runs = OccupyEveryRun(&auth, users, 2);
  EXPECT_EQ(auth.Verify(users, Header("fresh:n3w"), "10.0.0.1"), BasicAuth::Result::kOk);
  EXPECT_EQ(auth.throttled(), 0u);
  for (auto& t : runs) t.join();
}

// The wait has a ceiling all the same: a client is answered 429 rather than
// held past `longest_wait` behind runs that do not end.
TEST(BasicAuthTest, TheWaitForASlowRunEndsAtTheLongestWait) {
  const std::map<std::string, std::string> users = {{"slow", kSlowHash}, {"fresh", Bcrypt("n3w")}};
  BasicAuth auth(1, 15, std::chrono::milliseconds(600));
  std::vector<std::thread> runs = OccupyEveryRun(&auth, users, 1);
  EXPECT_EQ(auth.Verify(users, Header("fresh:n3w"), "10.0.0.1"), BasicAuth::Result::kThrottled);
  EXPECT_EQ(auth.throttled(), 1u);
  EXPECT_EQ(auth.running(), 1);  // the slow run was still going
  for (auto& t : runs) t.join();
}

}  // namespace
}  // namespace xpu::http
