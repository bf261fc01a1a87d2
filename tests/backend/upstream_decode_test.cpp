// The upstream wire's response side for OpenAI-compatible upstreams
// (backend/upstream_wire.h): streams as OpenAI and vLLM send them, decoded
// into events; every split of the bytes giving the same events; several
// choices; errors mid-stream, truncated streams and malformed input;
// logprobs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/decode_testing.h"
#include "backend/upstream_wire.h"
#include "util/utf8.h"

namespace strata::backend::upstream {
namespace {

using decode_testing::Decode;
using decode_testing::DecodeCut;
using decode_testing::Decoded;
using decode_testing::ExpectSplitInvariant;
using decode_testing::Show;
using decode_testing::ShowAll;
using decode_testing::Sse;
using decode_testing::Stream;
using util::ErrorReason;
using util::StatusCode;

// --- OpenAI, as OpenAI sends it -------------------------------------------------

// gpt-4o's chat stream with stream_options.include_usage.
const char* const kOpenAIChat =
    R"(data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":"Hello"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{"content":" wörld"},"logprobs":null,"finish_reason":null}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}],"usage":null}

data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o","system_fingerprint":"fp_1","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14,"prompt_tokens_details":{"cached_tokens":4,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}

data: [DONE]

)";

TEST(DecodeOpenAI, AChatStreamGivesItsDeltasThenOneFinishWithUsage) {
  const Decoded d = Decode({}, kOpenAIChat);
  EXPECT_TRUE(d.error.ok()) << d.error.ToString();
  EXPECT_EQ(ShowAll(d.events),
            "delta[0] \"Hello\"\n"
            "delta[0] \" wörld\"\n"
            "finish[0] end_of_turn stop= status=OK usage=12/4/0/2 tokens=2\n");
  EXPECT_TRUE(d.complete);
  EXPECT_TRUE(d.started);
}

TEST(DecodeOpenAI, EverySplitOfTheBytesGivesTheSameEvents) {
  ExpectSplitInvariant({}, kOpenAIChat);
}

TEST(DecodeOpenAI, TheFinishWaitsForTheUsageChunk) {
  const std::string body = kOpenAIChat;
  const size_t usage_at = body.rfind("data: ", body.find("\"choices\":[],"));
  ASSERT_NE(usage_at, std::string::npos);
  StreamDecoder d(Api::kOpenAI, true, 1, {});
  std::vector<Event> events;
  ASSERT_TRUE(d.Feed(body.substr(0, usage_at), &events).ok());
  EXPECT_EQ(events.size(), 2u);  // the two deltas; the finish is held
  EXPECT_FALSE(d.complete());
  ASSERT_TRUE(d.Feed(body.substr(usage_at), &events).ok());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].kind, Event::Kind::kFinish);
  EXPECT_EQ(events[2].usage.prompt_tokens, 12);
  EXPECT_TRUE(d.complete());
  EXPECT_TRUE(d.End(&events).ok());
}

TEST(DecodeOpenAI, WithoutAUsageChunkDoneReleasesTheFinish) {
  const std::string body =
      Sse(R"({"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]})") +
      Sse(R"({"choices":[{"index":0,"delta":{},"finish_reason":"length"}]})") + Sse("[DONE]");
  const Decoded d = Decode({}, body);
  EXPECT_TRUE(d.error.ok());
  EXPECT_EQ(ShowAll(d.events),
            "delta[0] \"a\"\nfinish[0] length stop= status=OK usage=0/0/0/0 tokens=0\n");
}

TEST(DecodeOpenAI, KeepAliveCommentsEmptyChoicesAndRoleOnlyDeltasAreSkipped) {
  const std::string body =
      ": keep-alive\n\n" + Sse(R"({"choices":[]})") +
      Sse(R"({"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]})") +
      ": ping\r\n\r\n" +
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}"
      "\r\n\r\n" +
      Sse("[DONE]");
  const Decoded d = Decode({}, body);
  EXPECT_TRUE(d.error.ok()) << d.error.ToString();
  EXPECT_EQ(ShowAll(d.events),
            "delta[0] \"x\"\nfinish[0] end_of_turn stop= status=OK usage=0/0/0/0 tokens=0\n");
}

