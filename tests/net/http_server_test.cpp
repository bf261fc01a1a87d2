#include "net/http_server.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "testing/raw_http.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::net {
namespace {

using namespace std::chrono_literals;
using testing::RawClient;
using testing::RawResponse;

std::string Gzip(const std::string& in) {
  z_stream zs{};
  deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&zs, in.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

// Routes:
//   GET  /health      answered from OnHead
//   POST /reject      401 from OnHead (the body is never read)
//   POST /echo        the body back
//   POST /later       the body back after 300 ms, from another thread
//   POST /hold        never answered; records its cancellation
//   GET  /stream?n=K  K chunks of 1 KiB, written while the client drains them
//   GET  /open        a stream started and then held: no chunk, no end
class TestHandler : public HttpHandler {
 public:
  ~TestHandler() override {
    for (auto& t : threads_) t.join();
  }
  std::optional<Response> OnHead(const RequestHead& head) override {
    if (head.path() == "/health") return JsonResponse(200, R"({"status":"ok"})");
    if (head.path() == "/reject") return JsonResponse(401, R"({"error":"no key"})");
    return std::nullopt;
  }
  void OnRequest(std::shared_ptr<Exchange> ex, std::string body) override {
    const std::string path(ex->head().path());
    if (path == "/echo") {
      Response r;
      r.headers.Add("Content-Type", "text/plain");
      r.headers.Add("X-Method", ex->head().method);
      r.body = std::move(body);
      ex->Respond(std::move(r));
      return;
    }
    if (path == "/later") {
      ex->OnCancel([this](CancelReason why) { Cancelled(why); });
      std::lock_guard<std::mutex> lock(mu_);
      threads_.emplace_back([ex, body = std::move(body)] {
        std::this_thread::sleep_for(300ms);
        ex->Post([ex, body] {
          Response r;
          r.body = body;
          ex->Respond(std::move(r));
        });
      });
      return;
    }
    if (path == "/hold") {
      ex->OnCancel([this](CancelReason why) { Cancelled(why); });
      std::lock_guard<std::mutex> lock(mu_);
      held_.push_back(ex);
      held_cv_.notify_all();
      return;
    }
    if (path == "/open") {
      ex->OnCancel([this](CancelReason why) { Cancelled(why); });
      ex->StartStream(200, {{"Content-Type", "text/event-stream"}});
      std::lock_guard<std::mutex> lock(mu_);
      held_.push_back(ex);
      held_cv_.notify_all();
      return;
    }
    if (path == "/stream") {
      const int n =
          std::stoi(std::string(ex->head().target.substr(ex->head().target.find('=') + 1)));
      ex->OnCancel([this](CancelReason why) { Cancelled(why); });
      ex->StartStream(200, {{"Content-Type", "text/event-stream"}});
      auto sent = std::make_shared<int>(0);
      auto pump = std::make_shared<std::function<void()>>();
      *pump = [ex, n, sent, this] {
        while (*sent < n && !ex->congested()) {
          ex->Write(std::string(1024, 'a' + static_cast<char>(*sent % 26)));
          ++*sent;
        }
        if (*sent == n) {
          ex->End();
        } else {
          congested_.fetch_add(1);
        }
      };
      ex->OnWritable([pump] { (*pump)(); });
      (*pump)();
      // The exchange keeps the pump alive through OnWritable; break the
      // cycle when it ends.
      ex->OnCancel([this, pump](CancelReason why) {
        *pump = nullptr;
        Cancelled(why);
      });
      return;
    }
    ex->Respond(JsonResponse(404, R"({"error":"no route"})"));
  }

  void Cancelled(CancelReason why) {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(why);
    cancel_cv_.notify_all();
  }
  // Waits for the n-th cancellation; its reason.
  std::optional<CancelReason> WaitCancel(size_t n, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cancel_cv_.wait_for(lock, timeout, [&] { return cancels_.size() >= n; })) {
      return std::nullopt;
    }
    return cancels_[n - 1];
  }
  bool WaitHeld(size_t n, std::chrono::milliseconds timeout = 5s) {
    std::unique_lock<std::mutex> lock(mu_);
    return held_cv_.wait_for(lock, timeout, [&] { return held_.size() >= n; });
  }
  size_t n_cancels() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancels_.size();
  }
  std::atomic<int> congested_{0};

