// The RT-Switcher through the real HTTP server: HttpServer + Gateway +
// Scheduler + RtControl on a tiny model, driven by real HTTP requests.
//
// Latency is made deterministic with a FakeClock that the gateway and the
// RtControl read (the HTTP server keeps the real clock: its deadlines are real
// waits). A gate request, submitted straight to the scheduler, parks the
// scheduler thread inside its OnToken; requests sent meanwhile are submitted
// at a known fake time, the clock is advanced, and the gate lets go: their
// time to first token is exactly the advance. Every wait is bounded and none
// assumes the host is fast.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "engine/scheduler.h"
#include "gateway/gateway.h"
#include "gateway/rt_control.h"
#include "server/server.h"
#include "testing/fake_clock.h"
#include "testing/tiny_model.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::server {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// Every wait gives up after this many polls of at least 1 ms (two minutes
// or more of this process running): counted in polls, not in wall time, so
// that a process paused from outside (SIGSTOP, a starved host) does not find
// its deadline gone the moment it resumes. Only a broken test waits this long.
constexpr int kPolls = 120'000;
constexpr auto kPoll = std::chrono::milliseconds(1);

// A scheduler request that parks the scheduler thread in each OnToken until
// released (one step at a time) or opened (then it ends at its next token).
// Threading: OnToken runs on the scheduler thread, the rest on the test
// thread; everything is guarded by mu_.
class StepGate final : public engine::RequestSink {
 public:
  util::StatusOr<int32_t> Choose(std::span<const float>) override { return 5; }
  bool OnToken(int32_t) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (open_) return false;
    ++tokens_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return open_ || released_ >= tokens_; });
    return !open_;
  }
  void OnFinish(engine::FinishReason, const util::Status&, const engine::Usage&) override {}

  // True once the scheduler thread is parked in the gate's n-th OnToken (or
  // a later one); false after kPolls.
  bool WaitToken(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    for (int i = 0; i < kPolls; ++i) {
      if (cv_.wait_for(lock, kPoll, [&] { return tokens_ >= n; })) return true;
    }
    return false;
  }
  // Lets the parked OnToken return and waits until the scheduler parks in
  // the next one: exactly one more scheduler iteration (admission round and
  // step) has run in between.
  bool Step() {
    int n;
    {
      std::lock_guard<std::mutex> lock(mu_);
      n = tokens_;
      released_ = tokens_;
      cv_.notify_all();
    }
    return WaitToken(n + 1);
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int tokens_ = 0;     // guarded by mu_; OnToken calls so far
  int released_ = 0;   // guarded by mu_; OnToken calls allowed to return
  bool open_ = false;  // guarded by mu_
};

// One HTTP completion running on its own thread.
struct Reply {
  std::atomic<bool> done{false};
  int status = 0;  // written before `done`
  json body;
};

class RtSwitcherHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tiny_ = testing::MakeTinyModel();
    ASSERT_NE(tiny_.model, nullptr);
    engine::EngineOptions eo;
    eo.n_ctx = 128;
    eo.n_seq_max = 8;
    engine_ = std::move(engine::Engine::Create(*tiny_.model, eo, *log_)).value();

    // As serve_cmd.cpp builds it, with a ladder of two levels whose
    // difference shows in a response (a max_tokens cap of 4 at level 1) and
    // every request traced. The window is short so that two intervals give a
    // threshold, one breaching interval steps down, two calm ones step up.
    gateway::RtControlOptions ro;
    ro.switcher.levels = {
        {.level = 0, .trace_sample_rate = 1.0},
        {.level = 1,
         .trace_sample_rate = 1.0,
         .sampling_tier = sampling::SamplingTier::kTopK,
         .max_tokens_cap = 4},
    };
    ro.switcher.interval = std::chrono::seconds(1);
    ro.switcher.min_interval_samples = 1;
    ro.switcher.window_intervals = 4;
    ro.switcher.min_window_intervals = 2;
    ro.switcher.breach_intervals = 1;
    ro.switcher.calm_intervals = 2;
    ro.switcher.min_dwell = std::chrono::seconds(2);
    // The fake clock stands still while tokens are generated, so every time
    // per output token is 0 or tiny: a floor keeps that signal calm.
    ro.switcher.tpot.floor_s = 1.0;
    ro.kv_pressure_free_fraction = 0;
    // The gates are scheduler submissions the switcher never sees admitted,
    // which would read as demand above capacity and hold the step-up back.
    ro.capacity_memory = std::chrono::nanoseconds(0);
    rt_ = std::move(gateway::RtControl::Create(ro, metrics_, clock_, *log_)).value();

    sched_ = std::move(engine::Scheduler::Start(*engine_, {.control = rt_.get()}, *log_)).value();
    gateway::GatewayOptions go;
    go.model_name = "tiny";
    go.max_tokens_cap = 64;
    go.rt_control = rt_.get();
    gw_ = std::move(gateway::Gateway::Create(*tiny_.model, *sched_, metrics_, go, clock_, *log_))
              .value();
    ServerOptions so;
    so.port = 0;
    so.http_threads = 16;
    so.request_timeout = std::chrono::hours(1);  // real time: never the test's limit
    srv_ = std::move(HttpServer::Create(so, ApiKeys(), metrics_, util::RealClock(), *log_)).value();
    auto port = srv_->Start();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    port_ = *port;
    srv_->SetGateway(gw_.get());
  }

  void TearDown() override {
    for (auto& g : gates_) g->Open();  // a failed assertion may have left one parked
    for (auto& t : clients_) t.join();
    if (srv_) srv_->Stop();
    srv_.reset();
    gw_.reset();
    sched_.reset();
  }

  // Submits a gate straight to the scheduler and waits until it parks the
  // scheduler thread at its first token.
  std::shared_ptr<StepGate> Hold() {
    auto gate = std::make_shared<StepGate>();
    gates_.push_back(gate);
    engine::SchedulerRequest sr;
    sr.prompt = {1, 2, 3};
    sr.max_tokens = 100;
    sr.stop_at_eog = false;
    sr.sink = gate;
    EXPECT_TRUE(sched_->Submit(std::move(sr)).ok());
    EXPECT_TRUE(gate->WaitToken(1)) << "the gate never got a token";
    return gate;
  }

  // POST /v1/completions on its own thread, greedy, past end-of-generation
  // tokens, so that only max_tokens (or a level's cap) ends it.
  std::shared_ptr<Reply> Launch(const std::string& request_id, int max_tokens) {
    auto reply = std::make_shared<Reply>();
    const json body = {{"model", "tiny"},
                       {"prompt", "once upon a time"},
                       {"max_tokens", max_tokens},
                       {"temperature", 0},
                       {"ignore_eos", true}};
    const int port = port_;
    clients_.emplace_back([reply, body, request_id, port] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(3600, 0);
      auto r = c.Post("/v1/completions", {{"X-Request-ID", request_id}}, body.dump(),
                      "application/json");
      if (r) {
        reply->status = r->status;
        reply->body = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
      }
      reply->done = true;
    });
    return reply;
  }

  // Waits (at most kPolls polls) until `pred` holds.
  static bool WaitFor(const std::function<bool()>& pred) {
    for (int i = 0; i < kPolls; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(kPoll);
    }
    return pred();
  }
  bool WaitDone(const std::vector<std::shared_ptr<Reply>>& replies) {
    return WaitFor([&] {
      for (const auto& r : replies) {
        if (!r->done) return false;
      }
      return true;
    });
  }
  // Until the scheduler has taken `n` submissions in all (gates included).
  bool WaitSubmitted(int64_t n) {
    return WaitFor([&] { return sched_->Stats().submitted >= n; });
  }

  std::string GetMetrics() {
    httplib::Client c("127.0.0.1", port_);
    auto r = c.Get("/metrics");
    return r && r->status == 200 ? r->body : std::string();
  }
  // The value of one series in Prometheus text ("name{labels}"); NaN if absent.
  static double Series(const std::string& text, const std::string& series) {
    const std::string needle = "\n" + series + " ";
    const size_t at = ("\n" + text).find(needle);
    if (at == std::string::npos) return std::nan("");
    return std::strtod(text.c_str() + at + needle.size() - 1, nullptr);
  }
  // The trace line of a request (empty if none).
  std::string TraceLine(const std::string& request_id) const {
    for (const std::string& line : log_->Lines()) {
      if (line.find("[" + request_id + "] trace ") != std::string::npos) return line;
    }
    return {};
  }
  std::string LogLineWith(const std::string& needle) const {
    for (const std::string& line : log_->Lines()) {
      if (line.find(needle) != std::string::npos) return line;
    }
    return {};
  }
  double TtftCount() {
    return Series(metrics_.Render(), "strata_time_to_first_token_seconds_count");
  }

  // `n` requests whose time to first token is exactly `ttft` (fake time):
  // submitted while a gate holds the scheduler, the clock advanced, then let
  // go. Returns once they have all been answered.
  void Batch(int n, milliseconds ttft) {
    const int64_t before = sched_->Stats().submitted;
    auto gate = Hold();
    std::vector<std::shared_ptr<Reply>> replies;
    for (int i = 0; i < n; ++i) replies.push_back(Launch("base-" + std::to_string(next_id_++), 6));
    ASSERT_TRUE(WaitSubmitted(before + 1 + n));
    clock_.Advance(ttft);
    gate->Open();
    ASSERT_TRUE(WaitDone(replies));
    for (const auto& r : replies) ASSERT_EQ(r->status, 200) << r->body.dump();
  }

  testing::FakeClock clock_;  // read by the gateway and the RT-Switcher
  std::unique_ptr<util::CapturingLogger> log_ = std::make_unique<util::CapturingLogger>();
  obs::MetricsRegistry metrics_;
  testing::TinyModel tiny_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<gateway::RtControl> rt_;  // outlives the scheduler and the gateway
  std::unique_ptr<engine::Scheduler> sched_;
  std::unique_ptr<gateway::Gateway> gw_;
  std::unique_ptr<HttpServer> srv_;
  int port_ = 0;
  int next_id_ = 0;
  std::vector<std::shared_ptr<StepGate>> gates_;
  std::vector<std::thread> clients_;
};

