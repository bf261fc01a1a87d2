#include "gateway/gateway.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>

#include "engine/engine.h"
#include "testing/fake_clock.h"
#include "testing/serving_stack.h"
#include "testing/tiny_model.h"
#include "util/log.h"

namespace strata::gateway {
namespace {

class GatewayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::StartServingStack(s_, testing::TinyGatewayOptions(), metrics_, clock_, *log_);
  }
  void TearDown() override { s_.Stop(); }

  struct Result {
    std::vector<std::string> text;
    std::vector<FinishReason> finish;
    std::vector<std::vector<TokenLogprob>> logprobs;
  };
  Result Collect(Generation& g) {
    Result r;
    r.text.resize(static_cast<size_t>(g.n_choices()));
    r.finish.resize(r.text.size());
    r.logprobs.resize(r.text.size());
    const auto far = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (true) {
      auto e = g.Next(far);
      if (!e.ok()) {
        EXPECT_EQ(e.status().code(), util::StatusCode::kOutOfRange) << e.status().ToString();
        break;
      }
      const size_t i = static_cast<size_t>(e->index);
      if (e->kind == Event::Kind::kDelta) {
        r.text[i] += e->text;
        for (auto& lp : e->logprobs) r.logprobs[i].push_back(lp);
      } else {
        EXPECT_TRUE(e->status.ok()) << e->status.ToString();
        r.finish[i] = e->finish;
      }
    }
    return r;
  }
  CompletionRequest Prompt(const std::string& text, int max_tokens) {
    CompletionRequest r;
    r.prompt = text;
    r.max_tokens = max_tokens;
    r.sampling.temperature = 0.0f;
    return r;
  }

  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  testing::FakeClock clock_;
  obs::MetricsRegistry metrics_;
  testing::ServingStack s_;
};

TEST_F(GatewayTest, StopStringsCutTheTextWhereverTokensSplit) {
  auto full = s_.gw->Start(Prompt("once upon a time the little dog", 40));
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  const std::string text = Collect(**full).text[0];
  ASSERT_GT(text.size(), 12u) << "the random model produced too little text: " << text;
  // Every substring of the output, as a stop string, cuts the output right before it.
  for (size_t at : {size_t{3}, text.size() / 2, text.size() - 4}) {
    const std::string stop = text.substr(at, 3);
    CompletionRequest r = Prompt("once upon a time the little dog", 40);
    r.stop = {stop};
    auto g = s_.gw->Start(r);
    ASSERT_TRUE(g.ok());
    Result res = Collect(**g);
    EXPECT_EQ(res.text[0], text.substr(0, text.find(stop))) << "stop '" << stop << "'";
    EXPECT_EQ(res.finish[0], FinishReason::kStopString);
  }
}

TEST_F(GatewayTest, SeveralChoicesAreSeededDistinctlyAndReproducibly) {
  CompletionRequest r = Prompt("the cat", 12);
  r.sampling.temperature = 1.5f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0f;
  r.sampling.min_p = 0.0f;
  r.sampling.seed = 99;
  r.n = 3;
  auto a = Collect(**s_.gw->Start(r));
  auto b = Collect(**s_.gw->Start(r));
  EXPECT_EQ(a.text, b.text);
  EXPECT_FALSE(a.text[0] == a.text[1] && a.text[1] == a.text[2]) << "choices were identical";
  // Sampling at temperature 1.5 may draw the end-of-sequence token early.
  for (auto f : a.finish) EXPECT_TRUE(f == FinishReason::kLength || f == FinishReason::kEndOfTurn);
}

TEST_F(GatewayTest, LogprobsComeWithEveryToken) {
  CompletionRequest r = Prompt("the cat", 6);
  r.top_logprobs = 3;
  auto res = Collect(**s_.gw->Start(r));
  ASSERT_EQ(res.logprobs[0].size(), 6u);
  for (const auto& lp : res.logprobs[0]) {
    EXPECT_LE(lp.logprob, 0.0f);
    ASSERT_EQ(lp.top.size(), 3u);
    EXPECT_GE(lp.top[0].second, lp.top[1].second);
    EXPECT_FLOAT_EQ(lp.top[0].second, lp.logprob);  // greedy picks the most likely token
  }
}