TEST(DecodeOpenAI, OtherFinishReasonsAreEndsOfTurn) {
  for (const char* reason : {"content_filter", "abort"}) {
    const std::string body =
        Sse(fmt::format(R"({{"choices":[{{"index":0,"delta":{{}},"finish_reason":"{}"}}]}})",
                        reason)) +
        Sse("[DONE]");
    const Decoded d = Decode({}, body);
    ASSERT_EQ(d.events.size(), 1u) << reason;
    EXPECT_EQ(d.events[0].finish, FinishReason::kEndOfTurn) << reason;
  }
}

// --- vLLM ---------------------------------------------------------------------

// vLLM's /v1/completions stream: stop_reason names the matched stop string.
const char* const kVllmCompletion =
    R"(data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}

data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" end","logprobs":null,"finish_reason":null,"stop_reason":null}],"usage":null}

data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop","stop_reason":"END"}],"usage":null}

data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3,"prompt_tokens_details":null}}

data: [DONE]

)";

TEST(DecodeVllm, AStopReasonThatIsARequestStopIsAStopString) {
  const Decoded d = Decode({.chat = false, .stops = {"\n", "END"}}, kVllmCompletion);
  EXPECT_TRUE(d.error.ok()) << d.error.ToString();
  EXPECT_EQ(ShowAll(d.events),
            "delta[0] \" the\"\n"
            "delta[0] \" end\"\n"
            "finish[0] stop_string stop=END status=OK usage=5/0/0/3 tokens=3\n");
  ExpectSplitInvariant({.chat = false, .stops = {"END"}}, kVllmCompletion);
}

TEST(DecodeVllm, AStopReasonNotAmongTheRequestsStopsOrATokenIdIsAnEndOfTurn) {
  EXPECT_EQ(Decode({.chat = false, .stops = {"STOP"}}, kVllmCompletion).events.back().finish,
            FinishReason::kEndOfTurn);
  const std::string token_id =
      Sse(R"({"choices":[{"index":0,"text":"","finish_reason":"stop","stop_reason":128009}]})") +
      Sse("[DONE]");
  EXPECT_EQ(Decode({.chat = false, .stops = {"128009"}}, token_id).events.back().finish,
            FinishReason::kEndOfTurn);
}

TEST(DecodeVllm, ContinuousUsageOnEveryChunkOnlyUpdatesTheTotals) {
  const std::string body =
      Sse(R"({"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}],)"
          R"("usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}})") +
      Sse(R"({"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"length"}],)"
          R"("usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}})") +
      Sse(R"({"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}})") +
      Sse("[DONE]");
  const Decoded d = Decode({}, body);
  EXPECT_EQ(ShowAll(d.events),
            "delta[0] \"a\"\ndelta[0] \"b\"\n"
            "finish[0] length stop= status=OK usage=5/0/0/2 tokens=2\n");
}

// --- several choices -------------------------------------------------------------

const char* const kTwoChoices =
    R"(data: {"choices":[{"index":1,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

data: {"choices":[{"index":0,"delta":{"content":"A"},"finish_reason":null}]}

data: {"choices":[{"index":1,"delta":{"content":"B"},"finish_reason":null}]}

data: {"choices":[{"index":1,"delta":{},"finish_reason":"length"}]}

data: {"choices":[{"index":0,"delta":{"content":"A2"},"finish_reason":"stop"}]}

data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":3}}}

data: [DONE]

)";

TEST(DecodeOpenAI, SeveralChoicesInterleaveAndSplitTheCompletionTokens) {
  const Decoded d = Decode({.n = 2}, kTwoChoices);
  EXPECT_TRUE(d.error.ok()) << d.error.ToString();
  EXPECT_EQ(ShowAll(d.events),
            "delta[0] \"A\"\n"
            "delta[1] \"B\"\n"
            "delta[0] \"A2\"\n"
            "finish[0] end_of_turn stop= status=OK usage=7/3/0/3 tokens=3\n"
            "finish[1] length stop= status=OK usage=7/3/0/2 tokens=2\n");
  ExpectSplitInvariant({.n = 2}, kTwoChoices);
}

