#include "util/hash.h"

#include <gtest/gtest.h>

namespace strata::util {
namespace {

TEST(Hash, IncrementalEqualsOneShot) {
  Hasher h(5);
  h.Update("hello ").Update("world");
  EXPECT_EQ(h.Digest(), Hash64("hello world", 5));
  EXPECT_NE(Hash64("hello world", 5), Hash64("hello world", 6));
}

TEST(Hash, ValuesAreStable) {
  // Hashes are stored in caches; they must not change between releases.
  EXPECT_EQ(Hash64("", 0), 0x2d06800538d394c2ULL);
}

}  // namespace
}  // namespace strata::util
