#include "backend/remote.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "net/http_client.h"
#include "net/http_server.h"
#include "obs/metrics.h"
#include "obs/tracer.h"
#include "testing/span_recorder.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::backend {
namespace {

using namespace std::chrono_literals;

// The upstream: strata's own HTTP server answering every POST with one
// OpenAI chat stream of a text delta, its finish and the usage chunk.
class OneReplyUpstream : public net::HttpHandler {
 public:
  std::optional<net::Response> OnHead(const net::RequestHead&) override { return std::nullopt; }
  void OnRequest(std::shared_ptr<net::Exchange> ex, std::string) override {
    ex->StartStream(200, {{"Content-Type", "text/event-stream"}});
    ex->Write(R"(data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]})"
              "\n\n");
    ex->Write(R"(data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]})"
              "\n\n");
    ex->Write(R"(data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}})"
              "\n\n");
    ex->Write("data: [DONE]\n\n");
    ex->End();
  }
};

// The upstream as an OpenAI server answers either way: a stream when the
// body asks for one, else one JSON response. Keeps the last request.
class EitherWayUpstream : public net::HttpHandler {
 public:
  std::optional<net::Response> OnHead(const net::RequestHead& head) override {
    std::lock_guard<std::mutex> lock(mu_);
    accept_ = std::string(head.headers.GetOr("Accept"));
    request_id_ = std::string(head.headers.GetOr("X-Request-ID"));
    return std::nullopt;
  }
  void OnRequest(std::shared_ptr<net::Exchange> ex, std::string body) override {
    const bool stream = body.find(R"("stream":true)") != std::string::npos;
    {
      std::lock_guard<std::mutex> lock(mu_);
      body_ = body;
    }
    if (stream) {
      ex->StartStream(200, {{"Content-Type", "text/event-stream"}});
      ex->Write(R"(data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}],)"
                R"("usage":{"prompt_tokens":3,"completion_tokens":1}})"
                "\n\ndata: [DONE]\n\n");
      ex->End();
      return;
    }
    ex->Respond(net::JsonResponse(
        200, R"({"choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},)"
             R"("finish_reason":"stop"}],"usage":{"prompt_tokens":3,)"
             R"("completion_tokens":1,"prompt_tokens_details":{"cached_tokens":2}}})"));
  }
  std::string body() {
    std::lock_guard<std::mutex> lock(mu_);
    return body_;
  }
  std::string accept() {
    std::lock_guard<std::mutex> lock(mu_);
    return accept_;
  }
  std::string request_id() {
    std::lock_guard<std::mutex> lock(mu_);
    return request_id_;
  }

 private:
  std::mutex mu_;
  std::string body_;        // guarded by mu_
  std::string accept_;      // guarded by mu_
  std::string request_id_;  // guarded by mu_
};

// Answers with `chunks` text deltas of 1 KiB each (a stream, or one JSON
// answer when the body does not ask for a stream), then the finish.
class FloodUpstream : public net::HttpHandler {
 public:
  explicit FloodUpstream(int chunks) : chunks_(chunks) {}
  std::optional<net::Response> OnHead(const net::RequestHead&) override { return std::nullopt; }
  void OnRequest(std::shared_ptr<net::Exchange> ex, std::string body) override {
    const std::string text(1024, 'x');
    if (body.find(R"("stream":true)") == std::string::npos) {
      std::string all;
      for (int i = 0; i < chunks_; ++i) all += text;
      ex->Respond(net::JsonResponse(
          200,
          R"({"choices":[{"index":0,"message":{"role":"assistant","content":")" + all +
              R"("},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}})"));
      return;
    }
    ex->StartStream(200, {{"Content-Type", "text/event-stream"}});
    for (int i = 0; i < chunks_; ++i) {
      ex->Write(R"(data: {"choices":[{"index":0,"delta":{"content":")" + text +
                R"("},"finish_reason":null}]})" + "\n\n");
    }
    ex->Write(R"(data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],)"
              R"("usage":{"prompt_tokens":3,"completion_tokens":1}})"
              "\n\ndata: [DONE]\n\n");
    ex->End();
  }

 private:
  const int chunks_;
};