TEST(DecodeOpenAI, ChoiceIndexOutOfRangeIsAProtocolError) {
  const Decoded d = Decode({.n = 1}, kTwoChoices);
  EXPECT_EQ(d.error.reason(), ErrorReason::kUpstreamProtocol);
  EXPECT_NE(d.error.message().find("'choices[0].index' is 1, the request has 1 choice"),
            std::string::npos)
      << d.error.message();
  // The caller's Fail ends the one choice.
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].finish, FinishReason::kCancelled);
  EXPECT_EQ(d.events[0].status.reason(), ErrorReason::kUpstreamProtocol);
  EXPECT_TRUE(d.complete);
}

TEST(DecodeOpenAI, ChoiceCountsOutsideTheRangeAreClamped) {
  const std::string one =
      Sse(R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})") + Sse("[DONE]");
  EXPECT_TRUE(Decode({.n = 0}, one).error.ok());
  StreamDecoder d(Api::kOpenAI, true, 1 << 30, {});
  std::vector<Event> events;
  d.Fail(util::CancelledError("client left"), &events);
  EXPECT_EQ(events.size(), static_cast<size_t>(kMaxChoices));
}

// --- errors and broken streams ----------------------------------------------------

TEST(DecodeOpenAI, AnErrorMidStreamEndsEveryUnfinishedChoiceWithItsStatus) {
  const std::string body =
      Sse(R"({"choices":[{"index":0,"delta":{"content":"A"},"finish_reason":"stop"}]})") +
      Sse(R"({"choices":[{"index":1,"delta":{"content":"B"},"finish_reason":null}]})") +
      Sse(R"({"error":{"message":"Rate limit reached","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}})");
  const Decoded d = Decode({.n = 2}, body);
  EXPECT_TRUE(d.error.ok()) << "an upstream's error is the choices' outcome, not the decoder's";
  ASSERT_EQ(d.events.size(), 4u);
  EXPECT_EQ(Show(d.events[2]), "finish[0] end_of_turn stop= status=OK usage=0/0/0/0 tokens=0");
  EXPECT_EQ(d.events[3].finish, FinishReason::kCancelled);
  EXPECT_EQ(d.events[3].status.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(d.events[3].status.reason(), ErrorReason::kUpstreamRateLimited);
  EXPECT_NE(d.events[3].status.message().find("Rate limit reached"), std::string::npos);
  EXPECT_TRUE(d.complete);
  ExpectSplitInvariant({.n = 2}, body);
}

TEST(DecodeOpenAI, LlamaServersNumericErrorCodeIsAnHttpStatus) {
  const Decoded d = Decode(
      {}, Sse(R"({"error":{"code":503,"message":"Loading model","type":"unavailable_error"}})"));
  ASSERT_EQ(d.events.size(), 1u);
  EXPECT_EQ(d.events[0].status.reason(), ErrorReason::kUpstreamOverloaded);
}

TEST(DecodeOpenAI, AnErrorBeforeAnyEventIsFeedsErrorSoTheCallerMayRetry) {
  StreamDecoder d(Api::kOpenAI, true, 1, {});
  std::vector<Event> events;
  const util::Status s = d.Feed(
      Sse(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]})") +
          Sse(R"({"error":{"message":"busy","type":"server_error","code":"upstream_overloaded"}})"),
      &events);
  EXPECT_EQ(s.reason(), ErrorReason::kUpstreamOverloaded);
  EXPECT_NE(s.message().find("busy"), std::string::npos);
  EXPECT_TRUE(events.empty());
  EXPECT_FALSE(d.started());
  d.Fail(s, &events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].status, s);
  EXPECT_TRUE(d.started());
}

TEST(DecodeOpenAI, DoneBeforeEveryChoiceFinishedIsAProtocolError) {
  const std::string body =
      Sse(R"({"choices":[{"index":0,"delta":{"content":"A"},"finish_reason":"stop"}]})") +
      Sse("[DONE]");
  const Decoded d = Decode({.n = 2}, body);
  EXPECT_EQ(d.error.reason(), ErrorReason::kUpstreamProtocol);
  EXPECT_NE(d.error.message().find("[DONE] before choice 1 finished"), std::string::npos);
  // Choice 0 had finished: it keeps its reason; choice 1 fails.
  ASSERT_EQ(d.events.size(), 3u);
  EXPECT_EQ(d.events[1].finish, FinishReason::kEndOfTurn);
  EXPECT_TRUE(d.events[1].status.ok());
  EXPECT_EQ(d.events[2].finish, FinishReason::kCancelled);
}

