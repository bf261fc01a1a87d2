// The upstream wire's response side for a strata upstream (the frames
// strata's own server renders, both APIs) and for the Anthropic Messages
// API; whole (non-streaming) bodies.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/decode_testing.h"
#include "backend/upstream_wire.h"
#include "server/api.h"
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

// --- a strata upstream: the frames strata's own server writes --------------------------

gateway::Event GatewayDelta(int32_t index, std::string text,
                            std::vector<gateway::TokenLogprob> lps = {}) {
  gateway::Event e;
  e.kind = gateway::Event::Kind::kDelta;
  e.index = index;
  e.text = std::move(text);
  e.logprobs = std::move(lps);
  return e;
}

gateway::Event GatewayFinish(int32_t index, FinishReason reason, int32_t completion,
                             std::string stop = "", int32_t cached = 0) {
  gateway::Event e;
  e.kind = gateway::Event::Kind::kFinish;
  e.index = index;
  e.finish = reason;
  e.stop_sequence = std::move(stop);
  e.usage.completion_tokens = completion;
  e.usage.cached_tokens = cached;
  return e;
}

server::ResponseMeta Meta() {
  server::ResponseMeta m;
  m.id = "chatcmpl-strata";
  m.model = "tiny";
  m.created = 1700000000;
  m.prompt_tokens = 10;
  m.cached_tokens = 4;
  m.fingerprint = "strata-abc";
  return m;
}

TEST(DecodeStrata, StrataChatStreamWithTwoChoicesAndLogprobsDecodes) {
  using server::ApiKind;
  const auto kind = ApiKind::kOpenAIChat;
  const server::ResponseMeta m = Meta();
  gateway::TokenLogprob lp;
  lp.text = "Hi";
  lp.bytes = {'H', 'i'};
  lp.logprob = -0.5f;
  lp.top = {{"Hi", -0.5f}, {"Ho", -std::numeric_limits<float>::infinity()}};
  std::string body = server::RenderStreamStart(kind, m, 2);
  body += server::RenderStreamDelta(kind, m, GatewayDelta(0, "Hi", {lp}), true);
  body += server::RenderStreamDelta(kind, m, GatewayDelta(1, "Yo", {lp}), true);
  body += server::RenderStreamFinish(kind, m, GatewayFinish(1, FinishReason::kLength, 2));
  body += server::RenderStreamDelta(kind, m, GatewayDelta(0, "!", {lp}), true);
  body += server::RenderStreamFinish(kind, m, GatewayFinish(0, FinishReason::kStopString, 3));
  body += server::RenderStreamEnd(kind, m, 5, /*include_usage=*/true);
  const Stream s{.n = 2, .stops = {"END"}};
  const Decoded d = Decode(s, body);
  ASSERT_TRUE(d.error.ok()) << d.error.ToString();
  const std::string lp_shown = " lp(\"Hi\" -0.5 b2 \"Hi\"=-0.5 \"Ho\"=-inf)";
  // strata's own stream says "stop" for both a stop string and an end of
  // turn (no stop_reason): an end of turn.
  EXPECT_EQ(ShowAll(d.events), "delta[0] \"Hi\"" + lp_shown + "\n" + "delta[1] \"Yo\"" + lp_shown +
                                   "\n" + "delta[0] \"!\"" + lp_shown + "\n" +
                                   "finish[0] end_of_turn stop= status=OK usage=10/4/0/3 tokens=3\n"
                                   "finish[1] length stop= status=OK usage=10/4/0/2 tokens=2\n");
  ExpectSplitInvariant(s, body);
}

TEST(DecodeStrata, StrataCompletionStreamDecodes) {
  const auto kind = server::ApiKind::kOpenAICompletion;
  const server::ResponseMeta m = Meta();
  gateway::TokenLogprob lp;
  lp.text = "x";
  lp.bytes = {'x'};
  lp.logprob = -1.0f;
  lp.top = {{"x", -1.0f}, {"y", -2.0f}};
  std::string body = server::RenderStreamStart(kind, m, 1);
  body += server::RenderStreamDelta(kind, m, GatewayDelta(0, "x", {lp}), true);
  body += server::RenderStreamFinish(kind, m, GatewayFinish(0, FinishReason::kLength, 1));
  body += server::RenderStreamEnd(kind, m, 1, true);
  const Decoded d = Decode({.chat = false}, body);
  ASSERT_TRUE(d.error.ok()) << d.error.ToString();
  EXPECT_EQ(ShowAll(d.events),
            "delta[0] \"x\" lp(\"x\" -1 b1 \"x\"=-1 \"y\"=-2)\n"
            "finish[0] length stop= status=OK usage=10/4/0/1 tokens=1\n");
}