TEST_F(GatewayTest, ChatRequestsUseTheTemplateAndCountPromptTokens) {
  CompletionRequest r;
  r.messages = {{"system", "be short"}, {"user", "hello"}};
  r.max_tokens = 4;
  r.sampling.temperature = 0.0f;
  auto tokens = s_.gw->Tokenize(r);
  ASSERT_TRUE(tokens.ok());
  auto g = s_.gw->Start(r);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ((*g)->prompt_tokens(), static_cast<int32_t>(tokens->size()));
  Collect(**g);
}

// ignore_eos: an end-of-generation token no longer ends the choice; the
// text up to it is the same (same seed, same draws), and generation goes on
// to max_tokens.
TEST_F(GatewayTest, IgnoreEosGeneratesPastTheEndOfGeneration) {
  const int kMax = 48;
  std::optional<uint64_t> ended_seed;
  std::string ended_text;
  for (uint64_t seed = 1; seed <= 200 && !ended_seed; ++seed) {
    CompletionRequest r = Prompt("Once upon", kMax);
    // Near uniform over the whole vocabulary: the end token comes up by chance.
    r.sampling.temperature = 50.0f;
    r.sampling.top_k = 0;
    r.sampling.top_p = 1.0f;
    r.sampling.min_p = 0.0f;
    r.sampling.seed = seed;
    r.response_cache = false;
    auto g = s_.gw->Start(r);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    Result res = Collect(**g);
    if (res.finish[0] == FinishReason::kEndOfTurn) {
      ended_seed = seed;
      ended_text = res.text[0];
    }
  }
  ASSERT_TRUE(ended_seed.has_value()) << "no seed in 1..200 reached an end-of-generation token";
  CompletionRequest r = Prompt("Once upon", kMax);
  r.sampling.temperature = 50.0f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0f;
  r.sampling.min_p = 0.0f;
  r.sampling.seed = *ended_seed;
  r.response_cache = false;
  r.ignore_eos = true;
  auto g = s_.gw->Start(r);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  int32_t completion_tokens = 0;
  FinishReason finish = FinishReason::kCancelled;
  std::string text;
  const auto far = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (true) {
    auto e = (*g)->Next(far);
    if (!e.ok()) break;
    if (e->kind == Event::Kind::kDelta) {
      text += e->text;
    } else {
      finish = e->finish;
      completion_tokens = e->usage.completion_tokens;
    }
  }
  EXPECT_EQ(finish, FinishReason::kLength);
  EXPECT_EQ(completion_tokens, kMax);
  EXPECT_EQ(text.substr(0, ended_text.size()), ended_text);
}

// With a seed stream (as strata serve sets), unseeded sampling differs from
// request to request; a seeded request stays reproducible.
TEST_F(GatewayTest, UnseededRequestsDrawFreshSeedsFromTheServersStream) {
  GatewayOptions go = testing::TinyGatewayOptions();
  go.unseeded_seed_base = 12345;
  obs::MetricsRegistry metrics;  // a second gateway registers its own metrics
  auto gw =
      std::move(Gateway::Create(*s_.tiny.model, *s_.sched, metrics, go, clock_, *log_)).value();
  auto run = [&](std::optional<uint64_t> seed) {
    CompletionRequest r = Prompt("Once upon", 16);
    r.sampling.temperature = 1.5f;
    r.sampling.top_k = 0;
    r.sampling.top_p = 1.0f;
    r.sampling.min_p = 0.0f;
    if (seed) {
      r.sampling.seed = *seed;
      r.fixed_seed = true;
    }
    auto g = gw->Start(r);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    return g.ok() ? Collect(**g).text[0] : std::string();
  };
  std::set<std::string> unseeded;
  for (int i = 0; i < 6; ++i) unseeded.insert(run(std::nullopt));
  EXPECT_GE(unseeded.size(), 5u) << "unseeded requests kept sampling the same text";
  EXPECT_EQ(run(7), run(7));
}

