// ApiHandler without any HTTP: calls in, replies (and stream frames) out,
// over a real gateway on a tiny model.
#include "server/internal/handler.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "testing/tiny_model.h"

namespace strata::server {
namespace {

using nlohmann::json;

// Feeds a responder the way the server does, on this thread: waits until
// WhenReady says events are readable, pumps, and collects what comes out.
// After `limit` frames' worth of pumps the client "leaves".
struct Drive {
  std::vector<std::string> frames;  // a stream's output, one entry per pump
  ApiReply whole;                   // a whole response, once done
  bool done = false;
};

Drive Feed(Responder& r, size_t limit = SIZE_MAX) {
  Drive d;
  std::mutex mu;
  std::condition_variable cv;
  while (!d.done) {
    bool ready = false;
    r.WhenReady([&] {
      std::lock_guard<std::mutex> lock(mu);
      ready = true;
      cv.notify_all();
    });
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return ready; });
    }
    if (d.frames.size() >= limit) {
      r.Abandon("client gone");
      return d;
    }
    Responder::Output out = r.Pump(/*max_bytes=*/256);
    if (!out.frames.empty()) d.frames.push_back(std::move(out.frames));
    if (out.done) {
      d.done = true;
      d.whole = std::move(out.reply);
    }
  }
  return d;
}

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
  EXPECT_EQ(loading.responder, nullptr);
  EXPECT_EQ(handler_->Health().status, 503);
  handler_->SetGateway(gw_.get());
  EXPECT_EQ(handler_->Health().status, 200);
  const ApiReply started = handler_->Complete(ApiKind::kAnthropicMessages, call);
  ASSERT_NE(started.responder, nullptr) << started.body;
  EXPECT_FALSE(started.responder->streaming());
  const ApiReply ok = Feed(*started.responder).whole;
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body)["id"], "msg_rid-1");
  EXPECT_EQ(Header(ok, "x-strata-cache"), "miss");
}

TEST_F(HandlerTest, AStreamIsPumpedAsItsEventsArrive) {
  handler_->SetGateway(gw_.get());
  const ApiCall call = Call(
      "/v1/chat/completions",
      R"({"model":"tiny","max_tokens":3,"temperature":0,"stream":true,"messages":[{"role":"user","content":"hi"}]})",
      "rid-2");
  const ApiReply reply = handler_->Complete(ApiKind::kOpenAIChat, call);
  ASSERT_EQ(reply.status, 200) << reply.body;
  ASSERT_NE(reply.responder, nullptr);
  ASSERT_TRUE(reply.responder->streaming());
  EXPECT_EQ(Header(reply, "Cache-Control"), "no-cache");
  const Drive d = Feed(*reply.responder);
  ASSERT_TRUE(d.done);
  std::string all;
  for (const std::string& f : d.frames) all += f;
  EXPECT_EQ(all.rfind("data: {", 0), 0u) << all;
  EXPECT_TRUE(all.ends_with("data: [DONE]\n\n")) << all;
  EXPECT_EQ(d.whole.body, "");
}

TEST_F(HandlerTest, AClientThatLeavesCancelsTheGeneration) {
  handler_->SetGateway(gw_.get());
  const ApiCall call = Call(
      "/v1/completions",
      R"({"model":"tiny","prompt":"the cat","max_tokens":60,"ignore_eos":true,"stream":true,"no_cache":true})",
      "rid-3");
  const ApiReply reply = handler_->Complete(ApiKind::kOpenAICompletion, call);
  ASSERT_NE(reply.responder, nullptr);
  EXPECT_FALSE(Feed(*reply.responder, /*limit=*/2).done);
  EXPECT_TRUE(sched_->Drain(std::chrono::seconds(30)));
  EXPECT_EQ(sched_->Stats().kv_blocks_used, 0);
  EXPECT_TRUE(log_.Contains("client disconnected"));
}

