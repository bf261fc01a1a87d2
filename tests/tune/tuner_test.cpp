// The tuner's parts: scenario files and the requests they make, the
// simulator's responses to each knob, the sensitivity matrix and the
// NSGA-II search.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "testing/shared_data.h"
#include "tune/scenario.h"
#include "tune/search.h"
#include "tune/simulator.h"
#include "util/file_system.h"

namespace strata::tune {
namespace {

Scenario Parsed(const std::string& text) {
  auto s = ParseScenario(text, "t.toml");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : Scenario{};
}

TEST(ScenarioTest, TheRepositorysScenariosParseAndCoverTheWorkloads) {
  auto all = LoadScenarios(*util::NewPosixFileSystem(), "bench/scenarios");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_GE(all->size(), 8u);
  std::set<std::string> names;
  bool trace = false, closed = false, sessions = false, rewords = false, cold = false;
  for (const Scenario& s : *all) {
    names.insert(s.name);
    trace |= s.arrival == ArrivalProcess::kTrace;
    closed |= s.arrival == ArrivalProcess::kClosed;
    sessions |= s.turns > 1;
    rewords |= s.reword > 0.5;
    cold |= s.measure_first_s > 0;
  }
  EXPECT_TRUE(trace && closed && sessions && rewords && cold);
  for (const char* n : {"faq", "shared-system-prompt", "multi-turn", "long-context",
                        "code-completion", "bursty", "paraphrase-heavy", "cold-start"}) {
    EXPECT_EQ(names.count(n), 1u) << n;
  }
  auto two = LoadScenarios(*util::NewPosixFileSystem(), "bench/scenarios", {"faq", "bursty"});
  ASSERT_TRUE(two.ok());
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].name, "bursty");
  auto missing = LoadScenarios(*util::NewPosixFileSystem(), "bench/scenarios", {"nope"});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("there are: "), std::string::npos);
}