TEST(DecodeOpenAI, ABodyThatEndsEarlyIsAProtocolErrorAtEveryCut) {
  const std::string body = kOpenAIChat;
  const size_t finish_chunk = body.find("\"finish_reason\":\"stop\"");
  for (size_t end = 0; end < finish_chunk; end += 7) {
    const Decoded d = Decode({}, body.substr(0, end));
    ASSERT_EQ(d.error.reason(), ErrorReason::kUpstreamProtocol) << end;
    ASSERT_FALSE(d.events.empty());
    EXPECT_EQ(d.events.back().kind, Event::Kind::kFinish);
    EXPECT_EQ(d.events.back().finish, FinishReason::kCancelled);
    EXPECT_TRUE(d.complete);
  }
  const Decoded early = Decode({}, body.substr(0, body.find("\n\n") + 2));
  EXPECT_NE(early.error.message().find("ended before choice 0 finished"), std::string::npos)
      << early.error.message();
}

TEST(DecodeOpenAI, AStreamThatFinishedButLacksDoneIsAccepted) {
  const std::string body = kOpenAIChat;
  // Without the usage chunk and [DONE]: the finish, with no usage.
  const Decoded no_usage =
      Decode({}, body.substr(0, body.rfind("data: ", body.find("\"choices\":[],"))));
  EXPECT_TRUE(no_usage.error.ok()) << no_usage.error.ToString();
  EXPECT_EQ(no_usage.events.back().finish, FinishReason::kEndOfTurn);
  EXPECT_EQ(no_usage.events.back().usage.prompt_tokens, 0);
  // The last event needs no blank line: the usage chunk still counts.
  const Decoded no_blank = Decode({}, body.substr(0, body.find("data: [DONE]") - 2));
  EXPECT_TRUE(no_blank.error.ok()) << no_blank.error.ToString();
  EXPECT_EQ(no_blank.events.back().usage.prompt_tokens, 12);
}

TEST(DecodeOpenAI, MalformedChunksAreProtocolErrorsNeverCrashes) {
  const char* const bad[] = {
      "{",
      "[1,2]",
      "\"text\"",
      R"({"choices":{}})",
      R"({"choices":[5]})",
      R"({"choices":[{"index":"0","delta":{"content":"a"}}]})",
      R"({"choices":[{"index":-1,"delta":{"content":"a"}}]})",
      R"({"choices":[{"index":0.5,"delta":{"content":"a"}}]})",
      R"({"choices":[{"index":0,"delta":"a"}]})",
      R"({"choices":[{"index":0,"delta":{"content":7}}]})",
      R"({"choices":[{"index":0,"delta":{},"finish_reason":1}]})",
      R"({"choices":[],"usage":"lots"})",
      R"({"choices":[],"usage":{"prompt_tokens":-3}})",
      R"({"choices":[],"usage":{"prompt_tokens":1.5}})",
      R"({"choices":[],"usage":{"prompt_tokens_details":[]}})",
      R"({"choices":[{"index":0,"delta":{},"logprobs":{"content":{}}}]})",
      R"({"choices":[{"index":0,"delta":{},"logprobs":{"content":[{"logprob":-1}]}}]})",
      R"({"choices":[{"index":0,"delta":{},"logprobs":{"content":[{"token":"a","logprob":"x"}]}}]})",
      R"({"choices":[{"index":0,"delta":{},"logprobs":{"content":[{"token":"a","logprob":-1,"bytes":[300]}]}}]})",
      R"({"choices":[{"index":0,"delta":{},"logprobs":{"content":[{"token":"a","logprob":-1,"top_logprobs":[1]}]}}]})",
  };
  for (const char* chunk : bad) {
    const Decoded d = Decode({}, Sse(chunk) + Sse("[DONE]"));
    EXPECT_EQ(d.error.reason(), ErrorReason::kUpstreamProtocol) << chunk;
    EXPECT_EQ(d.error.code(), StatusCode::kInternal) << chunk;
    EXPECT_TRUE(d.complete) << chunk;
  }
}

