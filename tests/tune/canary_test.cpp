#include "tune/canary.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <mutex>

#include "testing/fake_clock.h"
#include "testing/mem_file_system.h"

namespace strata::tune {
namespace {

using namespace std::chrono_literals;
using backend::Event;

// A backend that answers at once, on the calling thread: `text` with a time
// to first token of `ttft` (as its events' timing says), or fails.
class ScriptedBackend final : public backend::Backend {
 public:
  ScriptedBackend(std::string name, uint64_t fingerprint)
      : name_(std::move(name)), fp_(fingerprint) {}
  std::string text = "the answer";
  std::chrono::milliseconds ttft{50};
  util::Status fail_in_stream;   // not OK: every choice finishes with it
  util::Status fail_to_start;    // not OK: Start refuses
  util::Status fail_to_prepare;  // not OK: Prepare refuses
  std::atomic<int> started{0};

  const std::string& name() const override { return name_; }
  std::string_view kind() const override { return "openai"; }
  uint64_t fingerprint() const override { return fp_; }
  int32_t n_ctx() const override { return 0; }
  util::StatusOr<std::shared_ptr<const backend::Prepared>> Prepare(
      const backend::Request&) const override {
    if (!fail_to_prepare.ok()) return fail_to_prepare;
    return std::shared_ptr<const backend::Prepared>(std::make_shared<backend::Prepared>());
  }
  util::StatusOr<std::shared_ptr<backend::Run>> Start(const backend::Request& r,
                                                      std::shared_ptr<const backend::Prepared>,
                                                      std::shared_ptr<backend::Sink> sink,
                                                      backend::Governor*) override {
    if (!fail_to_start.ok()) return fail_to_start;
    started++;
    for (int32_t i = 0; i < std::max(1, r.n); ++i) {
      Event d;
      d.index = i;
      d.text = text;
      if (fail_in_stream.ok()) sink->Push(std::move(d));
      Event f;
      f.kind = Event::Kind::kFinish;
      f.index = i;
      f.finish = backend::FinishReason::kEndOfTurn;
      f.status = fail_in_stream;
      f.timing.submitted = std::chrono::steady_clock::time_point(1s);
      if (fail_in_stream.ok()) f.timing.first_token = f.timing.submitted + ttft;
      sink->Push(std::move(f));
    }
    return std::shared_ptr<backend::Run>(std::make_shared<NoRun>());
  }
  util::StatusOr<backend::EmbeddingResult> Embed(const backend::EmbeddingRequest&,
                                                 std::chrono::steady_clock::time_point) override {
    return util::InvalidArgumentError("no embeddings");
  }

 private:
  struct NoRun final : backend::Run {
    void Cancel() override {}
  };
  const std::string name_;
  const uint64_t fp_;
};

// The client's side of a run.
class ClientSink final : public backend::Sink {
 public:
  void Push(Event&& e) override {
    std::lock_guard lock(mu);
    if (e.kind == Event::Kind::kDelta) {
      text += e.text;
    } else {
      status = e.status;
      finished = true;
    }
  }
  void OnFirstToken(std::chrono::nanoseconds) override {}
  void DoNotStore() override { do_not_store = true; }
  std::mutex mu;
  std::string text;
  util::Status status;
  bool finished = false;
  bool do_not_store = false;
};

class CanaryTest : public ::testing::Test {
 protected:
  CanaryOptions Options() {
    CanaryOptions o;
    o.id = "openai:http://candidate";
    o.step_time = 60s;
    o.min_samples = 20;
    o.min_pairs = 10;
    o.mirror = 1.0;
    o.max_mirrors = 1024;
    o.state_file = "/state/canary.json";
    return o;
  }
  std::unique_ptr<CanaryController> Controller(const CanaryOptions& o) {
    // A registry per controller: a restart's controller registers its metrics again.
    registries_.push_back(std::make_unique<obs::MetricsRegistry>());
    auto c = CanaryController::Create(o, clock_, fs_, registries_.back().get(), *log_);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? *std::move(c) : nullptr;
  }
  // Sends `count` requests through `b`; returns how many the candidate took.
  int Send(CanaryBackend& b, int count, const std::string& tenant = "default",
           float temperature = 0.0f) {
    int before = candidate_.started.load();
    for (int i = 0; i < count; ++i) {
      backend::Request r;
      r.request_id = fmt::format("req-{}", next_id_++);
      r.tenant = tenant;
      r.sampling.temperature = temperature;
      r.messages.push_back({.role = "user", .content = "hello"});
      auto p = b.Prepare(r);
      EXPECT_TRUE(p.ok()) << p.status().ToString();
      if (!p.ok()) continue;
      auto sink = std::make_shared<ClientSink>();
      auto run = b.Start(r, *p, sink, nullptr);
      EXPECT_TRUE(run.ok()) << run.status().ToString();
    }
    return candidate_.started.load() - before;
  }