TEST(DecodeStrata, StrataAnthropicStreamDecodesWithItsUsageAndStopSequence) {
  const auto kind = server::ApiKind::kAnthropicMessages;
  const server::ResponseMeta m = Meta();
  std::string body = server::RenderStreamStart(kind, m, 1);
  body += server::RenderStreamDelta(kind, m, GatewayDelta(0, "Bon"), false);
  body += server::RenderStreamDelta(kind, m, GatewayDelta(0, "jour"), false);
  body +=
      server::RenderStreamFinish(kind, m, GatewayFinish(0, FinishReason::kStopString, 2, "END", 4));
  body += server::RenderStreamEnd(kind, m, 2, false);
  const Stream s{.api = Api::kAnthropic};
  const Decoded d = Decode(s, body);
  ASSERT_TRUE(d.error.ok()) << d.error.ToString();
  EXPECT_EQ(ShowAll(d.events),
            "delta[0] \"Bon\" usage=10/4/0/0\ndelta[0] \"jour\"\n"
            "finish[0] stop_string stop=END status=OK usage=10/4/0/2 tokens=2\n");
  ExpectSplitInvariant(s, body);
}

TEST(DecodeStrata, StrataErrorsMidStreamKeepTheirMeaning) {
  struct Row {
    server::ApiKind kind;
    util::Status error;
    ErrorReason want;
  };
  const Row rows[] = {
      {server::ApiKind::kOpenAIChat,
       util::DeadlineExceededError("too slow").WithReason(ErrorReason::kTimeout),
       ErrorReason::kUpstreamTimeout},
      {server::ApiKind::kOpenAIChat,
       util::ResourceExhaustedError("queue full").WithReason(ErrorReason::kQueueFull),
       ErrorReason::kUpstreamRateLimited},
      {server::ApiKind::kOpenAIChat,
       util::UnavailableError("draining").WithReason(ErrorReason::kShuttingDown),
       ErrorReason::kUpstreamOverloaded},
      {server::ApiKind::kOpenAIChat, util::InternalError("bug"), ErrorReason::kUpstreamError},
      {server::ApiKind::kAnthropicMessages,
       util::UnavailableError("draining").WithReason(ErrorReason::kShuttingDown),
       ErrorReason::kUpstreamOverloaded},
      {server::ApiKind::kAnthropicMessages,
       util::InvalidArgumentError("bad").WithReason(ErrorReason::kInvalidField),
       ErrorReason::kUpstreamRejected},
  };
  for (const Row& row : rows) {
    const bool anthropic = row.kind == server::ApiKind::kAnthropicMessages;
    std::string body = server::RenderStreamStart(row.kind, Meta(), 1);
    body += server::RenderStreamDelta(row.kind, Meta(), GatewayDelta(0, "partial"), false);
    body += server::RenderStreamError(row.kind, row.error);
    const Decoded d = Decode({.api = anthropic ? Api::kAnthropic : Api::kOpenAI}, body);
    EXPECT_TRUE(d.error.ok()) << d.error.ToString();
    ASSERT_EQ(d.events.size(), 2u) << row.error.ToString();
    EXPECT_EQ(d.events[1].finish, FinishReason::kCancelled);
    EXPECT_EQ(d.events[1].status.reason(), row.want) << row.error.ToString();
    EXPECT_NE(d.events[1].status.message().find(row.error.message()), std::string::npos)
        << d.events[1].status.message();
    if (anthropic) {
      EXPECT_EQ(d.events[1].usage.prompt_tokens, 10);
    }
  }
}

// --- Anthropic, as the Messages API sends it ---------------------------------------

const char* const kAnthropic = R"(event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_creation_input_tokens":10,"cache_read_input_tokens":100,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"! ✓"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}

event: message_stop
data: {"type":"message_stop"}

)";

TEST(DecodeAnthropic, AMessagesStreamGivesItsTextAndTheWholePromptAsPromptTokens) {
  const Stream s{.api = Api::kAnthropic};
  const Decoded d = Decode(s, kAnthropic);
  ASSERT_TRUE(d.error.ok()) << d.error.ToString();
  // input_tokens excludes the cache: 25 + 100 read + 10 written. The first
  // delta carries the prompt's counts, so a client's message_start can too.
  EXPECT_EQ(ShowAll(d.events),
            "delta[0] \"Hello\" usage=135/100/10/0\ndelta[0] \"! ✓\"\n"
            "finish[0] end_of_turn stop= status=OK usage=135/100/10/15 tokens=15\n");
  ExpectSplitInvariant(s, kAnthropic);
}

