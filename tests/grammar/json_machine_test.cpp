#include "grammar/json_machine.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "grammar/token_mask.h"
#include "testing/tiny_model.h"
#include "util/random.h"

namespace strata::grammar {
namespace {

// Whether the machine takes every byte of `doc` and is complete after it.
bool Accepts(std::string_view doc, JsonMachine::Root root = JsonMachine::Root::kObject) {
  JsonMachine m(root);
  for (const char c : doc) {
    if (!m.Feed(static_cast<uint8_t>(c))) return false;
  }
  return m.complete();
}

TEST(JsonMachine, AcceptsObjectsOfEveryKindOfValue) {
  for (const char* doc : {
           R"({})",
           R"({"a":1})",
           R"( { "a" : [1, -2.5e+3, 0, 0.25, 1E9, true, false, null, "x"] , "b" : {} })",
           R"({"esc":"\"\\\/\b\f\n\r\t\u00e9\uD83D\uDE00"})",
           "{\"utf8\":\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"}",
           R"({"nested":{"a":{"b":[[[{}]]]}}})",
       }) {
    EXPECT_TRUE(Accepts(doc)) << doc;
  }
  EXPECT_TRUE(Accepts("[1,2]", JsonMachine::Root::kAnyValue));
  EXPECT_TRUE(Accepts("-0.5", JsonMachine::Root::kAnyValue));
  EXPECT_TRUE(Accepts("\"s\"", JsonMachine::Root::kAnyValue));
}

TEST(JsonMachine, RefusesWhatIsNotJsonAndLeavesTheStateAsItWas) {
  for (const char* doc : {
           R"([1])",         // an object is required
           R"({"a":01})",    // leading zero
           R"({"a":1.})",    // fraction without digits
           R"({"a":-})",     // sign alone
           R"({"a":+1})",    // no plus sign
           R"({"a":1,})",    // trailing comma
           R"({a:1})",       // unquoted key
           R"({"a" 1})",     // missing colon
           R"({"a":tru})",   // truncated literal
           R"({"a":"\x"})",  // bad escape
           R"({"a":"\u12G4"})",
           "{\"a\":\"\x01\"}",          // raw control character
           "{\"a\":\"\xc0\xaf\"}",      // overlong UTF-8
           "{\"a\":\"\xed\xa0\x80\"}",  // a surrogate in UTF-8
           "{\"a\":\"\xf5\x80\x80\x80\"}",
           R"({}})",  // nothing after the document
           R"({} )",  // not even whitespace
       }) {
    EXPECT_FALSE(Accepts(doc)) << doc;
  }
  JsonMachine m;
  ASSERT_TRUE(m.FeedAll(R"({"k":)"));
  EXPECT_FALSE(m.Feed('}'));
  EXPECT_FALSE(m.FeedAll("12x"));  // all or nothing
  EXPECT_TRUE(m.FeedAll("12}"));
  EXPECT_TRUE(m.complete());
}

TEST(JsonMachine, BoundsNestingAndWhitespaceRuns) {
  JsonMachine m(JsonMachine::Root::kAnyValue);
  for (int i = 0; i < JsonMachine::kMaxDepth; ++i) ASSERT_TRUE(m.Feed('['));
  EXPECT_FALSE(m.Feed('['));
  EXPECT_TRUE(m.Feed('1'));
  // Numbers stay within a double's range: 20 integer and 20 fraction
  // digits, a two-digit exponent (an exponent of 3100 fails common parsers).
  EXPECT_TRUE(Accepts(R"({"a":-12345678901234567890.12345678901234567890e-99})"));
  EXPECT_FALSE(Accepts(R"({"a":123456789012345678901})"));
  EXPECT_FALSE(Accepts(R"({"a":0.123456789012345678901})"));
  EXPECT_FALSE(Accepts(R"({"a":1e100})"));
  EXPECT_FALSE(Accepts(R"({"a":-2.5e3100})"));
  // \u escapes of surrogates pair up, high then low.
  EXPECT_TRUE(Accepts(R"({"e":"\ud83d\ude00 \uD83D\uDE00 \u00e9"})"));
  EXPECT_FALSE(Accepts(R"({"e":"\udc00"})"));
  EXPECT_FALSE(Accepts(R"({"e":"\ud83dx"})"));
  EXPECT_FALSE(Accepts(R"({"e":"\ud83d\u0041"})"));
  EXPECT_FALSE(Accepts(R"({"e":"\ud83d\ud83d"})"));
  EXPECT_TRUE(Accepts(R"({"e":"\ud00e"})"));  // U+D00E is a letter, not a surrogate
  EXPECT_FALSE(Accepts(R"({"e":"\ud00e\udddd"})"));
  JsonMachine w;
  for (int i = 0; i < JsonMachine::kMaxWhitespaceRun; ++i) ASSERT_TRUE(w.Feed(' '));
  EXPECT_FALSE(w.Feed(' '));
  EXPECT_TRUE(w.Feed('{'));
}