TEST(DecodeOpenAI, AnErrorIsStickyAndLaterBytesAreNotDecoded) {
  StreamDecoder d(Api::kOpenAI, true, 1, {});
  std::vector<Event> events;
  const util::Status first = d.Feed(Sse("{oops"), &events);
  EXPECT_EQ(first.reason(), ErrorReason::kUpstreamProtocol);
  EXPECT_EQ(d.Feed(Sse(R"({"choices":[{"index":0,"delta":{"content":"a"}}]})"), &events), first);
  EXPECT_EQ(d.End(&events), first);
  EXPECT_TRUE(events.empty());
  EXPECT_FALSE(d.started());
}

TEST(DecodeOpenAI, TextAfterAChoicesFinishIsAProtocolError) {
  const std::string body =
      Sse(R"({"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}]})") +
      Sse(R"({"choices":[{"index":0,"delta":{"content":"b"},"finish_reason":null}]})");
  EXPECT_EQ(Decode({}, body).error.reason(), ErrorReason::kUpstreamProtocol);
}

TEST(DecodeOpenAI, AnEventOverTheLimitIsAProtocolError) {
  const std::string big = Sse(fmt::format(
      R"({{"choices":[{{"index":0,"delta":{{"content":"{}"}}}}]}})", std::string(5000, 'x')));
  const Decoded d = Decode({.max_event_bytes = 4096}, big);
  EXPECT_EQ(d.error.reason(), ErrorReason::kUpstreamProtocol);
  EXPECT_NE(d.error.message().find("exceeds 4096 bytes"), std::string::npos);
  EXPECT_TRUE(
      Decode({}, big + Sse(R"({"choices":[{"index":0,"finish_reason":"stop"}]})") + Sse("[DONE]"))
          .error.ok());
}

TEST(DecodeOpenAI, DeepNestingIsRefusedBeforeParsing) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const Decoded d = Decode({}, Sse(deep));
  EXPECT_EQ(d.error.reason(), ErrorReason::kUpstreamProtocol);
  EXPECT_NE(d.error.message().find("nests deeper"), std::string::npos);
}

TEST(DecodeOpenAI, InvalidUtf8BecomesReplacementCharacters) {
  const std::string body =
      Sse("{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\xff\xc3\"},\"finish_reason\":"
          "\"stop\"}]}") +
      Sse("[DONE]");
  const Decoded d = Decode({}, body);
  ASSERT_TRUE(d.error.ok()) << d.error.ToString();
  EXPECT_EQ(d.events[0].text, "a\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(util::IsValidUtf8(d.events[0].text));
}

TEST(DecodeOpenAI, BytesAfterTheStreamCompletedAreIgnored) {
  const Decoded d = Decode({}, std::string(kOpenAIChat) + "data: {garbage\n\n" + Sse("x"));
  EXPECT_TRUE(d.error.ok());
  EXPECT_EQ(d.events.size(), 3u);
}

TEST(DecodeOpenAI, FailAfterAnOrdinaryEndIsANoOp) {
  StreamDecoder d(Api::kOpenAI, true, 1, {});
  std::vector<Event> events;
  ASSERT_TRUE(d.Feed(kOpenAIChat, &events).ok());
  d.Fail(util::DeadlineExceededError("late"), &events);
  EXPECT_EQ(events.size(), 3u);
}

TEST(DecodeOpenAI, ATransportFailureFailsTheUnfinishedChoicesWithItsStatus) {
  StreamDecoder d(Api::kOpenAI, true, 2, {});
  std::vector<Event> events;
  EXPECT_FALSE(d.started());
  ASSERT_TRUE(d.Feed(Sse(R"({"choices":[{"index":1,"delta":{"content":"x"}}]})"), &events).ok());
  EXPECT_TRUE(d.started());
  const util::Status timeout =
      util::DeadlineExceededError("no chunk for 30 s").WithReason(ErrorReason::kUpstreamTimeout);
  d.Fail(timeout, &events);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1].index, 0);
  EXPECT_EQ(events[1].status, timeout);
  EXPECT_EQ(events[2].index, 1);
  EXPECT_EQ(events[2].finish, FinishReason::kCancelled);
  EXPECT_TRUE(d.complete());
}

// --- logprobs -----------------------------------------------------------------------

