// The gateway over backends that are not the local engine: requests are
// routed by model id, and the response tiers key a remote backend's
// requests on their fields (messages, the sampling fields the client set,
// tenant, backend), never on local tokens. The backend here is a scripted
// one on the backend interface (what a remote backend produces from its
// upstream's stream), so each test says exactly which events a run yields.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>

#include "backend/backend.h"
#include "gateway/gateway.h"
#include "gateway/rt_control.h"
#include "testing/fake_clock.h"
#include "util/log.h"

namespace strata::gateway {
namespace {

using std::chrono::seconds;

// A backend whose every run answers "echo: <last message>" in two deltas, or
// is held until Release (to coalesce), or fails before any event.
class ScriptedBackend final : public backend::Backend {
 public:
  ScriptedBackend(std::string name, uint64_t fingerprint)
      : name_(std::move(name)), fingerprint_(fingerprint) {}

  const std::string& name() const override { return name_; }
  std::string_view kind() const override { return "openai"; }
  uint64_t fingerprint() const override { return fingerprint_; }
  int32_t n_ctx() const override { return 0; }
  util::StatusOr<std::shared_ptr<const backend::Prepared>> Prepare(
      const backend::Request& r) const override {
    auto p = std::make_shared<backend::Prepared>();
    p->max_tokens = r.max_tokens.value_or(0);
    p->stops = r.stop;
    p->whole = !r.stream;  // as a remote backend: a whole answer for a client that does not stream
    return std::shared_ptr<const backend::Prepared>(std::move(p));
  }
  util::StatusOr<std::shared_ptr<backend::Run>> Start(const backend::Request& r,
                                                      std::shared_ptr<const backend::Prepared>,
                                                      std::shared_ptr<backend::Sink> sink,
                                                      backend::Governor* governor) override {
    starts_.fetch_add(1);
    terms_ = governor != nullptr ? governor->Admit().describe : "";
    const std::string text = "echo: " + r.messages.back().content;
    if (fail_next_.exchange(false)) {
      Finish(
          *sink, r.n,
          util::UnavailableError("no replica").WithReason(util::ErrorReason::kUpstreamUnavailable));
      return std::shared_ptr<backend::Run>(std::make_shared<NoRun>());
    }
    if (hold_.load()) {
      std::lock_guard<std::mutex> lock(mu_);
      held_.push_back({sink, text, r.n});
      return std::shared_ptr<backend::Run>(std::make_shared<NoRun>());
    }
    Answer(*sink, text, r.n);
    return std::shared_ptr<backend::Run>(std::make_shared<NoRun>());
  }
  util::StatusOr<backend::EmbeddingResult> Embed(const backend::EmbeddingRequest&,
                                                 std::chrono::steady_clock::time_point) override {
    return util::UnimplementedError("no embeddings");
  }
  bool defers_stream_head() const override { return true; }

  int starts() const { return starts_.load(); }
  // The terms the RT-Switcher gave the last run ("" = no switcher).
  const std::string& terms() const { return terms_; }
  void FailNext() { fail_next_.store(true); }
  void Hold() { hold_.store(true); }
  void ReleaseHeld() {
    std::vector<Held> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      held.swap(held_);
    }
    for (auto& h : held) Answer(*h.sink, h.text, h.n);
  }

 private:
  struct NoRun final : backend::Run {
    void Cancel() override {}
  };
  struct Held {
    std::shared_ptr<backend::Sink> sink;
    std::string text;
    int32_t n;
  };
  static void Answer(backend::Sink& sink, const std::string& text, int32_t n) {
    for (int32_t i = 0; i < n; ++i) {
      sink.OnFirstToken(std::chrono::milliseconds(1));
      backend::Event a;
      a.index = i;
      a.text = text.substr(0, 3);
      sink.Push(std::move(a));
      backend::Event b;
      b.index = i;
      b.text = text.substr(3);
      sink.Push(std::move(b));
      backend::Event f;
      f.kind = backend::Event::Kind::kFinish;
      f.index = i;
      f.finish = backend::FinishReason::kEndOfTurn;
      f.usage = {.prompt_tokens = 12, .cached_tokens = 8, .completion_tokens = 4};
      sink.Push(std::move(f));
    }
  }
  static void Finish(backend::Sink& sink, int32_t n, const util::Status& why) {
    for (int32_t i = 0; i < n; ++i) {
      backend::Event f;
      f.kind = backend::Event::Kind::kFinish;
      f.index = i;
      f.finish = backend::FinishReason::kCancelled;
      f.status = why;
      sink.Push(std::move(f));
    }
  }