 private:
  std::mutex mu_;
  std::condition_variable cancel_cv_, held_cv_;
  std::vector<CancelReason> cancels_;            // guarded by mu_
  std::vector<std::shared_ptr<Exchange>> held_;  // guarded by mu_
  std::vector<std::thread> threads_;             // guarded by mu_
};

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions o = {}) {
    o.port = 0;
    auto s = HttpServer::Create(o, handler_, *log_, util::RealClock());
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    auto port = server_->Start();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    port_ = *port;
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  static std::string Post(std::string_view path, std::string_view body,
                          std::string_view extra = "") {
    return "POST " + std::string(path) +
           " HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
           std::string(extra) + "\r\n" + std::string(body);
  }

  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  TestHandler handler_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

TEST_F(HttpServerTest, AnswersRequestsOnOneKeptAliveConnection) {
  StartServer();
  RawClient c(port_);
  ASSERT_TRUE(c.connected());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(c.Send(Post("/echo", "hello " + std::to_string(i))));
    auto r = c.ReadResponse();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->body, "hello " + std::to_string(i));
    EXPECT_EQ(r->Header("x-method"), "POST");
    EXPECT_FALSE(r->Header("date").empty());
  }
}

TEST_F(HttpServerTest, AnswersPipelinedRequestsInOrder) {
  StartServer();
  RawClient c(port_);
  ASSERT_TRUE(c.Send(Post("/later", "first") + Post("/echo", "second") +
                     "GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto a = c.ReadResponse();
  auto b = c.ReadResponse();
  auto h = c.ReadResponse();
  ASSERT_TRUE(a && b && h);
  EXPECT_EQ(a->body, "first");
  EXPECT_EQ(b->body, "second");
  EXPECT_EQ(h->body, R"({"status":"ok"})");
}

TEST_F(HttpServerTest, DecodesChunkedAndCompressedBodies) {
  StartServer();
  RawClient c(port_);
  ASSERT_TRUE(
      c.Send("POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
             "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"));
  auto r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "hello world");

  const std::string text(100000, 'x');
  ASSERT_TRUE(c.Send(Post("/echo", Gzip(text), "Content-Encoding: gzip\r\n")));
  r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, text);
}

TEST_F(HttpServerTest, StopsACompressionBombBeforeItInflates) {
  HttpServerOptions o;
  o.limits.max_body_bytes = 1 << 20;
  StartServer(o);
  // 16 MB of zeros compress to about 16 KB: the limit applies to what it inflates to.
  const std::string bomb = Gzip(std::string(16u << 20, '\0'));
  ASSERT_LT(bomb.size(), o.limits.max_body_bytes);
  RawClient c(port_);
  ASSERT_TRUE(c.Send(Post("/echo", bomb, "Content-Encoding: gzip\r\n")));
  auto r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("decompress"), std::string::npos) << r->body;
  EXPECT_EQ(r->Header("connection"), "close");
}

TEST_F(HttpServerTest, RefusesAnUnknownContentEncoding) {
  StartServer();
  RawClient c(port_);
  ASSERT_TRUE(c.Send(Post("/echo", "abc", "Content-Encoding: zstd\r\n")));
  auto r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 415);
}

