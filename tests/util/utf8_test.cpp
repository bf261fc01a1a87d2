#include "util/utf8.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

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

// The word-at-a-time scans find what a byte-by-byte loop finds, at every
// offset and for every byte value (each in every position of a word).
TEST(Utf8, WordScansFindTheFirstByteAsALoopDoes) {
  auto non_ascii = [](std::string_view s, size_t from) {
    while (from < s.size() && static_cast<unsigned char>(s[from]) < 0x80) ++from;
    return from;
  };
  auto special = [](std::string_view s, size_t from) {
    while (from < s.size()) {
      const unsigned char c = static_cast<unsigned char>(s[from]);
      if (c == '"' || c == '\\' || c < 0x20) break;
      ++from;
    }
    return from;
  };
  for (int value = 0; value < 256; ++value) {
    for (size_t at = 0; at < 19; ++at) {
      std::string s(19, 'a');
      s[at] = static_cast<char>(value);
      for (size_t from = 0; from <= s.size(); ++from) {
        ASSERT_EQ(FindNonAscii(s, from), non_ascii(s, from)) << value << " " << at << " " << from;
        ASSERT_EQ(FindJsonSpecial(s, from), special(s, from)) << value << " " << at << " " << from;
      }
    }
  }
  std::mt19937 rng(5);
  for (int round = 0; round < 20000; ++round) {
    std::string s(rng() % 40, ' ');
    for (char& c : s) c = static_cast<char>(rng() % 3 ? 0x20 + rng() % 0x60 : rng() % 256);
    const size_t from = s.empty() ? 0 : rng() % (s.size() + 1);
    ASSERT_EQ(FindNonAscii(s, from), non_ascii(s, from));
    ASSERT_EQ(FindJsonSpecial(s, from), special(s, from));
  }
}

}  // namespace
}  // namespace strata::util