  const std::string name_;
  const uint64_t fingerprint_;
  std::atomic<int> starts_{0};
  std::atomic<bool> fail_next_{false};
  std::atomic<bool> hold_{false};
  std::string terms_;
  std::mutex mu_;
  std::vector<Held> held_;  // guarded by mu_
};

struct Observed {
  std::string text;
  CacheOutcome outcome = CacheOutcome::kMiss;
  util::Status status;
  Usage usage;
};

class BackendTiersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GatewayOptions go;
    go.l1.max_bytes = 1 << 20;
    go.coalesce = true;
    auto g = Gateway::Create({&a_, &b_}, metrics_, go, clock_, *log_);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    gw_ = std::move(g).value();
  }

  static CompletionRequest Chat(std::string text, std::string model = "a") {
    CompletionRequest r;
    r.model = std::move(model);
    r.messages = {{"system", "be brief"}, {"user", std::move(text)}};
    r.sampling.temperature = 0;
    r.sampling_set.temperature = true;
    return r;
  }

  // The text a started generation streams, read to its end.
  static std::string Text(Generation& gen) {
    std::string text;
    while (true) {
      auto e = gen.Next(std::chrono::steady_clock::now() + seconds(10));
      if (!e.ok()) break;
      if (e->kind == Event::Kind::kDelta) text += e->text;
    }
    return text;
  }

  Observed Run(const CompletionRequest& r) {
    Observed o;
    auto gen = gw_->Start(r);
    if (!gen.ok()) {
      o.status = gen.status();
      return o;
    }
    o.outcome = (*gen)->cache_outcome();
    const auto deadline = std::chrono::steady_clock::now() + seconds(10);
    while (true) {
      auto e = (*gen)->Next(deadline);
      if (!e.ok()) {
        if (e.status().code() != util::StatusCode::kOutOfRange) o.status = e.status();
        break;
      }
      if (e->kind == Event::Kind::kDelta) o.text += e->text;
      if (e->kind == Event::Kind::kFinish) {
        o.usage = e->usage;
        if (!e->status.ok()) o.status = e->status;
      }
    }
    return o;
  }

  testing::FakeClock clock_;
  obs::MetricsRegistry metrics_;
  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  ScriptedBackend a_{"a", 0xa}, b_{"b", 0xb};
  std::unique_ptr<Gateway> gw_;
  int next_id_ = 0;
};

