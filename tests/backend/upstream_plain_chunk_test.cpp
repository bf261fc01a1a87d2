// The OpenAI stream decoder reads the plain chunk without a DOM: wherever
// that reader accepts a chunk, the events (and errors) must be exactly the
// DOM reader's. Each body is decoded as it is and once more with every
// "logprobs":null written as "logprobs":{} (the same length, the same
// meaning to the DOM reader, and outside the plain shape, so the DOM reader
// reads it).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "backend/decode_testing.h"

namespace strata::backend::upstream {
namespace {

using decode_testing::Decode;
using decode_testing::Decoded;
using decode_testing::ShowAll;
using decode_testing::Sse;
using decode_testing::Stream;

std::string ForceDom(std::string body) {
  const std::string from = "\"logprobs\":null";
  const std::string to = "\"logprobs\":{}  ";
  for (size_t at = body.find(from); at != std::string::npos; at = body.find(from, at)) {
    body.replace(at, from.size(), to);
  }
  return body;
}

std::string DecodedAs(const Stream& s, const std::string& body) {
  const Decoded d = Decode(s, body);
  return ShowAll(d.events) + d.error.ToString() + (d.complete ? " complete" : " open");
}

void ExpectSameAsDom(const Stream& s, const std::string& body) {
  ASSERT_EQ(DecodedAs(s, body), DecodedAs(s, ForceDom(body))) << body;
}

std::string ChunkOf(std::string_view choice) {
  return fmt::format(
      R"({{"choices":[{}],"created":1,"id":"chatcmpl-1","model":"m","object":"chat.completion.chunk"}})",
      choice);
}

const std::string kUsageChunk =
    R"({"choices":[],"usage":{"completion_tokens":3,"prompt_tokens":21,"prompt_tokens_details":{"cached_tokens":5},"total_tokens":24}})";

// A whole stream: `deltas` (choice objects), a finish, the usage, [DONE].
std::string PlainBody(const std::vector<std::string>& choices, std::string_view finish = "stop") {
  std::string body;
  for (const std::string& c : choices) body += Sse(ChunkOf(c));
  body += Sse(ChunkOf(
      fmt::format(R"({{"delta":{{}},"finish_reason":"{}","index":0,"logprobs":null}})", finish)));
  body += Sse(kUsageChunk) + Sse("[DONE]");
  return body;
}

std::string DeltaOf(std::string_view content_json) {
  return fmt::format(
      R"({{"delta":{{"content":{}}},"finish_reason":null,"index":0,"logprobs":null}})",
      content_json);
}

// One to three random one-byte edits of `s` (a byte of JSON's alphabet
// replaced, inserted or deleted).
void RandomEdits(std::string& s, std::mt19937& rng) {
  static constexpr std::string_view kAlphabet = "{}[]\",:0123456789-.eE \\unlltrufasx";
  const int edits = 1 + static_cast<int>(rng() % 3);
  for (int k = 0; k < edits && !s.empty(); ++k) {
    const size_t at = rng() % s.size();
    const char ch = kAlphabet[rng() % kAlphabet.size()];
    switch (rng() % 3) {
      case 0:
        s[at] = ch;
        break;
      case 1:
        s.insert(s.begin() + static_cast<std::ptrdiff_t>(at), ch);
        break;
      default:
        s.erase(at, 1);
        break;
    }
  }
}

TEST(PlainChunk, ReadsWhatTheDomReaderReads) {
  const Stream chat;
  const std::vector<std::string> bodies = {
      PlainBody(
          {R"({"delta":{"content":"","role":"assistant"},"finish_reason":null,"index":0,"logprobs":null})",
           DeltaOf(R"("Hello")"), DeltaOf(R"(" world")")}),
      PlainBody({DeltaOf(R"("h\u00e9llo \ud83d\ude00 \n\t\"q\" \\ \/ \b\f\r")"),
                 DeltaOf(R"("héllo 😀")")}),
      PlainBody(
          {R"(  {"delta" : { "content" : "spaced" } , "finish_reason" : null , "index" : 0 , "logprobs":null}  )"}),
      PlainBody(
          {DeltaOf("null"), R"({"delta":null,"finish_reason":null,"index":0,"logprobs":null})",
           R"({"delta":{"role":"assistant","tool_calls":[{"id":"x","function":{"arguments":"{}"}}]},"index":null,"logprobs":null})"}),
      PlainBody({DeltaOf(R"("a")")}, "length"),
      PlainBody({DeltaOf(R"("a")")}, "content_filter"),
      PlainBody(
          {R"({"delta":{"content":"x"},"finish_reason":null,"index":0,"logprobs":null,"extra":[1,-2.5e3,true,false,null,{"k":[[]]}]})"}),
      // Keys with escapes (read decoded: "d\u0065lta" is "delta"), and escaped
      // strings in skipped members.
      PlainBody(
          {R"({"d\u0065lta":{"c\u006fntent":"esc"},"finish_reason":null,"\u0069ndex":0,"logprobs":null})",
           R"({"delta":{"content":"x"},"index":0,"logprobs":null,"k\"ey":{"\u00e9\n":"\ud83d\ude00\"","a\\b":["\t"]}})"}),
      PlainBody({R"({"delta":{"content":"x"},"index":0,"logprobs":null,"bad":"\u12"})"}),
      PlainBody({R"({"delta":{"content":"x"},"index":0,"logprobs":null,"b\qad":1})"}),
      // Malformed or outside the plain shape: the DOM reader decides.
      PlainBody({R"({"delta":{"content":"x","content":"y"},"index":0,"logprobs":null})"}),
      PlainBody({R"({"delta":{"content":"x"},"index":0,"index":0,"logprobs":null})"}),
      PlainBody({R"({"delta":{"content":"x"},"index":1,"logprobs":null})"}),
      PlainBody({R"({"delta":{"content":"x"},"index":-1,"logprobs":null})"}),
      PlainBody({R"({"delta":{"content":"x"},"index":0.0,"logprobs":null})"}),
      PlainBody({R"({"delta":{"content":"x"},"index":"0","logprobs":null})"}),
      PlainBody({R"({"delta":{"content":7},"index":0,"logprobs":null})"}),
      PlainBody({R"({"delta":"text","index":0,"logprobs":null})"}),
      PlainBody({R"({"delta":{"content":"x"},"finish_reason":3,"index":0,"logprobs":null})"}),
      PlainBody({R"({"delta":{"content":"x",},"index":0,"logprobs":null})"}),
      PlainBody({R"({"delta":{} "index":0,"logprobs":null})"}),
      PlainBody({R"({"delta":{"content":"x"},"index":00,"logprobs":null})"}),
      PlainBody({"{\"delta\":{\"content\":\"a\x01b\"},\"index\":0,\"logprobs\":null}"}),
      PlainBody({R"({"delta":{"content":"\ud800"},"index":0,"logprobs":null})"}),
      PlainBody({R"({"delta":{"content":"\udc00x"},"index":0,"logprobs":null})"}),
      PlainBody({R"({"delta":{"content":"\x"},"index":0,"logprobs":null})"}),
      PlainBody({"{\"delta\":{\"content\":\"\xff\xfe\"},\"index\":0,\"logprobs\":null}"}),
      PlainBody({R"({"delta":{"content":"x"},"index":0,"logprobs":null}] , "x")"}),
      PlainBody({R"({"delta":{"content":"x"},"index":0,"logprobs":null,"deep":)" +
                 std::string(60, '[') + std::string(60, ']') + "}"}),
  };
  for (const std::string& body : bodies) ExpectSameAsDom(chat, body);
}

TEST(PlainChunk, StopReasonsAndUsageAsTheDomReaderReadsThem) {
  const Stream chat{.stops = {"###"}};
  const std::string stop =
      R"({"delta":{},"finish_reason":"stop","index":0,"logprobs":null,"stop_reason":"###"})";
  const std::string token_stop =
      R"({"delta":{},"finish_reason":"stop","index":0,"logprobs":null,"stop_reason":128001})";
  for (const std::string& fin : {stop, token_stop}) {
    ExpectSameAsDom(chat, Sse(ChunkOf(DeltaOf(R"("a")"))) + Sse(ChunkOf(fin)) + Sse(kUsageChunk) +
                              Sse("[DONE]"));
  }
  for (const std::string usage :
       {R"({"choices":[],"usage":{"prompt_tokens":null,"completion_tokens":2}})",
        R"({"choices":[],"usage":{"prompt_tokens":4,"prompt_tokens_details":null}})",
        R"({"choices":[],"usage":{"prompt_tokens":4,"prompt_tokens_details":{"cached_tokens":9}}})",
        R"({"choices":[],"usage":{"prompt_tokens":99999999999,"completion_tokens":1}})",
        R"({"choices":[],"usage":{"prompt_tokens":1.5}})",
        R"({"choices":[],"usage":{"prompt_tokens":-1}})",
        R"({"choices":[],"usage":{"prompt_tokens":1,"prompt_tokens":2}})",
        R"({"choices":[],"usage":null})", R"({"choices":null,"usage":{"prompt_tokens":3}})",
        R"({"usage":{"prompt_tokens":3},"error":null})",
        R"({"choices":[],"error":{"message":"boom","type":"server_error"}})"}) {
    ExpectSameAsDom(
        chat, Sse(ChunkOf(DeltaOf(R"("a")"))) + Sse(ChunkOf(stop)) + Sse(usage) + Sse("[DONE]"));
  }
  // Two choices, one chunk each and one with both.
  const Stream two{.n = 2};
  ExpectSameAsDom(
      two,
      Sse(ChunkOf(
          R"({"delta":{"content":"a"},"index":1,"logprobs":null},{"delta":{"content":"b"},"index":0,"logprobs":null})")) +
          Sse(ChunkOf(
              R"({"delta":{},"finish_reason":"stop","index":0,"logprobs":null},{"delta":{},"finish_reason":"length","index":1,"logprobs":null})")) +
          Sse(ChunkOf(R"({"delta":{"content":"late"},"index":0,"logprobs":null})")) +
          Sse("[DONE]"));
}

TEST(PlainChunk, CompletionsTextAsTheDomReaderReadsIt) {
  const Stream completions{.chat = false};
  ExpectSameAsDom(
      completions,
      Sse(R"({"choices":[{"text":"Once","index":0,"logprobs":null,"finish_reason":null}]})") +
          Sse(R"({"choices":[{"text":null,"index":0,"logprobs":null,"finish_reason":"length"}]})") +
          Sse(kUsageChunk) + Sse("[DONE]"));
  ExpectSameAsDom(completions,
                  Sse(R"({"choices":[{"text":1,"index":0,"logprobs":null}]})") + Sse("[DONE]"));
}

// Random edits of a plain stream: wherever the plain reader accepts a
// chunk, it must agree with the DOM reader.
TEST(PlainChunk, AgreesWithTheDomReaderOnRandomEdits) {
  const Stream chat{.n = 2, .stops = {"###"}};
  const std::vector<std::string> chunks = {
      ChunkOf(DeltaOf(R"("Hel\u006co")")),
      ChunkOf(R"({"delta":{"content":" w"},"finish_reason":null,"index":1,"logprobs":null})"),
      ChunkOf(
          R"({"delta":{},"finish_reason":"stop","index":0,"logprobs":null,"stop_reason":"###"},{"delta":{},"finish_reason":"length","index":1,"logprobs":null})"),
      kUsageChunk};
  std::mt19937 rng(20261202);
  for (int round = 0; round < 4000; ++round) {
    std::vector<std::string> edited = chunks;
    RandomEdits(edited[rng() % edited.size()], rng);
    std::string body;
    for (const std::string& e : edited) body += Sse(e);
    body += Sse("[DONE]");
    ExpectSameAsDom(chat, body);
  }
}

// A chunk that repeats an earlier plain chunk's bytes around its text is
// read from its text alone: every such chunk, and every near miss, must
// still decode as the DOM reader decodes it.
TEST(PlainChunk, AChunkOfARepeatedShapeReadsAsTheDomReaderReadsIt) {
  const Stream chat{.n = 2};
  const std::string first = ChunkOf(DeltaOf(R"("a")"));
  const std::vector<std::string> texts = {R"("b")",
                                          R"("")",
                                          R"("h\u00e9\n\"q\" \\")",
                                          R"("\ud83d\ude00")",
                                          R"("héllo 😀")",
                                          R"(  "spaced"  )",
                                          "null",
                                          "7",
                                          R"("x","content":"y")",
                                          R"("x"},"delta":{"content":"y")",
                                          R"("a"}],"x":{"y":")",
                                          R"("\ud800")",
                                          R"("\x")",
                                          R"("open)",
                                          R"("a\")",
                                          R"(")",
                                          "\"a\x01b\"",
                                          "\"\xff\xfe\"",
                                          "\"caf\xc3\""};
  for (const std::string& text : texts) {
    // The shape kept, then the chunk, then one like the first again.
    ExpectSameAsDom(
        chat,
        Sse(first) + Sse(ChunkOf(DeltaOf(text))) + Sse(first) + Sse(ChunkOf(DeltaOf(R"("c")"))) +
            Sse(ChunkOf(
                R"({"delta":{},"finish_reason":"stop","index":0,"logprobs":null},{"delta":{},"finish_reason":"stop","index":1,"logprobs":null})")) +
            Sse("[DONE]"));
  }
  // The same bytes around the text of another choice, or after its finish.
  const std::string other =
      ChunkOf(R"({"delta":{"content":"o"},"finish_reason":null,"index":1,"logprobs":null})");
  const std::string finish_0 =
      ChunkOf(R"({"delta":{},"finish_reason":"length","index":0,"logprobs":null})");
  ExpectSameAsDom(
      chat, Sse(other) + Sse(other) + Sse(first) + Sse(finish_0) + Sse(first) + Sse("[DONE]"));
  ExpectSameAsDom(
      chat, Sse(first) + Sse(finish_0) + Sse(ChunkOf(DeltaOf(R"("")"))) + Sse(other) +
                Sse(ChunkOf(R"({"delta":{},"finish_reason":"stop","index":1,"logprobs":null})")) +
                Sse("[DONE]"));
  // Random edits anywhere in a run of chunks of one shape.
  std::mt19937 rng(20261206);
  for (int round = 0; round < 4000; ++round) {
    std::vector<std::string> chunks = {first, ChunkOf(DeltaOf(R"("Hel\u006co")")),
                                       ChunkOf(DeltaOf(R"(" w")")), ChunkOf(DeltaOf(R"("!")"))};
    RandomEdits(chunks[1 + rng() % 3], rng);
    std::string body;
    for (const std::string& e : chunks) body += Sse(e);
    body += Sse(ChunkOf(
        R"({"delta":{},"finish_reason":"stop","index":0,"logprobs":null},{"delta":{},"finish_reason":"stop","index":1,"logprobs":null})"));
    body += Sse("[DONE]");
    ExpectSameAsDom(chat, body);
  }
}

