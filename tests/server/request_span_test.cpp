// One API request's trace as the server makes it (server/internal/
// request_span.h): the context from the headers, the traceresponse answer,
// the root span's attributes and its error, which never quotes the body.
#include "server/internal/request_span.h"

#include <gtest/gtest.h>

#include "server/internal/handler.h"
#include "testing/fake_clock.h"
#include "testing/span_recorder.h"

namespace strata::server {
namespace {

using testing::Attr;

constexpr std::string_view kParent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

class RequestSpanTest : public ::testing::Test {
 protected:
  RequestSpanTest() {
    tracer_ = *obs::Tracer::Create({.sample_rate = 1.0, .seed = 5}, recorder_, metrics_, clock_);
  }
  ApiCall Call(std::vector<std::string_view> traceparent = {},
               std::vector<std::string_view> tracestate = {}) {
    ApiCall c;
    c.method = "POST";
    c.path = "/v1/chat/completions";
    c.request_id = "req-1";
    c.traceparent = std::move(traceparent);
    c.tracestate = std::move(tracestate);
    return c;
  }
  RequestSpan Start(const ApiCall& call, const char* endpoint = "/v1/chat/completions",
                    bool with_tracer = true) {
    return RequestSpan::Start(call, endpoint, with_tracer ? tracer_.get() : nullptr, nullptr,
                              clock_.Now());
  }

