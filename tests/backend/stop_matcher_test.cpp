#include "backend/stop_matcher.h"

#include <gtest/gtest.h>

namespace strata::backend {
namespace {

// Feeds `pieces` and returns everything emitted.
std::string FeedAll(StopMatcher& m, const std::vector<std::string>& pieces) {
  std::string out;
  for (const auto& p : pieces) out += m.Push(p);
  return out + m.Finish();
}

TEST(StopMatcher, StopStringSplitAcrossPiecesIsNeverEmitted) {
  StopMatcher m({"\nUser:"});
  EXPECT_EQ(FeedAll(m, {"Hello", " there", "\nUs", "er:", " more"}), "Hello there");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.matched(), "\nUser:");
}

TEST(StopMatcher, PartialMatchThatFailsIsReleased) {
  StopMatcher m({"STOP"});
  std::string out = m.Push("abcST");
  EXPECT_EQ(out, "abc");  // "ST" held back
  out += m.Push("ART");
  EXPECT_EQ(out, "abcSTART");
  EXPECT_EQ(m.Finish(), "");
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, EarliestOfSeveralStopsWins) {
  StopMatcher m({"world", "lo"});
  EXPECT_EQ(FeedAll(m, {"hello world"}), "hel");
  EXPECT_EQ(m.matched(), "lo");
}

TEST(StopMatcher, HeldTextIsFlushedAtTheEnd) {
  StopMatcher m({"</end>"});
  EXPECT_EQ(m.Push("text</e"), "text");
  EXPECT_EQ(m.Finish(), "</e");
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.Push("abc"), "abc");
  EXPECT_EQ(m.Finish(), "");
}

TEST(StopMatcher, MultibyteStopsSplitOnlyAtCharacterBoundaries) {
  StopMatcher m({"世界"});
  EXPECT_EQ(m.Push("你好世"), "你好");
  EXPECT_EQ(m.Push("界!"), "");
  EXPECT_TRUE(m.stopped());
}

}  // namespace
}  // namespace strata::backend
