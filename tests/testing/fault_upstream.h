// testing/fault_upstream.h — a model server that fails on cue, for tests of
// what strata does in front of a broken upstream: on net::HttpServer, it
// answers the OpenAI and Anthropic streaming endpoints with error statuses,
// stalls and cut connections as a test scripts them, and with a valid
// stream otherwise, counting every request.
//
// Usage:
//   testing::FaultUpstream up;
//   ASSERT_TRUE(up.Start().ok());
//   up.Play({{.status = 429}});  // the next POST gets a 429, the one after a stream
//   ... strata serve --backend openai:<up.url()> ...
//   EXPECT_EQ(up.posts(), 2);
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "net/http_server.h"
#include "net/sse.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::testing {

// Plays a script: each POST takes the next Step (a plain stream once the
// script is spent). The API is the path's: /v1/messages is Anthropic,
// /v1/chat/completions and /v1/completions are OpenAI. GET /v1/models (the
// front's health probe) is 200 and not counted.
//
// Threading: the handler runs on the server's I/O thread; Play, posts,
// WaitHeld and Cut on the test's thread. mu_ guards the script, the count
// and the held exchanges.
class FaultUpstream final : public net::HttpHandler {
 public:
  // What the upstream does with one POST.
  struct Step {
    int status = 200;    // not 200: this status, with an error body in the path's API
    bool stall = false;  // 200: the head and one chunk of text, then nothing
    bool cut = false;    // 200: the head and two chunks of text, then held until Cut()
  };
  // The answer, one stream chunk per word.
  static constexpr std::array<std::string_view, 5> kWords = {"Hello", " from", " the", " fault",
                                                             " upstream"};
  static constexpr std::string_view kText = "Hello from the fault upstream";

  ~FaultUpstream() override { Stop(); }

  // Listens on a free port (the first time) or the port it had.
  util::Status Start() {
    net::HttpServerOptions o;
    o.port = port_;
    o.io_threads = 1;
    STRATA_ASSIGN_OR_RETURN(server_, net::HttpServer::Create(o, *this, *log_, util::RealClock()));
    STRATA_ASSIGN_OR_RETURN(port_, server_->Start());
    return util::OkStatus();
  }
  void Stop() {
    if (server_) server_->Stop();
    server_.reset();
    std::lock_guard<std::mutex> lock(mu_);
    held_.clear();
  }
  // Drops every connection (held streams end without their last chunk, as
  // when an upstream dies) and listens again on the same port.
  util::Status Cut() {
    Stop();
    return Start();
  }

  // The next POSTs' steps, in order; resets the count and forgets held exchanges.
  void Play(std::vector<Step> script) {
    std::lock_guard<std::mutex> lock(mu_);
    script_.assign(script.begin(), script.end());
    posts_ = 0;
    held_.clear();  // a held exchange stays open until its client or Cut ends it
  }
  // Every POST from now on waits `d` before it answers (on the server's one
  // I/O thread: the POSTs are answered one after another), as a slow
  // upstream would.
  void SetLatency(std::chrono::milliseconds d) {
    std::lock_guard<std::mutex> lock(mu_);
    latency_ = d;
  }
  int posts() const {
    std::lock_guard<std::mutex> lock(mu_);
    return posts_;
  }
  // Waits until `n` exchanges are held (stalled or waiting for Cut).
  bool WaitHeld(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return held_.size() >= n; });
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::optional<net::Response> OnHead(const net::RequestHead&) override { return std::nullopt; }

  void OnRequest(std::shared_ptr<net::Exchange> ex, std::string) override {
    const std::string path(ex->head().path());
    if (ex->head().method == "GET") {
      ex->Respond(net::JsonResponse(200, R"({"object":"list","data":[{"id":"demo"}]})"));
      return;
    }
    Step step;
    std::chrono::milliseconds latency{0};
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++posts_;
      latency = latency_;
      if (!script_.empty()) {
        step = script_.front();
        script_.pop_front();
      }
    }
    if (latency.count() > 0) std::this_thread::sleep_for(latency);
    const bool anthropic = path == "/v1/messages";
    const bool chat = path == "/v1/chat/completions";
    if (step.status != 200) {
      ex->Respond(net::JsonResponse(step.status, ErrorBody(anthropic, step.status)));
      return;
    }
    ex->StartStream(200, {{"Content-Type", "text/event-stream"}});
    if (anthropic) {
      ex->Write(net::SseFrame(
          R"({"type":"message_start","message":{"id":"msg_f","type":"message","role":"assistant","model":"demo","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":7,"output_tokens":0}}})",
          "message_start"));
      ex->Write(net::SseFrame(
          R"({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})",
          "content_block_start"));
    }
    const size_t words = step.stall ? 1 : step.cut ? 2 : kWords.size();
    for (size_t i = 0; i < words; ++i) ex->Write(TextChunk(anthropic, chat, kWords[i]));
    if (step.stall || step.cut) {
      std::lock_guard<std::mutex> lock(mu_);
      held_.push_back(ex);
      cv_.notify_all();
      return;
    }
    if (anthropic) {
      ex->Write(net::SseFrame(R"({"type":"content_block_stop","index":0})", "content_block_stop"));
      ex->Write(net::SseFrame(
          R"({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}})",
          "message_delta"));
      ex->Write(net::SseFrame(R"({"type":"message_stop"})", "message_stop"));
    } else {
      nlohmann::json finish = {{"index", 0}, {"finish_reason", "stop"}};
      if (chat) {
        finish["delta"] = nlohmann::json::object();
      } else {
        finish["text"] = "";
      }
      ex->Write(net::SseFrame(nlohmann::json{{"id", "f"}, {"choices", {finish}}}.dump()));
      ex->Write(net::SseFrame(
          R"({"id":"f","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}})"));
      ex->Write(net::SseFrame("[DONE]"));
    }
    ex->End();
  }

 private:
  static std::string TextChunk(bool anthropic, bool chat, std::string_view text) {
    if (anthropic) {
      return net::SseFrame(nlohmann::json{{"type", "content_block_delta"},
                                          {"index", 0},
                                          {"delta", {{"type", "text_delta"}, {"text", text}}}}
                               .dump(),
                           "content_block_delta");
    }
    nlohmann::json choice = {{"index", 0}, {"finish_reason", nullptr}};
    if (chat) {
      choice["delta"] = {{"content", text}};
    } else {
      choice["text"] = text;
    }
    return net::SseFrame(nlohmann::json{{"id", "f"}, {"choices", {choice}}}.dump());
  }
  static std::string ErrorBody(bool anthropic, int status) {
    const std::string message = "the fault upstream answers " + std::to_string(status);
    if (anthropic) {
      const char* type = status == 429   ? "rate_limit_error"
                         : status == 529 ? "overloaded_error"
                                         : "api_error";
      return nlohmann::json{{"type", "error"}, {"error", {{"type", type}, {"message", message}}}}
          .dump();
    }
    const char* type = status == 429 ? "rate_limit_error" : "server_error";
    return nlohmann::json{{"error", {{"message", message}, {"type", type}, {"param", nullptr}}}}
        .dump();
  }

  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  int port_ = 0;
  mutable std::mutex mu_;  // guards script_, posts_, held_, latency_
  std::condition_variable cv_;
  std::deque<Step> script_;
  int posts_ = 0;
  std::chrono::milliseconds latency_{0};
  std::vector<std::shared_ptr<net::Exchange>> held_;
  std::unique_ptr<net::HttpServer> server_;  // last: stopped before the state it uses
};

}  // namespace strata::testing
