#include "common/label.h"

#include <gtest/gtest.h>

namespace xpu {
namespace {

TEST(LabelTest, SanitizesInvalidUtf8AndLength) {
  std::string ok = "naïve ✓";
  EXPECT_FALSE(SanitizeLabelValue(&ok));
  std::string bad = "a\xc3\x28z";  // invalid continuation
  EXPECT_TRUE(SanitizeLabelValue(&bad));
  EXPECT_EQ(bad, "a\xEF\xBF\xBD(z");
  std::string surrogate = "\xed\xa0\x80";
  EXPECT_TRUE(SanitizeLabelValue(&surrogate));
  std::string overlong = "\xc0\xaf";
  EXPECT_TRUE(SanitizeLabelValue(&overlong));
  std::string longs = "ab✓✓";
  EXPECT_TRUE(SanitizeLabelValue(&longs, 4));  // never cuts a character in half
  EXPECT_EQ(longs, "ab");
}

}  // namespace
}  // namespace xpu
