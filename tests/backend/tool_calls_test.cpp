#include "backend/tool_calls.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "util/random.h"

namespace strata::backend {
namespace {

using text::ToolSyntax;

struct Parsed {
  std::string text;
  std::vector<ToolCall> calls;  // the deltas joined
  size_t deltas = 0;
  std::string fragments;  // "|" between the argument fragments of call 0 (streaming shape)
};

// Feeds `pieces` one Push each and joins what comes out.
Parsed Parse(ToolSyntax syntax, const std::vector<std::string>& pieces, bool parallel = true) {
  ToolCallParser p({.syntax = syntax, .parallel = parallel, .id_seed = "seed"});
  Parsed out;
  std::vector<ToolCallDelta> deltas;
  for (const std::string& piece : pieces) {
    std::vector<ToolCallDelta> step;  // what one Push gives (a caller sends it as one event)
    p.Push(piece, &out.text, &step);
    deltas.insert(deltas.end(), step.begin(), step.end());
  }
  p.Finish(&out.text, &deltas);
  out.deltas = deltas.size();
  for (const ToolCallDelta& d : deltas) {
    if (static_cast<size_t>(d.index) == out.calls.size()) {
      EXPECT_FALSE(d.id.empty()) << "the first piece of a call carries its id";
      EXPECT_FALSE(d.name.empty());
      out.calls.push_back({d.id, d.name, ""});
    } else {
      EXPECT_TRUE(d.id.empty() && d.name.empty()) << "only the first piece names the call";
    }
    if (static_cast<size_t>(d.index) >= out.calls.size()) {
      ADD_FAILURE() << "a piece of call " << d.index << " before its first";
      continue;
    }
    out.calls[static_cast<size_t>(d.index)].arguments += d.arguments;
    if (d.index == 0 && !d.arguments.empty()) out.fragments += d.arguments + "|";
  }
  return out;
}

// Every split of `s` into one-byte pieces.
std::vector<std::string> Bytes(std::string_view s) {
  std::vector<std::string> out;
  for (char c : s) out.emplace_back(1, c);
  return out;
}

TEST(ToolCallParser, TagsCallAfterTextNeverShowsMarkup) {
  const std::string out =
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  for (const auto& pieces : {std::vector<std::string>{out}, Bytes(out)}) {
    const Parsed p = Parse(ToolSyntax::kTags, pieces);
    EXPECT_EQ(p.text, "Let me look.");
    ASSERT_EQ(p.calls.size(), 1u);
    EXPECT_EQ(p.calls[0].name, "get_weather");
    EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Paris\"}");
    EXPECT_EQ(p.calls[0].id, ToolCallParser::CallId("seed", 0));
  }
  // Byte by byte, the arguments stream in pieces as they are generated.
  EXPECT_GT(Parse(ToolSyntax::kTags, Bytes(out)).deltas, 5u);
}

TEST(ToolCallParser, SeveralTagCallsAndWhitespaceBetweenThem) {
  const std::string out =
      "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
      "\"b\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n";
  const Parsed p = Parse(ToolSyntax::kTags, Bytes(out));
  EXPECT_EQ(p.text, "");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].name, "a");
  EXPECT_EQ(p.calls[0].arguments, "{}");
  EXPECT_EQ(p.calls[1].name, "b");
  EXPECT_EQ(p.calls[1].arguments, "{\"x\": [1, {\"y\": \"}\"}]}");
  EXPECT_NE(p.calls[0].id, p.calls[1].id);
  // Not parallel: the first call is the last.
  const Parsed one = Parse(ToolSyntax::kTags, {out}, /*parallel=*/false);
  EXPECT_EQ(one.calls.size(), 1u);
}

TEST(ToolCallParser, ArgumentsBeforeNameAndAsAString) {
  const Parsed p =
      Parse(ToolSyntax::kTags,
            Bytes("<tool_call>{\"arguments\": {\"q\": 1}, \"name\": \"f\"}</tool_call>"));
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "f");
  EXPECT_EQ(p.calls[0].arguments, "{\"q\": 1}");
  const Parsed s =
      Parse(ToolSyntax::kTags,
            {"<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": 2}\"}</tool_call>"});
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].arguments, "{\"q\": 2}");
  // No arguments at all: an empty object.
  const Parsed none = Parse(ToolSyntax::kTags, {"<tool_call>{\"name\": \"f\"}</tool_call>"});
  ASSERT_EQ(none.calls.size(), 1u);
  EXPECT_EQ(none.calls[0].arguments, "{}");
}

