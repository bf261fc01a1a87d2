#include "net/http_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "net/http_server.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::net {
namespace {

using namespace std::chrono_literals;

// The upstream: strata's own server (a real HTTP/1.1 peer).
//   POST /echo         the body back
//   GET  /stream?n=K   K chunks of 1000 bytes, each written when the last drained
//   GET  /silent       never answers
//   GET  /close        answers, then says Connection: close
class Upstream : public HttpHandler {
 public:
  std::optional<Response> OnHead(const RequestHead& head) override {
    if (head.path() == "/close") {
      Response r = JsonResponse(200, "{}");
      r.headers.Add("X-Close", "1");
      return r;
    }
    return std::nullopt;
  }
  void OnRequest(std::shared_ptr<Exchange> ex, std::string body) override {
    const std::string path(ex->head().path());
    if (path == "/echo") {
      Response r;
      r.body = body;
      r.headers.Add("X-Got-Length", std::to_string(body.size()));
      ex->Respond(std::move(r));
    } else if (path == "/stream") {
      const int n =
          std::stoi(std::string(ex->head().target.substr(ex->head().target.find('=') + 1)));
      ex->StartStream(200, {{"Content-Type", "text/plain"}});
      auto sent = std::make_shared<int>(0);
      auto pump = std::make_shared<std::function<void()>>();
      *pump = [ex, n, sent] {
        while (*sent < n && !ex->congested()) {
          ex->Write(std::string(1000, static_cast<char>('a' + *sent % 26)));
          ++*sent;
        }
        if (*sent == n) ex->End();
      };
      ex->OnWritable([pump] { (*pump)(); });
      ex->OnCancel([pump](CancelReason) { *pump = nullptr; });
      (*pump)();
    } else if (path == "/silent") {
      std::lock_guard<std::mutex> lock(mu_);
      held_.push_back(ex);
    } else {
      ex->Respond(JsonResponse(404, "{}"));
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::shared_ptr<Exchange>> held_;  // guarded by mu_
};

class HttpClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HttpServerOptions o;
    o.port = 0;
    o.limits.max_buffered_output = 8 << 10;
    auto s = HttpServer::Create(o, upstream_, *log_, util::RealClock());
    ASSERT_TRUE(s.ok());
    server_ = std::move(s).value();
    auto port = server_->Start();
    ASSERT_TRUE(port.ok());
    base_ = "http://127.0.0.1:" + std::to_string(*port);
  }
  std::unique_ptr<HttpClient> MakeClient(HttpClientOptions o = {}) {
    auto c = HttpClient::Create(o, *log_);
    EXPECT_TRUE(c.ok());
    return std::move(c).value();
  }

  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  Upstream upstream_;
  std::unique_ptr<HttpServer> server_;
  std::string base_;
};

TEST_F(HttpClientTest, FetchesAndReusesTheConnection) {
  auto client = MakeClient();
  for (int i = 0; i < 5; ++i) {
    ClientRequest r;
    r.method = "POST";
    r.url = base_ + "/echo";
    r.body = "payload " + std::to_string(i);
    auto resp = client->Fetch(r);
    ASSERT_TRUE(resp.ok()) << resp.status().ToString();
    EXPECT_EQ(resp->status, 200);
    EXPECT_EQ(resp->body, r.body);
    EXPECT_EQ(resp->headers.GetOr("X-Got-Length"), std::to_string(r.body.size()));
  }
  EXPECT_EQ(client->Stats().connections_opened, 1);
  EXPECT_EQ(client->Stats().connections_reused, 4);
}

TEST_F(HttpClientTest, StreamsTheBodyAndPausesAtTheCallersPace) {
  auto client = MakeClient();
  std::mutex mu;
  std::condition_variable cv;
  size_t received = 0;
  bool done = false;
  util::Status result;
  std::shared_ptr<ClientCall> call;
  ClientCallbacks cb;
  cb.on_body = [&](std::string_view b) {
    std::lock_guard<std::mutex> lock(mu);
    received += b.size();
    cv.notify_all();
  };
  cb.on_done = [&](const util::Status& s) {
    std::lock_guard<std::mutex> lock(mu);
    done = true;
    result = s;
    cv.notify_all();
  };
  ClientRequest r;
  r.url = base_ + "/stream?n=2000";
  call = client->Start(r, cb);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 5s, [&] { return received > 0; }));
  }
  call->Pause();
  std::this_thread::sleep_for(200ms);
  size_t at_pause;
  {
    std::lock_guard<std::mutex> lock(mu);
    at_pause = received;
  }
  std::this_thread::sleep_for(200ms);
  {
    // Paused: at most what was already read in flight arrives.
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_LE(received, at_pause + 64 * 1024);
    EXPECT_LT(received, 2000u * 1000u);
  }
  call->Resume();
  std::unique_lock<std::mutex> lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return done; }));
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(received, 2000u * 1000u);
}