// Answers its first `fail` POSTs 503, then one stream as OneReplyUpstream;
// keeps each request's traceparent and tracestate.
class TracedUpstream : public net::HttpHandler {
 public:
  explicit TracedUpstream(int fail) : fail_(fail) {}
  std::optional<net::Response> OnHead(const net::RequestHead& head) override {
    std::lock_guard<std::mutex> lock(mu_);
    seen_.push_back({std::string(head.headers.GetOr("traceparent")),
                     std::string(head.headers.GetOr("tracestate"))});
    return std::nullopt;
  }
  void OnRequest(std::shared_ptr<net::Exchange> ex, std::string body) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (fail_ > 0) {
        --fail_;
        ex->Respond(net::JsonResponse(503, R"({"error":{"message":"busy","type":"x"}})"));
        return;
      }
    }
    reply_.OnRequest(std::move(ex), std::move(body));
  }
  std::vector<std::pair<std::string, std::string>> seen() const {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }

 private:
  OneReplyUpstream reply_;
  mutable std::mutex mu_;  // guards fail_ and seen_
  int fail_;
  std::vector<std::pair<std::string, std::string>> seen_;  // traceparent, tracestate
};

// Records the events; says when it is destroyed.
struct Gone {
  std::mutex mu;
  std::condition_variable cv;
  bool gone = false;  // guarded by mu
};

class WatchedSink final : public Sink {
 public:
  explicit WatchedSink(std::shared_ptr<Gone> gone) : gone_(std::move(gone)) {}
  ~WatchedSink() override {
    std::lock_guard<std::mutex> lock(gone_->mu);
    gone_->gone = true;
    gone_->cv.notify_all();
  }
  void Push(Event&& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(e));
    cv_.notify_all();
  }
  void OnFirstToken(std::chrono::nanoseconds) override {}
  void DoNotStore() override {}
  // Waits (at most 10 s) for the finish; returns the events so far.
  std::vector<Event> WaitForFinish() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, 10s, [this] {
      return !events_.empty() && events_.back().kind == Event::Kind::kFinish;
    });
    return events_;
  }

 private:
  const std::shared_ptr<Gone> gone_;
  std::mutex mu_;
  std::condition_variable cv_;  // an event arrived
  std::vector<Event> events_;   // guarded by mu_
};

// `upstream` on strata's own HTTP server, and the remote backend "up" in
// front of it (no health probes: the test's requests are all it sees).
struct Rig {
  void Start(net::HttpHandler& upstream, size_t max_answer_bytes = 64u << 20) {
    net::HttpServerOptions so;
    so.port = 0;
    auto s = net::HttpServer::Create(so, upstream, *log, util::RealClock());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server = std::move(s).value();
    auto port = server->Start();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    auto c = net::HttpClient::Create({}, *log);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    client = std::move(c).value();
    RemoteOptions o;
    o.name = "up";
    replica = "http://127.0.0.1:" + std::to_string(*port);
    o.routing.replicas = {replica};
    o.health_path = "";
    o.max_answer_bytes = max_answer_bytes;
    auto b = RemoteBackend::Create(o, *client, *metrics, util::RealClock(), *log);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend = std::move(b).value();
  }

  std::unique_ptr<util::Logger> log = util::NewNullLogger();
  std::unique_ptr<net::HttpServer> server;
  std::unique_ptr<net::HttpClient> client;
  obs::MetricsRegistry registry;
  std::unique_ptr<RemoteMetrics> metrics = RemoteMetrics::Register(registry);
  std::string replica;                     // the upstream's base URL
  std::unique_ptr<RemoteBackend> backend;  // destroyed first
};