std::string AnthropicWith(std::string_view stop_reason, std::string_view extra_events = "") {
  return Sse("message_start",
             R"({"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}})") +
         std::string(extra_events) +
         Sse("message_delta",
             fmt::format(R"({{"type":"message_delta","delta":{{"stop_reason":{}}},)"
                         R"("usage":{{"output_tokens":4}}}})",
                         stop_reason)) +
         Sse("message_stop", R"({"type":"message_stop"})");
}

TEST(DecodeAnthropic, StopReasonsMapToFinishReasons) {
  const Stream s{.api = Api::kAnthropic};
  struct Row {
    const char* stop_reason;
    const char* shown;
  };
  const Row rows[] = {
      {R"("end_turn")", "end_of_turn stop="},
      {R"("max_tokens")", "length stop="},
      {R"("stop_sequence","stop_sequence":"\n\nHuman:")", "stop_string stop=\n\nHuman:"},
      {R"("tool_use")", "tool_calls stop="},
      {R"("refusal")", "end_of_turn stop="},
      {R"("pause_turn")", "end_of_turn stop="},
      {R"("model_context_window_exceeded")", "length stop="},
      {"null", "end_of_turn stop="},
  };
  for (const Row& row : rows) {
    const Decoded d = Decode(s, AnthropicWith(row.stop_reason));
    ASSERT_TRUE(d.error.ok()) << row.stop_reason << ": " << d.error.ToString();
    EXPECT_EQ(ShowAll(d.events),
              fmt::format("finish[0] {} status=OK usage=3/0/0/4 tokens=4\n", row.shown));
  }
}

TEST(DecodeAnthropic, TextAndToolUseAreReadThinkingAndUnknownEventsAreSkipped) {
  const std::string blocks =
      Sse("content_block_start",
          R"({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}})") +
      Sse("content_block_delta",
          R"({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}})") +
      Sse("content_block_delta",
          R"({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"s"}})") +
      Sse("content_block_stop", R"({"type":"content_block_stop","index":0})") +
      Sse("content_block_start",
          R"({"type":"content_block_start","index":1,"content_block":{"type":"text","text":"Hi"}})") +
      Sse("content_block_delta",
          R"({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":" there"}})") +
      Sse("content_block_start",
          R"({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}})") +
      Sse("content_block_delta",
          R"({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}})") +
      Sse("future_event", R"({"type":"future_event","x":1})") + ": comment\n\n";
  const Decoded d = Decode({.api = Api::kAnthropic}, AnthropicWith(R"("tool_use")", blocks));
  ASSERT_TRUE(d.error.ok()) << d.error.ToString();
  EXPECT_EQ(ShowAll(d.events),
            "delta[0] \"Hi\" usage=3/0/0/0\ndelta[0] \" there\"\n"
            "delta[0] \"\" call[0 t f \"\"]\n"
            "delta[0] \"\" call[0 \"{\\\"a\\\":\"]\n"
            "finish[0] tool_calls stop= status=OK usage=3/0/0/4 tokens=4\n");
}

TEST(DecodeAnthropic, MessageDeltaUsageOverridesMessageStart) {
  const std::string body =
      Sse("message_start",
          R"({"type":"message_start","message":{"usage":{"input_tokens":3,"cache_read_input_tokens":0,"output_tokens":1}}})") +
      Sse("message_delta",
          R"({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":5,"cache_read_input_tokens":7,"cache_creation_input_tokens":2,"output_tokens":9}})") +
      Sse("message_stop", R"({"type":"message_stop"})");
  const Decoded d = Decode({.api = Api::kAnthropic}, body);
  ASSERT_TRUE(d.error.ok());
  EXPECT_EQ(Show(d.events[0]), "finish[0] end_of_turn stop= status=OK usage=14/7/2/9 tokens=9");
}