TEST_F(HttpServerTest, EnforcesHeaderLimits) {
  HttpServerOptions o;
  o.limits.max_header_bytes = 4096;
  o.limits.max_request_line_bytes = 1024;
  o.limits.max_header_fields = 10;
  StartServer(o);
  {
    RawClient c(port_);
    ASSERT_TRUE(
        c.Send("GET /health HTTP/1.1\r\nHost: t\r\nX-Big: " + std::string(8000, 'a') + "\r\n\r\n"));
    auto r = c.ReadResponse();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 431);
  }
  {
    RawClient c(port_);
    std::string req = "GET /health HTTP/1.1\r\nHost: t\r\n";
    for (int i = 0; i < 20; ++i) req += "X-" + std::to_string(i) + ": v\r\n";
    ASSERT_TRUE(c.Send(req + "\r\n"));
    auto r = c.ReadResponse();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 431);
  }
  {
    // Never finished: the line alone is over its limit, so the answer comes
    // without waiting for the rest.
    RawClient c(port_);
    ASSERT_TRUE(c.Send("GET /" + std::string(2000, 'a')));
    auto r = c.ReadResponse();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 414);
  }
}

TEST_F(HttpServerTest, EnforcesTheBodyLimitForFixedAndChunkedBodies) {
  HttpServerOptions o;
  o.limits.max_body_bytes = 64 << 10;
  StartServer(o);
  {
    // Announced too large: refused before any body byte is sent.
    RawClient c(port_);
    ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n"));
    auto r = c.ReadResponse();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
  }
  {
    RawClient c(port_);
    std::string req = "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 100; ++i) req += "400\r\n" + std::string(1024, 'z') + "\r\n";
    c.Send(req);  // the server may stop reading half-way
    auto r = c.ReadResponse();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
  }
}

TEST_F(HttpServerTest, AnswersFromTheHeadWithoutReadingTheBody) {
  StartServer();
  RawClient c(port_);
  ASSERT_TRUE(c.Send("POST /reject HTTP/1.1\r\nHost: t\r\nContent-Length: 5000000\r\n\r\n"));
  auto r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->Header("connection"), "close");
  EXPECT_TRUE(c.WaitClosed());
}

TEST_F(HttpServerTest, TimesOutSlowHeadersAndBodies) {
  HttpServerOptions o;
  o.limits.header_timeout = 200ms;
  o.limits.body_timeout = 200ms;
  o.limits.idle_timeout = 200ms;
  StartServer(o);
  {
    RawClient c(port_);
    ASSERT_TRUE(c.Send("GET /health HTTP/1.1\r\nHo"));
    auto r = c.ReadResponse();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 408);
  }
  {
    RawClient c(port_);
    ASSERT_TRUE(c.Send("POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc"));
    auto r = c.ReadResponse();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 408);
  }
  {
    // Idle between requests: closed without an answer.
    RawClient c(port_);
    EXPECT_TRUE(c.WaitClosed());
    EXPECT_TRUE(c.buffered().empty());
  }
}

TEST_F(HttpServerTest, AnswersAClientThatHalfClosesAfterSending) {
  StartServer();
  RawClient c(port_);
  ASSERT_TRUE(c.Send(Post("/later", "still here")));
  c.ShutdownWrite();
  auto r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "still here");
  EXPECT_TRUE(c.WaitClosed());
  EXPECT_EQ(handler_.n_cancels(), 0u);
}

TEST_F(HttpServerTest, CancelsTheRequestOfAClientThatLeft) {
  StartServer();
  {
    RawClient c(port_);
    ASSERT_TRUE(c.Send(Post("/hold", "x")));
    ASSERT_TRUE(handler_.WaitHeld(1));
  }  // closed without a reset: the probe tells it from a half-close
  auto why = handler_.WaitCancel(1);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, CancelReason::kClientGone);
  {
    RawClient c(port_);
    ASSERT_TRUE(c.Send(Post("/hold", "x")));
    ASSERT_TRUE(handler_.WaitHeld(2));
    c.Reset();
  }
  why = handler_.WaitCancel(2);
  ASSERT_TRUE(why);
  EXPECT_EQ(*why, CancelReason::kClientGone);
}