TEST_F(RtSwitcherHttpTest, ABreachStepsDownInFlightRequestsKeepTheirTermsAndCalmStepsBackUp) {
  // The switcher's first interval is [1 s, 2 s) of the fake clock.
  // Two intervals of history: TTFT P95s 0.1 s and 0.2 s, so the threshold is
  // mean 0.15 + 1.5 x sigma 0.05 = 0.225 s.
  ASSERT_NO_FATAL_FAILURE(Batch(2, milliseconds(100)));
  clock_.Advance(milliseconds(900));  // t = 2 s
  ASSERT_NO_FATAL_FAILURE(Batch(2, milliseconds(200)));
  clock_.Advance(milliseconds(800));  // t = 3 s
  std::string m = GetMetrics();
  EXPECT_EQ(Series(m, "strata_rt_level"), 0) << m;
  EXPECT_EQ(Series(m, "strata_rt_max_tokens_cap"), 0);

  // A burst that waits 2 s for its first token: two short requests and one
  // long one ("inflight") that will still be running when the level drops.
  const int64_t before = sched_->Stats().submitted;
  auto gate = Hold();
  std::vector<std::shared_ptr<Reply>> slow = {Launch("slow-0", 12), Launch("slow-1", 12)};
  auto inflight = Launch("inflight", 40);
  ASSERT_TRUE(WaitSubmitted(before + 4));
  clock_.Advance(std::chrono::seconds(2));  // t = 5 s; nothing has been admitted yet
  // Step the scheduler until all three first tokens are in (TTFT = 2 s, in
  // the interval [5 s, 6 s)); the gate parks it again after each step.
  const double ttft_before = TtftCount();
  for (int step = 0; step < 20 && TtftCount() < ttft_before + 3; ++step) ASSERT_TRUE(gate->Step());
  ASSERT_EQ(TtftCount(), ttft_before + 3);
  EXPECT_FALSE(inflight->done);
  m = GetMetrics();
  EXPECT_EQ(Series(m, "strata_rt_level"), 0) << "the interval has not closed yet\n" << m;

  // The interval closes at t = 6 s: the next admission round evaluates it.
  clock_.Advance(std::chrono::seconds(1));
  ASSERT_TRUE(gate->Step());

  // Over HTTP: the level, the switch, the statistics it was decided on.
  m = GetMetrics();
  EXPECT_EQ(Series(m, "strata_rt_level"), 1) << m;
  EXPECT_EQ(Series(m, "strata_rt_switch_total{direction=\"down\"}"), 1);
  EXPECT_EQ(Series(m, "strata_rt_max_tokens_cap"), 4);
  EXPECT_NEAR(Series(m, "strata_rt_threshold_seconds{signal=\"ttft\"}"), 0.225, 1e-9);
  EXPECT_NEAR(Series(m, "strata_rt_p95_seconds{signal=\"ttft\"}"), 2.0, 1e-9);
  EXPECT_NEAR(Series(m, "strata_rt_threshold_seconds{signal=\"tpot\"}"), 1.0, 1e-9);
  // The decision's log line, with its reason and the new terms.
  const std::string down = LogLineWith("rt-switcher: step down 0 -> 1");
  EXPECT_EQ(down.rfind("warn: ", 0), 0u) << down;
  EXPECT_NE(down.find("breach for 1 intervals; ttft p95 2.0000 s > threshold 0.2250 s (window "
                      "mean 0.1500 s + 1.5 sigma 0.0500 s over 2 intervals; 3 samples)"),
            std::string::npos)
      << down;
  EXPECT_NE(down.find("new requests get level 1: trace 1, sampling topk, max batch none, "
                      "max_tokens cap 4"),
            std::string::npos)
      << down;

  // The long request was admitted at level 0 and is still running (the gate
  // holds the scheduler): a request that arrives now gets level 1's terms.
  EXPECT_FALSE(inflight->done) << "the in-flight request must outlive the step-down";
  auto after = Launch("after", 16);
  ASSERT_TRUE(WaitSubmitted(before + 5))
      << "'after' was not submitted; "
      << (after->done ? "answered " + std::to_string(after->status) + ": " + after->body.dump()
                      : std::string("no answer"));
  gate->Open();
  ASSERT_TRUE(WaitDone(slow));
  ASSERT_TRUE(WaitDone({inflight, after}));

  ASSERT_EQ(inflight->status, 200) << inflight->body.dump();
  EXPECT_EQ(inflight->body["usage"]["completion_tokens"], 40) << "kept level 0: no cap";
  EXPECT_EQ(inflight->body["choices"][0]["finish_reason"], "length");
  std::string trace = TraceLine("inflight");
  EXPECT_NE(trace.find("ttft_ms=2000.0"), std::string::npos) << trace;
  EXPECT_NE(trace.find("completion_tokens=40"), std::string::npos) << trace;
  EXPECT_NE(trace.find("rt_level=0 sampling=entropy max_tokens_cap=0"), std::string::npos) << trace;

  ASSERT_EQ(after->status, 200) << after->body.dump();
  EXPECT_EQ(after->body["usage"]["completion_tokens"], 4) << "level 1 caps max_tokens at 4";
  EXPECT_EQ(after->body["choices"][0]["finish_reason"], "length");
  trace = TraceLine("after");
  EXPECT_NE(trace.find("completion_tokens=4 "), std::string::npos) << trace;
  EXPECT_NE(trace.find("max_tokens=16 rt_level=1 sampling=topk max_tokens_cap=4"),
            std::string::npos)
      << trace;

  // Calm: two intervals of fast answers ([6 s, 7 s) and [7 s, 8 s)), and the
  // minimum dwell of 2 s since the step-down at 6 s has passed at 8 s.
  clock_.Advance(std::chrono::seconds(1));  // t = 7 s
  auto calm = Launch("calm", 16);
  ASSERT_TRUE(WaitDone({calm}));
  EXPECT_EQ(calm->body["usage"]["completion_tokens"], 4) << "still level 1";
  m = GetMetrics();
  EXPECT_EQ(Series(m, "strata_rt_level"), 1) << "one calm interval is not enough\n" << m;
  clock_.Advance(std::chrono::seconds(1));  // t = 8 s
  auto back = Launch("back", 16);
  ASSERT_TRUE(WaitDone({back}));
  ASSERT_EQ(back->status, 200) << back->body.dump();
  EXPECT_EQ(back->body["usage"]["completion_tokens"], 16) << "level 0 again: no cap";
  EXPECT_NE(TraceLine("back").find("rt_level=0 sampling=entropy max_tokens_cap=0"),
            std::string::npos)
      << TraceLine("back");

  m = GetMetrics();
  EXPECT_EQ(Series(m, "strata_rt_level"), 0) << m;
  EXPECT_EQ(Series(m, "strata_rt_switch_total{direction=\"up\"}"), 1);
  EXPECT_EQ(Series(m, "strata_rt_switch_total{direction=\"down\"}"), 1);
  EXPECT_EQ(Series(m, "strata_rt_max_tokens_cap"), 0);
  const std::string up = LogLineWith("rt-switcher: step up 1 -> 0");
  EXPECT_EQ(up.rfind("warn: ", 0), 0u) << up;
  EXPECT_NE(up.find("calm for 2 intervals"), std::string::npos) << up;
  EXPECT_NE(up.find("new requests get level 0"), std::string::npos) << up;
}

}  // namespace
}  // namespace strata::server