TEST(RemoteBackend, ARunLetsGoOfItsSinkOnceEveryChoiceFinished) {
  OneReplyUpstream upstream;
  Rig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Start(upstream));

  Request r;
  r.model = "up";
  r.messages = {{"user", "hello"}};
  auto prepared = rig.backend->Prepare(r);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  auto gone = std::make_shared<Gone>();
  auto sink = std::make_shared<WatchedSink>(gone);
  // The caller keeps the run (the gateway's flight does, and it is the sink).
  auto run = rig.backend->Start(r, *prepared, sink, nullptr);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const std::vector<Event> events = sink->WaitForFinish();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].text, "Hi");
  EXPECT_EQ(events[1].finish, FinishReason::kLength);
  EXPECT_TRUE(events[1].status.ok()) << events[1].status.ToString();
  EXPECT_EQ(events[1].usage.prompt_tokens, 3);

  sink.reset();
  std::unique_lock<std::mutex> lock(gone->mu);
  EXPECT_TRUE(gone->cv.wait_for(lock, 10s, [&] { return gone->gone; }))
      << "the finished run still holds its sink";
}

TEST(RemoteBackend, AClientThatDoesNotStreamIsSentTheUpstreamsWholeAnswer) {
  EitherWayUpstream upstream;
  Rig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Start(upstream));

  for (const bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streaming client" : "whole answer");
    Request r;
    r.model = "up";
    r.stream = stream;
    r.request_id = stream ? "req-stream" : "req-whole";
    r.messages = {{"user", "hello"}};
    auto prepared = rig.backend->Prepare(r);
    ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
    EXPECT_EQ((*prepared)->whole, !stream);
    auto sink = std::make_shared<WatchedSink>(std::make_shared<Gone>());
    auto run = rig.backend->Start(r, *prepared, sink, nullptr);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    const std::vector<Event> events = sink->WaitForFinish();
    ASSERT_EQ(events.size(), 2u);
    EXPECT_EQ(events[0].text, "Hi");
    EXPECT_EQ(events[1].finish, FinishReason::kEndOfTurn);
    EXPECT_TRUE(events[1].status.ok()) << events[1].status.ToString();
    EXPECT_EQ(events[1].usage.prompt_tokens, 3);
    EXPECT_EQ(events[1].usage.completion_tokens, 1);
    // The finish names the replica that answered (a request snapshot records it).
    EXPECT_EQ(events[1].replica, rig.replica);
    EXPECT_FALSE(events[1].seed.has_value());
    EXPECT_EQ(upstream.accept(), stream ? "text/event-stream" : "application/json");
    EXPECT_EQ(upstream.request_id(), r.request_id);
    const std::string body = upstream.body();
    EXPECT_NE(body.find(stream ? R"("stream":true)" : R"("stream":false)"), std::string::npos)
        << body;
    EXPECT_EQ(body.find("stream_options") != std::string::npos, stream) << body;
  }
}

// An answer past max_answer_bytes ends the run with a protocol error, after
// the text that came before it (a stream) or with none (a whole answer); one
// within the bound arrives whole.
TEST(RemoteBackend, AnAnswerPastTheByteBoundEndsWithAProtocolError) {
  FloodUpstream upstream(100);  // ~100 KiB of text
  Rig big;
  ASSERT_NO_FATAL_FAILURE(big.Start(upstream, 1u << 20));
  Rig small;
  ASSERT_NO_FATAL_FAILURE(small.Start(upstream, 64u << 10));
  for (const bool stream : {true, false}) {
    for (Rig* rig : {&big, &small}) {
      const bool bounded = rig == &small;
      SCOPED_TRACE(fmt::format("{} {}", stream ? "stream" : "whole", bounded ? "64 KiB" : "1 MiB"));
      Request r;
      r.model = "up";
      r.stream = stream;
      r.messages = {{"user", "hello"}};
      auto prepared = rig->backend->Prepare(r);
      ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
      auto sink = std::make_shared<WatchedSink>(std::make_shared<Gone>());
      auto run = rig->backend->Start(r, *prepared, sink, nullptr);
      ASSERT_TRUE(run.ok()) << run.status().ToString();
      const std::vector<Event> events = sink->WaitForFinish();
      ASSERT_FALSE(events.empty());
      const Event& finish = events.back();
      ASSERT_EQ(finish.kind, Event::Kind::kFinish);
      size_t text = 0;
      for (const Event& e : events) text += e.text.size();
      if (!bounded) {
        EXPECT_TRUE(finish.status.ok()) << finish.status.ToString();
        EXPECT_EQ(text, 100u * 1024);
        continue;
      }
      EXPECT_EQ(finish.status.reason(), util::ErrorReason::kUpstreamProtocol)
          << finish.status.ToString();
      EXPECT_NE(finish.status.message().find("exceeds 65536 bytes"), std::string::npos)
          << finish.status.ToString();
      EXPECT_LT(text, 64u * 1024);
      if (!stream) {
        EXPECT_EQ(text, 0u);
      }
    }
  }
}