  testing::FakeClock clock_;
  testing::MemFileSystem fs_;
  std::vector<std::unique_ptr<obs::MetricsRegistry>> registries_;
  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  ScriptedBackend baseline_{"llama", 1};
  ScriptedBackend candidate_{"llama", 2};
  int next_id_ = 0;
};

TEST_F(CanaryTest, AGoodCandidateRampsThroughEveryStepToPromotion) {
  auto c = Controller(Options());
  CanaryBackend b(baseline_, candidate_, *c);
  EXPECT_DOUBLE_EQ(c->Weight(), 0.05);
  EXPECT_EQ(b.fingerprint(), 1u);
  for (int32_t want : {25, 50, 100}) {
    const int32_t before = c->percent();
    Send(b, 800);
    c->Tick();
    EXPECT_EQ(c->percent(), before) << "no step before its time";
    EXPECT_EQ(c->phase(), CanaryPhase::kRamping);
    clock_.Advance(61s);
    c->Tick();
    EXPECT_EQ(c->percent(), want);
    EXPECT_DOUBLE_EQ(c->Weight(), want / 100.0);
    EXPECT_EQ(c->phase(), CanaryPhase::kRamping);
  }
  Send(b, 100);
  clock_.Advance(61s);
  c->Tick();
  EXPECT_EQ(c->phase(), CanaryPhase::kPromoted);
  EXPECT_DOUBLE_EQ(c->Weight(), 1.0);
  EXPECT_EQ(b.fingerprint(), 2u) << "once promoted, the candidate's answers are the model's";
  EXPECT_EQ(Send(b, 50), 50);
  auto events = c->Events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].what, "step");
  EXPECT_EQ(events[0].from_percent, 5);
  EXPECT_EQ(events[0].to_percent, 25);
  EXPECT_EQ(events[3].what, "promoted");
  auto state = nlohmann::json::parse(*fs_.ReadFile("/state/canary.json"));
  EXPECT_EQ(state["phase"], "promoted");
  EXPECT_EQ(state["id"], "openai:http://candidate");
  EXPECT_NE(registries_.back()->Render().find("strata_canary_weight 1"), std::string::npos);
}

TEST_F(CanaryTest, TheSplitFollowsTheWeightAndASessionStaysOnOneSide) {
  auto o = Options();
  o.steps = {25, 100};
  auto c = Controller(o);
  CanaryBackend b(baseline_, candidate_, *c);
  const int n = 4000;
  const int took = Send(b, n, "default", 0.7f);
  EXPECT_NEAR(took / static_cast<double>(n), 0.25, 0.03);
  // Every turn of one session goes to the same side.
  for (int s = 0; s < 20; ++s) {
    int first = -1;
    for (int turn = 0; turn < 5; ++turn) {
      backend::Request r;
      r.request_id = fmt::format("s{}-t{}", s, turn);
      r.session_id = fmt::format("session-{}", s);
      r.sampling.temperature = 0.7f;
      r.messages.push_back({.role = "user", .content = "hi"});
      const int before = candidate_.started.load();
      auto p = b.Prepare(r);
      ASSERT_TRUE(p.ok());
      ASSERT_TRUE(b.Start(r, *p, std::make_shared<ClientSink>(), nullptr).ok());
      const int side = candidate_.started.load() - before;
      if (first < 0) first = side;
      EXPECT_EQ(side, first) << "session " << s << " turn " << turn;
    }
  }
}

