// `strata serve` as a process, tried as a hostile or careless client would:
// limits before parsing, the key before the body, slow-client floods, a port
// in use, a shutdown that cuts a stream, a model file truncated under the
// server. The binary is $STRATA_BIN (ctest sets it); the model is written by
// `strata mkmodel`, so nothing here needs ../shared.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "testing/raw_http.h"
#include "testing/strata_process.h"

namespace strata {
namespace {

using testing::HttpRequest;
using testing::RawClient;
using testing::RawResponse;
using testing::ReadAll;
using testing::Spawn;
using testing::WaitExit;
using Clock = std::chrono::steady_clock;

std::string Gzip(const std::string& data) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Resident set size of `pid` in KiB (/proc), 0 if unknown.
long RssKib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

class ServeProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    demo_ = new testing::DemoModelDir("strata_serve_process",
                                      "n_embd=128,n_layers=4,n_heads=4,n_ff=256,n_ctx=4096");
    ASSERT_FALSE(demo_->model.empty()) << demo_->MkmodelLog();
  }
  static void TearDownTestSuite() { delete demo_; }
  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      WaitExit(pid_, std::chrono::seconds(10));
    }
  }

  // Starts `strata serve` on `model` (default: the suite's) and waits until
  // /health is 200; the port it listens on.
  int Serve(std::vector<std::string> extra, std::string model = "") {
    static int n = 0;  // every server of the suite logs to its own file
    log_ = (demo_->dir / ("serve_" + std::to_string(++n) + ".log")).string();
    std::vector<std::string> args = {"serve",
                                     "-m",
                                     model.empty() ? demo_->model : model,
                                     "--port",
                                     "0",
                                     "--log-level",
                                     "info",
                                     "--ctx",
                                     "4096",
                                     "--max-tokens-cap",
                                     "4000",
                                     "--alias",
                                     "demo"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = Spawn(args, log_);
    if (const int port = testing::WaitReady(pid_, log_); port > 0) return port;
    ADD_FAILURE() << "the server did not start:\n" << ReadAll(log_);
    return -1;
  }

  // One request on a fresh connection and its response.
  std::optional<RawResponse> Ask(int port, const std::string& bytes) {
    RawClient c(port);
    if (!c.connected() || !c.Send(bytes)) return std::nullopt;
    return c.ReadResponse();
  }

  static testing::DemoModelDir* demo_;
  pid_t pid_ = -1;
  std::string log_;
};
testing::DemoModelDir* ServeProcessTest::demo_ = nullptr;

const char kChat[] =
    R"({"model":"demo","max_tokens":4,"messages":[{"role":"user","content":"hello"}]})";

TEST_F(ServeProcessTest, LimitsHoldBeforeAnythingIsParsed) {
  const int port = Serve({"--body-limit", "65536", "--max-header-bytes", "8192"});
  ASSERT_GT(port, 0);
  const long rss0 = RssKib(pid_);

  // A 100 MB gzip bomb (about 100 KB on the wire): 413 while inflating.
  const std::string bomb = Gzip(std::string(100u << 20, ' '));
  auto r =
      Ask(port, HttpRequest("POST", "/v1/chat/completions", bomb, "Content-Encoding: gzip\r\n"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413) << r->body;
  EXPECT_NE(r->body.find(R"("code":null)"), std::string::npos) << r->body;  // body_too_large
  EXPECT_LT(RssKib(pid_) - rss0, 64 * 1024) << "the bomb inflated";

  // A chunked body past the limit: 413 too.
  {
    RawClient c(port);
    std::string req = "POST /v1/messages HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
    for (int i = 0; i < 200; ++i) req += "400\r\n" + std::string(1024, 'x') + "\r\n";
    c.Send(req);
    auto chunked = c.ReadResponse();
    ASSERT_TRUE(chunked);
    EXPECT_EQ(chunked->status, 413);
    EXPECT_NE(chunked->body.find("request_too_large"), std::string::npos) << chunked->body;
  }

  // Headers past the limit, on /health too: 431.
  auto big = Ask(
      port, "GET /health HTTP/1.1\r\nHost: t\r\nX-Fill: " + std::string(20000, 'h') + "\r\n\r\n");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 431);
  EXPECT_NE(big->body.find("headers_too_large"), std::string::npos) << big->body;

  // An unknown encoding: 415; a body announced past the limit: 413 at once.
  auto enc =
      Ask(port, HttpRequest("POST", "/v1/chat/completions", kChat, "Content-Encoding: zstd\r\n"));
  ASSERT_TRUE(enc);
  EXPECT_EQ(enc->status, 415);
  auto announced = Ask(port,
                       "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: "
                       "900000000\r\n\r\n");
  ASSERT_TRUE(announced);
  EXPECT_EQ(announced->status, 413);

  // The server still answers normally.
  auto ok = Ask(port, HttpRequest("POST", "/v1/chat/completions", kChat));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

TEST_F(ServeProcessTest, TheKeyIsCheckedBeforeTheBodyIsRead) {
  const std::string keys = (demo_->dir / "keys.txt").string();
  std::ofstream(keys) << "sk-good-key-1 team-a\n";
  const int port = Serve({"--api-keys", keys});
  ASSERT_GT(port, 0);
  // Announces 1 MB and sends none of it: the 401 comes anyway.
  RawClient c(port);
  ASSERT_TRUE(c.Send("POST /v1/messages HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n"));
  auto r = c.ReadResponse(std::chrono::seconds(5));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_NE(r->body.find("authentication_error"), std::string::npos) << r->body;
  auto good = Ask(port, HttpRequest("POST", "/v1/chat/completions", kChat,
                                    "Authorization: Bearer sk-good-key-1\r\n"));
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200);
}