// Each attempt of a traced request is a CLIENT span, and the upstream is
// told that span as its parent (with the caller's tracestate); an
// untraced request sends no context.
TEST(RemoteBackend, EachUpstreamAttemptIsAClientSpanAndTheUpstreamsParent) {
  TracedUpstream upstream(/*fail=*/1);
  Rig rig;
  ASSERT_NO_FATAL_FAILURE(rig.Start(upstream));
  obs::MetricsRegistry tracer_metrics;
  auto recorder = std::make_shared<testing::SpanRecorder>();
  auto tracer = *obs::Tracer::Create({.sample_rate = 1.0, .seed = 9}, recorder, tracer_metrics,
                                     util::RealClock());
  Request r;
  r.model = "up";
  r.messages = {{"user", "hello"}};
  r.trace = tracer->StartRequest(
      obs::ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
      "congo=t61rcWkgMzE", 1.0);
  auto prepared = rig.backend->Prepare(r);
  ASSERT_TRUE(prepared.ok()) << prepared.status().ToString();
  auto sink = std::make_shared<WatchedSink>(std::make_shared<Gone>());
  auto run = rig.backend->Start(r, *prepared, sink, nullptr);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  const std::vector<Event> events = sink->WaitForFinish();
  ASSERT_FALSE(events.empty());
  EXPECT_TRUE(events.back().status.ok()) << events.back().status.ToString();
  run->reset();  // the run ends its last span when it goes
  const auto seen = upstream.seen();
  ASSERT_EQ(seen.size(), 2u);         // the 503, then the answer
  ASSERT_TRUE(recorder->WaitFor(2));  // the last ends when its exchange does
  const std::vector<obs::SpanData> calls = recorder->spans();
  ASSERT_EQ(calls.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const obs::SpanData& c = calls[i];
    EXPECT_EQ(c.kind, obs::SpanKind::kClient);
    EXPECT_EQ(c.name, "chat up");
    EXPECT_EQ(c.parent_span_id, r.trace->root_span_id());
    EXPECT_EQ(c.trace_state, "congo=t61rcWkgMzE");
    EXPECT_EQ(seen[i].first, "00-4bf92f3577b34da6a3ce929d0e0e4736-" + c.span_id.Hex() + "-01");
    EXPECT_EQ(seen[i].second, "congo=t61rcWkgMzE");
    EXPECT_EQ(std::get<std::string>(*testing::Attr(c, "gen_ai.provider.name")), "openai");
    EXPECT_EQ(std::get<std::string>(*testing::Attr(c, "server.address")), "127.0.0.1");
  }
  EXPECT_EQ(std::get<int64_t>(*testing::Attr(calls[0], "http.response.status_code")), 503);
  EXPECT_TRUE(calls[0].error);
  EXPECT_EQ(calls[0].status_message, "upstream_overloaded");
  EXPECT_EQ(std::get<int64_t>(*testing::Attr(calls[1], "http.request.resend_count")), 1);
  EXPECT_FALSE(calls[1].error);
  EXPECT_EQ(std::get<int64_t>(*testing::Attr(calls[1], "gen_ai.usage.output_tokens")), 1);

  // Without a trace nothing is sent.
  r.trace = nullptr;
  auto untraced = std::make_shared<WatchedSink>(std::make_shared<Gone>());
  auto again = rig.backend->Start(r, *prepared, untraced, nullptr);
  ASSERT_TRUE(again.ok());
  untraced->WaitForFinish();
  ASSERT_EQ(upstream.seen().size(), 3u);
  EXPECT_EQ(upstream.seen()[2].first, "");
  EXPECT_EQ(upstream.seen()[2].second, "");
}

}  // namespace
}  // namespace strata::backend