TEST_F(CanaryTest, TheCandidatesAnswersAreNotStoredBeforePromotion) {
  auto o = Options();
  o.steps = {50, 100};
  auto c = Controller(o);
  CanaryBackend b(baseline_, candidate_, *c);
  int stored_by_candidate = 0, not_stored = 0;
  for (int i = 0; i < 200; ++i) {
    backend::Request r;
    r.request_id = fmt::format("r{}", i);
    r.sampling.temperature = 0.5f;
    r.messages.push_back({.role = "user", .content = "hi"});
    const int before = candidate_.started.load();
    auto p = b.Prepare(r);
    ASSERT_TRUE(p.ok());
    auto sink = std::make_shared<ClientSink>();
    ASSERT_TRUE(b.Start(r, *p, sink, nullptr).ok());
    const bool candidate = candidate_.started.load() > before;
    if (candidate && !sink->do_not_store) stored_by_candidate++;
    if (!candidate && sink->do_not_store) not_stored++;
  }
  EXPECT_EQ(stored_by_candidate, 0);
  EXPECT_EQ(not_stored, 0);
}

TEST_F(CanaryTest, ASlowCandidateIsRolledBackOnItsTimeToFirstToken) {
  candidate_.ttft = 900ms;  // the baseline's is 50 ms
  auto o = Options();
  o.mirror = 0;
  auto c = Controller(o);
  CanaryBackend b(baseline_, candidate_, *c);
  int sent = 0;
  while (c->phase() == CanaryPhase::kRamping && sent < 5000) {
    Send(b, 50, "default", 0.7f);
    sent += 50;
    clock_.Advance(1s);
    c->Tick();
  }
  ASSERT_EQ(c->phase(), CanaryPhase::kRolledBack);
  // Judged as soon as the candidate had its 20 samples: at 5 %, about 400
  // requests, within the first step's minute.
  EXPECT_LE(sent, 800);
  EXPECT_DOUBLE_EQ(c->Weight(), 0.0);
  EXPECT_EQ(Send(b, 200), 0) << "a rolled-back candidate takes no requests";
  auto events = c->Events();
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().what, "rolled_back");
  EXPECT_EQ(events.back().reason, "ttft");
  EXPECT_NE(events.back().detail.find("900"), std::string::npos) << events.back().detail;
  EXPECT_NE(registries_.back()->Render().find("strata_canary_rollbacks_total{reason=\"ttft\"} 1"),
            std::string::npos);
}

TEST_F(CanaryTest, AFailingCandidateIsRolledBackAndItsClientsAreServedByTheBaseline) {
  candidate_.fail_to_start = util::UnavailableError("upstream down");
  auto o = Options();
  o.mirror = 0;
  auto c = Controller(o);
  CanaryBackend b(baseline_, candidate_, *c);
  int failed_clients = 0;
  for (int i = 0; i < 1000 && c->phase() == CanaryPhase::kRamping; ++i) {
    backend::Request r;
    r.request_id = fmt::format("r{}", i);
    r.messages.push_back({.role = "user", .content = "hi"});
    auto p = b.Prepare(r);
    ASSERT_TRUE(p.ok());
    auto sink = std::make_shared<ClientSink>();
    auto run = b.Start(r, *p, sink, nullptr);
    ASSERT_TRUE(run.ok()) << run.status().ToString();
    if (!sink->status.ok() || sink->text != "the answer") failed_clients++;
    if (i % 20 == 0) c->Tick();
  }
  c->Tick();
  EXPECT_EQ(failed_clients, 0);
  ASSERT_EQ(c->phase(), CanaryPhase::kRolledBack);
  EXPECT_EQ(c->Events().back().reason, "errors");
}

TEST_F(CanaryTest, ErrorsInsideTheCandidatesStreamRollItBack) {
  candidate_.fail_in_stream = util::UnavailableError("connection reset");
  auto o = Options();
  o.mirror = 0;
  auto c = Controller(o);
  CanaryBackend b(baseline_, candidate_, *c);
  Send(b, 1000);
  c->Tick();
  ASSERT_EQ(c->phase(), CanaryPhase::kRolledBack);
  EXPECT_EQ(c->Events().back().reason, "errors");
}

TEST_F(CanaryTest, ClientErrorsAreNotTheCandidatesFault) {
  candidate_.fail_in_stream = util::InvalidArgumentError("bad request");
  baseline_.fail_in_stream = util::InvalidArgumentError("bad request");
  auto o = Options();
  o.mirror = 0;
  auto c = Controller(o);
  CanaryBackend b(baseline_, candidate_, *c);
  Send(b, 1000);
  c->Tick();
  EXPECT_EQ(c->phase(), CanaryPhase::kRamping);
}

