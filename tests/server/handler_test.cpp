// ApiHandler without any HTTP: calls in, replies (and stream frames) out,
// over a real gateway on a tiny model.
#include "server/internal/handler.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "testing/tiny_model.h"

namespace strata::server {
namespace {

using nlohmann::json;

// Collects frames; after `limit` frames the client "leaves".
class Frames final : public FrameSink {
 public:
  explicit Frames(size_t limit = SIZE_MAX) : limit_(limit) {}
  bool Write(std::string_view frame) override {
    if (frames.size() >= limit_) return false;
    frames.emplace_back(frame);
    return true;
  }
  bool Connected() override { return frames.size() < limit_; }
  std::vector<std::string> frames;

 private:
  size_t limit_;
};

std::string Header(const ApiReply& r, const std::string& name) {
  for (const auto& [n, v] : r.headers) {
    if (n == name) return v;
  }
  return "";
}

class HandlerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = testing::MakeTinyModel();
    ASSERT_NE(tiny_.model, nullptr);
    engine::EngineOptions eo;
    eo.n_ctx = 128;
    eo.n_seq_max = 4;
    engine_ = std::move(engine::Engine::Create(*tiny_.model, eo, log_)).value();
    sched_ = std::move(engine::Scheduler::Start(*engine_, {.max_running = 4}, log_)).value();
    gateway::GatewayOptions go;
    go.model_name = "tiny";
    go.max_tokens_cap = 64;
    gw_ = std::move(gateway::Gateway::Create(*tiny_.model, *sched_, metrics_, go, util::RealClock(),
                                             log_))
              .value();
    handler_ =
        std::make_unique<ApiHandler>(ServerOptions{}, ApiKeys(), metrics_, util::RealClock(), log_);
  }
  void TearDown() override {
    handler_.reset();
    gw_.reset();
    sched_.reset();
  }
  ApiCall Call(const std::string& path, const std::string& body, const std::string& rid) {
    body_ = body;
    return {.method = "POST", .path = path, .body = body_, .request_id = rid, .api_key = ""};
  }

  testing::TinyModel tiny_;
  util::CapturingLogger log_;
  obs::MetricsRegistry metrics_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::Scheduler> sched_;
  std::unique_ptr<gateway::Gateway> gw_;
  std::unique_ptr<ApiHandler> handler_;
  std::string body_;
};

TEST_F(HandlerTest, RepliesNameTheRequestAndErrorsComeFromTheTable) {
  const ApiCall call = Call(
      "/v1/messages",
      R"({"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"x"}]})", "rid-1");
  const ApiReply loading = handler_->Complete(ApiKind::kAnthropicMessages, call);
  EXPECT_EQ(loading.status, 503);
  EXPECT_EQ(Header(loading, "X-Request-ID"), "rid-1");
  EXPECT_EQ(Header(loading, "request-id"), "rid-1");
  EXPECT_EQ(json::parse(loading.body)["error"]["type"], "api_error");
  EXPECT_EQ(loading.stream, nullptr);
  EXPECT_EQ(handler_->Health().status, 503);
  handler_->SetGateway(gw_.get());
  EXPECT_EQ(handler_->Health().status, 200);
  const ApiReply ok = handler_->Complete(ApiKind::kAnthropicMessages, call);
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body)["id"], "msg_rid-1");
  EXPECT_EQ(Header(ok, "x-strata-cache"), "miss");
}

TEST_F(HandlerTest, AStreamIsWrittenThroughTheFrameSink) {
  handler_->SetGateway(gw_.get());
  const ApiCall call = Call(
      "/v1/chat/completions",
      R"({"model":"tiny","max_tokens":3,"temperature":0,"stream":true,"messages":[{"role":"user","content":"hi"}]})",
      "rid-2");
  const ApiReply reply = handler_->Complete(ApiKind::kOpenAIChat, call);
  ASSERT_EQ(reply.status, 200) << reply.body;
  ASSERT_NE(reply.stream, nullptr);
  EXPECT_EQ(Header(reply, "Cache-Control"), "no-cache");
  Frames frames;
  EXPECT_TRUE(reply.stream->Run(frames));
  ASSERT_GE(frames.frames.size(), 3u);
  EXPECT_EQ(frames.frames.back(), "data: [DONE]\n\n");
}

TEST_F(HandlerTest, AClientThatLeavesCancelsTheGeneration) {
  handler_->SetGateway(gw_.get());
  const ApiCall call = Call(
      "/v1/completions",
      R"({"model":"tiny","prompt":"the cat","max_tokens":60,"ignore_eos":true,"stream":true,"no_cache":true})",
      "rid-3");
  const ApiReply reply = handler_->Complete(ApiKind::kOpenAICompletion, call);
  ASSERT_NE(reply.stream, nullptr);
  Frames frames(/*limit=*/2);
  EXPECT_FALSE(reply.stream->Run(frames));
  EXPECT_TRUE(sched_->Drain(std::chrono::seconds(30)));
  EXPECT_EQ(sched_->Stats().kv_blocks_used, 0);
  EXPECT_TRUE(log_.Contains("client disconnected"));
}

TEST_F(HandlerTest, RequestIdsAndTransportErrors) {
  EXPECT_EQ(handler_->RequestId("abc-1.2_3"), "abc-1.2_3");
  const std::string made = handler_->RequestId("not sane!");
  EXPECT_EQ(made.size(), 16u);
  EXPECT_EQ(handler_->RequestId(std::string(129, 'a')).size(), 16u);
  EXPECT_EQ(handler_->TransportError(413, "POST", "/v1/messages").reason(),
            util::ErrorReason::kBodyTooLarge);
  EXPECT_EQ(handler_->TransportError(404, "GET", "/x").reason(), util::ErrorReason::kNoRoute);
  EXPECT_EQ(handler_->TransportError(400, "GET", "/x").code(), util::StatusCode::kInvalidArgument);
  const ApiReply r = ApiHandler::ErrorReply(
      ApiKind::kOpenAIChat,
      util::ResourceExhaustedError("full").WithReason(util::ErrorReason::kQueueFull));
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(Header(r, "Retry-After"), "1");
}

}  // namespace
}  // namespace strata::server
