// The audit hook inside ApiHandler, without HTTP: what each kind of outcome
// records, token-level audit, and a server that fails closed while its
// audit log loses records. A real gateway on the tiny model; the audit log
// on an in-memory file system whose disk can fail.
#include "server/internal/audit_hook.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "obs/audit_log.h"
#include "server/internal/handler.h"
#include "testing/fake_clock.h"
#include "testing/mem_file_system.h"
#include "testing/tiny_model.h"

namespace strata::server {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// Pumps a responder to its end on this thread (as the server does), or
// leaves after `limit` pumps.
ApiReply Finish(Responder& r, size_t limit = SIZE_MAX, std::string* frames = nullptr) {
  std::mutex mu;
  std::condition_variable cv;
  for (size_t pumps = 0;; ++pumps) {
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
    if (pumps >= limit) {
      r.Abandon("client gone");
      return {};
    }
    Responder::Output out = r.Pump(256);
    if (frames != nullptr) *frames += out.frames;
    if (out.done) return std::move(out.reply);
  }
}

class AuditHookTest : public ::testing::Test {
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
    audit_ = std::move(obs::AuditLog::Open(fs_, audit_clock_, {.path = "/a/audit.log"}, nullptr,
                                           nullptr, log_))
                 .value();
  }
  void TearDown() override {
    handler_.reset();
    gw_.reset();
    sched_.reset();
  }
  void MakeHandler(bool tokens, bool fail_closed) {
    ServerOptions so;
    so.compliance = {.audit_log = audit_.get(),
                     .watermarker = nullptr,
                     .audit_tokens = tokens,
                     .fail_closed = fail_closed};
    handler_ = std::make_unique<ApiHandler>(so, ApiKeys(), metrics_, util::RealClock(), log_);
    handler_->SetGateway(gw_.get());
  }
  ApiReply Complete(ApiKind kind, const std::string& body, const std::string& rid) {
    body_ = body;
    return handler_->Complete(kind, {.method = "POST",
                                     .path = "/v1/chat/completions",
                                     .body = body_,
                                     .request_id = rid,
                                     .api_key = ""});
  }
  // The request records written so far, by request id.
  std::map<std::string, json> Records() {
    EXPECT_TRUE(audit_->Flush(10s));
    std::map<std::string, json> out;
    const std::string text = *fs_.ReadFile("/a/audit.log");
    size_t from = 0;
    while (from < text.size()) {
      const size_t nl = text.find('\n', from);
      const json j = json::parse(text.substr(from, nl - from));
      if (j["type"] == "request") out[j["id"]] = j;
      from = nl + 1;
    }
    return out;
  }

  testing::TinyModel tiny_;
  util::CapturingLogger log_;
  obs::MetricsRegistry metrics_;
  testing::MemFileSystem fs_;
  testing::FakeClock audit_clock_;
  std::unique_ptr<obs::AuditLog> audit_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::Scheduler> sched_;
  std::unique_ptr<gateway::Gateway> gw_;
  std::unique_ptr<ApiHandler> handler_;
  std::string body_;
};

constexpr const char* kChat =
    R"({"model":"tiny","max_tokens":5,"temperature":0,"messages":[{"role":"user","content":"hi"}])";

TEST_F(AuditHookTest, EachOutcomeIsRecordedOnce) {
  MakeHandler(/*tokens=*/false, /*fail_closed=*/false);
  const ApiReply ok = Complete(ApiKind::kOpenAIChat, std::string(kChat) + "}", "ok-1");
  ASSERT_NE(ok.responder, nullptr) << ok.body;
  EXPECT_EQ(Finish(*ok.responder).status, 200);
  const ApiReply bad = Complete(ApiKind::kOpenAIChat, R"({"model":"tiny"})", "bad-1");
  EXPECT_EQ(bad.status, 400);
  const ApiReply left = Complete(
      ApiKind::kOpenAIChat,
      R"({"model":"tiny","max_tokens":60,"ignore_eos":true,"stream":true,"no_cache":true,"messages":[{"role":"user","content":"hi"}]})",
      "left-1");
  ASSERT_NE(left.responder, nullptr);
  Finish(*left.responder, /*limit=*/1);
  left.responder->Abandon("again");  // a second end records nothing more
  auto records = Records();
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records["ok-1"]["outcome"], "ok");
  EXPECT_EQ(records["ok-1"]["cache"], "miss");
  EXPECT_EQ(records["ok-1"]["completion_tokens"], 5);
  EXPECT_EQ(records["ok-1"]["backend_kind"], "local");
  EXPECT_EQ(records["ok-1"]["request_sha256"].get<std::string>().size(), 64u);
  EXPECT_FALSE(records["ok-1"].contains("tokens"));
  EXPECT_EQ(records["bad-1"]["status"], 400);
  EXPECT_EQ(records["bad-1"]["error"], "invalid_field");
  EXPECT_TRUE(records["bad-1"]["response_sha256"].is_null());
  EXPECT_EQ(records["left-1"]["outcome"], "cancelled");
  EXPECT_EQ(records["left-1"]["error"], "client_disconnected");
  EXPECT_EQ(records["left-1"]["stream"], true);
}