TEST_F(CanaryTest, WrongAnswersAreRolledBackOnQuality) {
  candidate_.text = "something else entirely, which no one asked for";
  auto c = Controller(Options());
  CanaryBackend b(baseline_, candidate_, *c);
  Send(b, 1000);  // greedy: mirrored
  c->Tick();
  ASSERT_EQ(c->phase(), CanaryPhase::kRolledBack);
  EXPECT_EQ(c->Events().back().reason, "quality");
  EXPECT_NE(registries_.back()->Render().find("strata_canary_mirrored_total{result=\"disagreed\"}"),
            std::string::npos);
}

TEST_F(CanaryTest, ReworderedButEquivalentAnswersAgree) {
  baseline_.text = "The capital of France is Paris, a city on the Seine.";
  candidate_.text = "The capital of France is Paris, a city on the Seine!";
  auto c = Controller(Options());
  CanaryBackend b(baseline_, candidate_, *c);
  Send(b, 1000);
  c->Tick();
  EXPECT_EQ(c->phase(), CanaryPhase::kRamping);
  auto state = nlohmann::json::parse(c->StateJson());
  bool found = false;
  for (const auto& s : state["segments"]) {
    if (s["segment"] != "*") continue;
    found = true;
    EXPECT_GE(s["pairs"].get<int>(), 10);
    EXPECT_EQ(s["pairs"], s["agreed"]);
  }
  EXPECT_TRUE(found);
}

TEST_F(CanaryTest, SampledAnswersAreNotComparedSoTheyCannotFailQuality) {
  candidate_.text = "different";
  auto c = Controller(Options());
  CanaryBackend b(baseline_, candidate_, *c);
  Send(b, 1000, "default", 0.9f);
  c->Tick();
  EXPECT_EQ(c->phase(), CanaryPhase::kRamping);
}

TEST_F(CanaryTest, OneFailingTenantRollsBackAndIsNamed) {
  auto o = Options();
  o.mirror = 0;
  o.min_samples = 10;
  auto c = Controller(o);
  // A candidate that is slow only for tenant "b" (a scripted backend per
  // tenant: the canary's baseline and candidate see the same requests).
  class PerTenant final : public backend::Backend {
   public:
    PerTenant(ScriptedBackend& a, ScriptedBackend& b) : a_(a), b_(b) {}
    const std::string& name() const override { return a_.name(); }
    std::string_view kind() const override { return "openai"; }
    uint64_t fingerprint() const override { return 3; }
    int32_t n_ctx() const override { return 0; }
    util::StatusOr<std::shared_ptr<const backend::Prepared>> Prepare(
        const backend::Request& r) const override {
      return (r.tenant == "b" ? b_ : a_).Prepare(r);
    }
    util::StatusOr<std::shared_ptr<backend::Run>> Start(const backend::Request& r,
                                                        std::shared_ptr<const backend::Prepared> p,
                                                        std::shared_ptr<backend::Sink> s,
                                                        backend::Governor* g) override {
      return (r.tenant == "b" ? b_ : a_).Start(r, std::move(p), std::move(s), g);
    }
    util::StatusOr<backend::EmbeddingResult> Embed(
        const backend::EmbeddingRequest& r, std::chrono::steady_clock::time_point d) override {
      return a_.Embed(r, d);
    }

   private:
    ScriptedBackend& a_;
    ScriptedBackend& b_;
  };
  ScriptedBackend slow_for_b{"llama", 4};
  slow_for_b.ttft = 2000ms;
  PerTenant candidate(candidate_, slow_for_b);
  CanaryBackend b(baseline_, candidate, *c);
  Send(b, 2000, "a");
  Send(b, 400, "b");
  c->Tick();
  ASSERT_EQ(c->phase(), CanaryPhase::kRolledBack);
  EXPECT_NE(c->Events().back().detail.find("segment b/chat"), std::string::npos)
      << c->Events().back().detail;
}