TEST_F(ServeProcessTest, SlowClientsStarveNeitherHealthNorTheApi) {
  struct rlimit rl {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &rl), 0);
  if (rl.rlim_cur < 1200) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 4096);
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  const int port = Serve({"--max-connections-per-client", "2000", "--header-timeout", "60"});
  ASSERT_GT(port, 0);
  // 300 sockets that send part of a request line and stop, 300 slow bodies,
  // 300 that send nothing.
  std::vector<std::unique_ptr<RawClient>> crowd;
  for (int i = 0; i < 300; ++i) {
    crowd.push_back(std::make_unique<RawClient>(port));
    crowd.back()->Send("POST /v1/chat/completions HTTP/1.1\r\nHo");
    crowd.push_back(std::make_unique<RawClient>(port));
    crowd.back()->Send(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Length: "
        "100000\r\n\r\n{\"mo");
    crowd.push_back(std::make_unique<RawClient>(port));
  }
  for (int round = 0; round < 3; ++round) {
    const auto t0 = Clock::now();
    auto health = Ask(port, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n");
    const auto health_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    // A functional bound (the latency figures are in bench/net.sh): far
    // below the 30 s a thread-per-connection server took under this flood.
    EXPECT_LT(health_ms, 5000);
    auto api = Ask(port, HttpRequest("POST", "/v1/chat/completions", kChat));
    ASSERT_TRUE(api);
    EXPECT_EQ(api->status, 200) << api->body;
    for (int i = 0; i < 300; i += 30) crowd[static_cast<size_t>(3 * i)]->Send("s");  // trickle
  }
}

TEST_F(ServeProcessTest, APortInUseIsAnErrorNotASharedPort) {
  const int port = Serve({});
  ASSERT_GT(port, 0);
  const std::string log = (demo_->dir / "second.log").string();
  const pid_t second = Spawn({"serve", "-m", demo_->model, "--port", std::to_string(port)}, log);
  const int rc = WaitExit(second, std::chrono::seconds(30));
  if (rc < 0) ::kill(second, SIGKILL);
  EXPECT_EQ(rc, 1) << ReadAll(log);
  EXPECT_NE(ReadAll(log).find("in use"), std::string::npos) << ReadAll(log);
}

TEST_F(ServeProcessTest, ShutdownCutsAStreamWithAnErrorAndExitsWithinGracePlusOneSecond) {
  // Grace 0: the cut comes at once, so the 4000-token stream is still
  // running however fast the machine is.
  const int port = Serve({"--grace", "0"});
  ASSERT_GT(port, 0);
  RawClient stream(port);
  ASSERT_TRUE(stream.Send(HttpRequest(
      "POST", "/v1/completions",
      R"({"model":"demo","prompt":"once","max_tokens":4000,"ignore_eos":true,"stream":true})")));
  ASSERT_TRUE(stream.ReadUntil("data: {", std::chrono::seconds(10)));
  // Idle and slow connections must not hold the exit up.
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 20; ++i) {
    idle.push_back(std::make_unique<RawClient>(port));
    idle.back()->Send("GET /heal");
  }
  const auto t0 = Clock::now();
  ASSERT_EQ(::kill(pid_, SIGTERM), 0);
  const int rc = WaitExit(pid_, std::chrono::seconds(10));
  const auto exit_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count();
  EXPECT_EQ(rc, 0) << ReadAll(log_);
  pid_ = -1;
  EXPECT_LT(exit_ms, 1000) << "grace 0 s: the exit must come within grace + 1 s";
  stream.WaitClosed(std::chrono::seconds(5));
  const std::string& got = stream.buffered();
  EXPECT_NE(got.find(R"("code":"shutting_down")"), std::string::npos)
      << got.substr(got.size() > 600 ? got.size() - 600 : 0);
  EXPECT_EQ(got.find("[DONE]"), std::string::npos);
  EXPECT_EQ(got.find(R"("finish_reason":"stop")"), std::string::npos);
}

TEST_F(ServeProcessTest, AModelTruncatedUnderTheServerFailsRequestsNotTheProcess) {
  const std::string copy = (demo_->dir / "served.gguf").string();
  std::filesystem::copy_file(demo_->model, copy, std::filesystem::copy_options::overwrite_existing);
  const int port = Serve({}, copy);
  ASSERT_GT(port, 0);
  auto before = Ask(port, HttpRequest("POST", "/v1/chat/completions", kChat));
  ASSERT_TRUE(before);
  EXPECT_EQ(before->status, 200);
  std::filesystem::resize_file(copy, 4096);
  const std::string fresh =
      R"({"model":"demo","max_tokens":8,"no_cache":true,"messages":[{"role":"user","content":"again"}]})";
  auto during = Ask(port, HttpRequest("POST", "/v1/chat/completions", fresh));
  ASSERT_TRUE(during);
  EXPECT_EQ(during->status, 503) << during->body;
  EXPECT_NE(during->body.find("model_changed"), std::string::npos) << during->body;
  // Within the watch period /health turns 503 and says why.
  std::optional<RawResponse> health;
  for (int i = 0; i < 40; ++i) {
    health = Ask(port, "GET /health HTTP/1.1\r\nHost: t\r\n\r\n");
    if (health && health->status == 503) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_NE(health->body.find("model_changed"), std::string::npos) << health->body;
  EXPECT_EQ(WaitExit(pid_, std::chrono::milliseconds(0)), -1) << "the process died";
  EXPECT_NE(ReadAll(log_).find("truncated"), std::string::npos) << ReadAll(log_);
}

}  // namespace
}  // namespace strata
