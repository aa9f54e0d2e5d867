#include "common/duration.h"

#include <gtest/gtest.h>

namespace xpu {
namespace {

using std::chrono::milliseconds;

TEST(DurationTest, ParsesPrometheusForms) {
  EXPECT_EQ(ParseDuration("500ms"), milliseconds(500));
  EXPECT_EQ(ParseDuration("1s"), milliseconds(1000));
  EXPECT_EQ(ParseDuration("2m"), milliseconds(120000));
  EXPECT_EQ(ParseDuration("1h30m"), milliseconds(5400000));
  EXPECT_EQ(ParseDuration("1m30s500ms"), milliseconds(90500));
  EXPECT_EQ(ParseDuration("0"), milliseconds(0));
  EXPECT_EQ(ParseDuration("1d"), milliseconds(86400000));
}

TEST(DurationTest, RejectsMalformed) {
  for (const char* bad :
       {"", "1", "s", "-1s", "1.5s", "1 s", "1sec", "10x", "ms", "1s ", "99999999999999999999s"}) {
    EXPECT_FALSE(ParseDuration(bad).has_value()) << bad;
  }
}

TEST(DurationTest, FormatsShortestAndRoundTrips) {
  EXPECT_EQ(FormatDuration(milliseconds(0)), "0s");
  EXPECT_EQ(FormatDuration(milliseconds(1500)), "1s500ms");
  EXPECT_EQ(FormatDuration(milliseconds(60000)), "1m");
  for (int64_t ms : {1, 999, 1000, 61001, 3600000, 90061001}) {
    EXPECT_EQ(ParseDuration(FormatDuration(milliseconds(ms))), milliseconds(ms)) << ms;
  }
}

}  // namespace
}  // namespace xpu
