#include "net/event_loops.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "net/http_client.h"
#include "net/http_server.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::net {
namespace {

using namespace std::chrono_literals;

ClientRequest PostTo(std::string url, std::string body) {
  ClientRequest r;
  r.method = "POST";
  r.url = std::move(url);
  r.body = std::move(body);
  return r;
}

// The upstream: POST /echo answers its body; POST /silent never answers
// (its exchanges are held until the test lets them go).
class EchoUpstream : public HttpHandler {
 public:
  std::optional<Response> OnHead(const RequestHead&) override { return std::nullopt; }
  void OnRequest(std::shared_ptr<Exchange> ex, std::string body) override {
    if (ex->head().path() == "/silent") {
      std::lock_guard<std::mutex> lock(mu_);
      held_.push_back(ex);
      held_promise_.set_value();
      return;
    }
    Response r;
    r.body = std::move(body);
    ex->Respond(std::move(r));
  }
  // Waits for the first /silent request to arrive.
  void WaitHeld() { held_future_.wait(); }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<Exchange>> held_;  // guarded by mu_
  std::promise<void> held_promise_;
  std::shared_future<void> held_future_ = held_promise_.get_future().share();
};

// A front that forwards each request to the upstream path it names (the
// request's own path) through a client over its own loops, and answers with
// the upstream's body. It records the threads involved.
class ForwardingFront : public HttpHandler {
 public:
  ForwardingFront(HttpClient*& client, std::string upstream)
      : client_(client), upstream_(upstream) {}
  std::optional<Response> OnHead(const RequestHead&) override { return std::nullopt; }
  void OnRequest(std::shared_ptr<Exchange> ex, std::string body) override {
    const std::thread::id handler = std::this_thread::get_id();
    ClientRequest r = PostTo(upstream_ + std::string(ex->head().path()), std::move(body));
    auto got = std::make_shared<std::string>();
    ClientCallbacks cb;
    cb.on_body = [got](std::string_view b) { got->append(b); };
    cb.on_done = [this, ex, got, handler](const util::Status& st) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        same_thread_.push_back(std::this_thread::get_id() == handler);
        done_.push_back(st);
      }
      done_cv_.notify_all();
      if (st.ok()) {
        Response resp;
        resp.body = *got;
        ex->Respond(std::move(resp));
      } else {
        ex->Respond(JsonResponse(502, "{}"));
      }
    };
    std::shared_ptr<ClientCall> call = client_->Start(std::move(r), std::move(cb));
    ex->OnCancel([call](CancelReason) { call->Cancel(); });
  }
  std::vector<bool> same_thread() {
    std::lock_guard<std::mutex> lock(mu_);
    return same_thread_;
  }
  std::vector<util::Status> done() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  // Waits (10 s at most) until `n` calls have ended; what ended by then.
  std::vector<util::Status> WaitDone(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait_for(lock, std::chrono::seconds(10), [&] { return done_.size() >= n; });
    return done_;
  }

 private:
  HttpClient*& client_;
  const std::string upstream_;
  std::mutex mu_;
  std::vector<bool> same_thread_;    // guarded by mu_: on_done ran on the handler's thread
  std::vector<util::Status> done_;   // guarded by mu_: each call's outcome
  std::condition_variable done_cv_;  // a call ended
};

class SharedLoopsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions uo;
    uo.port = 0;
    auto up = HttpServer::Create(uo, upstream_, *log_, util::RealClock());
    ASSERT_TRUE(up.ok());
    up_ = std::move(up).value();
    auto up_port = up_->Start();
    ASSERT_TRUE(up_port.ok());
    front_handler_ = std::make_unique<ForwardingFront>(
        client_ptr_, "http://127.0.0.1:" + std::to_string(*up_port));

    auto loops = EventLoops::Create(2);
    ASSERT_TRUE(loops.ok());
    loops_ = std::move(loops).value();
    auto client = HttpClient::Create({}, *log_, loops_.get());
    ASSERT_TRUE(client.ok());
    client_ = std::move(client).value();
    client_ptr_ = client_.get();
    HttpServerOptions fo;
    fo.port = 0;
    fo.loops = loops_.get();
    auto front = HttpServer::Create(fo, *front_handler_, *log_, util::RealClock());
    ASSERT_TRUE(front.ok());
    front_ = std::move(front).value();
    auto front_port = front_->Start();
    ASSERT_TRUE(front_port.ok());
    front_url_ = "http://127.0.0.1:" + std::to_string(*front_port);
    auto outside = HttpClient::Create({}, *log_);
    ASSERT_TRUE(outside.ok());
    outside_ = std::move(outside).value();
  }
  void TearDown() override {
    // The shutdown order of net/event_loops.h.
    if (front_) front_->Stop();
    if (client_) client_->Stop();
    if (loops_) loops_->Stop();
    upstream_.Release();
  }

  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  EchoUpstream upstream_;
  std::unique_ptr<HttpServer> up_;
  HttpClient* client_ptr_ = nullptr;
  std::unique_ptr<ForwardingFront> front_handler_;
  std::unique_ptr<EventLoops> loops_;
  std::unique_ptr<HttpClient> client_;
  std::unique_ptr<HttpServer> front_;
  std::string front_url_;
  std::unique_ptr<HttpClient> outside_;  // the front's own client, on its own thread
};