TEST_F(HttpServerTest, StreamsWithBackpressureAndDropsAStalledReader) {
  HttpServerOptions o;
  o.limits.max_buffered_output = 16 << 10;
  o.limits.write_stall_timeout = 300ms;
  StartServer(o);
  {
    // A reader that keeps up gets every chunk, though the writer had to wait.
    RawClient c(port_);
    ASSERT_TRUE(c.Send("GET /stream?n=2000 HTTP/1.1\r\nHost: t\r\n\r\n"));
    auto r = c.ReadResponse();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->body.size(), 2000u * 1024u);
    EXPECT_GT(handler_.congested_.load(), 0);
  }
  {
    // A reader that stops: the server's buffer stays bounded, then it gives up.
    RawClient c(port_);
    c.SetReceiveBuffer(4096);
    ASSERT_TRUE(c.Send("GET /stream?n=100000 HTTP/1.1\r\nHost: t\r\n\r\n"));
    auto why = handler_.WaitCancel(1);
    ASSERT_TRUE(why);
    EXPECT_EQ(*why, CancelReason::kWriteStalled);
  }
}

TEST_F(HttpServerTest, AStreamsHeadGoesOutThoughNoChunkFollows) {
  // The head waits for the end of the handler that started the stream (to
  // leave with the first chunk), never for a chunk.
  StartServer({});
  RawClient c(port_);
  ASSERT_TRUE(c.Send("GET /open HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_TRUE(c.ReadUntil("\r\n\r\n", 5s)) << c.buffered();
  EXPECT_EQ(c.buffered().rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << c.buffered();
  EXPECT_NE(c.buffered().find("Transfer-Encoding: chunked\r\n"), std::string::npos);
}

TEST_F(HttpServerTest, CapsConnectionsPerClient) {
  HttpServerOptions o;
  o.limits.max_connections_per_client = 3;
  StartServer(o);
  std::vector<std::unique_ptr<RawClient>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(std::make_unique<RawClient>(port_));
    ASSERT_TRUE(held.back()->Send("GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));
    ASSERT_TRUE(held.back()->ReadResponse());
  }
  RawClient extra(port_);
  auto r = extra.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(server_->Stats().connections_refused, 1);
  held.pop_back();
  // A slot is free again once the server has seen the close.
  std::optional<RawResponse> ok;
  for (int attempt = 0; attempt < 50 && !(ok && ok->status == 200); ++attempt) {
    RawClient again(port_);
    again.Send("GET /health HTTP/1.1\r\nHost: t\r\n\r\n");
    ok = again.ReadResponse();
    if (!ok || ok->status != 200) std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

TEST_F(HttpServerTest, ASlowHeaderFloodCannotLockOutANewClient) {
  HttpServerOptions o;
  o.io_threads = 1;
  o.limits.max_connections = 20;
  StartServer(o);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(std::make_unique<RawClient>(port_));
    slow.back()->Send("GET /health HTTP/1.1\r\nX-Slow: ");
  }
  // Wait until the server holds them all.
  for (int i = 0; i < 200 && server_->Stats().connections_open < 20; ++i) {
    std::this_thread::sleep_for(5ms);
  }
  RawClient c(port_);
  ASSERT_TRUE(c.Send("GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_GE(server_->Stats().connections_displaced, 1);
}

TEST_F(HttpServerTest, RefusesAPortInUse) {
  StartServer();
  HttpServerOptions o;
  o.port = port_;
  auto second = HttpServer::Create(o, handler_, *log_, util::RealClock());
  ASSERT_TRUE(second.ok());
  auto started = (*second)->Start();
  ASSERT_FALSE(started.ok());
  EXPECT_EQ(started.status().code(), util::StatusCode::kUnavailable);
  EXPECT_NE(started.status().message().find("in use"), std::string::npos)
      << started.status().message();
}

TEST_F(HttpServerTest, ListensOnIpv6) {
  HttpServerOptions o;
  o.host = "::1";
  o.port = 0;
  auto s = HttpServer::Create(o, handler_, *log_, util::RealClock());
  ASSERT_TRUE(s.ok());
  auto port = (*s)->Start();
  if (!port.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << port.status().message();
  RawClient c(*port, /*ipv6=*/true);
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send("GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  (*s)->Stop();
}

TEST_F(HttpServerTest, RefusesMalformedRequests) {
  StartServer();
  const std::pair<std::string, int> cases[] = {
      {"GET /health HTTP/1.1\r\n\r\n", 400},             // no Host
      {"GET /health HTTP/2.0\r\nHost: t\r\n\r\n", 505},  // not HTTP/1.x
      {"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip\r\n\r\n", 501},
      {"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc", 400},
      {"GARBAGE\r\n\r\n", 400},
  };
  for (const auto& [request, status] : cases) {
    RawClient c(port_);
    ASSERT_TRUE(c.Send(request));
    auto r = c.ReadResponse();
    ASSERT_TRUE(r) << request;
    EXPECT_EQ(r->status, status) << request;
  }
}

TEST_F(HttpServerTest, SendsContinueWhenAskedAndNoBodyForHead) {
  StartServer();
  RawClient c(port_);
  ASSERT_TRUE(c.Send(
      "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"));
  auto cont = c.ReadResponse(10s, /*keep_interim=*/true);
  ASSERT_TRUE(cont);
  EXPECT_EQ(cont->status, 100);
  ASSERT_TRUE(c.Send("ok"));
  auto r = c.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "ok");

  ASSERT_TRUE(c.Send("HEAD /health HTTP/1.1\r\nHost: t\r\n\r\n"));
  c.ExpectHeadResponse(true);
  auto h = c.ReadResponse();
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(h->Header("content-length"), "15");
  c.ExpectHeadResponse(false);
  ASSERT_TRUE(c.Send("GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto g = c.ReadResponse();
  ASSERT_TRUE(g);
  EXPECT_EQ(g->body, R"({"status":"ok"})");
}

TEST_F(HttpServerTest, StopCancelsWhatIsRunningAndReturnsPromptly) {
  StartServer();
  std::vector<std::unique_ptr<RawClient>> clients;
  for (int i = 0; i < 5; ++i) {
    clients.push_back(std::make_unique<RawClient>(port_));
    ASSERT_TRUE(clients.back()->Send(Post("/hold", "x")));
  }
  ASSERT_TRUE(handler_.WaitHeld(5));
  // Idle and half-sent connections too.
  RawClient idle(port_);
  RawClient partial(port_);
  partial.Send("GET /he");
  const auto t0 = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  for (size_t i = 1; i <= 5; ++i) {
    auto why = handler_.WaitCancel(i);
    ASSERT_TRUE(why);
    EXPECT_EQ(*why, CancelReason::kServerStopped);
  }
  for (auto& c : clients) EXPECT_TRUE(c->WaitClosed());
}

TEST_F(HttpServerTest, DrainingClosesIdleConnectionsAndSaysCloseOnResponses) {
  StartServer();
  RawClient idle(port_);
  ASSERT_TRUE(idle.Send("GET /health HTTP/1.1\r\nHost: t\r\n\r\n"));
  ASSERT_TRUE(idle.ReadResponse());
  RawClient busy(port_);
  ASSERT_TRUE(busy.Send(Post("/later", "x")));
  std::this_thread::sleep_for(50ms);
  server_->SetDraining();
  EXPECT_TRUE(idle.WaitClosed());
  auto r = busy.ReadResponse();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->Header("connection"), "close");
}

TEST(HttpServerOptions, RejectsValuesOutOfRange) {
  auto log = util::NewNullLogger();
  TestHandler h;
  HttpServerOptions o;
  o.limits.max_header_fields = 0;
  auto s = HttpServer::Create(o, h, *log, util::RealClock());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("max_header_fields"), std::string::npos);
}

// A field line drops every CR and LF of its name and value, so a value
// can neither end the head nor start a field of its own.
TEST(AppendField, DropsLineBreaksFromNameAndValue) {
  std::string out;
  AppendField(out, "X-A", "plain");
  AppendField(out, "X-B\r\n", "v\r\nInjected: 1\n\r\n\r\nbody");
  AppendField(out, "", "");
  EXPECT_EQ(out, "X-A: plain\r\nX-B: vInjected: 1body\r\n: \r\n");
}

}  // namespace
}  // namespace strata::net