TEST_F(BackendTiersTest, RoutesByModelAndListsEveryBackend) {
  EXPECT_EQ(gw_->model_names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(gw_->model_name(), "a");
  EXPECT_EQ(Run(Chat("hi", "b")).text, "echo: hi");
  EXPECT_EQ(b_.starts(), 1);
  EXPECT_EQ(a_.starts(), 0);
  const Observed missing = Run(Chat("hi", "c"));
  EXPECT_EQ(missing.status.reason(), util::ErrorReason::kModelNotFound);
  // "" is the default backend (the first).
  EXPECT_EQ(Run(Chat("hi", "")).text, "echo: hi");
  EXPECT_EQ(a_.starts(), 1);
}

TEST_F(BackendTiersTest, ARemoteAnswerIsCachedOnTheRequestsFieldsWithItsUsage) {
  const Observed first = Run(Chat("what is L1?"));
  EXPECT_EQ(first.outcome, CacheOutcome::kMiss);
  const Observed again = Run(Chat("what is L1?"));
  EXPECT_EQ(again.outcome, CacheOutcome::kL1);
  EXPECT_EQ(again.text, first.text);
  EXPECT_EQ(again.usage.prompt_tokens, 12);  // the upstream's usage, replayed
  EXPECT_EQ(again.usage.cached_tokens, 8);
  EXPECT_EQ(a_.starts(), 1);

  // Everything the upstream is sent is in the key: other words, another
  // system prompt, a field set explicitly rather than left to the upstream.
  EXPECT_EQ(Run(Chat("what is L2?")).outcome, CacheOutcome::kMiss);
  CompletionRequest system = Chat("what is L1?");
  system.messages[0].content = "be verbose";
  EXPECT_EQ(Run(system).outcome, CacheOutcome::kMiss);
  CompletionRequest top_p = Chat("what is L1?");
  top_p.sampling_set.top_p = true;  // same value, but now sent upstream
  EXPECT_EQ(Run(top_p).outcome, CacheOutcome::kMiss);
  CompletionRequest longer = Chat("what is L1?");
  longer.max_tokens = 7;
  EXPECT_EQ(Run(longer).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(a_.starts(), 5);
}

TEST_F(BackendTiersTest, TenantsAndBackendsNeverShareAnAnswer) {
  EXPECT_EQ(Run(Chat("q")).outcome, CacheOutcome::kMiss);
  CompletionRequest other_tenant = Chat("q");
  other_tenant.tenant = "acme";
  EXPECT_EQ(Run(other_tenant).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(Run(Chat("q", "b")).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(a_.starts(), 2);
  EXPECT_EQ(b_.starts(), 1);
}

TEST_F(BackendTiersTest, SampledRequestsAreNeitherCachedNorCoalesced) {
  CompletionRequest r = Chat("q");
  r.sampling.temperature = 1;
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(Run(r).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(a_.starts(), 2);
}

TEST_F(BackendTiersTest, AFailedRunIsNotStoredAndReachesTheReader) {
  a_.FailNext();
  const Observed failed = Run(Chat("q"));
  EXPECT_EQ(failed.status.reason(), util::ErrorReason::kUpstreamUnavailable);
  const Observed retried = Run(Chat("q"));
  EXPECT_TRUE(retried.status.ok());
  EXPECT_EQ(retried.outcome, CacheOutcome::kMiss);
  EXPECT_EQ(a_.starts(), 2);
}

TEST_F(BackendTiersTest, IdenticalRemoteRequestsInFlightShareOneUpstreamCall) {
  a_.Hold();
  auto leader = gw_->Start(Chat("q"));
  auto follower = gw_->Start(Chat("q"));
  ASSERT_TRUE(leader.ok() && follower.ok());
  EXPECT_EQ((*follower)->cache_outcome(), CacheOutcome::kCoalesced);
  EXPECT_TRUE((*leader)->defers_stream_head());
  EXPECT_TRUE((*follower)->defers_stream_head());
  a_.ReleaseHeld();
  for (auto* gen : {&*leader, &*follower}) EXPECT_EQ(Text(**gen), "echo: q");
  EXPECT_EQ(a_.starts(), 1);
}

TEST_F(BackendTiersTest, StreamingAndWholeAnswerRunsAreJoinedOnlyWithTheirOwnKind) {
  a_.Hold();
  CompletionRequest whole = Chat("q");
  whole.stream = false;
  auto w1 = gw_->Start(whole);
  auto s1 = gw_->Start(Chat("q"));
  auto w2 = gw_->Start(whole);
  auto s2 = gw_->Start(Chat("q"));
  ASSERT_TRUE(w1.ok() && s1.ok() && w2.ok() && s2.ok());
  // A streaming client never waits on a run that reports only at the end.
  EXPECT_EQ((*w1)->cache_outcome(), CacheOutcome::kMiss);
  EXPECT_EQ((*s1)->cache_outcome(), CacheOutcome::kMiss);
  EXPECT_EQ((*w2)->cache_outcome(), CacheOutcome::kCoalesced);
  EXPECT_EQ((*s2)->cache_outcome(), CacheOutcome::kCoalesced);
  EXPECT_EQ(a_.starts(), 2);
  a_.ReleaseHeld();
  for (auto* gen : {&*w1, &*s1, &*w2, &*s2}) EXPECT_EQ(Text(**gen), "echo: q");
  // Both kinds store under the request's own key: either kind is a hit now.
  EXPECT_EQ(Run(whole).outcome, CacheOutcome::kL1);
  EXPECT_EQ(Run(Chat("q")).outcome, CacheOutcome::kL1);
  EXPECT_EQ(a_.starts(), 2);
}

TEST_F(BackendTiersTest, TheRtSwitcherGivesARemoteBackendsRunsTheirTerms) {
  // A remote backend's runs take the level's terms (its max_tokens cap,
  // trace sampling) from request threads: the switcher is thread-safe.
  obs::MetricsRegistry metrics;
  auto rt = RtControl::Create({}, metrics, clock_, *log_);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  GatewayOptions go;
  go.rt_control = rt->get();
  auto g = Gateway::Create({&a_}, metrics, go, clock_, *log_);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto gen = (*g)->Start(Chat("q"));
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(a_.starts(), 1);
  EXPECT_EQ(a_.terms(), " rt_level=0 sampling=entropy max_tokens_cap=0");
  // The fixture's gateway runs without a switcher: no terms.
  (void)Run(Chat("another"));
  EXPECT_EQ(a_.terms(), "");
}

TEST_F(BackendTiersTest, ALevelMarkedFallbackSendsRequestsToTheFallbackModel) {
  obs::MetricsRegistry metrics;
  RtControlOptions ro;
  auto levels = ParseLevels("1:entropy:0:0:0:1");  // one level, and it falls back
  ASSERT_TRUE(levels.ok()) << levels.status().ToString();
  ro.switcher.levels = *levels;
  auto rt = RtControl::Create(ro, metrics, clock_, *log_);
  ASSERT_TRUE(rt.ok()) << rt.status().ToString();
  GatewayOptions go;
  go.rt_control = rt->get();
  go.rt_fallback_model = "b";
  auto g = Gateway::Create({&a_, &b_}, metrics, go, clock_, *log_);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto gen = (*g)->Start(Chat("q", "a"));
  ASSERT_TRUE(gen.ok());
  EXPECT_EQ(a_.starts(), 0);
  EXPECT_EQ(b_.starts(), 1);
  EXPECT_NE(metrics.Render().find("strata_rt_fallback_total 1"), std::string::npos);
  // The fallback must be served.
  go.rt_fallback_model = "c";
  obs::MetricsRegistry other;
  EXPECT_FALSE(Gateway::Create({&a_, &b_}, other, go, clock_, *log_).ok());
}

TEST_F(BackendTiersTest, ANewPolicyRampsInAndASessionMovesOnce) {
  // The policies differ in the cap: max_tokens 100 fits the old one only.
  GatewayLiveOptions next = gw_->live_options();
  next.max_tokens_cap = 50;
  auto share_new = [&] {
    int refused = 0;
    for (int i = 0; i < 2000; ++i) {
      CompletionRequest r = Chat("q");
      r.request_id = fmt::format("r{}-{}", i, next_id_++);
      r.max_tokens = 100;
      r.response_cache = false;
      auto gen = gw_->Start(r);
      refused += gen.ok() ? 0 : 1;
    }
    return refused / 2000.0;
  };
  ASSERT_TRUE(gw_->Reconfigure(next, std::chrono::seconds(100)).ok());
  EXPECT_EQ(gw_->live_options().max_tokens_cap, 50) << "the newest options are the ones in force";
  EXPECT_LT(share_new(), 0.02);
  clock_.Advance(std::chrono::seconds(40));
  EXPECT_NEAR(gw_->policy_ramp_progress(), 0.4, 1e-9);
  EXPECT_NEAR(share_new(), 0.4, 0.05);
  EXPECT_NE(metrics_.Render().find("strata_policy_ramp_progress 0.4"), std::string::npos);
  // A session moves once and stays moved.
  for (int s = 0; s < 50; ++s) {
    CompletionRequest r = Chat("q");
    r.session_id = fmt::format("session-{}", s);
    r.max_tokens = 100;
    r.response_cache = false;
    r.request_id = "a";
    const bool first = gw_->Start(r).ok();
    r.request_id = "b";
    EXPECT_EQ(gw_->Start(r).ok(), first) << "session " << s;
  }
  // Reconfigured again mid-ramp: the ramp starts over from the options
  // fully in force before it.
  next.max_tokens_cap = 60;
  ASSERT_TRUE(gw_->Reconfigure(next, std::chrono::seconds(100)).ok());
  EXPECT_LT(share_new(), 0.02);
  clock_.Advance(std::chrono::seconds(101));
  EXPECT_DOUBLE_EQ(share_new(), 1.0);
  EXPECT_DOUBLE_EQ(gw_->policy_ramp_progress(), 1.0);
  EXPECT_FALSE(gw_->Reconfigure(next, std::chrono::hours(48)).ok());
}

}  // namespace
}  // namespace strata::gateway
