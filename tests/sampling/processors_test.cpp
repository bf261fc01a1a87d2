#include "sampling/processors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

#include "sampling/chi_square.h"
#include "sampling/internal/fast_exp.h"
#include "sampling/internal/select.h"
#include "util/random.h"

namespace strata::sampling {
namespace {

using testing::ChiSquare;

Candidates Make(const std::vector<float>& logits) { return FromLogits(logits); }

std::vector<int32_t> Ids(const Candidates& c) {
  std::vector<int32_t> ids;
  for (const Candidate& x : c.items) ids.push_back(x.id);
  return ids;
}

std::vector<int32_t> SortedIds(const Candidates& c) {
  std::vector<int32_t> ids = Ids(c);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<float> LogProbs(const std::vector<double>& p) {
  std::vector<float> l;
  for (double x : p) l.push_back(static_cast<float>(std::log(x)));
  return l;
}

// Draws n times from c with a seeded generator; counts per token.
std::map<int32_t, int64_t> DrawMany(const Candidates& c, int64_t n, uint64_t seed) {
  util::Rng rng(seed);
  std::map<int32_t, int64_t> counts;
  for (int64_t i = 0; i < n; ++i) counts[Draw(c, rng.Uniform()).id]++;
  return counts;
}

std::map<int32_t, double> Softmax(const std::vector<std::pair<int32_t, double>>& id_logit,
                                  double t) {
  double mx = -1e300;
  for (auto& [id, l] : id_logit) mx = std::max(mx, l);
  double z = 0;
  for (auto& [id, l] : id_logit) z += std::exp((l - mx) / t);
  std::map<int32_t, double> p;
  for (auto& [id, l] : id_logit) p[id] = std::exp((l - mx) / t) / z;
  return p;
}

TEST(FastExp, MatchesStdExpWithinTwoUlpsRelative) {
  double worst = 0;
  for (float x = -87.0f; x <= 0.0f; x += 0.00731f) {
    const double ref = std::exp(static_cast<double>(x));
    const double got = internal::FastExp(x);
    worst = std::max(worst, std::abs(got - ref) / ref);
  }
  EXPECT_LT(worst, 2e-7);
  EXPECT_EQ(internal::FastExp(-88.0f), 0.0f);
  EXPECT_EQ(internal::FastExp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(internal::FastExp(-3.0e38f), 0.0f);
  EXPECT_EQ(internal::FastExp(0.0f), 1.0f);
}

TEST(FromLogits, DropsMaskedTokensAndKeepsIdOrder) {
  const float ninf = -std::numeric_limits<float>::infinity();
  const Candidates c = Make({1.0f, ninf, 3.0f, ninf, -2.0f});
  EXPECT_EQ(Ids(c), (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(c.order, Order::kById);
  // A reused, larger buffer gives the same result.
  Candidates big = Make(std::vector<float>(100, 0.5f));
  const Candidates again = FromLogits(std::vector<float>{ninf, 7.0f}, std::move(big));
  EXPECT_EQ(Ids(again), (std::vector<int32_t>{1}));
}

TEST(PartialSelect, PutsTheBestFirstSortedAndLosesNothing) {
  util::Rng rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng.Below(5000);
    std::vector<Candidate> v(n);
    for (size_t i = 0; i < n; ++i) {
      // Coarse values so that ties are common; sometimes sorted ascending (the
      // worst case for the running threshold).
      v[i] = {static_cast<int32_t>(i), static_cast<float>(rng.Below(50))};
    }
    if (trial % 7 == 0)
      std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.logit < b.logit; });
    const size_t m = rng.Below(n + 3);
    std::vector<Candidate> ref = v;
    std::sort(ref.begin(), ref.end(), Before);
    PartialSelect(v, m);
    const size_t k = std::min(m, n);
    for (size_t i = 0; i < k; ++i) {
      ASSERT_EQ(v[i].id, ref[i].id) << "n=" << n << " m=" << m << " i=" << i;
    }
    std::vector<int32_t> ids;
    for (auto& x : v) ids.push_back(x.id);
    std::sort(ids.begin(), ids.end());
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(ids[i], static_cast<int32_t>(i));
  }
}

TEST(KeepByKeyUntilMass, MatchesSortingThenAccumulating) {
  util::Rng rng(6);
  for (int trial = 0; trial < 60; ++trial) {
    const size_t n = 1 + rng.Below(30000);
    std::vector<Candidate> v(n);
    const bool coarse = trial % 3 == 0;  // many ties
    for (size_t i = 0; i < n; ++i) {
      const double z = coarse ? static_cast<double>(rng.Below(8)) : 3.0 * rng.Normal();
      v[i] = {static_cast<int32_t>(i), static_cast<float>(z)};
    }
    float mx = v[0].logit;
    for (auto& x : v) mx = std::max(mx, x.logit);
    const float center = mx - 2.0f * static_cast<float>(rng.Uniform());
    auto key = [&](const Candidate& x) {
      return trial % 2 ? std::abs(x.logit - center) : mx - x.logit;
    };
    double total = 0;
    for (auto& x : v) total += internal::FastExp(internal::Gap(x.logit, mx));
    const double target = rng.Uniform() * total;
    std::vector<Candidate> ref = v;
    std::sort(ref.begin(), ref.end(), [&](const Candidate& a, const Candidate& b) {
      return key(a) < key(b) || (key(a) == key(b) && Before(a, b));
    });
    double cum = 0;
    size_t want = ref.size();
    for (size_t i = 0; i < ref.size(); ++i) {
      cum += internal::FastExp(internal::Gap(ref[i].logit, mx));
      if (cum >= target) {
        want = i + 1;
        break;
      }
    }
    const size_t got = internal::KeepByKeyUntilMass(std::span<Candidate>(v), key, mx, target,
                                                    trial % 4 == 1 ? 1.0f : 90.0f);
    // Sums in another order may move the cut by a token where the cumulative
    // weight sits on the target.
    ASSERT_NEAR(static_cast<double>(got), static_cast<double>(want), 1.0) << "trial " << trial;
    std::vector<int32_t> a, b;
    for (size_t i = 0; i < std::min(got, want); ++i) {
      a.push_back(v[i].id);
      b.push_back(ref[i].id);
    }
    if (got == want) {
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      EXPECT_EQ(a, b) << "trial " << trial;
    }
  }
}

TEST(TopK, KeepsTheKBestSortedAndBreaksTiesByLowerId) {
  const Candidates c = TopK(Make({1, 5, 3, 5, 2}), 3);
  EXPECT_EQ(Ids(c), (std::vector<int32_t>{1, 3, 2}));
  EXPECT_EQ(c.order, Order::kByLogit);
  EXPECT_EQ(TopK(Make({1, 2}), 0).items.size(), 2u);
  EXPECT_EQ(TopK(Make({1, 2}), 10).items.size(), 2u);
}

TEST(TopP, KeepsTheSmallestSufficientPrefix) {
  const std::vector<float> l = LogProbs({0.2, 0.5, 0.3});
  EXPECT_EQ(SortedIds(TopP(Make(l), 0.75f)), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(SortedIds(TopP(Make(l), 0.49f)), (std::vector<int32_t>{1}));
  EXPECT_EQ(SortedIds(TopP(Make(l), 0.81f)), (std::vector<int32_t>{0, 1, 2}));
  // On a sorted set the prefix keeps its order.
  EXPECT_EQ(Ids(TopP(SortByLogit(Make(l)), 0.75f)), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(TopP(Make(l), 1.0f).items.size(), 3u);
}

TEST(TopP, SelectsLargeNucleiWithoutSorting) {
  // 10000 tokens, nearly flat: the nucleus spans thousands of tokens, so the
  // histogram selection refines its crossing bin several times.
  std::vector<float> l(10000);
  util::Rng rng(9);
  for (auto& x : l) x = rng.UniformFloat(0.0f, 0.01f);
  const Candidates c = TopP(Make(l), 0.5f);
  std::vector<Candidate> ref = Make(l).items;
  std::sort(ref.begin(), ref.end(), Before);
  double z = 0;
  for (auto& x : ref) z += std::exp(x.logit);
  double cum = 0;
  size_t want = 0;
  while (cum < 0.5 * z) cum += std::exp(ref[want++].logit);
  EXPECT_NEAR(static_cast<double>(c.items.size()), static_cast<double>(want), 2.0);
  // The kept set is the top of the ranking (in no particular order).
  std::vector<int32_t> got_ids = Ids(c), want_ids;
  for (size_t i = 0; i < c.items.size(); ++i) want_ids.push_back(ref[i].id);
  std::sort(got_ids.begin(), got_ids.end());
  std::sort(want_ids.begin(), want_ids.end());
  EXPECT_EQ(got_ids, want_ids);
}

// Logits shaped like the sampling benchmark's: a Gaussian body over a
// Qwen2-sized vocabulary with a few dozen boosted tokens.
std::vector<float> LanguageModelLogits(size_t n, uint64_t seed) {
  util::Rng rng(seed);
  std::vector<float> l(n);
  for (auto& x : l) x = static_cast<float>(2.0 * rng.Normal());
  for (int i = 0; i < 40; ++i) l[rng.Below(n)] += 4.0f + 8.0f * static_cast<float>(rng.Uniform());
  return l;
}

// The first `size` ids of `ranked`, sorted.
std::vector<int32_t> Prefix(const std::vector<Candidate>& ranked, size_t size) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < size && i < ranked.size(); ++i) ids.push_back(ranked[i].id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Where the cumulative softmax mass of `ranked` first reaches p (double exps).
size_t ReferenceCut(const std::vector<Candidate>& ranked, double p) {
  double mx = -INFINITY, z = 0;
  for (const auto& x : ranked) mx = std::max(mx, static_cast<double>(x.logit));
  for (const auto& x : ranked) z += std::exp(x.logit - mx);
  double cum = 0;
  size_t n = 0;
  while (n < ranked.size() && cum < p * z) cum += std::exp(ranked[n++].logit - mx);
  return n;
}

TEST(TopP, AtQwenVocabularySizeKeepsTheReferenceNucleus) {
  for (uint64_t seed : {1, 2, 3}) {
    const std::vector<float> l = LanguageModelLogits(152064, seed);
    for (float p : {0.5f, 0.9f, 0.95f, 0.99f}) {
      const Candidates c = TopP(Make(l), p);
      std::vector<Candidate> ref = Make(l).items;
      std::sort(ref.begin(), ref.end(), Before);
      EXPECT_NEAR(static_cast<double>(c.items.size()), static_cast<double>(ReferenceCut(ref, p)),
                  2.0)
          << "seed " << seed << " p " << p;
      // Exactly the top of the ranking, whatever its size.
      EXPECT_EQ(SortedIds(c), Prefix(ref, c.items.size())) << "seed " << seed << " p " << p;
    }
  }
}

TEST(TypicalP, AtQwenVocabularySizeKeepsTheReferenceSet) {
  for (uint64_t seed : {4, 5}) {
    const std::vector<float> l = LanguageModelLogits(152064, seed);
    // Reference: rank by |logit - E[logit]| under the softmax (ties by Before).
    double mx = -INFINITY, z = 0, zx = 0;
    for (float x : l) mx = std::max(mx, static_cast<double>(x));
    for (float x : l) {
      z += std::exp(x - mx);
      zx += std::exp(x - mx) * x;
    }
    const float center = static_cast<float>(zx / z);
    for (float p : {0.5f, 0.95f}) {
      const Candidates c = TypicalP(Make(l), p);
      std::vector<Candidate> ref = Make(l).items;
      std::sort(ref.begin(), ref.end(), [&](const Candidate& a, const Candidate& b) {
        const float ka = std::abs(a.logit - center), kb = std::abs(b.logit - center);
        return ka < kb || (ka == kb && Before(a, b));
      });
      EXPECT_NEAR(static_cast<double>(c.items.size()), static_cast<double>(ReferenceCut(ref, p)),
                  2.0)
          << "seed " << seed << " p " << p;
      EXPECT_EQ(SortedIds(c), Prefix(ref, c.items.size())) << "seed " << seed << " p " << p;
    }
  }
}

TEST(MinP, CutsRelativeToTheMostLikely) {
  // p_i / p_max = e^-i.
  EXPECT_EQ(Ids(MinP(Make({0, -1, -2, -3}), 0.3f)), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(Ids(MinP(Make({-3, 0, -2, -1}), 0.1f)), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(MinP(Make({0, -1}), 0.0f).items.size(), 2u);
}

TEST(TypicalP, KeepsTokensNearestTheMeanSurprise) {
  // p = {0.5, 0.2, 0.2, 0.1}: H = 1.2206, surprises 0.69, 1.61, 1.61, 2.30;
  // distance to H: 0.53, 0.39, 0.39, 1.08. Ranked: 1, 2, 0, 3.
  const std::vector<float> l = LogProbs({0.5, 0.2, 0.2, 0.1});
  EXPECT_EQ(SortedIds(TypicalP(Make(l), 0.3f)), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(SortedIds(TypicalP(Make(l), 0.5f)), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(TypicalP(Make(l), 1.0f).items.size(), 4u);
}

TEST(Penalties, FollowTheDocumentedFormula) {
  const Penalties p{.repetition = 2.0f, .presence = 0.5f, .frequency = 0.25f};
  EXPECT_FLOAT_EQ(PenalizedLogit(2.0f, 2, p), 2.0f / 2 - 0.5f - 0.5f);
  EXPECT_FLOAT_EQ(PenalizedLogit(-2.0f, 1, p), -2.0f * 2 - 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(PenalizedLogit(3.0f, 0, p), 3.0f);
  const std::vector<TokenCount> counts = {{0, 2}, {2, 1}, {99, 4}};
  const Candidates a = ApplyPenalties(Make({2.0f, 1.0f, -2.0f}), counts, p);
  EXPECT_FLOAT_EQ(a.items[0].logit, 0.0f);
  EXPECT_FLOAT_EQ(a.items[1].logit, 1.0f);
  EXPECT_FLOAT_EQ(a.items[2].logit, -4.75f);
  // The same on a set in another order.
  Candidates s = SortByLogit(Make({2.0f, 1.0f, -2.0f}));
  s = ApplyPenalties(std::move(s), counts, p);
  std::map<int32_t, float> by_id;
  for (auto& x : s.items) by_id[x.id] = x.logit;
  EXPECT_FLOAT_EQ(by_id[0], 0.0f);
  EXPECT_FLOAT_EQ(by_id[2], -4.75f);
}

TEST(MirostatV2, CutsBySurpriseAndKeepsAtLeastOne) {
  // p = {0.5, 0.25, 0.125, 0.125}: surprises 1, 2, 3, 3 bits.
  const std::vector<float> l = LogProbs({0.5, 0.25, 0.125, 0.125});
  EXPECT_EQ(Ids(MirostatV2(Make(l), 2.5f)), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(Ids(MirostatV2(Make(l), 3.01f)).size(), 4u);
  EXPECT_EQ(Ids(MirostatV2(Make(l), 0.1f)), (std::vector<int32_t>{0}));
  // mu moves against the error: surprise 3 bits > tau 2 lowers mu by eta.
  EXPECT_NEAR(MirostatV2Update(4.0f, 2.0f, 1.0f, 0.125), 3.0f, 1e-6);
  EXPECT_NEAR(MirostatV2Update(4.0f, 2.0f, 0.5f, 0.5), 4.5f, 1e-6);
}

TEST(Draw, ReportsProbabilityAndEntropyOfTheDistribution) {
  const std::vector<double> p = {0.5, 0.25, 0.125, 0.125};
  const Candidates c = Make(LogProbs(p));
  const DrawResult d = Draw(c, 0.6);  // cumulative 0.5, 0.75: token 1
  EXPECT_EQ(d.id, 1);
  EXPECT_NEAR(d.probability, 0.25, 1e-6);
  EXPECT_NEAR(d.entropy_nats, 1.75 * std::log(2.0), 1e-5);
  EXPECT_EQ(d.n_candidates, 4u);
  EXPECT_EQ(Draw(c, 0.0).id, 0);
  EXPECT_EQ(Draw(c, 0.999999).id, 3);
  EXPECT_EQ(Draw(Make({4.0f}), 0.3).id, 0);
}

TEST(Draw, FollowsTheSoftmaxOverManyBlocks) {
  // 1000 candidates (4 exp blocks); a chi-square at alpha = 0.001 over the
  // pooled cells.
  std::vector<float> l(1000);
  util::Rng rng(17);
  for (auto& x : l) x = static_cast<float>(2.0 * rng.Normal());
  const Candidates c = Make(l);
  std::vector<std::pair<int32_t, double>> il;
  for (auto& x : c.items) il.push_back({x.id, x.logit});
  const int64_t n = 200000;
  const auto r = ChiSquare(DrawMany(c, n, 3), Softmax(il, 1.0), n);
  EXPECT_TRUE(r.Passes()) << r.statistic << " >= " << r.critical << " df " << r.df;
}

// After each processor, draws follow softmax over what the processor kept.
TEST(Draw, FollowsTheDistributionLeftByEachProcessor) {
  const std::vector<float> l = {2.0f, 1.5f, 1.2f, 0.7f, 0.3f, 0.0f, -0.4f, -1.0f, -2.0f, -3.5f};
  struct Case {
    const char* name;
    Candidates c;
  };
  const std::vector<Case> cases = {
      {"top-k 4", TopK(Make(l), 4)},
      {"top-p 0.8", TopP(Make(l), 0.8f)},
      {"min-p 0.2", MinP(Make(l), 0.2f)},
      {"typical-p 0.6", TypicalP(Make(l), 0.6f)},
      {"temperature 1.7", Temperature(Make(l), 1.7f)},
      {"mirostat mu 2.5", MirostatV2(Make(l), 2.5f)},
  };
  uint64_t seed = 100;
  for (const Case& k : cases) {
    std::vector<std::pair<int32_t, double>> il;
    for (auto& x : k.c.items) il.push_back({x.id, x.logit});
    const int64_t n = 60000;
    const auto r = ChiSquare(DrawMany(k.c, n, ++seed), Softmax(il, 1.0), n);
    EXPECT_TRUE(r.Passes()) << k.name << ": " << r.statistic << " >= " << r.critical;
  }
}

}  // namespace
}  // namespace strata::sampling