TEST(ScenarioTest, ProblemsAreNamedWithTheirLines) {
  auto s = ParseScenario(
      "name = \"x\"\n[arrival]\nprocess = \"trace\"\nrat = 3\n"
      "[prompts]\nrepeat = 0.7\nreword = 0.6\n[metrics]\nmatter = [\"speed\"]\n",
      "bad.toml");
  ASSERT_FALSE(s.ok());
  const std::string m = s.status().message();
  EXPECT_NE(m.find("bad.toml:4: arrival.rat"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean"), std::string::npos) << m;
  EXPECT_NE(m.find("needs arrival.trace"), std::string::npos) << m;
  EXPECT_NE(m.find("exceed 1"), std::string::npos) << m;
  EXPECT_NE(m.find("'speed' is not a metric"), std::string::npos) << m;
  EXPECT_FALSE(ParseScenario("name = \"Has Spaces\"\n", "n.toml").ok());
  EXPECT_FALSE(ParseScenario("", "empty.toml").ok());
  EXPECT_FALSE(ParseScenario("name = \"x\"\n[arrival]\nrate = -1\n", "r.toml").ok());
}

TEST(ScenarioTest, RequestsFollowTheDeclaredShape) {
  const Scenario s = Parsed(
      "name = \"x\"\n[arrival]\nrate = 10\nduration = 100\n[prompts]\ntokens = 100\n"
      "system_tokens = 500\nsystem_prompts = 2\nrepeat = 0.3\nreword = 0.2\n"
      "[output]\ntokens = 50\n");
  auto r = Requests(s, 7, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_NEAR(static_cast<double>(r->size()), 1000, 120);  // Poisson, 10/s for 100 s
  std::set<uint64_t> questions, prefixes;
  int repeats = 0, rewords = 0;
  double out_tokens = 0;
  for (const WorkloadRequest& w : *r) {
    EXPECT_GE(w.arrival_s, 0);
    EXPECT_LT(w.arrival_s, 100);
    EXPECT_EQ(w.shared_tokens, 500);
    prefixes.insert(w.prefix_id);
    if (questions.count(w.question) > 0) ++repeats;
    if (w.question != w.meaning && questions.count(w.question) == 0 &&
        w.meaning != w.question + 1) {
      ++rewords;
    }
    questions.insert(w.question);
    out_tokens += w.output_tokens;
  }
  EXPECT_EQ(prefixes.size(), 2u);
  EXPECT_NEAR(repeats / static_cast<double>(r->size()), 0.3, 0.05);
  EXPECT_NEAR(rewords / static_cast<double>(r->size()), 0.2, 0.05);
  EXPECT_NEAR(out_tokens / static_cast<double>(r->size()), 50, 4);
  // The same seed makes the same requests.
  auto again = Requests(s, 7, nullptr);
  ASSERT_EQ(again->size(), r->size());
  EXPECT_EQ((*again)[10].question, (*r)[10].question);
  EXPECT_EQ((*again)[10].arrival_s, (*r)[10].arrival_s);
}

TEST(ScenarioTest, SessionsCarryTheirHistory) {
  const Scenario s = Parsed(
      "name = \"x\"\n[arrival]\nrate = 6\nduration = 30\n[prompts]\ntokens = 50\nspread = 0\n"
      "turns = 3\n[output]\ntokens = 20\nspread = 0\n");
  auto r = Requests(s, 1, nullptr);
  ASSERT_TRUE(r.ok());
  ASSERT_GE(r->size(), 6u);
  EXPECT_EQ((*r)[0].turn, 0);
  EXPECT_EQ((*r)[1].turn, 1);
  EXPECT_EQ((*r)[1].session, (*r)[0].session);
  EXPECT_EQ((*r)[1].prefix_id, (*r)[0].publishes) << "turn 1 starts with what turn 0 left";
  EXPECT_EQ((*r)[1].shared_tokens, 70);
  EXPECT_EQ((*r)[2].prompt_tokens, 140 + 50);
}

TEST(ScenarioTest, ATraceScenarioReplaysItsTrace) {
  STRATA_REQUIRE_SHARED("data/traces/burstgpt_1_first400.csv");
  auto all = LoadScenarios(*util::NewPosixFileSystem(), "bench/scenarios", {"bursty"});
  ASSERT_TRUE(all.ok());
  const Scenario& s = (*all)[0];
  EXPECT_FALSE(Requests(s, 1, nullptr).ok()) << "a trace scenario needs its trace";
  auto text = util::NewPosixFileSystem()->ReadFile(s.trace);
  ASSERT_TRUE(text.ok());
  auto parsed = ParseTrace(s.trace_format, *text);
  ASSERT_TRUE(parsed.ok());
  auto r = Requests(s, 1, &parsed->requests);
  ASSERT_TRUE(r.ok());
  ASSERT_FALSE(r->empty());
  EXPECT_LE(r->size(), 400u);
  EXPECT_EQ((*r)[0].prompt_tokens, parsed->requests[0].prompt_tokens);
}

// A small cost model: prefill 1 ms a token, 10 ms a step, 1 ms per decoder.
CostModel Cheap() {
  CostModel m;
  m.prefill_s_per_token = 1e-3;
  m.step_s = 1e-2;
  m.decode_s_per_sequence = 1e-3;
  m.attention_s_per_token = 0;
  return m;
}

SimResult Simulated(const std::string& toml, const SimConfig& c, const CostModel& m = Cheap()) {
  const Scenario s = Parsed(toml);
  auto r = Requests(s, 3, nullptr);
  EXPECT_TRUE(r.ok());
  return Simulate(s, *r, c, m, 5);
}

const char* kFaq =
    "name = \"faq\"\n[arrival]\nrate = 2\nduration = 60\n[prompts]\ntokens = 40\n"
    "repeat = 0.5\n[output]\ntokens = 20\n";

TEST(SimulatorTest, RepeatsAreServedFromL1OnlyWhenItIsOn) {
  SimConfig on;
  const SimResult with = Simulated(kFaq, on);
  SimConfig off;
  off.l1_bytes = 0;
  off.coalesce = false;
  const SimResult without = Simulated(kFaq, off);
  EXPECT_GT(with.l1_hits, with.requests / 4);
  EXPECT_EQ(without.l1_hits, 0);
  EXPECT_LT(with.ttft_p50_s, without.ttft_p50_s);
  EXPECT_EQ(with.errors, 0);
  EXPECT_DOUBLE_EQ(with.quality, 1.0);
  // Deterministic.
  const SimResult again = Simulated(kFaq, on);
  EXPECT_EQ(again.l1_hits, with.l1_hits);
  EXPECT_DOUBLE_EQ(again.ttft_p95_s, with.ttft_p95_s);
}

TEST(SimulatorTest, ASharedSystemPromptIsPrefilledOnceWhileItStaysCached) {
  const char* toml =
      "name = \"sys\"\n[arrival]\nrate = 1\nduration = 60\n[prompts]\ntokens = 20\n"
      "system_tokens = 800\n[output]\ntokens = 10\ntemperature = 0.7\n";
  SimConfig big;
  const SimResult cached = Simulated(toml, big);
  EXPECT_GT(cached.cached_prompt_tokens, cached.prompt_tokens / 2);
  SimConfig tiny;
  tiny.kv_tokens = 830;  // room for one request at a time and nothing cached beside it
  const SimResult uncached = Simulated(toml, tiny);
  EXPECT_LT(uncached.cached_prompt_tokens, cached.cached_prompt_tokens);
  EXPECT_GT(uncached.ttft_p50_s, cached.ttft_p50_s);
}

TEST(SimulatorTest, OverloadFillsTheQueueAndIsCountedAsErrors) {
  const char* toml =
      "name = \"busy\"\n[arrival]\nrate = 50\nduration = 20\n[prompts]\ntokens = 200\n"
      "[output]\ntokens = 100\ntemperature = 1\n";
  SimConfig c;
  c.parallel = 2;
  c.queue = 4;
  const SimResult r = Simulated(toml, c);
  EXPECT_GT(r.error_rate, 0.5);
  SimConfig more;
  more.parallel = 64;
  more.queue = 256;
  EXPECT_GT(Simulated(toml, more).throughput_rps, r.throughput_rps);
}

TEST(SimulatorTest, ACapRefusesLongerAnswersAndTheContextCutsThem) {
  // As the server does: a request asking for more than the cap is a 400.
  SimConfig c;
  c.max_tokens_cap = 20;  // answers average 20 tokens
  const SimResult r = Simulated(kFaq, c);
  EXPECT_GT(r.error_rate, 0.2);
  EXPECT_LT(r.error_rate, 0.8);
  EXPECT_EQ(r.quality, 1);
  // An answer that would run past the context is cut: its share delivered.
  SimConfig small;
  small.ctx = 55;  // prompts of about 40 tokens, answers of about 20
  const SimResult cut = Simulated(kFaq, small);
  EXPECT_LT(cut.quality, 0.95);
  EXPECT_GT(cut.quality, 0.3);
}

TEST(SimulatorTest, TheSemanticTierTradesFalseHitsForSpeed) {
  const char* toml =
      "name = \"para\"\n[arrival]\nrate = 2\nduration = 120\n[prompts]\ntokens = 40\n"
      "reword = 0.6\n[output]\ntokens = 40\n";
  SimConfig off;
  SimConfig loose;
  loose.semantic = true;
  loose.semantic_similarity = 0.7;
  CostModel m = Cheap();
  m.semantic.false_hit = {0.2, 0.2, 0.2, 0.2, 0.2, 0.2};  // a bad encoder: every fifth new question
  const SimResult a = Simulated(toml, off, m);
  const SimResult b = Simulated(toml, loose, m);
  EXPECT_EQ(a.semantic_hits, 0);
  EXPECT_GT(b.semantic_hits, 0);
  EXPECT_GT(b.false_hits, 0);
  EXPECT_LT(b.quality, a.quality);
  // Verification, as the tier does it: nothing served before verify_min
  // would-be hits were generated anyway, then a share of them is.
  SimConfig unverified = loose;
  unverified.semantic_verify = 0;
  SimConfig learning = loose;
  learning.semantic_verify_min = 100000;
  EXPECT_GT(Simulated(toml, unverified, m).semantic_hits, b.semantic_hits);
  EXPECT_EQ(Simulated(toml, learning, m).semantic_hits, 0);
}

TEST(SimulatorTest, AClosedLoopKeepsItsClientsBusy) {
  const char* toml =
      "name = \"closed\"\n[arrival]\nprocess = \"closed\"\nconcurrency = 4\nduration = 600\n"
      "max_requests = 40\n[prompts]\ntokens = 50\n[output]\ntokens = 20\ntemperature = 1\n";
  SimConfig c;
  const SimResult r = Simulated(toml, c);
  EXPECT_EQ(r.answered, 40);
  c.parallel = 1;
  EXPECT_LT(Simulated(toml, c).throughput_rps, r.throughput_rps);
}

TEST(SimulatorTest, CostModelsRoundTripAndBadOnesAreNamed) {
  CostModel m = Cheap();
  m.source = "llama-100m on a test machine";
  auto back = ParseCostModel(CostModelJson(m));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->source, m.source);
  EXPECT_DOUBLE_EQ(back->prefill_s_per_token, 1e-3);
  EXPECT_EQ(back->semantic.threshold, m.semantic.threshold);
  EXPECT_FALSE(ParseCostModel("[]").ok());
  EXPECT_FALSE(ParseCostModel("{\"step_s\": -1}").ok());
  auto st = ParseCostModel(
      "{\"l3\": {\"threshold\": [0.9, 0.8], \"recall\": [0, 0], "
      "\"false_hit\": [0, 0]}}");
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("ascending"), std::string::npos);
}

// A made-up landscape: throughput rises with parallel, TTFT with it too,
// and the cache knob is irrelevant.
Evaluate Landscape(int* calls) {
  return [calls](size_t, const Settings& s) -> std::optional<Measured> {
    ++*calls;
    const double p = s.at("engine.parallel");
    Measured m;
    m.throughput = std::log2(p + 1);
    m.ttft_p95_s = 0.05 * p;
    m.ttft_p99_s = 0.06 * p;
    m.quality = 1;
    return m;
  };
}

std::vector<TuneKnob> TwoKnobs() {
  std::vector<TuneKnob> knobs = KnobsFor(SimConfig{});
  std::vector<TuneKnob> two;
  for (const TuneKnob& k : knobs) {
    if (k.key == "engine.parallel" || k.key == "l1.ttl") two.push_back(k);
  }
  return two;
}

TEST(SearchTest, SensitivityFindsTheKnobThatMattersAndFreezesTheOther) {
  int calls = 0;
  const SensitivityResult r = Sensitivity({"a", "b"}, TwoKnobs(), 2, 0.05, Landscape(&calls));
  ASSERT_TRUE(r.complete);
  ASSERT_EQ(r.rows.size(), 4u);
  for (const SensitivityRow& row : r.rows) {
    if (row.knob == "engine.parallel") {
      EXPECT_GT(row.throughput, 0.1);
      EXPECT_NEAR(row.ttft_p95, 1.0, 1e-9) << "TTFT is proportional to parallel";
    } else {
      EXPECT_DOUBLE_EQ(row.largest(), 0.0);
    }
  }
  EXPECT_EQ(r.frozen, std::vector<std::string>{"l1.ttl"});
}

TEST(SearchTest, TheParetoFrontIsTheTradeOffAndTheConstraintHolds) {
  int calls = 0;
  ParetoOptions o;
  o.population = 8;
  o.generations = 6;
  o.constraints.ttft_p99_slo_s = 1.0;  // parallel 32 and 64 break it
  const ParetoResult r = Pareto(1, TwoKnobs(), o, Landscape(&calls), nullptr);
  ASSERT_TRUE(r.complete);
  ASSERT_FALSE(r.front.empty());
  std::set<double> parallels;
  for (const ParetoPoint& p : r.front) {
    EXPECT_EQ(p.violation, 0) << "infeasible points never reach the front when feasible ones exist";
    parallels.insert(p.settings.at("engine.parallel"));
  }
  EXPECT_GE(parallels.size(), 3u) << "every feasible parallel is a trade-off";
  EXPECT_EQ(parallels.count(32), 0u);
  EXPECT_LE(calls, 8 * 7 + 1) << "a configuration is measured once";
  auto chosen = ChoosePoint(r);
  ASSERT_TRUE(chosen.has_value());
  EXPECT_EQ(chosen->violation, 0);
}

TEST(SearchTest, ASpentBudgetStopsTheSearchWithWhatItHas) {
  int calls = 0;
  auto inner = Landscape(&calls);
  Evaluate limited = [&](size_t s, const Settings& x) -> std::optional<Measured> {
    if (calls >= 5) return std::nullopt;
    return inner(s, x);
  };
  ParetoOptions o;
  o.population = 8;
  const ParetoResult r = Pareto(1, TwoKnobs(), o, limited, nullptr);
  EXPECT_FALSE(r.complete);
  EXPECT_EQ(r.evaluated.size(), 5u);
  EXPECT_FALSE(r.front.empty());
  // A sensitivity run cut short freezes nothing: an unmeasured knob is not
  // a weak one.
  calls = 0;
  const SensitivityResult cut = Sensitivity({"a", "b"}, TwoKnobs(), 2, 0.05, limited);
  EXPECT_FALSE(cut.complete);
  EXPECT_FALSE(cut.rows.empty());
  EXPECT_TRUE(cut.frozen.empty());
}

}  // namespace
}  // namespace strata::tune