// Whether the scheduler's drain catches the request running is a race with
// the tiny model's speed, so each mode runs until a round is cut; every
// round must be either complete (all 60 tokens of every choice) or an error.
TEST_F(HandlerTest, ARequestCutAtTheEndOfTheGracePeriodEndsWithAnErrorNotAStop) {
  std::vector<std::unique_ptr<obs::MetricsRegistry>> registries;  // one per gateway, outliving it
  for (const bool stream : {true, false}) {
    bool cut = false;
    for (int round = 0; round < 50 && !cut; ++round) {
      gw_.reset();
      sched_.reset();
      registries.push_back(std::make_unique<obs::MetricsRegistry>());
      sched_ = std::move(engine::Scheduler::Start(*engine_, {.max_running = 4}, log_)).value();
      gateway::GatewayOptions go;
      go.model_name = "tiny";
      go.max_tokens_cap = 64;
      gw_ = std::move(gateway::Gateway::Create(*tiny_.model, *sched_, *registries.back(), go,
                                               util::RealClock(), log_))
                .value();
      handler_->SetGateway(gw_.get());
      const ApiCall call =
          Call("/v1/completions",
               std::string(R"({"model":"tiny","prompt":"the cat","max_tokens":60,"n":4,)") +
                   R"("ignore_eos":true,"no_cache":true,"stream_options":null,"stream":)" +
                   (stream ? "true}" : "false}"),
               "rid-cut");
      const ApiReply reply = handler_->Complete(ApiKind::kOpenAICompletion, call);
      ASSERT_NE(reply.responder, nullptr) << reply.body;
      std::thread drain([&] { sched_->Drain(std::chrono::milliseconds(0)); });
      const Drive d = Feed(*reply.responder);
      drain.join();
      ASSERT_TRUE(d.done);
      if (stream) {
        std::string all;
        for (const std::string& f : d.frames) all += f;
        const bool error = all.find(R"("code":"shutting_down")") != std::string::npos;
        size_t finishes = 0;
        for (size_t at = all.find(R"("finish_reason":"length")"); at != std::string::npos;
             at = all.find(R"("finish_reason":"length")", at + 1)) {
          ++finishes;
        }
        if (error) {
          cut = true;
          EXPECT_EQ(all.find("[DONE]"), std::string::npos) << all;
          EXPECT_TRUE(all.ends_with("\n\n")) << all;
        } else {
          EXPECT_EQ(finishes, 4u) << all;  // complete: every choice ended normally
          EXPECT_TRUE(all.ends_with("data: [DONE]\n\n")) << all;
        }
      } else if (d.whole.status == 200) {
        const json body = json::parse(d.whole.body);
        EXPECT_EQ(body["usage"]["completion_tokens"], 240) << d.whole.body;
      } else {
        cut = true;
        EXPECT_EQ(d.whole.status, 503) << d.whole.body;
        EXPECT_EQ(json::parse(d.whole.body)["error"]["code"], "shutting_down");
      }
    }
    EXPECT_TRUE(cut) << "no round was cut by the drain (stream=" << stream << ")";
  }
  gw_.reset();  // before the registry it reports to
}

TEST_F(HandlerTest, ADeadlineEndsAWholeResponseWith504AndAStreamWithAnErrorFrame) {
  handler_->SetGateway(gw_.get());
  for (const bool stream : {true, false}) {
    const ApiCall call =
        Call("/v1/chat/completions",
             std::string(R"({"model":"tiny","max_tokens":60,"ignore_eos":true,"no_cache":true,)") +
                 R"("messages":[{"role":"user","content":"x"}],"stream":)" +
                 (stream ? "true}" : "false}"),
             "rid-late");
    const ApiReply reply = handler_->Complete(ApiKind::kOpenAIChat, call);
    ASSERT_NE(reply.responder, nullptr);
    const Responder::Output out = reply.responder->Expire();
    ASSERT_TRUE(out.done);
    if (stream) {
      EXPECT_NE(out.frames.find(R"("code":"timeout")"), std::string::npos) << out.frames;
    } else {
      EXPECT_EQ(out.reply.status, 504);
      EXPECT_EQ(Header(out.reply, "X-Request-ID"), "rid-late");
    }
    EXPECT_TRUE(reply.responder->Pump().done);  // nothing after the end
  }
  EXPECT_TRUE(sched_->Drain(std::chrono::seconds(30)));
  EXPECT_EQ(sched_->Stats().kv_blocks_used, 0);
}

TEST_F(HandlerTest, ABrokenModelFailsHealthAndEveryRequestBeforeItsBody) {
  handler_->SetGateway(gw_.get());
  const ApiCall call = Call("/v1/messages", "", "rid-b");
  EXPECT_FALSE(handler_->Screen(ApiKind::kAnthropicMessages, "/v1/messages", call, true));
  handler_->SetBroken(util::FailedPreconditionError("the model file changed")
                          .WithReason(util::ErrorReason::kModelChanged));
  const ApiReply health = handler_->Health();
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(json::parse(health.body)["status"], "model_changed");
  auto refused = handler_->Screen(ApiKind::kAnthropicMessages, "/v1/messages", call, true);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(json::parse(refused->body)["error"]["type"], "api_error");
  EXPECT_EQ(Header(*refused, "request-id"), "rid-b");
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