TEST(ToolCallParser, TextThatOnlyLooksLikeMarkupIsText) {
  EXPECT_EQ(Parse(ToolSyntax::kTags, Bytes("a <tool x> b < c")).text, "a <tool x> b < c");
  EXPECT_EQ(Parse(ToolSyntax::kTags, {"ends with <tool_ca"}).text, "ends with <tool_ca");
  // Broken JSON before a name went out: the model's words, as text.
  const Parsed broken = Parse(ToolSyntax::kTags, Bytes("<tool_call>{name: 1}</tool_call> ok"));
  EXPECT_TRUE(broken.calls.empty());
  EXPECT_EQ(broken.text, "<tool_call>{name: 1}</tool_call> ok");
  // No name: text too.
  const Parsed nameless = Parse(ToolSyntax::kTags, {"<tool_call>{\"x\": 1}</tool_call>"});
  EXPECT_TRUE(nameless.calls.empty());
  EXPECT_EQ(nameless.text, "<tool_call>{\"x\": 1}</tool_call>");
  // Whitespace inside text is kept.
  EXPECT_EQ(Parse(ToolSyntax::kTags, Bytes("a \n b  ")).text, "a \n b  ");
}

TEST(ToolCallParser, CutShortCallKeepsWhatWentOut) {
  const Parsed p =
      Parse(ToolSyntax::kTags, Bytes("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1"));
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].arguments, "{\"a\": 1");
  const Parsed early = Parse(ToolSyntax::kTags, Bytes("<tool_call>{\"na"));
  EXPECT_TRUE(early.calls.empty());
  EXPECT_EQ(early.text, "<tool_call>{\"na");
}

TEST(ToolCallParser, Llama3WholeAnswerIsTheCall) {
  const Parsed p =
      Parse(ToolSyntax::kLlama3,
            Bytes("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}"));
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Oslo\"}");
  EXPECT_EQ(p.text, "");
  const Parsed two =
      Parse(ToolSyntax::kLlama3, {"{\"name\": \"a\", \"parameters\": {}}; {\"name\": "
                                  "\"b\", \"parameters\": {\"k\": true}}"});
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[1].arguments, "{\"k\": true}");
  // Text answers, even ones with braces later, are text.
  EXPECT_EQ(Parse(ToolSyntax::kLlama3, Bytes("Use {x} here")).text, "Use {x} here");
  // JSON that is not a call is text.
  EXPECT_EQ(Parse(ToolSyntax::kLlama3, Bytes("{\"answer\": 42}")).text, "{\"answer\": 42}");
}

TEST(ToolCallParser, MistralList) {
  const Parsed p = Parse(ToolSyntax::kMistral,
                         Bytes("[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": 1}}, "
                               "{\"name\": \"b\", \"arguments\": {}, \"id\": \"abcdefghi\"}]"));
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].arguments, "{\"x\": 1}");
  EXPECT_EQ(p.calls[1].name, "b");
  EXPECT_EQ(p.text, "");
  EXPECT_EQ(Parse(ToolSyntax::kMistral, {"[TOOL_X] text"}).text, "[TOOL_X] text");
  EXPECT_EQ(Parse(ToolSyntax::kMistral, Bytes("[TOOL_CALLS] nope")).text, "[TOOL_CALLS] nope");
}

// Whatever the bytes, the parser never crashes, and with no markup in the
// input the text comes out unchanged.
TEST(ToolCallParser, RandomBytesAreSafeAndPlainTextIsUnchanged) {
  util::Rng rng(7);
  const std::string alphabet = "<>[]{}\":,tool_cal/TOCLS nme\\ax1\n";
  for (int round = 0; round < 2000; ++round) {
    std::string s;
    const int len = static_cast<int>(rng.Below(60));
    for (int i = 0; i < len; ++i) s += alphabet[rng.Below(alphabet.size())];
    for (ToolSyntax syntax : {ToolSyntax::kTags, ToolSyntax::kLlama3, ToolSyntax::kMistral}) {
      std::vector<std::string> pieces;
      for (size_t i = 0; i < s.size();) {
        const size_t n = 1 + rng.Below(5);
        pieces.push_back(s.substr(i, n));
        i += n;
      }
      const Parsed p = Parse(syntax, pieces);
      if (p.calls.empty()) {
        EXPECT_LE(p.text.size(), s.size());
      }
    }
    std::string plain;
    for (char c : s) {
      if (c != '<' && c != '[' && c != '{') plain += c;
    }
    EXPECT_EQ(Parse(ToolSyntax::kTags, {plain}).text, plain);
    EXPECT_EQ(Parse(ToolSyntax::kMistral, {plain}).text, plain);
  }
}

