#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "sampling/chi_square.h"
#include "util/random.h"

namespace strata::sampling {
namespace {

using testing::ChiSquare;

const float kNegInf = -std::numeric_limits<float>::infinity();

// Parameters with every cut off, so a test turns on only what it studies.
SamplingParams Plain(float temperature, uint64_t seed) {
  SamplingParams p;
  p.temperature = temperature;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = seed;
  return p;
}

std::vector<float> RandomLogits(util::Rng& rng, size_t n, double scale) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(scale * rng.Normal());
  return v;
}

std::map<int32_t, int64_t> SampleMany(Sampler& s, const std::vector<float>& logits, int64_t n) {
  std::map<int32_t, int64_t> counts;
  for (int64_t i = 0; i < n; ++i) counts[*s.Sample(logits)]++;
  return counts;
}

// softmax(z / t) over the given ids.
std::map<int32_t, double> SoftmaxOver(const std::vector<float>& z, const std::vector<int32_t>& ids,
                                      double t) {
  double mx = -1e300;
  for (int32_t i : ids) mx = std::max<double>(mx, z[i]);
  double sum = 0;
  for (int32_t i : ids) sum += std::exp((z[i] - mx) / t);
  std::map<int32_t, double> p;
  for (int32_t i : ids) p[i] = std::exp((z[i] - mx) / t) / sum;
  return p;
}

// Token ids ranked by logit (descending, ties by id).
std::vector<int32_t> Ranked(const std::vector<float>& z) {
  std::vector<int32_t> ids(z.size());
  for (size_t i = 0; i < z.size(); ++i) ids[i] = static_cast<int32_t>(i);
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  return ids;
}

TEST(Sampler, ZeroTemperatureIsArgmax) {
  Sampler s({.temperature = 0.0f, .seed = 1});
  const std::vector<float> logits = {0.1f, 2.0f, 1.9f, -5.0f};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(*s.Sample(logits), 1);
  const StepReport r = *s.SampleWithReport(logits);
  EXPECT_EQ(r.token, 1);
  EXPECT_EQ(r.entropy_nats, 0.0);
  EXPECT_EQ(r.temperature, 0.0);
}

SamplingParams EntropyPolicy(float target, uint64_t seed) {
  SamplingParams p = Plain(1.0f, seed);
  p.target_entropy = target;
  return p;
}

SamplingParams MirostatPolicy(float tau, uint64_t seed) {
  SamplingParams p = Plain(1.0f, seed);
  p.mirostat = true;
  p.mirostat_tau_bits = tau;
  return p;
}

std::vector<SamplingParams> Policies(uint64_t seed) {
  SamplingParams topk{
      .temperature = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.0f, .seed = seed};
  SamplingParams minp = Plain(1.0f, seed);
  minp.min_p = 0.1f;
  SamplingParams typical = Plain(1.0f, seed);
  typical.typical_p = 0.9f;
  SamplingParams pen = Plain(0.9f, seed);
  pen.repetition_penalty = 1.3f;
  pen.frequency_penalty = 0.2f;
  return {Plain(0.7f, seed),         topk, minp, typical, pen, EntropyPolicy(2.0f, seed),
          MirostatPolicy(4.0f, seed)};
}

TEST(Sampler, SameSeedParametersAndLogitsGiveTheSameTokens) {
  util::Rng rng(1);
  std::vector<std::vector<float>> steps;
  for (int i = 0; i < 100; ++i) steps.push_back(RandomLogits(rng, 2000, 3.0));
  for (const SamplingParams& p : Policies(77)) {
    Sampler a(p), b(p);
    for (const auto& l : steps) ASSERT_EQ(*a.Sample(l), *b.Sample(l));
  }
}

TEST(Sampler, TokensDoNotDependOnTheOtherRequestsInTheBatch) {
  util::Rng rng(2);
  std::vector<std::vector<float>> steps;
  for (int i = 0; i < 60; ++i) steps.push_back(RandomLogits(rng, 500, 2.0));
  for (const SamplingParams& p : Policies(5)) {
    Sampler alone(p);
    std::vector<int32_t> want;
    for (const auto& l : steps) want.push_back(*alone.Sample(l));
    // The same request interleaved with others of every policy, each seeing
    // other logits, as in a batch of any composition.
    Sampler in_batch(p);
    std::vector<Sampler> others;
    for (const SamplingParams& q : Policies(99)) others.emplace_back(q);
    for (size_t i = 0; i < steps.size(); ++i) {
      for (size_t k = 0; k < i % others.size(); ++k)
        (void)others[k].Sample(steps[(i + 7) % steps.size()]);
      ASSERT_EQ(*in_batch.Sample(steps[i]), want[i]) << "step " << i;
    }
  }
}

// The Sampler is exactly the documented composition of the pure processors,
// with one uniform draw per token from Rng(seed).
TEST(Sampler, AppliesTheProcessorsInTheDocumentedOrder) {
  util::Rng data(3);
  for (int trial = 0; trial < 40; ++trial) {
    SamplingParams p = Plain(0.5f + 1.5f * static_cast<float>(data.Uniform()), 1000 + trial);
    p.top_k = trial % 3 == 0 ? 0 : static_cast<int32_t>(5 + data.Below(100));
    p.top_p = trial % 4 == 0 ? 1.0f : 0.5f + 0.5f * static_cast<float>(data.Uniform());
    p.min_p = trial % 5 == 0 ? 0.0f : 0.1f * static_cast<float>(data.Uniform());
    p.typical_p = trial % 2 == 0 ? 1.0f : 0.6f + 0.4f * static_cast<float>(data.Uniform());
    p.presence_penalty = 0.3f;
    p.frequency_penalty = 0.1f;
    p.repetition_penalty = 1.2f;
    if (trial % 3 == 1) p.target_entropy = static_cast<float>(3 * data.Uniform());
    if (trial % 3 == 2) p.mirostat = true;
    ASSERT_TRUE(Validate(p).ok());
    Sampler s(p);
    util::Rng draws(p.seed);
    std::vector<TokenCount> counts;
    float mu = 2 * p.mirostat_tau_bits;
    for (int step = 0; step < 30; ++step) {
      const std::vector<float> l = RandomLogits(data, 300, 2.0);
      Candidates c = FromLogits(l);
      c = ApplyPenalties(std::move(c), counts,
                         {.repetition = 1.2f, .presence = 0.3f, .frequency = 0.1f});
      c = TopK(std::move(c), p.top_k);
      c = TopP(std::move(c), p.top_p);
      c = MinP(std::move(c), p.min_p);
      c = TypicalP(std::move(c), p.typical_p);
      if (p.target_entropy >= 0) {
        c = EntropyTarget(std::move(c), p.target_entropy, p.entropy_tail_nats).kept;
      } else {
        c = Temperature(std::move(c), p.temperature);
      }
      if (p.mirostat) c = MirostatV2(std::move(c), mu);
      const DrawResult d = Draw(c, draws.Uniform());
      if (p.mirostat) mu = MirostatV2Update(mu, p.mirostat_tau_bits, p.mirostat_eta, d.probability);
      ASSERT_EQ(*s.Sample(l), d.id) << "trial " << trial << " step " << step;
      auto it = std::lower_bound(counts.begin(), counts.end(), d.id,
                                 [](const TokenCount& t, int32_t id) { return t.id < id; });
      if (it != counts.end() && it->id == d.id) {
        ++it->count;
      } else {
        counts.insert(it, {d.id, 1});
      }
    }
  }
}

TEST(Sampler, TopKComesBeforeTopP) {
  // p = {0.4, 0.3, 0.2, 0.1}. Top-k 3 renormalises to {0.44, 0.33, 0.22}, so
  // top-p 0.42 keeps token 0 alone; top-p first would keep {0, 1}.
  const std::vector<float> l = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  SamplingParams p = Plain(1.0f, 4);
  p.top_k = 3;
  p.top_p = 0.42f;
  Sampler s(p);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(*s.Sample(l), 0);
}

TEST(Sampler, MinPCutsBeforeTheTemperature) {
  // At T = 1, p_i / p_max = e^-i: min-p 0.3 keeps {0, 1}. At T = 2 (if the
  // temperature came first) it would keep {0, 1, 2}.
  SamplingParams p = Plain(2.0f, 5);
  p.min_p = 0.3f;
  Sampler s(p);
  const auto counts = SampleMany(s, {0, -1, -2, -3}, 2000);
  EXPECT_EQ(counts.size(), 2u);
  EXPECT_FALSE(counts.contains(2));
}

TEST(Sampler, PenaltiesComeBeforeTopK) {
  SamplingParams p = Plain(1.0f, 6);
  p.top_k = 1;
  p.presence_penalty = 1.0f;
  Sampler s(p);
  const std::vector<float> l = {2.0f, 1.5f, 0.0f};
  EXPECT_EQ(*s.Sample(l), 0);
  EXPECT_EQ(*s.Sample(l), 1);  // token 0 is penalised below token 1 before top-1
}

TEST(Sampler, TheEntropyTargetReplacesTheTemperature) {
  util::Rng rng(8);
  SamplingParams a = EntropyPolicy(1.5f, 9);
  SamplingParams b = a;
  b.temperature = 3.7f;
  Sampler sa(a), sb(b);
  for (int i = 0; i < 50; ++i) {
    const auto l = RandomLogits(rng, 1000, 2.0);
    const StepReport ra = *sa.SampleWithReport(l), rb = *sb.SampleWithReport(l);
    EXPECT_EQ(ra.token, rb.token);
    EXPECT_NEAR(ra.entropy_nats, 1.5, 0.01);
    EXPECT_EQ(ra.entropy_clamp, EntropyClamp::kNone);
  }
}

// Chi-square at alpha = 0.001 (see chi_square.h) of the Sampler's draws
// against a reference distribution computed here, independently, for each
// processor.
TEST(Sampler, DrawsFollowTheIntendedDistributionAfterEachProcessor) {
  const std::vector<float> z = {1.1f, 2.0f, -0.3f, 1.6f, 0.2f, -1.0f, 0.9f, -2.2f, 0.5f, -0.1f};
  const std::vector<int32_t> ranked = Ranked(z);
  const int64_t n = 40000;
  auto all = [&] { return ranked; };
  auto softmax1 = SoftmaxOver(z, all(), 1.0);
  struct Case {
    std::string name;
    SamplingParams params;
    std::map<int32_t, double> expected;
  };
  std::vector<Case> cases;
  {
    SamplingParams p = Plain(2.0f, 21);
    cases.push_back({"temperature 2", p, SoftmaxOver(z, all(), 2.0)});
  }
  {
    SamplingParams p = Plain(0.7f, 22);
    p.top_k = 4;
    cases.push_back(
        {"top-k 4, T 0.7", p,
         SoftmaxOver(z, std::vector<int32_t>(ranked.begin(), ranked.begin() + 4), 0.7)});
  }
  {
    SamplingParams p = Plain(1.3f, 23);
    p.top_p = 0.8f;
    std::vector<int32_t> keep;
    double cum = 0;
    for (int32_t id : ranked) {
      keep.push_back(id);
      if ((cum += softmax1[id]) >= 0.8) break;
    }
    cases.push_back({"top-p 0.8, T 1.3", p, SoftmaxOver(z, keep, 1.3)});
  }
  {
    SamplingParams p = Plain(1.0f, 24);
    p.min_p = 0.2f;
    std::vector<int32_t> keep;
    for (int32_t id : ranked) {
      if (softmax1[id] >= 0.2 * softmax1[ranked[0]]) keep.push_back(id);
    }
    cases.push_back({"min-p 0.2", p, SoftmaxOver(z, keep, 1.0)});
  }
  {
    SamplingParams p = Plain(1.0f, 25);
    p.typical_p = 0.6f;
    double h = 0;
    for (auto& [id, q] : softmax1) h -= q * std::log(q);
    std::vector<int32_t> by_typ = ranked;
    std::stable_sort(by_typ.begin(), by_typ.end(), [&](int32_t a, int32_t b) {
      return std::abs(-std::log(softmax1[a]) - h) < std::abs(-std::log(softmax1[b]) - h);
    });
    std::vector<int32_t> keep;
    double cum = 0;
    for (int32_t id : by_typ) {
      keep.push_back(id);
      if ((cum += softmax1[id]) >= 0.6) break;
    }
    cases.push_back({"typical-p 0.6", p, SoftmaxOver(z, keep, 1.0)});
  }
  {
    // Entropy target 1.2 nats, m = 1: the kept set and T from the rule,
    // which tests/sampling/entropy_test.cpp checks against a brute force.
    SamplingParams p = EntropyPolicy(1.2f, 26);
    p.entropy_tail_nats = 1.0f;
    const EntropyTargetResult e = EntropyTarget(FromLogits(z), 1.2, 1.0);
    std::vector<int32_t> keep;
    for (auto& c : e.kept.items) keep.push_back(c.id);
    EXPECT_LT(keep.size(), z.size());  // the tail rule did cut
    cases.push_back({"entropy 1.2", p, SoftmaxOver(z, keep, e.solution.temperature)});
  }
  for (const Case& c : cases) {
    Sampler s(c.params);
    const auto r = ChiSquare(SampleMany(s, z, n), c.expected, n);
    EXPECT_TRUE(r.Passes()) << c.name << ": chi2 " << r.statistic << " >= " << r.critical << " (df "
                            << r.df << ")" << (r.unexpected ? ", unexpected token" : "");
  }
}

TEST(Sampler, MirostatKeepsTheMeanSurpriseNearTau) {
  // Zipf-like logits over 2000 tokens; after a burn-in the running mean of
  // the observed surprise is within 0.25 bits of tau.
  std::vector<float> z(2000);
  for (size_t i = 0; i < z.size(); ++i) z[i] = -1.1f * std::log(static_cast<float>(i + 1));
  for (float tau : {3.0f, 5.0f}) {
    Sampler s(MirostatPolicy(tau, 31));
    double sum = 0;
    int counted = 0;
    for (int i = 0; i < 3000; ++i) {
      const StepReport r = *s.SampleWithReport(z);
      if (i >= 500) {
        sum += -std::log2(r.probability);
        ++counted;
      }
    }
    EXPECT_NEAR(sum / counted, tau, 0.25) << tau;
  }
  // mu is per Sampler: a fresh one starts again at 2 tau.
  EXPECT_FLOAT_EQ(Sampler(MirostatPolicy(3.0f, 1)).mirostat_mu_bits(), 6.0f);
}

TEST(Sampler, ReportsAnEntropyTargetOutOfReach) {
  Sampler s(EntropyPolicy(2.0f, 3));
  const StepReport r = *s.SampleWithReport(std::vector<float>{0.0f, kNegInf, 1.0f, 0.5f});
  EXPECT_EQ(r.entropy_clamp, EntropyClamp::kAboveMax);
  EXPECT_NEAR(r.entropy_nats, std::log(3.0), 1e-6);
  EXPECT_NE(r.token, 1);  // the masked token is never drawn
}

TEST(Sampler, NonFiniteLogitsAreErrors) {
  for (const SamplingParams& p : Policies(1)) {
    Sampler s(p);
    const auto nan = s.Sample(std::vector<float>{0.0f, std::nanf("")});
    ASSERT_FALSE(nan.ok());
    EXPECT_EQ(nan.status().code(), util::StatusCode::kInvalidArgument);
    EXPECT_NE(nan.status().message().find("token 1"), std::string::npos);
    EXPECT_FALSE(s.Sample(std::vector<float>{1.0f, std::numeric_limits<float>::infinity()}).ok());
    EXPECT_FALSE(s.Sample(std::vector<float>{kNegInf, kNegInf}).ok());
    EXPECT_FALSE(s.Sample(std::vector<float>{}).ok());
    // -inf entries are masked candidates, not errors.
    for (int i = 0; i < 50; ++i)
      EXPECT_EQ(*s.Sample(std::vector<float>{kNegInf, 0.0f, kNegInf}), 1);
  }
  Sampler greedy({.temperature = 0.0f, .seed = 1});
  EXPECT_FALSE(greedy.Sample(std::vector<float>{std::nanf(""), 1.0f}).ok());
}

TEST(Sampler, InvalidParametersNameTheField) {
  EXPECT_NE(Validate({.temperature = -1.0f}).message().find("temperature"), std::string::npos);
  EXPECT_NE(Validate({.top_p = 0.0f}).message().find("top_p"), std::string::npos);
  EXPECT_NE(Validate({.min_p = 1.0f}).message().find("min_p"), std::string::npos);
  EXPECT_NE(Validate({.top_k = -2}).message().find("top_k"), std::string::npos);
  EXPECT_NE(Validate({.typical_p = 0.0f}).message().find("typical_p"), std::string::npos);
  EXPECT_NE(Validate({.target_entropy = 101.0f}).message().find("target_entropy"),
            std::string::npos);
  EXPECT_NE(Validate({.entropy_tail_nats = 0.0f}).message().find("entropy_tail_nats"),
            std::string::npos);
  EXPECT_NE(Validate({.mirostat_tau_bits = 0.0f}).message().find("mirostat_tau_bits"),
            std::string::npos);
  EXPECT_NE(Validate({.mirostat_eta = 2.0f}).message().find("mirostat_eta"), std::string::npos);
  EXPECT_NE(Validate({.target_entropy = 2.0f, .mirostat = true}).message().find("exclusive"),
            std::string::npos);
  EXPECT_FALSE(Validate({.presence_penalty = 3.0f}).ok());
  EXPECT_FALSE(Validate({.repetition_penalty = 0.0f}).ok());
  EXPECT_TRUE(Validate({}).ok());
  EXPECT_TRUE(Validate({.target_entropy = 50.0f}).ok());  // out of reach is clamped, not invalid
}

TEST(Sampler, PenaltiesLowerRepeatedTokens) {
  std::vector<float> logits = {1.0f, 0.9f, 0.0f};
  SamplingParams p{
      .temperature = 0.0f, .presence_penalty = 0.5f, .frequency_penalty = 0.0f, .seed = 1};
  Sampler s(p);
  EXPECT_EQ(*s.Sample(logits), 0);  // nothing generated yet
  EXPECT_EQ(*s.Sample(logits), 1);  // token 0 now carries the presence penalty
}

TEST(Sampler, LogitBiasBansForcesAndShiftsTokens) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.5f, 0.0f};
  {
    SamplingParams p{.temperature = 0.0f, .seed = 1};
    p.logit_bias = {{0, -100.0f}};  // banned: the next best wins
    Sampler s(p);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(*s.Sample(logits), 1);
  }
  {
    SamplingParams p = Plain(1.0f, 3);
    p.logit_bias = {{0, -100.0f}, {3, 100.0f}};  // 3 all but forced, 0 never
    Sampler s(p);
    const auto counts = SampleMany(s, logits, 2000);
    EXPECT_EQ(counts.count(0), 0u);
    EXPECT_EQ(counts.at(3), 2000);
  }
  {
    // A finite bias shifts the logit: softmax of {2, 1, 0.5 + 1.5, 0}.
    SamplingParams p = Plain(1.0f, 5);
    p.logit_bias = {{2, 1.5f}};
    Sampler s(p);
    const int64_t n = 30000;
    const auto want = SoftmaxOver({2.0f, 1.0f, 2.0f, 0.0f}, {0, 1, 2, 3}, 1.0);
    const auto r = ChiSquare(SampleMany(s, logits, n), want, n);
    EXPECT_TRUE(r.Passes()) << r.statistic;
  }
  {
    // Banning every token leaves nothing to sample.
    SamplingParams p = Plain(1.0f, 1);
    p.logit_bias = {{0, -100.0f}, {1, -100.0f}, {2, -100.0f}, {3, -100.0f}};
    EXPECT_FALSE(Sampler(p).Sample(logits).ok());
  }
  {
    // A token beyond the logits is an error, not a write past them.
    SamplingParams p = Plain(1.0f, 1);
    p.logit_bias = {{4, 1.0f}};
    const auto r = Sampler(p).Sample(logits);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("token 4"), std::string::npos);
  }
}