  testing::FakeClock clock_;
  obs::MetricsRegistry metrics_;
  std::shared_ptr<testing::SpanRecorder> recorder_ = std::make_shared<testing::SpanRecorder>();
  std::shared_ptr<obs::Tracer> tracer_;
};

TEST_F(RequestSpanTest, WithoutATracerOrAHeaderThereIsNoTrace) {
  RequestSpan s = Start(Call(), "/v1/chat/completions", /*with_tracer=*/false);
  EXPECT_EQ(s.trace(), nullptr);
  ApiReply reply;
  s.AddHeaders(reply);
  EXPECT_TRUE(reply.headers.empty());
  s.End(200, util::OkStatus(), 1, 1);
  EXPECT_TRUE(recorder_->spans().empty());
}

TEST_F(RequestSpanTest, WithoutATracerAValidContextPassesThrough) {
  RequestSpan s = Start(Call({kParent}, {"k=v"}), "/v1/chat/completions", false);
  ASSERT_NE(s.trace(), nullptr);
  EXPECT_FALSE(s.trace()->participating());
  EXPECT_EQ(s.trace()->OutgoingTraceparent(), kParent);
  EXPECT_EQ(s.trace()->tracestate(), "k=v");
  ApiReply reply;
  s.AddHeaders(reply);
  EXPECT_TRUE(reply.headers.empty());  // strata took no part
  // An invalid one is dropped.
  EXPECT_EQ(Start(Call({"00-xyz"}), "/v1/chat/completions", false).trace(), nullptr);
}

TEST_F(RequestSpanTest, AValidParentIsContinuedAndAnsweredInTraceresponse) {
  RequestSpan s = Start(Call({kParent}, {"congo=1", "rojo=2"}));
  ASSERT_NE(s.trace(), nullptr);
  EXPECT_TRUE(s.recording());
  EXPECT_EQ(s.trace()->trace_id().Hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_EQ(s.trace()->tracestate(), "congo=1,rojo=2");
  ApiReply reply;
  s.AddHeaders(reply);
  ASSERT_EQ(reply.headers.size(), 1u);
  EXPECT_EQ(reply.headers[0].first, "traceresponse");
  EXPECT_EQ(reply.headers[0].second,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-" + s.trace()->root_span_id().Hex() + "-01");
}

TEST_F(RequestSpanTest, InvalidOrRepeatedTraceparentsStartANewTraceAndDropTheTracestate) {
  for (const std::vector<std::string_view>& tp :
       std::vector<std::vector<std::string_view>>{{"garbage"}, {kParent, kParent}, {}}) {
    RequestSpan s = Start(Call(tp, {"congo=1"}));
    ASSERT_NE(s.trace(), nullptr);
    EXPECT_NE(s.trace()->trace_id().Hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
    EXPECT_FALSE(s.trace()->parent().has_value());
    EXPECT_EQ(s.trace()->tracestate(), "");
  }
}

TEST_F(RequestSpanTest, OnlyGenerationAndEmbeddingEndpointsAreTraced) {
  EXPECT_EQ(Start(Call({kParent}), "/v1/messages/count_tokens").trace(), nullptr);
  EXPECT_EQ(Start(Call({kParent}), "/tokenize").trace(), nullptr);
  EXPECT_NE(Start(Call({kParent}), "/v1/embeddings").trace(), nullptr);
  EXPECT_NE(Start(Call({kParent}), "/v1/messages").trace(), nullptr);
}

TEST_F(RequestSpanTest, TheRootSpanEndsWithTheOutcomeAndUsage) {
  RequestSpan s = Start(Call({kParent}));
  gateway::Event finish;
  finish.kind = gateway::Event::Kind::kFinish;
  finish.finish = gateway::FinishReason::kEndOfTurn;
  s.OnFinish(finish, ApiKind::kAnthropicMessages);
  finish.finish = gateway::FinishReason::kLength;
  s.OnFinish(finish, ApiKind::kAnthropicMessages);
  s.End(200, util::OkStatus(), 12, 7);
  s.End(500, util::InternalError("twice"), 0, 0);  // ignored
  const auto spans = recorder_->spans();
  ASSERT_EQ(spans.size(), 1u);
  const obs::SpanData& d = spans[0];
  EXPECT_EQ(d.kind, obs::SpanKind::kServer);
  EXPECT_EQ(d.name, "chat");
  EXPECT_EQ(d.parent_span_id.Hex(), "00f067aa0ba902b7");
  EXPECT_FALSE(d.error);
  EXPECT_EQ(std::get<int64_t>(*Attr(d, "gen_ai.usage.input_tokens")), 12);
  EXPECT_EQ(std::get<int64_t>(*Attr(d, "gen_ai.usage.output_tokens")), 7);
  EXPECT_EQ(std::get<int64_t>(*Attr(d, "http.response.status_code")), 200);
  EXPECT_EQ(std::get<std::vector<std::string>>(*Attr(d, "gen_ai.response.finish_reasons")),
            (std::vector<std::string>{"end_turn", "max_tokens"}));
  EXPECT_EQ(std::get<std::string>(*Attr(d, "strata.trace.sampled_by")), "parent");
  EXPECT_EQ(std::get<std::string>(*Attr(d, "strata.request.id")), "req-1");
}

TEST_F(RequestSpanTest, AnErrorIsRecordedWithoutWhatTheClientOrUpstreamSent) {
  RequestSpan s = Start(Call({kParent}));
  s.End(400,
        util::InvalidArgumentError("malformed JSON at byte 40: syntax error (near 'my secret')")
            .WithReason(util::ErrorReason::kMalformedJson),
        0, 0);
  const obs::SpanData d = recorder_->spans().at(0);
  EXPECT_TRUE(d.error);
  EXPECT_EQ(d.status_message, "malformed JSON at byte 40: syntax error");
  EXPECT_EQ(std::get<std::string>(*Attr(d, "error.type")), "malformed_json");
  EXPECT_EQ(std::get<int64_t>(*Attr(d, "http.response.status_code")), 400);

  EXPECT_EQ(SpanErrorMessage(util::InvalidArgumentError(
                                 "the openai upstream answered HTTP 400 'invalid_request_error': "
                                 "'your prompt: my secret'")
                                 .WithReason(util::ErrorReason::kUpstreamRejected)),
            "the openai upstream answered HTTP 400 'invalid_request_error'");
  EXPECT_EQ(SpanErrorMessage(util::UnavailableError("the openai upstream failed mid-stream: 'x'")
                                 .WithReason(util::ErrorReason::kUpstreamError)),
            "the openai upstream failed mid-stream");
  EXPECT_EQ(SpanErrorMessage(util::InvalidFieldError("n", "n 9 is outside [1, 8]")),
            "n 9 is outside [1, 8]");
}

}  // namespace
}  // namespace strata::server