TEST_F(AuditHookTest, TokenLevelAuditRecordsIdsTheClientDidNotAskToSee) {
  MakeHandler(/*tokens=*/true, /*fail_closed=*/false);
  const ApiReply whole = Complete(ApiKind::kOpenAIChat, std::string(kChat) + "}", "whole-1");
  ASSERT_NE(whole.responder, nullptr);
  const ApiReply answer = Finish(*whole.responder);
  EXPECT_TRUE(json::parse(answer.body)["choices"][0]["logprobs"].is_null()) << answer.body;
  const ApiReply stream = Complete(ApiKind::kOpenAIChat,
                                   std::string(kChat) + R"(,"stream":true,"seed":3})", "stream-1");
  ASSERT_NE(stream.responder, nullptr);
  std::string frames;
  Finish(*stream.responder, SIZE_MAX, &frames);
  EXPECT_EQ(frames.find("\"logprobs\":{"), std::string::npos) << frames;
  // The stream's first chunk opens the message with empty content; no delta
  // made only of (unrequested) logprobs shows up as another empty one.
  size_t empty = 0;
  for (size_t at = frames.find(R"("content":"")"); at != std::string::npos;
       at = frames.find(R"("content":"")", at + 1)) {
    ++empty;
  }
  EXPECT_EQ(empty, 1u) << frames;
  auto records = Records();
  for (const char* id : {"whole-1", "stream-1"}) {
    const json& t = records[id]["tokens"];
    ASSERT_EQ(t.size(), 1u) << id;
    EXPECT_EQ(t[0]["choice"], 0);
    EXPECT_EQ(t[0]["ids"].size(), 5u) << id;
    EXPECT_EQ(t[0]["logprobs"].size(), 5u) << id;
    for (const auto& v : t[0]["ids"]) EXPECT_GE(v.get<int>(), 0);
    for (const auto& v : t[0]["logprobs"]) EXPECT_LE(v.get<double>(), 0.0);
  }
}

TEST_F(AuditHookTest, FailingClosedRefusesRequestsWhileTheAuditLogLosesRecords) {
  MakeHandler(/*tokens=*/false, /*fail_closed=*/true);
  fs_.SetDiskError(util::ResourceExhaustedError("no space left on device"));
  const ApiReply first = Complete(ApiKind::kOpenAIChat, R"({"model":"tiny"})", "lost-1");
  EXPECT_EQ(first.status, 400);
  EXPECT_FALSE(audit_->Flush(10s));  // its record could not be written
  ASSERT_FALSE(audit_->healthy());
  const ApiReply refused = Complete(ApiKind::kOpenAIChat, std::string(kChat) + "}", "refused-1");
  EXPECT_EQ(refused.status, 503);
  EXPECT_NE(refused.body.find("audit log"), std::string::npos) << refused.body;
  fs_.SetDiskError(util::OkStatus());
  audit_clock_.Advance(2s);  // past the retry interval
  ASSERT_TRUE(audit_->Flush(10s));
  ASSERT_TRUE(audit_->healthy());
  const ApiReply served = Complete(ApiKind::kOpenAIChat, std::string(kChat) + "}", "served-1");
  ASSERT_NE(served.responder, nullptr) << served.body;
  EXPECT_EQ(Finish(*served.responder).status, 200);
  auto records = Records();
  EXPECT_EQ(records.count("lost-1"), 0u);  // its write failed
  EXPECT_EQ(records["served-1"]["outcome"], "ok");
}

}  // namespace
}  // namespace strata::server