TEST(DecodeAnthropic, AnErrorEventFailsTheChoiceByItsType) {
  struct Row {
    const char* type;
    StatusCode code;
    ErrorReason reason;
  };
  const Row rows[] = {
      {"overloaded_error", StatusCode::kUnavailable, ErrorReason::kUpstreamOverloaded},
      {"rate_limit_error", StatusCode::kResourceExhausted, ErrorReason::kUpstreamRateLimited},
      {"api_error", StatusCode::kUnavailable, ErrorReason::kUpstreamError},
      {"invalid_request_error", StatusCode::kInvalidArgument, ErrorReason::kUpstreamRejected},
      {"timeout_error", StatusCode::kDeadlineExceeded, ErrorReason::kUpstreamTimeout},
      {"authentication_error", StatusCode::kPermissionDenied, ErrorReason::kUpstreamError},
      {"something_new", StatusCode::kUnavailable, ErrorReason::kUpstreamError},
  };
  for (const Row& row : rows) {
    const std::string body =
        Sse("message_start",
            R"({"type":"message_start","message":{"usage":{"input_tokens":3,"output_tokens":1}}})") +
        Sse("content_block_delta",
            R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}})") +
        Sse("error",
            fmt::format(R"({{"type":"error","error":{{"type":"{}","message":"Overloaded"}}}})",
                        row.type));
    const Decoded d = Decode({.api = Api::kAnthropic}, body);
    ASSERT_TRUE(d.error.ok()) << d.error.ToString();
    ASSERT_EQ(d.events.size(), 2u);
    const Event& f = d.events[1];
    EXPECT_EQ(f.finish, FinishReason::kCancelled);
    EXPECT_EQ(f.status.code(), row.code) << row.type;
    EXPECT_EQ(f.status.reason(), row.reason) << row.type;
    EXPECT_EQ(f.usage.prompt_tokens, 3);
    EXPECT_NE(f.status.message().find(row.type), std::string::npos) << f.status.message();
  }
}

TEST(DecodeAnthropic, BrokenStreamsAreProtocolErrors) {
  const Stream s{.api = Api::kAnthropic};
  const std::string start =
      Sse("message_start", R"({"type":"message_start","message":{"usage":{"input_tokens":3}}})");
  struct Row {
    std::string body;
    const char* says;
  };
  const Row rows[] = {
      {"", "ended before message_start"},
      {start, "ended before message_stop"},
      {Sse("content_block_delta",
           R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}})"),
       "before message_start"},
      {start + start, "second message_start"},
      {Sse("message_start", R"({"type":"message_start"})"), "no 'message' object"},
      {start + Sse("content_block_delta", R"({"type":"content_block_delta","delta":5})"),
       "no 'delta' object"},
      {start + Sse("content_block_delta",
                   R"({"type":"content_block_delta","delta":{"type":"text_delta"}})"),
       "no 'text'"},
      {start + Sse("message_delta", R"({"type":"message_delta","usage":{"output_tokens":"9"}})"),
       "'usage.output_tokens' is not a token count"},
      {start + Sse("message_delta", "not json"), "not JSON"},
      {Sse("message_start", "{\"type\":7}"), "'type' is not a string"},
  };
  for (const Row& row : rows) {
    const Decoded d = Decode(s, row.body);
    EXPECT_EQ(d.error.reason(), ErrorReason::kUpstreamProtocol) << row.body;
    EXPECT_NE(d.error.message().find(row.says), std::string::npos)
        << d.error.message() << " / " << row.says;
    ASSERT_EQ(d.events.size(), 1u) << row.body;
    EXPECT_EQ(d.events[0].finish, FinishReason::kCancelled);
  }
}

TEST(DecodeAnthropic, TheTypeFieldDecidesWhenTheEventNameIsMissing) {
  const std::string body =
      Sse(R"({"type":"message_start","message":{"usage":{"input_tokens":1}}})") +
      Sse(R"({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"z"}})") +
      Sse(R"({"type":"message_stop"})");
  const Decoded d = Decode({.api = Api::kAnthropic}, body);
  ASSERT_TRUE(d.error.ok()) << d.error.ToString();
  EXPECT_EQ(d.events.size(), 2u);
}

// --- whole responses -------------------------------------------------------------

