#include "util/utf8.h"

#include <gtest/gtest.h>

namespace strata::util {
namespace {

TEST(Utf8, CompleteTextPassesThrough) {
  auto s = SplitCompleteUtf8("héllo, 世界 🙂");
  EXPECT_EQ(s.complete, "héllo, 世界 🙂");
  EXPECT_EQ(s.tail, "");
}

TEST(Utf8, UnfinishedCharacterIsHeldBack) {
  const std::string smile = "\xF0\x9F\x99\x82";
  for (size_t cut = 1; cut < smile.size(); ++cut) {
    auto s = SplitCompleteUtf8("ab" + smile.substr(0, cut));
    EXPECT_EQ(s.complete, "ab");
    EXPECT_EQ(s.tail, smile.substr(0, cut));
  }
}

TEST(Utf8, InvalidBytesBecomeReplacementCharacters) {
  auto s = SplitCompleteUtf8(
      "a\xFF"
      "b\xC0\xAF"
      "c");
  EXPECT_EQ(s.complete,
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD\xEF\xBF\xBD"
            "c");
  EXPECT_TRUE(IsValidUtf8(s.complete));
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));  // a surrogate
  EXPECT_EQ(SanitizeUtf8("x\xE4\xB8"), "x\xEF\xBF\xBD");
}

}  // namespace
}  // namespace strata::util