TEST(EventLoops, RefusesAThreadCountOutOfRange) {
  EXPECT_FALSE(EventLoops::Create(0).ok());
  EXPECT_FALSE(EventLoops::Create(257).ok());
}

TEST(EventLoops, KnowsWhichLoopAThreadRuns) {
  auto loops = EventLoops::Create(2);
  ASSERT_TRUE(loops.ok());
  EXPECT_EQ((*loops)->OnLoopThread(), -1);
  auto client = HttpClient::Create({}, *util::NewNullLogger(), loops->get());
  ASSERT_TRUE(client.ok());
  (*client)->Stop();
  (*loops)->Stop();
  (*loops)->Stop();  // idempotent
}

TEST_F(SharedLoopsTest, ACallStartedOnAServerLoopRunsOnThatLoopsThread) {
  for (int i = 0; i < 6; ++i) {
    auto resp = outside_->Fetch(PostTo(front_url_ + "/echo", "hi " + std::to_string(i)));
    ASSERT_TRUE(resp.ok()) << resp.status().ToString();
    EXPECT_EQ(resp->status, 200);
    EXPECT_EQ(resp->body, "hi " + std::to_string(i));
  }
  const std::vector<bool> same = front_handler_->same_thread();
  ASSERT_EQ(same.size(), 6u);
  for (bool s : same) EXPECT_TRUE(s);
  // The loop's pool kept the upstream connection: one per loop at most.
  EXPECT_LE(client_->Stats().connections_opened, 2);
  EXPECT_GE(client_->Stats().connections_reused, 4);
}

TEST_F(SharedLoopsTest, ACallStartedOnAnotherThreadStillWorks) {
  auto resp = client_->Fetch(PostTo(front_url_ + "/echo", "from the test's thread"));
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->body, "from the test's thread");
  std::promise<util::Status> done;
  ClientCallbacks cb;
  cb.on_done = [&done](const util::Status& st) { done.set_value(st); };
  auto call = client_->Start(PostTo(front_url_ + "/echo", "x"), std::move(cb));
  EXPECT_TRUE(done.get_future().get().ok());
}

TEST_F(SharedLoopsTest, StoppingTheServerCancelsTheUpstreamCallsItStarted) {
  std::promise<util::Status> outer;
  ClientCallbacks cb;
  cb.on_done = [&outer](const util::Status& st) { outer.set_value(st); };
  auto call = outside_->Start(PostTo(front_url_ + "/silent", "x"), std::move(cb));
  upstream_.WaitHeld();
  front_->Stop();  // the exchange is cancelled, and with it its upstream call
  const util::Status front_side = outer.get_future().get();
  EXPECT_FALSE(front_side.ok());
  // The call's cancellation runs on its loop soon after, not by the
  // client's Stop (whose reason would be "the HTTP client stopped").
  const std::vector<util::Status> done = front_handler_->WaitDone(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].code(), util::StatusCode::kCancelled) << done[0].ToString();
  EXPECT_NE(done[0].message().find(": cancelled"), std::string::npos) << done[0].ToString();
  client_->Stop();
  loops_->Stop();
}

TEST_F(SharedLoopsTest, StoppingTheClientCancelsItsCallsOnSharedLoops) {
  std::promise<util::Status> outer;
  ClientCallbacks cb;
  cb.on_done = [&outer](const util::Status& st) { outer.set_value(st); };
  auto call = outside_->Start(PostTo(front_url_ + "/silent", "x"), std::move(cb));
  upstream_.WaitHeld();
  client_->Stop();  // the front's call ends now; the front answers 502
  const util::Status front_side = outer.get_future().get();
  EXPECT_TRUE(front_side.ok()) << front_side.ToString();
  const std::vector<util::Status> done = front_handler_->done();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].code(), util::StatusCode::kCancelled) << done[0].ToString();
  // The client is gone before its loops: what it left queued runs safely.
  client_.reset();
  front_->Stop();
  loops_->Stop();
}

}  // namespace
}  // namespace strata::net