TEST(Sampler, InvalidLogitBiasIsRefused) {
  SamplingParams p;
  p.logit_bias = {{3, 101.0f}};
  EXPECT_NE(Validate(p).message().find("[-100, 100]"), std::string::npos);
  p.logit_bias = {{-1, 1.0f}};
  EXPECT_NE(Validate(p).message().find("negative"), std::string::npos);
  p.logit_bias = {{5, 1.0f}, {2, 1.0f}};
  EXPECT_NE(Validate(p).message().find("sorted"), std::string::npos);
  p.logit_bias = {{2, std::nanf("")}};
  EXPECT_FALSE(Validate(p).ok());
  p.logit_bias.clear();
  for (int32_t i = 0; i <= static_cast<int32_t>(kMaxLogitBias); ++i) p.logit_bias.push_back({i, 1});
  EXPECT_NE(Validate(p).message().find("at most"), std::string::npos);
  p.logit_bias.pop_back();
  EXPECT_TRUE(Validate(p).ok());
}

TEST(Sampler, DrawsFollowTheSoftmax) {
  // Three tokens with probabilities 0.5, 0.3, 0.2: a chi-square goodness of fit.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.2f)};
  Sampler s(Plain(1.0f, 11));
  const int64_t n = 30000;
  const auto r = ChiSquare(SampleMany(s, logits, n), {{0, 0.5}, {1, 0.3}, {2, 0.2}}, n);
  EXPECT_TRUE(r.Passes()) << r.statistic;
}

}  // namespace
}  // namespace strata::sampling