TEST_F(HttpClientTest, GivesUpOnASilentServerAtTheFirstByteDeadline) {
  HttpClientOptions o;
  o.first_byte_timeout = 200ms;
  auto client = MakeClient(o);
  ClientRequest r;
  r.url = base_ + "/silent";
  auto resp = client->Fetch(r);
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().code(), util::StatusCode::kDeadlineExceeded);
  EXPECT_NE(resp.status().message().find("no response"), std::string::npos);
  // The request went out: not a connect failure, so not safe to resend.
  EXPECT_EQ(resp.status().reason(), util::ErrorReason::kUpstreamTimeout);
}

// A refused connection sent nothing: its reason says it may go elsewhere.
TEST_F(HttpClientTest, ARefusedConnectionIsUnavailable) {
  auto client = MakeClient();
  ClientRequest r;
  r.url = "http://127.0.0.1:1/v1/models";  // nothing listens on port 1
  auto resp = client->Fetch(r);
  ASSERT_FALSE(resp.ok());
  EXPECT_EQ(resp.status().reason(), util::ErrorReason::kUpstreamUnavailable)
      << resp.status().ToString();
}

TEST_F(HttpClientTest, AfterRunsOnceItsTimeHasPassedOrWhenTheClientStops) {
  auto client = MakeClient();
  std::promise<std::pair<bool, std::chrono::steady_clock::duration>> fired;
  const auto t0 = std::chrono::steady_clock::now();
  client->After(50ms, [&](bool stopped) {
    fired.set_value({stopped, std::chrono::steady_clock::now() - t0});
  });
  auto f = fired.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  const auto [stopped, waited] = f.get();
  EXPECT_FALSE(stopped);
  EXPECT_GE(waited, 50ms);
  // One still waiting when the client stops runs then, told so.
  std::promise<bool> late;
  client->After(std::chrono::hours(1), [&](bool s) { late.set_value(s); });
  std::this_thread::sleep_for(20ms);  // posted to its loop
  client->Stop();
  auto g = late.get_future();
  ASSERT_EQ(g.wait_for(1s), std::future_status::ready);
  EXPECT_TRUE(g.get());
}

TEST_F(HttpClientTest, CancelEndsARequestAtOnce) {
  auto client = MakeClient();
  std::promise<util::Status> done;
  ClientRequest r;
  r.url = base_ + "/silent";
  ClientCallbacks cb;
  cb.on_done = [&](const util::Status& s) { done.set_value(s); };
  auto call = client->Start(r, cb);
  std::this_thread::sleep_for(50ms);
  call->Cancel();
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get().code(), util::StatusCode::kCancelled);
}

TEST_F(HttpClientTest, RefusesAResponseHeadBeyondItsLimitAndABadUrl) {
  auto client = MakeClient();
  ClientRequest bad;
  bad.url = "ftp://x/y";
  EXPECT_EQ(client->Fetch(bad).status().code(), util::StatusCode::kInvalidArgument);

  // A raw server that sends a huge head.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::listen(fd, 1);
  std::thread srv([fd] {
    const int c = ::accept(fd, nullptr, nullptr);
    char buf[4096];
    ::recv(c, buf, sizeof(buf), 0);
    std::string head = "HTTP/1.1 200 OK\r\nX-Big: " + std::string(200000, 'h') + "\r\n\r\n";
    ::send(c, head.data(), head.size(), MSG_NOSIGNAL);
    ::close(c);
  });
  ClientRequest r;
  r.url = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port)) + "/";
  auto resp = client->Fetch(r);
  srv.join();
  ::close(fd);
  ASSERT_FALSE(resp.ok());
  EXPECT_NE(resp.status().message().find("exceeds"), std::string::npos) << resp.status().message();
}

TEST_F(HttpClientTest, RetriesOnceWhenAPooledConnectionWasClosed) {
  auto client = MakeClient();
  ClientRequest r;
  r.method = "POST";
  r.url = base_ + "/echo";
  r.body = "one";
  ASSERT_TRUE(client->Fetch(r).ok());
  // The upstream restarts: the pooled connection is dead.
  server_->Stop();
  HttpServerOptions o;
  o.port = std::stoi(base_.substr(base_.rfind(':') + 1));
  auto s = HttpServer::Create(o, upstream_, *log_, util::RealClock());
  ASSERT_TRUE(s.ok());
  server_ = std::move(s).value();
  ASSERT_TRUE(server_->Start().ok());
  r.body = "two";
  auto resp = client->Fetch(r);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  EXPECT_EQ(resp->body, "two");
}

TEST_F(HttpClientTest, StopCancelsWhatIsInFlight) {
  auto client = MakeClient();
  std::promise<util::Status> done;
  ClientRequest r;
  r.url = base_ + "/silent";
  ClientCallbacks cb;
  cb.on_done = [&](const util::Status& s) { done.set_value(s); };
  client->Start(r, cb);
  std::this_thread::sleep_for(50ms);
  client->Stop();
  auto f = done.get_future();
  ASSERT_EQ(f.wait_for(1s), std::future_status::ready);
  EXPECT_EQ(f.get().code(), util::StatusCode::kCancelled);
}

}  // namespace
}  // namespace strata::net