// What a request snapshot records: each choice's finish carries the seed it
// sampled with (drawn from the server's stream for an unseeded request) and
// its token ids, and the generation names the backend and its prepared
// prompt. Running again with those seeds gives the same tokens.
TEST_F(GatewayTest, AFinishCarriesTheSeedAndTokensThatReproduceTheChoice) {
  GatewayOptions go = testing::TinyGatewayOptions();
  go.unseeded_seed_base = 987;
  obs::MetricsRegistry metrics;
  auto gw =
      std::move(Gateway::Create(*s_.tiny.model, *s_.sched, metrics, go, clock_, *log_)).value();
  CompletionRequest r = Prompt("Once upon", 12);
  r.sampling.temperature = 1.2f;
  r.sampling.top_k = 0;
  r.n = 3;
  struct Choice {
    std::string text;
    std::optional<uint64_t> seed;
    std::vector<int32_t> tokens;
  };
  auto run = [&](const CompletionRequest& req) {
    std::vector<Choice> out(static_cast<size_t>(req.n));
    auto g = gw->Start(req);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    if (!g.ok()) return out;
    EXPECT_EQ((*g)->provenance().size(), 1u);
    if ((*g)->provenance().size() == 1) {
      const Provenance& p = (*g)->provenance()[0];
      EXPECT_EQ(p.backend, gw->Find(""));
      EXPECT_EQ(p.prepared->tokens, *gw->Tokenize(req));
      EXPECT_EQ(p.prepared->max_tokens, 12);
    }
    const auto far = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    while (true) {
      auto e = (*g)->Next(far);
      if (!e.ok()) break;
      Choice& c = out[static_cast<size_t>(e->index)];
      if (e->kind == Event::Kind::kDelta) {
        c.text += e->text;
      } else {
        c.seed = e->seed;
        c.tokens = e->token_ids;
        EXPECT_EQ(static_cast<int32_t>(c.tokens.size()), e->usage.completion_tokens);
        EXPECT_TRUE(e->replica.empty());
      }
    }
    return out;
  };
  const std::vector<Choice> first = run(r);
  ASSERT_TRUE(first[0].seed.has_value());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(first[i].seed, *first[0].seed + i);  // choice i samples with base + i
    EXPECT_FALSE(first[i].tokens.empty());
  }
  CompletionRequest again = r;
  again.sampling.seed = *first[0].seed;
  again.fixed_seed = true;
  const std::vector<Choice> second = run(again);
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(second[i].tokens, first[i].tokens) << i;
    EXPECT_EQ(second[i].text, first[i].text) << i;
    EXPECT_EQ(second[i].seed, first[i].seed) << i;
  }
}

TEST_F(GatewayTest, InvalidRequestsNameTheProblem) {
  CompletionRequest r = Prompt("x", 5);
  r.n = 0;
  EXPECT_NE(s_.gw->Start(r).status().message().find("n 0"), std::string::npos);
  r = Prompt("x", 5);
  r.sampling.top_p = 3.0f;
  EXPECT_NE(s_.gw->Start(r).status().message().find("top_p"), std::string::npos);
  r = Prompt("x", 500);
  EXPECT_NE(s_.gw->Start(r).status().message().find("max_tokens 500"), std::string::npos);
  r = Prompt(std::string(2000, 'a') + " the cat sat", 5);
  auto long_prompt = s_.gw->Start(r);
  EXPECT_EQ(long_prompt.status().code(), util::StatusCode::kOutOfRange);
  EXPECT_NE(long_prompt.status().message().find("context length exceeded"), std::string::npos);
  CompletionRequest chat;
  chat.messages = {{"wizard", "x"}};
  EXPECT_NE(s_.gw->Start(chat).status().message().find("messages[0].role"), std::string::npos);
}