TEST(DecodeOpenAI, ChatLogprobsBecomeTheDeltasLogprobs) {
  const std::string body =
      Sse(R"({"choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[)"
          R"({"token":"H","logprob":-0.25,"bytes":[72],"top_logprobs":[{"token":"H","logprob":-0.25,"bytes":[72]},{"token":"Y","logprob":-2.0,"bytes":null}]},)"
          R"({"token":"i","logprob":null,"bytes":null,"top_logprobs":[]}],"refusal":null},"finish_reason":null}]})") +
      Sse(R"({"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]})") + Sse("[DONE]");
  const Decoded d = Decode({}, body);
  ASSERT_TRUE(d.error.ok()) << d.error.ToString();
  ASSERT_EQ(d.events.size(), 2u);
  const auto& lps = d.events[0].logprobs;
  ASSERT_EQ(lps.size(), 2u);
  EXPECT_EQ(lps[0].text, "H");
  EXPECT_EQ(lps[0].logprob, -0.25f);
  EXPECT_EQ(lps[0].bytes, std::vector<uint8_t>{72});
  ASSERT_EQ(lps[0].top.size(), 2u);
  EXPECT_EQ(lps[0].top[1], (std::pair<std::string, float>("Y", -2.0f)));
  EXPECT_EQ(lps[1].bytes, std::vector<uint8_t>{'i'});             // bytes absent: the token's own
  EXPECT_TRUE(std::isinf(lps[1].logprob) && lps[1].logprob < 0);  // null is -inf
}

TEST(DecodeOpenAI, CompletionLogprobsBecomeTheDeltasLogprobsMostLikelyFirst) {
  const std::string body =
      Sse(R"({"choices":[{"index":0,"text":"ab","logprobs":{"tokens":["a","b"],)"
          R"("token_logprobs":[-0.5,-1.5],"top_logprobs":[{"z":-3.0,"a":-0.5},null],"text_offset":[0,1]},"finish_reason":"length"}]})") +
      Sse("[DONE]");
  const Decoded d = Decode({.chat = false}, body);
  ASSERT_TRUE(d.error.ok()) << d.error.ToString();
  EXPECT_EQ(Show(d.events[0]),
            "delta[0] \"ab\" lp(\"a\" -0.5 b1 \"a\"=-0.5 \"z\"=-3) lp(\"b\" -1.5 b1)");
  EXPECT_EQ(
      Decode(
          {.chat = false},
          Sse(R"({"choices":[{"index":0,"text":"a","logprobs":{"tokens":["a"],"token_logprobs":[]}}]})"))
          .error.reason(),
      ErrorReason::kUpstreamProtocol);
}

// --- tool calls ----------------------------------------------------------------

TEST(DecodeOpenAI, StreamedToolCallsBecomeCallPiecesAndFinishAsToolCalls) {
  const std::string body =
      Sse(R"({"choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null}]})") +
      Sse(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":"}}]},"finish_reason":null}]})") +
      Sse(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"finish_reason":null}]})") +
      Sse(R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"type":"function","function":{"name":"g","arguments":"{}"}}]},"finish_reason":null}]})") +
      Sse(R"({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]})") + Sse("[DONE]");
  const Decoded d = Decode({}, body);
  ASSERT_TRUE(d.error.ok()) << d.error.ToString();
  // The second call came without an id: it gets one.
  EXPECT_EQ(ShowAll(d.events),
            "delta[0] \"\" call[0 call_a f \"\"]\n"
            "delta[0] \"\" call[0 \"{\\\"x\\\":\"]\n"
            "delta[0] \"\" call[0 \"1}\"]\n"
            "delta[0] \"\" call[1 call_0_1 g \"{}\"]\n"
            "finish[0] tool_calls stop= status=OK usage=0/0/0/0 tokens=0\n");
  ExpectSplitInvariant({}, body);
}

TEST(DecodeOpenAI, AToolCallWithoutANameIsAProtocolError) {
  const std::string body = Sse(
      R"({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"finish_reason":null}]})");
  const Decoded d = Decode({}, body);
  EXPECT_EQ(d.error.reason(), util::ErrorReason::kUpstreamProtocol) << d.error.ToString();
}

}  // namespace
}  // namespace strata::backend::upstream
