// What the API server says of when to ask again: a Retry-After header's
// value (RFC 9110: delta-seconds or an HTTP date) and the wait it makes
// with a part's own backoff.
#include "kubernetes/api_client.h"

#include <gtest/gtest.h>

#include <ctime>

namespace xpu::kubernetes {
namespace {

using std::chrono::seconds;

TEST(RetryAfterTest, DeltaSecondsUpToTheCap) {
  const auto now = std::chrono::system_clock::now();
  EXPECT_EQ(ParseRetryAfter("2", now), seconds(2));
  EXPECT_EQ(ParseRetryAfter("0", now), seconds(0));
  EXPECT_EQ(ParseRetryAfter("60", now), seconds(60));
  EXPECT_EQ(ParseRetryAfter("3600", now), kMaxRetryAfter);
  EXPECT_EQ(ParseRetryAfter("99999999999999999999999", now), kMaxRetryAfter);
}

TEST(RetryAfterTest, AnHttpDateIsTheTimeUntilIt) {
  const auto now = std::chrono::system_clock::from_time_t(1780000000);
  auto date = [](time_t t) {
    char out[64];
    std::tm tm{};
    gmtime_r(&t, &tm);
    std::strftime(out, sizeof out, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    return std::string(out);
  };
  EXPECT_EQ(ParseRetryAfter(date(1780000005), now), seconds(5));
  EXPECT_EQ(ParseRetryAfter(date(1780000000 + 7200), now), kMaxRetryAfter);
  EXPECT_EQ(ParseRetryAfter(date(1780000000 - 30), now), seconds(0));  // passed
}

TEST(RetryAfterTest, AnythingElseAsksNothing) {
  const auto now = std::chrono::system_clock::now();
  for (const char* v : {"", "-1", "1.5", "soon", " 2", "2s", "0x10", "Sun, 99 Nox 1994 99:00:00"})
    EXPECT_EQ(ParseRetryAfter(v, now), seconds(0)) << v;
  EXPECT_EQ(ParseRetryAfter(std::string(65, '1'), now), seconds(0));  // over 64 bytes
}

// The longer of the backoff's step and the server's word; the backoff
// advances either way, so a server that stops asking leaves it where it got.
TEST(RetryAfterTest, TheWaitIsTheLongerOfTheBackoffAndTheServer) {
  Backoff b(std::chrono::milliseconds(100), 2.0, std::chrono::seconds(3), 0.0, [] { return 0.5; });
  EXPECT_EQ(RetryWait(&b, seconds(0)), std::chrono::milliseconds(100));
  EXPECT_EQ(RetryWait(&b, seconds(2)), std::chrono::milliseconds(2000));
  EXPECT_EQ(RetryWait(&b, seconds(0)), std::chrono::milliseconds(400));
  EXPECT_EQ(RetryWait(&b, seconds(0)), std::chrono::milliseconds(800));
  EXPECT_EQ(RetryWait(&b, seconds(1)), std::chrono::milliseconds(1600));
  EXPECT_EQ(RetryWait(&b, seconds(600)), std::chrono::milliseconds(60000));  // capped
}

}  // namespace
}  // namespace xpu::kubernetes