TEST_F(GatewayTest, DroppingAGenerationCancelsIt) {
  {
    auto g = s_.gw->Start(Prompt("the cat", 64));
    ASSERT_TRUE(g.ok());
    auto first = (*g)->Next(std::chrono::steady_clock::now() + std::chrono::minutes(1));
    ASSERT_TRUE(first.ok());
  }  // client gone
  EXPECT_TRUE(s_.sched->Drain(std::chrono::minutes(1)));
  EXPECT_EQ(s_.sched->Stats().kv_blocks_used, 0);
}

TEST_F(GatewayTest, MetricsRecordLatencyAndTokens) {
  Collect(**s_.gw->Start(Prompt("the cat", 5)));
  const std::string text = metrics_.Render();
  EXPECT_NE(text.find("strata_time_to_first_token_seconds_count 1"), std::string::npos) << text;
  EXPECT_NE(text.find("strata_generated_tokens_total 5"), std::string::npos);
  EXPECT_NE(text.find("strata_generations_finished_total{reason=\"length\"} 1"), std::string::npos);
}

}  // namespace
}  // namespace strata::gateway

namespace strata::gateway {
namespace {

// More inputs than the scheduler's running and queued slots are fed in as
// the request's own inputs finish; the vectors equal those embedded one by one.
TEST(GatewayEmbedTest, MoreInputsThanSchedulerSlotsAreFedInAsTheyFinish) {
  auto log = util::NewNullLogger();
  testing::FakeClock clock;
  obs::MetricsRegistry metrics;
  testing::ServingStack s;
  testing::StartServingStack(s, testing::TinyGatewayOptions(), metrics, clock, *log,
                             {.max_running = 2, .max_queue = 1});
  ASSERT_NE(s.gw, nullptr);
  EmbeddingRequest r;
  for (int i = 0; i < 40; ++i) r.texts.push_back("input number " + std::to_string(i));
  const auto far = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  auto all = s.gw->Embed(r, far);
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  ASSERT_EQ(all->embeddings.size(), 40u);
  for (int i : {0, 17, 39}) {
    EmbeddingRequest one;
    one.texts.push_back(r.texts[static_cast<size_t>(i)]);
    auto alone = s.gw->Embed(one, far);
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ(alone->embeddings[0], all->embeddings[static_cast<size_t>(i)]) << i;
  }
  s.Stop();
}

// A completions prompt's "<s>" is text unless the server says otherwise.
TEST(GatewayPromptTest, ControlTokenTextInAPromptStaysTextUnlessAsked) {
  auto log = util::NewNullLogger();
  testing::FakeClock clock;
  for (const bool special : {false, true}) {
    obs::MetricsRegistry metrics;
    testing::ServingStack s;
    GatewayOptions go = testing::TinyGatewayOptions();
    go.prompt_special_tokens = special;
    testing::StartServingStack(s, go, metrics, clock, *log);
    ASSERT_NE(s.gw, nullptr);
    const text::Tokenizer& tok = s.tiny.model->tokenizer();
    const std::string bos(tok.Piece(tok.bos(), /*render_special=*/true));
    ASSERT_FALSE(bos.empty());
    CompletionRequest r;
    r.prompt = bos + "ab";
    auto ids = s.gw->Tokenize(r);
    ASSERT_TRUE(ids.ok());
    const auto n_bos = std::count(ids->begin(), ids->end(), tok.bos());
    EXPECT_EQ(n_bos, special ? 2 : 1) << "special=" << special;  // the added BOS, plus the text's
    s.Stop();
  }
}

// --- live options (a reload) -------------------------------------------------

// The completion tokens of a generation's first choice, read to its end.
int32_t CompletionTokens(Generation& g) {
  int32_t tokens = -1;
  const auto far = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  while (true) {
    auto e = g.Next(far);
    if (!e.ok()) break;
    if (e->kind == Event::Kind::kFinish && e->index == 0) tokens = e->usage.completion_tokens;
  }
  return tokens;
}

TEST_F(GatewayTest, AReconfiguredCapHoldsForNewRequestsAndNotForRunningOnes) {
  CompletionRequest r = Prompt("Once upon", 40);
  r.ignore_eos = true;
  r.response_cache = false;
  auto running = s_.gw->Start(r);
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  GatewayLiveOptions live = s_.gw->live_options();
  EXPECT_EQ(live.max_tokens_cap, 64);
  live.max_tokens_cap = 8;
  ASSERT_TRUE(s_.gw->Reconfigure(live).ok());
  EXPECT_EQ(CompletionTokens(**running), 40);
  auto refused = s_.gw->Start(r);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().field(), "max_tokens");
  EXPECT_NE(refused.status().message().find("[1, 8]"), std::string::npos);
  r.max_tokens = 8;
  auto fits = s_.gw->Start(r);
  ASSERT_TRUE(fits.ok());
  EXPECT_EQ(CompletionTokens(**fits), 8);
}

TEST_F(GatewayTest, AnInvalidReconfigurationChangesNothing) {
  const GatewayLiveOptions before = s_.gw->live_options();
  GatewayLiveOptions bad = before;
  bad.max_tokens_cap = 0;
  EXPECT_FALSE(s_.gw->Reconfigure(bad).ok());
  bad = before;
  bad.l3_mode = L3Mode::kOn;  // the tier was off at creation: no index to turn on
  const util::Status st = s_.gw->Reconfigure(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("needs a restart"), std::string::npos);
  bad = before;
  bad.rt_fallback_model = "tiny";  // no RT-Switcher here
  EXPECT_FALSE(s_.gw->Reconfigure(bad).ok());
  bad = before;
  bad.l1_ttl_jitter = 0.95;
  EXPECT_FALSE(s_.gw->Reconfigure(bad).ok());
  EXPECT_EQ(s_.gw->live_options().max_tokens_cap, before.max_tokens_cap);
  EXPECT_EQ(s_.gw->live_options().l3_mode, before.l3_mode);
}

TEST_F(GatewayTest, AReconfiguredTtlHoldsForAnswersStoredFromThenOn) {
  GatewayOptions go = testing::TinyGatewayOptions();
  go.l1.max_bytes = 1 << 20;
  go.l1.ttl = std::chrono::seconds(600);
  go.l1.ttl_jitter = 0;
  go.coalesce = true;
  obs::MetricsRegistry metrics;  // the fixture's has the first stack's families
  testing::StartServingStack(s_, go, metrics, clock_, *log_);
  auto outcome = [&](const std::string& text) {
    auto g = s_.gw->Start(Prompt(text, 4));
    EXPECT_TRUE(g.ok());
    const CacheOutcome o = (*g)->cache_outcome();
    Collect(**g);
    return o;
  };
  EXPECT_EQ(outcome("stored under the old ttl"), CacheOutcome::kMiss);
  GatewayLiveOptions live = s_.gw->live_options();
  live.l1_ttl = std::chrono::seconds(1);
  ASSERT_TRUE(s_.gw->Reconfigure(live).ok());
  EXPECT_EQ(outcome("stored under the new ttl"), CacheOutcome::kMiss);
  EXPECT_EQ(outcome("stored under the new ttl"), CacheOutcome::kL1);
  clock_.Advance(std::chrono::seconds(2));
  EXPECT_EQ(outcome("stored under the old ttl"), CacheOutcome::kL1);
  EXPECT_EQ(outcome("stored under the new ttl"), CacheOutcome::kMiss);
  // Coalescing off: a deterministic request is still cached, not coalesced.
  live.coalesce = false;
  ASSERT_TRUE(s_.gw->Reconfigure(live).ok());
  EXPECT_FALSE(s_.gw->live_options().coalesce);
  s_.Stop();  // before `metrics` goes
}

}  // namespace
}  // namespace strata::gateway