// Random documents (nlohmann's serialisation of random values) are
// accepted; random byte strings the machine accepts in full and calls
// complete parse as JSON objects.
TEST(JsonMachine, AgreesWithAJsonParserOnRandomInput) {
  util::Rng rng(7);
  std::function<nlohmann::json(int)> value = [&](int depth) -> nlohmann::json {
    switch (depth > 3 ? rng.Below(4) : rng.Below(6)) {
      case 0:
        return rng.Uniform() < 0.5;
      case 1:
        return static_cast<int64_t>(rng.Below(2000000)) - 1000000;
      case 2:
        return rng.Uniform() * 1e6 - 5e5;
      case 3: {
        std::string s;
        for (uint64_t i = rng.Below(6); i > 0; --i) s += static_cast<char>(0x20 + rng.Below(95));
        return s;
      }
      case 4: {
        nlohmann::json a = nlohmann::json::array();
        for (uint64_t i = rng.Below(4); i > 0; --i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        nlohmann::json o = nlohmann::json::object();
        for (uint64_t i = rng.Below(4); i > 0; --i) o["k" + std::to_string(i)] = value(depth + 1);
        return o;
      }
    }
  };
  for (int i = 0; i < 300; ++i) {
    nlohmann::json o = nlohmann::json::object();
    o["v"] = value(0);
    const std::string doc = o.dump(i % 2 == 0 ? -1 : 1);
    EXPECT_TRUE(Accepts(doc)) << doc;
  }
  const std::string alphabet = "{}[]:,\"\\ 0123456789.-+eEtrufalsn\xc3\xa9";
  int complete = 0;
  for (int i = 0; i < 20000; ++i) {
    JsonMachine m;
    std::string doc;
    for (int k = 0; k < 40 && !m.complete(); ++k) {
      const char c = alphabet[rng.Below(alphabet.size())];
      if (m.Feed(static_cast<uint8_t>(c))) doc += c;
    }
    if (!m.complete()) continue;
    ++complete;
    const auto parsed = nlohmann::json::parse(doc, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(parsed.is_discarded()) << doc;
    EXPECT_TRUE(parsed.is_object()) << doc;
  }
  EXPECT_GT(complete, 100);
}

// The mask over a real vocabulary: exactly the tokens whose bytes the
// machine takes, end-of-generation and control tokens never.
TEST(JsonTokenMask, AllowsExactlyTheTokensTheMachineAccepts) {
  const testing::TinyModel tiny = testing::MakeTinyModel();
  const text::Tokenizer& tok = tiny.model->tokenizer();
  const JsonTokenMask mask(tok);
  for (const char* prefix : {"", "{", "{\"a", "{\"a\":", "{\"a\":1", "{\"a\":[tr", "{\"a\":\"\\",
                             "{\"a\":\"x y", "{\"a\":\"\xc3", "{\"a\":\"\\ud83d"}) {
    JsonMachine m;
    ASSERT_TRUE(m.FeedAll(prefix)) << prefix;
    std::vector<int32_t> want;
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
      if (tok.IsEog(id) || tok.Piece(id).empty()) continue;
      JsonMachine copy = m;
      if (copy.FeedAll(tok.Piece(id))) want.push_back(id);
    }
    EXPECT_EQ(mask.Allowed(m), want) << "after '" << prefix << "'";
    EXPECT_EQ(*mask.AllowedCached(m), want) << "after '" << prefix << "'";
    EXPECT_EQ(*mask.AllowedCached(m), want) << "memo, after '" << prefix << "'";
    EXPECT_FALSE(want.empty()) << prefix;
  }
}

}  // namespace
}  // namespace strata::grammar
