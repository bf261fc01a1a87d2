// The real trials' pure parts: prompts files, the text each request of a
// scenario sends, and how a trial's records become its metrics and its
// quality score (tune/live.h). RunLive itself runs against a real server in
// tests/integration/cli_test.sh ("tune, real trials").
#include <gtest/gtest.h>

#include <iterator>
#include <map>
#include <set>
#include <sstream>

#include "tune/live.h"
#include "tune/scenario.h"

namespace strata::tune {
namespace {

Scenario ParsedScenario(const std::string& text) {
  auto s = ParseScenario(text, "t.toml");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? *s : Scenario{};
}

int Words(const std::string& text) {
  std::istringstream in(text);
  std::string w;
  int n = 0;
  while (in >> w) ++n;
  return n;
}

TEST(PromptPoolTest, ReadsPairsListsAndLines) {
  auto pairs = ParsePromptPool(
      R"([{"origin": "What is L1?", "similar": "Explain L1."}, {"origin": "Why?"}, "Plain"])");
  ASSERT_TRUE(pairs.ok()) << pairs.status().ToString();
  ASSERT_EQ(pairs->questions.size(), 3u);
  EXPECT_EQ(pairs->paraphrases[0], "Explain L1.");
  EXPECT_EQ(pairs->paraphrases[1], "");
  EXPECT_EQ(pairs->questions[2], "Plain");
  auto lines = ParsePromptPool(
      "{\"prompt\": \"one\"}\n\n{\"question_id\": 81, \"turns\": [\"two\", \"x\"]}\n\"three\"\n");
  ASSERT_TRUE(lines.ok()) << lines.status().ToString();
  EXPECT_EQ(lines->questions, (std::vector<std::string>{"one", "two", "three"}));
}

TEST(PromptPoolTest, ProblemsAreNamed) {
  auto bad_line = ParsePromptPool("\"ok\"\n{\"nothing\": 1}\n");
  ASSERT_FALSE(bad_line.ok());
  EXPECT_NE(bad_line.status().message().find("line 2"), std::string::npos);
  auto not_json = ParsePromptPool("\"ok\"\nnot json\n");
  ASSERT_FALSE(not_json.ok());
  EXPECT_NE(not_json.status().message().find("line 2: not JSON"), std::string::npos);
  auto bad_element = ParsePromptPool(R"(["a", 3])");
  ASSERT_FALSE(bad_element.ok());
  EXPECT_NE(bad_element.status().message().find("element 1"), std::string::npos);
  EXPECT_FALSE(ParsePromptPool("").ok());
  EXPECT_FALSE(ParsePromptPool("[]").ok());
  EXPECT_FALSE(ParsePromptPool(R"([""])").ok());
  EXPECT_FALSE(ParsePromptPool("[unclosed").ok());
}

TEST(ScenarioTextTest, RepeatsAreIdenticalAndRewordingsDifferButStayClose) {
  const Scenario s = ParsedScenario(
      "name = \"x\"\n[arrival]\nrate = 10\nduration = 60\n[prompts]\ntokens = 40\n"
      "system_tokens = 100\nsystem_prompts = 2\nrepeat = 0.3\nreword = 0.3\n");
  auto r = Requests(s, 3, nullptr);
  ASSERT_TRUE(r.ok());
  for (const PromptPool& pool : {PromptPool{}, PromptPool{{"What is a cache?", "Why batch?"},
                                                          {"What does a cache do?", ""}}}) {
    const ScenarioText t(s, *r, pool, 3);
    const ScenarioText again(s, *r, pool, 3);
    std::map<uint64_t, std::string> by_question;
    std::map<uint64_t, std::string> first_of_meaning;
    std::map<uint64_t, std::string> system_of_prefix;
    int rewordings = 0;
    for (size_t i = 0; i < r->size(); ++i) {
      const WorkloadRequest& w = (*r)[i];
      const std::string& q = t.Question(i);
      EXPECT_EQ(q, again.Question(i));
      EXPECT_EQ(t.System(i), again.System(i));
      // The system prompt: one text per prefix, of about its tokens.
      auto [sp, fresh_sp] = system_of_prefix.emplace(w.prefix_id, t.System(i));
      EXPECT_EQ(sp->second, t.System(i));
      EXPECT_NEAR(Words(t.System(i)), 100, 1);
      // A question asked again is the same text.
      auto [bq, fresh_q] = by_question.emplace(w.question, q);
      EXPECT_EQ(bq->second, q);
      auto [fm, fresh_m] = first_of_meaning.emplace(w.meaning, q);
      if (fresh_q && !fresh_m) {
        ++rewordings;
        EXPECT_NE(fm->second, q) << i;
        if (pool.questions.empty()) {
          // Made-up: most words shared.
          std::istringstream a(fm->second), b(q);
          std::multiset<std::string> wa{std::istream_iterator<std::string>(a), {}};
          std::multiset<std::string> wb{std::istream_iterator<std::string>(b), {}};
          size_t common = 0;
          for (const std::string& x : wb) {
            if (auto it = wa.find(x); it != wa.end()) {
              wa.erase(it);
              ++common;
            }
          }
          EXPECT_GE(common * 10, wb.size() * 6) << fm->second << " / " << q;
        }
      }
      EXPECT_GE(Words(q), pool.questions.empty() ? 10 : 3);
    }
    EXPECT_GT(rewordings, 20);
    EXPECT_EQ(system_of_prefix.size(), 2u);
  }
}

TEST(ScenarioTextTest, PoolQuestionsUseTheirParaphrasesAndArePadded) {
  const Scenario s = ParsedScenario(
      "name = \"x\"\n[arrival]\nrate = 10\nduration = 30\n[prompts]\ntokens = 30\n"
      "spread = 0\nreword = 0.5\n");
  auto r = Requests(s, 5, nullptr);
  ASSERT_TRUE(r.ok());
  const PromptPool pool{{"What is a cache?"}, {"What does a cache do?"}};
  const ScenarioText t(s, *r, pool, 5);
  bool paraphrased = false, original = false;
  for (size_t i = 0; i < r->size(); ++i) {
    const std::string& q = t.Question(i);
    paraphrased |= q.find("What does a cache do?") != std::string::npos;
    original |= q.rfind("What is a cache?", 0) == 0;
    EXPECT_NEAR(Words(q), 30, 8) << q;
  }
  EXPECT_TRUE(paraphrased);
  EXPECT_TRUE(original);
}

TEST(ScenarioTextTest, ASessionKeepsItsSystemPrompt) {
  const Scenario s = ParsedScenario(
      "name = \"x\"\n[arrival]\nrate = 2\nduration = 60\n[prompts]\ntokens = 20\n"
      "system_tokens = 30\nturns = 3\n");
  auto r = Requests(s, 1, nullptr);
  ASSERT_TRUE(r.ok());
  const ScenarioText t(s, *r, {}, 1);
  std::map<uint64_t, std::string> first;
  for (size_t i = 0; i < r->size(); ++i) {
    const WorkloadRequest& w = (*r)[i];
    ASSERT_NE(w.session, 0u);
    if (w.turn == 0) {
      first[w.session] = t.System(i);
    } else {
      EXPECT_EQ(first[w.session], t.System(i));
    }
  }
  EXPECT_FALSE(t.FillerAnswer(0, 10).empty());
}

TEST(AnswersAgreeTest, EqualOrCloseAnswersAgree) {
  EXPECT_TRUE(AnswersAgree("the same answer", "the same answer", 0.8));
  EXPECT_TRUE(AnswersAgree("The cache keeps the answer of an earlier request for the same prompt.",
                           "The cache keeps the answer of an earlier request for the same prompts.",
                           0.8));
  EXPECT_FALSE(AnswersAgree("Paris is the capital of France.",
                            "Bananas grow on large herbaceous plants.", 0.8));
  EXPECT_FALSE(AnswersAgree("", "something", 0.8));
}

// A record of a request answered in full.
LiveRecord Answered(const std::string& text, const std::string& cache, uint64_t prompt, double sent,
                    double ttft) {
  LiveRecord r;
  r.sent_s = sent;
  r.ttft_s = ttft;
  r.done_s = sent + ttft + 0.5;
  r.ok = true;
  r.http_status = 200;
  r.cache = cache;
  r.text = text;
  r.completion_tokens = 10;
  r.max_tokens = 10;
  r.prompt_key = prompt;
  return r;
}

TEST(SummariseTest, QualityIsAgreementWithTheReferenceTimesTheShareDelivered) {
  Scenario s;
  s.warmup_s = 1;
  std::vector<WorkloadRequest> w(6);
  for (size_t i = 0; i < w.size(); ++i) w[i].arrival_s = static_cast<double>(i);
  w[5].greedy = false;
  const std::string answer = "a cache keeps what the model answered before for this prompt";
  std::vector<LiveRecord> rec = {
      Answered(answer, "miss", 1, 0, 9.0),  // in the warm-up: no TTFT
      Answered(answer, "l1", 1, 1, 0.01),   // agrees
      Answered("bananas are yellow and grow in bunches", "semantic", 2, 2, 0.01),  // false hit
      Answered(answer.substr(0, 20), "miss", 1, 3, 0.2),  // cut short: half delivered
      LiveRecord{},                                       // failed
      Answered("sampled text", "miss", 5, 5, 0.3)};       // sampled: delivered share only
  rec[3].completion_tokens = 5;
  rec[4].sent_s = 4;
  rec[4].error = "HTTP 503: busy";
  References refs;
  int fetched = 0;
  auto fetch = [&](const LiveRecord& r) -> std::optional<std::string> {
    ++fetched;
    EXPECT_EQ(r.prompt_key, 2u);
    return std::string("the capital of France is Paris and it is large");
  };
  const LiveSummary sum = Summarise(s, w, rec, refs, fetch);
  EXPECT_EQ(fetched, 1);
  EXPECT_EQ(sum.requests, 6);
  EXPECT_EQ(sum.answered, 5);
  EXPECT_EQ(sum.errors, 1);
  EXPECT_NEAR(sum.measured.error_rate, 1.0 / 6, 1e-9);
  EXPECT_EQ(sum.approximate_hits, 1);
  EXPECT_EQ(sum.false_hits, 1);
  EXPECT_EQ(sum.compared, 4);
  EXPECT_EQ(sum.agreed, 3);
  // (1 + 1 + 0 + 0.5 + 1) / 5
  EXPECT_NEAR(sum.measured.quality, 3.5 / 5, 1e-9);
  // TTFT outside the warm-up: 0.01, 0.01, 0.2, 0.3.
  EXPECT_NEAR(sum.measured.ttft_p99_s, 0.3, 1e-9);
  EXPECT_NEAR(sum.ttft_p50_s, 0.01, 1e-9);
  EXPECT_EQ(sum.served.at("miss"), 3);
  EXPECT_EQ(refs.count(1), 1u);
  EXPECT_EQ(refs.at(1), answer);
  ASSERT_EQ(sum.first_errors.size(), 1u);
  EXPECT_EQ(sum.first_errors[0], "HTTP 503: busy");
  // Throughput: 5 answered from the first arrival (0) to the last answer (9.5).
  EXPECT_NEAR(sum.measured.throughput, 5 / 9.5, 1e-9);
}

TEST(SummariseTest, AGenerationThatDisagreesWithAnEarlierReferenceCostsQuality) {
  Scenario s;
  std::vector<WorkloadRequest> w(2);
  References refs = {{7, "the reference answer that an earlier trial produced for this prompt"}};
  std::vector<LiveRecord> rec = {
      Answered("the reference answer that an earlier trial produced for this prompt", "miss", 7, 0,
               0.1),
      Answered("something else entirely, about weather and rivers and towns", "miss", 7, 1, 0.1)};
  const LiveSummary sum = Summarise(s, w, rec, refs, nullptr);
  EXPECT_EQ(sum.compared, 2);
  EXPECT_EQ(sum.agreed, 1);
  EXPECT_EQ(sum.false_hits, 0);  // generated, not an approximate hit
  EXPECT_NEAR(sum.measured.quality, 0.5, 1e-9);
  // Nothing answered: quality 0, no division by zero.
  std::vector<LiveRecord> none(2);
  none[0].sent_s = none[1].sent_s = 0;
  const LiveSummary empty = Summarise(s, w, none, refs, nullptr);
  EXPECT_EQ(empty.answered, 0);
  EXPECT_EQ(empty.measured.quality, 0);
  EXPECT_EQ(empty.measured.error_rate, 1);
}

}  // namespace
}  // namespace strata::tune