// What the grammar of forced calls lets a decoder write, the parser reads
// back as calls and nothing else: random walks through the grammar (a
// random accepted byte at each step) in each syntax, parsed.
TEST(ToolCallGrammar, EverySentenceParsesBackIntoValidCalls) {
  Request r;
  r.tools = {{"get_weather", "", R"({"type":"object","properties":{"city":{"type":"string",
              "maxLength":6},"unit":{"enum":["c","f"]}},"required":["city","unit"]})"},
             {"now", "", ""}};
  util::Rng rng(11);
  for (ToolSyntax syntax : {ToolSyntax::kTags, ToolSyntax::kLlama3, ToolSyntax::kMistral}) {
    for (const bool parallel : {true, false}) {
      r.parallel_tool_calls = parallel;
      r.tool_choice = {ToolChoice::Mode::kRequired, ""};
      auto gbnf = ToolCallGrammar(syntax, r);
      ASSERT_TRUE(gbnf.ok()) << gbnf.status().ToString();
      auto g = grammar::Grammar::Parse(*gbnf);
      ASSERT_TRUE(g.ok()) << g.status().ToString() << "\n" << *gbnf;
      for (int walk = 0; walk < 40; ++walk) {
        grammar::GrammarMatcher m(**g);
        std::string text;
        while (text.size() < 4000) {
          if (m.accepting() && (!m.can_continue() || rng.Below(4) == 0)) break;
          std::vector<uint8_t> ok;
          for (int b = 0; b < 256; ++b) {
            grammar::GrammarMatcher probe = m;
            if (probe.Feed(static_cast<uint8_t>(b))) ok.push_back(static_cast<uint8_t>(b));
          }
          ASSERT_FALSE(ok.empty()) << "a dead state after " << text;
          // Mostly printable ASCII, so strings end in reasonable time.
          std::vector<uint8_t> ascii;
          for (uint8_t b : ok) {
            if (b >= 0x20 && b < 0x7f) ascii.push_back(b);
          }
          const std::vector<uint8_t>& pick = ascii.empty() || rng.Below(10) == 0 ? ok : ascii;
          const uint8_t b = pick[rng.Below(pick.size())];
          ASSERT_TRUE(m.Feed(b));
          text += static_cast<char>(b);
        }
        ASSERT_TRUE(m.accepting()) << text;
        const Parsed p = Parse(syntax, Bytes(text), parallel);
        EXPECT_EQ(p.text, "") << text;
        ASSERT_GE(p.calls.size(), 1u) << text;
        if (!parallel) {
          EXPECT_EQ(p.calls.size(), 1u) << text;
        }
        for (const ToolCall& c : p.calls) {
          const auto args = nlohmann::json::parse(c.arguments, nullptr, false);
          ASSERT_TRUE(args.is_object()) << c.arguments;
          if (c.name == "get_weather") {
            ASSERT_TRUE(args["city"].is_string()) << c.arguments;
            size_t chars = 0;  // maxLength counts characters, not bytes
            for (unsigned char ch : args["city"].get<std::string>()) chars += (ch & 0xC0) != 0x80;
            EXPECT_LE(chars, 6u) << c.arguments;
            EXPECT_TRUE(args["unit"] == "c" || args["unit"] == "f") << c.arguments;
          } else {
            EXPECT_EQ(c.name, "now");
            EXPECT_EQ(args, nlohmann::json::object());
          }
        }
      }
    }
  }
  // Named: only that tool. An unknown keyword in its schema is an error
  // naming the tool's field.
  r.tool_choice = {ToolChoice::Mode::kNamed, "now"};
  auto named = ToolCallGrammar(ToolSyntax::kTags, r);
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->find("get_weather"), std::string::npos);
  r.tools[1].parameters =
      R"({"type":"object","properties":{"n":{"type":"number","multipleOf":2}}})";
  auto bad = ToolCallGrammar(ToolSyntax::kTags, r);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().field(), "tools[1].function.parameters");
  EXPECT_NE(bad.status().message().find("multipleOf"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace strata::backend