std::string WholeAs(bool chat, int32_t n, const std::vector<std::string>& stops,
                    const std::string& body) {
  std::vector<Event> events;
  const util::Status s = DecodeWholeResponse(Api::kOpenAI, chat, n, stops, body, &events);
  return ShowAll(events) + s.ToString();
}

// A whole answer: the plain reader (its "message" for "delta") finds what
// the DOM reader finds, on fixed answers and random edits of them.
TEST(PlainChunk, ReadsAWholeAnswerAsTheDomReaderDoes) {
  const std::vector<std::string> stops = {"###"};
  const std::string chat_answer =
      R"({"choices":[{"finish_reason":"length","index":0,"logprobs":null,"message":{"content":"::::","refusal":null,"role":"assistant"}}],"created":1796226978,"id":"chatcmpl-1","model":"demo","object":"chat.completion","system_fingerprint":"strata","usage":{"completion_tokens":32,"prompt_tokens":21,"prompt_tokens_details":{"cached_tokens":0},"total_tokens":53}})";
  const std::string two =
      R"({"choices":[{"finish_reason":"stop","index":1,"logprobs":null,"message":{"content":"b"},"stop_reason":"###"},{"finish_reason":null,"index":0,"logprobs":null,"message":{"content":"a\u00e9"}}],"usage":{"prompt_tokens":3}})";
  const std::string completion =
      R"({"choices":[{"finish_reason":"length","index":0,"logprobs":null,"text":"Once"}],"usage":null})";
  for (
      const std::string& body :
      {chat_answer, two, std::string(R"({"choices":[],"usage":{"prompt_tokens":1}})"),
       std::string(R"({"usage":{"prompt_tokens":1}})"), std::string(R"({"choices":null})"),
       std::string(
           R"({"choices":[{"index":0,"logprobs":null,"message":{"content":"x"}},{"index":0,"logprobs":null}]})"),
       std::string(R"({"choices":[{"index":1,"logprobs":null}]})")}) {
    for (int32_t n : {1, 2}) {
      EXPECT_EQ(WholeAs(true, n, stops, body), WholeAs(true, n, stops, ForceDom(body))) << body;
    }
  }
  EXPECT_EQ(WholeAs(false, 1, {}, completion), WholeAs(false, 1, {}, ForceDom(completion)));
  std::mt19937 rng(99);
  for (int round = 0; round < 3000; ++round) {
    std::string body = round % 2 ? chat_answer : two;
    RandomEdits(body, rng);
    ASSERT_EQ(WholeAs(true, 2, stops, body), WholeAs(true, 2, stops, ForceDom(body))) << body;
  }
}

}  // namespace
}  // namespace strata::backend::upstream
