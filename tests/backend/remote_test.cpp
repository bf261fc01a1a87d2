#include "backend/remote.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "net/http_client.h"
#include "net/http_server.h"
#include "obs/metrics.h"
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
  void Push(Event e) override {
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
  void Start(net::HttpHandler& upstream) {
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
    o.routing.replicas = {"http://127.0.0.1:" + std::to_string(*port)};
    o.health_path = "";
    auto b = RemoteBackend::Create(o, *client, *metrics, util::RealClock(), *log);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    backend = std::move(b).value();
  }

  std::unique_ptr<util::Logger> log = util::NewNullLogger();
  std::unique_ptr<net::HttpServer> server;
  std::unique_ptr<net::HttpClient> client;
  obs::MetricsRegistry registry;
  std::unique_ptr<RemoteMetrics> metrics = RemoteMetrics::Register(registry);
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
    EXPECT_EQ(upstream.accept(), stream ? "text/event-stream" : "application/json");
    EXPECT_EQ(upstream.request_id(), r.request_id);
    const std::string body = upstream.body();
    EXPECT_NE(body.find(stream ? R"("stream":true)" : R"("stream":false)"), std::string::npos)
        << body;
    EXPECT_EQ(body.find("stream_options") != std::string::npos, stream) << body;
  }
}

}  // namespace
}  // namespace strata::backend