TEST_F(CanaryTest, AStepWithTooFewRequestsIsHeld) {
  auto c = Controller(Options());
  CanaryBackend b(baseline_, candidate_, *c);
  Send(b, 20);  // about one candidate request at 5 %
  clock_.Advance(10min);
  c->Tick();
  EXPECT_EQ(c->percent(), 5);
  Send(b, 1000);
  c->Tick();
  EXPECT_EQ(c->percent(), 25);
}

TEST_F(CanaryTest, TheRampResumesAfterARestart) {
  {
    auto c = Controller(Options());
    CanaryBackend b(baseline_, candidate_, *c);
    Send(b, 1000);
    clock_.Advance(61s);
    c->Tick();
    ASSERT_EQ(c->percent(), 25);
  }
  {
    auto c = Controller(Options());
    EXPECT_EQ(c->percent(), 25) << "resumed at the step it was in";
    EXPECT_EQ(c->Events().back().what, "resumed");
  }
  {
    auto o = Options();
    o.id = "openai:http://another";
    auto c = Controller(o);
    EXPECT_EQ(c->percent(), 5) << "another candidate starts afresh";
  }
}

TEST_F(CanaryTest, ARolledBackCandidateStaysRolledBackAfterARestart) {
  candidate_.fail_in_stream = util::UnavailableError("down");
  {
    auto o = Options();
    o.mirror = 0;
    auto c = Controller(o);
    CanaryBackend b(baseline_, candidate_, *c);
    Send(b, 1000);
    c->Tick();
    ASSERT_EQ(c->phase(), CanaryPhase::kRolledBack);
  }
  auto c = Controller(Options());
  EXPECT_EQ(c->phase(), CanaryPhase::kRolledBack);
  EXPECT_DOUBLE_EQ(c->Weight(), 0.0);
}

TEST_F(CanaryTest, ADamagedStateFileStartsAfresh) {
  ASSERT_TRUE(fs_.CreateDirs("/state").ok());
  for (const char* text :
       {"not json", "{\"version\": 9}", "[1,2]",
        "{\"version\":1,\"id\":\"openai:http://candidate\",\"phase\":\"ramping\","
        "\"step\":99}",
        "{\"version\":1,\"id\":\"openai:http://candidate\",\"phase\":7,"
        "\"step\":1}"}) {
    ASSERT_TRUE(fs_.WriteFileAtomic("/state/canary.json", text).ok());
    auto c = Controller(Options());
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->percent(), 5) << text;
    EXPECT_EQ(c->phase(), CanaryPhase::kRamping) << text;
  }
}

TEST_F(CanaryTest, OptionsAreChecked) {
  EXPECT_TRUE(ValidateCanaryOptions(CanaryOptions{}).ok());
  auto bad = [](auto edit) {
    CanaryOptions o;
    edit(o);
    return !ValidateCanaryOptions(o).ok();
  };
  EXPECT_TRUE(bad([](CanaryOptions& o) { o.steps = {}; }));
  EXPECT_TRUE(bad([](CanaryOptions& o) { o.steps = {5, 50}; }));
  EXPECT_TRUE(bad([](CanaryOptions& o) { o.steps = {50, 25, 100}; }));
  EXPECT_TRUE(bad([](CanaryOptions& o) { o.steps = {0, 100}; }));
  EXPECT_TRUE(bad([](CanaryOptions& o) { o.step_time = 10ms; }));
  EXPECT_TRUE(bad([](CanaryOptions& o) { o.min_samples = 0; }));
  EXPECT_TRUE(bad([](CanaryOptions& o) { o.max_error_rate = 1; }));
  EXPECT_TRUE(bad([](CanaryOptions& o) { o.ttft_ratio = 0.5; }));
  EXPECT_TRUE(bad([](CanaryOptions& o) { o.mirror = 1.5; }));
  EXPECT_TRUE(bad([](CanaryOptions& o) { o.min_agreement = 0; }));
  auto steps = ParseCanarySteps("5, 25,50,100");
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, (std::vector<int32_t>{5, 25, 50, 100}));
  EXPECT_TRUE(ParseCanarySteps("100").ok());
  for (const char* text : {"", "5,,100", "5,25", "a,100", "5;100", "50,10,100", "5,101"}) {
    EXPECT_FALSE(ParseCanarySteps(text).ok()) << text;
  }
}

}  // namespace
}  // namespace strata::tune
