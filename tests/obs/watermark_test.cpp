#include "obs/watermark.h"

#include <gtest/gtest.h>

#include <cctype>

namespace strata::obs {
namespace {

// Vectors computed independently (Python's hmac and hashlib) from the spec
// in docs/formats/audit_log.md.
constexpr const char* kKey = "0123456789abcdef0123456789abcdef";

ResponseContent Text(std::string text) {
  ResponseContent c;
  c.choices.push_back({.text = std::move(text), .tool_calls = {}});
  return c;
}

TEST(Watermark, MatchesTheSpecsVectors) {
  const Watermarker wm(kKey);
  EXPECT_EQ(wm.key_id(), "4307c787c7427ec3");
  EXPECT_EQ(wm.Mark("req-1", "stories260K", Text("Once upon a time")),
            "v1:4307c787c7427ec3:b5579448779ae7b2fbe16f46078a1a58780504533c79806a1a209569f7312c93");
  ResponseContent two;
  two.choices.push_back(
      {.text = "",
       .tool_calls = {
           {.id = "call_1", .name = "get_weather", .arguments = R"({"city":"Paris"})"}}});
  two.choices.push_back({.text = "two", .tool_calls = {}});
  EXPECT_EQ(wm.Mark("req-2", "m", two),
            "v1:4307c787c7427ec3:023196b143acc1fe547c9277a7f343ef5717630f3a67ab7b7b0c9184a068c195");
  EXPECT_EQ(wm.Mark("", "", ResponseContent{}),
            "v1:4307c787c7427ec3:ec06b1e58c15881d93349927ece49833478dd4d7617ea8e3172f96c588f418ce");
  EXPECT_EQ(Hex(ResponseDigest(Text("Once upon a time"))),
            "fcb62cf71b2496770604a05aa243133a149cd85e8adc3363bc69404ce7e948d0");
}

TEST(Watermark, VerifiesItsOwnMarkAndNothingElse) {
  const Watermarker wm(kKey);
  const std::string mark = wm.Mark("req-1", "m", Text("hello"));
  EXPECT_EQ(wm.Verify(mark, "req-1", "m", Text("hello")), WatermarkCheck::kValid);
  EXPECT_EQ(wm.Verify(mark, "req-1", "m", Text("hello!")), WatermarkCheck::kInvalid);
  EXPECT_EQ(wm.Verify(mark, "req-2", "m", Text("hello")), WatermarkCheck::kInvalid);
  EXPECT_EQ(wm.Verify(mark, "req-1", "n", Text("hello")), WatermarkCheck::kInvalid);
  // Upper-case hex is the same mark.
  std::string upper = mark;
  for (size_t i = 3; i < upper.size(); ++i) upper[i] = static_cast<char>(std::toupper(upper[i]));
  EXPECT_EQ(wm.Verify(upper, "req-1", "m", Text("hello")), WatermarkCheck::kValid);
  const Watermarker other(std::string(32, 'z'));
  EXPECT_EQ(other.Verify(mark, "req-1", "m", Text("hello")), WatermarkCheck::kOtherKey);
  EXPECT_EQ(wm.Verify("v1:abc", "req-1", "m", Text("hello")), WatermarkCheck::kMalformed);
  EXPECT_EQ(wm.Verify(mark.substr(1), "req-1", "m", Text("hello")), WatermarkCheck::kMalformed);
  std::string flipped = mark;
  flipped.back() = flipped.back() == '0' ? '1' : '0';
  EXPECT_EQ(wm.Verify(flipped, "req-1", "m", Text("hello")), WatermarkCheck::kInvalid);
}

TEST(Watermark, FieldBoundariesCannotBeMovedBetweenFields) {
  const Watermarker wm(kKey);
  // The same bytes split differently between the fields give other marks.
  EXPECT_NE(wm.Mark("ab", "c", Text("d")), wm.Mark("a", "bc", Text("d")));
  EXPECT_NE(wm.Mark("a", "b", Text("cd")), wm.Mark("a", "bc", Text("d")));
  ResponseContent split;
  split.choices.push_back({.text = "ab", .tool_calls = {}});
  split.choices.push_back({.text = "c", .tool_calls = {}});
  EXPECT_NE(CanonicalResponse(split), CanonicalResponse(Text("abc")));
}

}  // namespace
}  // namespace strata::obs