TEST(DecodeWhole, StrataChatResponseWithTwoChoicesDecodes) {
  std::vector<server::ChoiceResult> choices(2);
  choices[0].text = "A";
  choices[0].finish = FinishReason::kEndOfTurn;
  choices[0].completion_tokens = 1;
  choices[1].text = "BB";
  choices[1].finish = FinishReason::kLength;
  choices[1].completion_tokens = 4;
  gateway::TokenLogprob lp;
  lp.text = "A";
  lp.bytes = {'A'};
  lp.logprob = -0.1f;
  choices[0].logprobs = {lp};
  const std::string body =
      server::RenderResponse(server::ApiKind::kOpenAIChat, Meta(), choices, true);
  std::vector<Event> events;
  ASSERT_TRUE(DecodeWholeResponse(Api::kOpenAI, true, 2, {}, body, &events).ok());
  EXPECT_EQ(ShowAll(events),
            "delta[0] \"A\" lp(\"A\" -0.1 b1)\n"
            "delta[1] \"BB\"\n"
            "finish[0] end_of_turn stop= status=OK usage=10/4/0/3 tokens=3\n"
            "finish[1] length stop= status=OK usage=10/4/0/2 tokens=2\n");
}

TEST(DecodeWhole, CompletionAndAnthropicResponsesDecode) {
  const char* const completion =
      R"({"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"xyz","logprobs":null,"finish_reason":"stop","stop_reason":"##"}],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}})";
  std::vector<Event> events;
  ASSERT_TRUE(DecodeWholeResponse(Api::kOpenAI, false, 1, {"##"}, completion, &events).ok());
  EXPECT_EQ(ShowAll(events),
            "delta[0] \"xyz\"\nfinish[0] stop_string stop=## status=OK usage=2/0/0/3 tokens=3\n");
  const char* const message =
      R"({"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[{"type":"thinking","thinking":"..."},{"type":"text","text":"Hi"},{"type":"text","text":"!"}],"stop_reason":"max_tokens","stop_sequence":null,"usage":{"input_tokens":4,"cache_read_input_tokens":6,"output_tokens":2}})";
  events.clear();
  ASSERT_TRUE(DecodeWholeResponse(Api::kAnthropic, true, 1, {}, message, &events).ok());
  EXPECT_EQ(ShowAll(events),
            "delta[0] \"Hi!\"\nfinish[0] length stop= status=OK usage=10/6/0/2 tokens=2\n");
}

TEST(DecodeWhole, ErrorBodiesAreTheirStatusAndMalformedOnesProtocolErrors) {
  std::vector<Event> events;
  const util::Status overloaded = DecodeWholeResponse(
      Api::kAnthropic, true, 1, {},
      R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})", &events);
  EXPECT_EQ(overloaded.reason(), ErrorReason::kUpstreamOverloaded);
  const util::Status rate = DecodeWholeResponse(
      Api::kOpenAI, true, 1, {}, R"({"error":{"message":"slow down","type":"rate_limit_error"}})",
      &events);
  EXPECT_EQ(rate.reason(), ErrorReason::kUpstreamRateLimited);
  for (const char* bad : {"", "[]", "{", R"({"choices":[]})",
                          R"({"choices":[{"index":0,"message":{"content":"a"}},{"index":0}]})",
                          R"({"choices":[{"index":3}]})", R"({"content":"text"})"}) {
    const Api api = std::string_view(bad).find("content\":\"text") != std::string_view::npos
                        ? Api::kAnthropic
                        : Api::kOpenAI;
    EXPECT_EQ(DecodeWholeResponse(api, true, 1, {}, bad, &events).reason(),
              ErrorReason::kUpstreamProtocol)
        << bad;
  }
  EXPECT_TRUE(events.empty());
}

TEST(DecodeWhole, ToolCallsOfEitherApiBecomeCallPieces) {
  std::vector<Event> events;
  const std::string openai =
      R"({"choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[
          {"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},
          "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":3}})";
  ASSERT_TRUE(DecodeWholeResponse(Api::kOpenAI, true, 1, {}, openai, &events).ok());
  EXPECT_EQ(ShowAll(events),
            "delta[0] \"\" call[0 call_1 f \"{\\\"a\\\":1}\"]\n"
            "finish[0] tool_calls stop= status=OK usage=5/0/0/3 tokens=3\n");
  events.clear();
  const std::string anthropic =
      R"({"type":"message","content":[{"type":"text","text":"Sure."},
          {"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}],
          "stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":3}})";
  ASSERT_TRUE(DecodeWholeResponse(Api::kAnthropic, true, 1, {}, anthropic, &events).ok());
  EXPECT_EQ(ShowAll(events),
            "delta[0] \"Sure.\" call[0 toolu_1 f \"{\\\"a\\\":1}\"]\n"
            "finish[0] tool_calls stop= status=OK usage=5/0/0/3 tokens=3\n");
}

}  // namespace
}  // namespace strata::backend::upstream
