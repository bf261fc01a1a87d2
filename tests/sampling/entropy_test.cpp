#include "sampling/entropy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "util/random.h"

namespace strata::sampling {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Reference entropy of softmax(z / T) in double with std::exp.
double RefEntropy(const std::vector<Candidate>& c, double t) {
  double mx = -kInf;
  for (auto& x : c) mx = std::max<double>(mx, x.logit);
  size_t ties = 0;
  for (auto& x : c) ties += x.logit == mx;
  if (t == kInf || ties == c.size()) return std::log(static_cast<double>(c.size()));
  if (t == 0) return std::log(static_cast<double>(ties));
  double z = 0;
  for (auto& x : c) z += std::exp((x.logit - mx) / t);
  double h = 0;
  for (auto& x : c) {
    const double p = std::exp((x.logit - mx) / t) / z;
    if (p > 0) h -= p * std::log(p);
  }
  return h;
}

struct Generator {
  std::string name;
  std::function<std::vector<float>(util::Rng&)> make;
};

// Random finite logits (and -inf masks), including extreme ranges.
std::vector<Generator> Generators() {
  const float ninf = -std::numeric_limits<float>::infinity();
  return {
      {"gaussian, scale 1e-3..1e4",
       [](util::Rng& r) {
         std::vector<float> v(2 + r.Below(3000));
         const double scale = std::pow(10.0, r.UniformFloat(-3, 4));
         for (auto& x : v) x = static_cast<float>(scale * r.Normal());
         return v;
       }},
      {"magnitudes spanning 1e-3..1e4",
       [](util::Rng& r) {
         std::vector<float> v(2 + r.Below(2000));
         for (auto& x : v) {
           x = static_cast<float>(std::pow(10.0, r.UniformFloat(-3, 4)) * (r.Below(2) ? 1 : -1));
         }
         return v;
       }},
      {"mostly -inf",
       [ninf](util::Rng& r) {
         std::vector<float> v(5000, ninf);
         const size_t k = 1 + r.Below(40);
         for (size_t i = 0; i < k; ++i) v[r.Below(v.size())] = r.UniformFloat(-10, 10);
         return v;
       }},
      {"single finite entry",
       [ninf](util::Rng& r) {
         std::vector<float> v(100, ninf);
         v[r.Below(100)] = r.UniformFloat(-5, 5);
         return v;
       }},
      {"ties",
       [](util::Rng& r) {
         std::vector<float> v(2 + r.Below(500));
         for (auto& x : v) x = static_cast<float>(r.Below(4));
         return v;
       }},
      {"two far clusters",
       [](util::Rng& r) {
         std::vector<float> v(4 + r.Below(1000));
         for (size_t i = 0; i < v.size(); ++i) {
           v[i] = static_cast<float>(i % 2 ? 1e-3 * r.Normal() : -1e4 + r.Normal());
         }
         return v;
       }},
      {"one dominant, flat tail",
       [](util::Rng& r) {
         std::vector<float> v(2 + r.Below(20000));
         for (auto& x : v) x = static_cast<float>(0.01 * r.Normal());
         v[0] = 20.0f;
         return v;
       }},
  };
}

TEST(SolveTemperature, ReachesTheTargetWithinAHundredthInTwentyIterations) {
  util::Rng rng(2024);
  int worst_iterations = 0;
  int cases = 0;
  for (const Generator& g : Generators()) {
    for (int trial = 0; trial < 150; ++trial) {
      const Candidates c = FromLogits(g.make(rng));
      ASSERT_FALSE(c.items.empty());
      const double ln_n = std::log(static_cast<double>(c.items.size()));
      const double ln_k = RefEntropy(c.items, 0);
      const double target = std::max(0.0, rng.Uniform() * (ln_n + 0.6) - 0.3);
      const TemperatureSolution s = SolveTemperature(c.items, target);
      const std::string what = g.name + " trial " + std::to_string(trial) + " n " +
                               std::to_string(c.items.size()) + " target " + std::to_string(target);
      ++cases;
      worst_iterations = std::max(worst_iterations, s.iterations);
      EXPECT_LE(s.iterations, 20) << what;
      EXPECT_TRUE(s.converged) << what;
      // The reported entropy is the true entropy at the reported temperature.
      EXPECT_NEAR(s.entropy_nats, RefEntropy(c.items, s.temperature), 1e-3) << what;
      if (target > ln_n + 1e-3) {
        EXPECT_EQ(s.clamp, EntropyClamp::kAboveMax) << what;
        EXPECT_NEAR(s.entropy_nats, ln_n, 1e-9) << what;
      } else if (target < ln_k - 1e-3) {
        EXPECT_EQ(s.clamp, EntropyClamp::kBelowGreedy) << what;
        EXPECT_NEAR(s.entropy_nats, ln_k, 1e-9) << what;
      } else {
        EXPECT_EQ(s.clamp, EntropyClamp::kNone) << what;
        EXPECT_LT(std::abs(s.entropy_nats - target), 0.01) << what;
      }
    }
  }
  std::printf("solver: %d cases, worst %d iterations\n", cases, worst_iterations);
}

TEST(SolveTemperature, HandlesAFullSizeVocabulary) {
  util::Rng rng(7);
  std::vector<float> v(152064);
  for (auto& x : v) x = static_cast<float>(2.5 * rng.Normal());
  const Candidates c = FromLogits(v);
  for (double target : {0.05, 0.5, 2.0, 5.0, 9.0, 11.9}) {
    const TemperatureSolution s = SolveTemperature(c.items, target);
    EXPECT_LE(s.iterations, 20) << target;
    EXPECT_LT(std::abs(s.entropy_nats - target), 0.01) << target;
  }
}

TEST(SolveTemperature, ReportsClampsAtBothEnds) {
  // Three tokens tied at the top: the greedy limit is ln 3.
  const Candidates c = FromLogits(std::vector<float>{1, 1, 1, 0, -1});
  const TemperatureSolution low = SolveTemperature(c.items, 0.5);
  EXPECT_EQ(low.clamp, EntropyClamp::kBelowGreedy);
  EXPECT_EQ(low.temperature, 0.0);
  EXPECT_NEAR(low.entropy_nats, std::log(3.0), 1e-12);
  const TemperatureSolution high = SolveTemperature(c.items, 2.0);
  EXPECT_EQ(high.clamp, EntropyClamp::kAboveMax);
  EXPECT_EQ(high.temperature, kInf);
  EXPECT_NEAR(high.entropy_nats, std::log(5.0), 1e-12);
  const TemperatureSolution one = SolveTemperature(FromLogits(std::vector<float>{3}).items, 1.0);
  EXPECT_EQ(one.clamp, EntropyClamp::kAboveMax);
  EXPECT_EQ(one.entropy_nats, 0.0);
  EXPECT_EQ(EntropyClampName(EntropyClamp::kBelowGreedy), "below_greedy");
}

TEST(EntropyAtTemperature, IsMonotoneInTemperature) {
  util::Rng rng(3);
  std::vector<float> v(300);
  for (auto& x : v) x = static_cast<float>(3 * rng.Normal());
  const Candidates c = FromLogits(v);
  double prev = EntropyAtTemperature(c.items, 0);
  for (double t = 0.01; t < 100; t *= 1.3) {
    const double h = EntropyAtTemperature(c.items, t);
    EXPECT_GE(h, prev - 1e-6) << t;
    EXPECT_NEAR(h, RefEntropy(c.items, t), 1e-4) << t;
    prev = h;
  }
  EXPECT_NEAR(EntropyAtTemperature(c.items, kInf), std::log(300.0), 1e-12);
}

// The tail rule, checked against a brute-force reference: for every prefix
// length j of the ranked candidates, solve T_j by bisection in double and test
// whether the last token's surprise is <= H* + m.
struct RefRule {
  size_t j_star = 0;
  std::vector<double> margin;  // (H* + m) - surprise of the last token, per j (index j)
};

RefRule ReferenceRule(std::vector<Candidate> c, double target, double m) {
  std::sort(c.begin(), c.end(), Before);
  RefRule r;
  r.margin.assign(c.size() + 1, 0);
  const size_t j_min = static_cast<size_t>(std::exp(target)) + 1;
  for (size_t j = j_min; j <= c.size(); ++j) {
    std::vector<Candidate> pre(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(j));
    double lo = -60, hi = 60;  // ln T
    for (int it = 0; it < 64; ++it) {
      const double mid = 0.5 * (lo + hi);
      (RefEntropy(pre, std::exp(mid)) > target ? hi : lo) = mid;
    }
    const double t = std::exp(0.5 * (lo + hi));
    double z = 0;
    const double mx = pre[0].logit;
    for (auto& x : pre) z += std::exp((x.logit - mx) / t);
    const double surprise = std::log(z) - (pre[j - 1].logit - mx) / t;
    r.margin[j] = target + m - surprise;
    if (r.margin[j] >= 0) r.j_star = j;
  }
  if (r.j_star == 0) r.j_star = j_min;
  return r;
}

TEST(EntropyTarget, KeepsTheLongestPrefixThatPassesTheRule) {
  util::Rng rng(99);
  for (int trial = 0; trial < 80; ++trial) {
    std::vector<float> v(3 + rng.Below(120));
    const double scale = std::pow(10.0, rng.UniformFloat(-1, 1.5));
    for (auto& x : v) x = static_cast<float>(scale * rng.Normal());
    const Candidates c = FromLogits(v);
    const double ln_n = std::log(static_cast<double>(v.size()));
    const double target = rng.Uniform() * (ln_n - 0.05);
    const double m = 0.5 + 3 * rng.Uniform();
    const EntropyTargetResult e = EntropyTarget(c, target, m);
    const std::string what = "trial " + std::to_string(trial) + " n " + std::to_string(v.size()) +
                             " target " + std::to_string(target) + " m " + std::to_string(m);
    if (static_cast<size_t>(std::exp(target)) + 1 > v.size()) continue;  // nothing to cut
    const RefRule ref = ReferenceRule(c.items, target, m);
    const size_t got = e.kept.items.size();
    if (got != ref.j_star) {
      // Only a borderline prefix may differ (solver tolerance 1e-3 nats).
      for (size_t j = std::min(got, ref.j_star) + 1; j <= std::max(got, ref.j_star); ++j) {
        EXPECT_LT(std::abs(ref.margin[j]), 0.02) << what << " j " << j;
      }
    }
    EXPECT_EQ(e.solution.clamp, EntropyClamp::kNone) << what;
    EXPECT_LT(std::abs(e.solution.entropy_nats - target), 0.01) << what;
    EXPECT_LT(std::abs(Entropy(e.kept) - target), 0.01) << what;
    EXPECT_LE(static_cast<double>(got), std::exp(target + m) + 1e-9) << what;
    // The kept set is the top of the ranking (in rank order unless it is
    // every candidate, which needs no ranking).
    std::vector<Candidate> sorted = c.items;
    std::sort(sorted.begin(), sorted.end(), Before);
    std::vector<int32_t> want_ids, got_ids;
    for (size_t i = 0; i < got; ++i) {
      want_ids.push_back(sorted[i].id);
      got_ids.push_back(e.kept.items[i].id);
    }
    if (got == v.size()) {
      std::sort(want_ids.begin(), want_ids.end());
      std::sort(got_ids.begin(), got_ids.end());
    }
    EXPECT_EQ(got_ids, want_ids) << what;
  }
}

TEST(EntropyTarget, TracksTheTargetOnAFullVocabulary) {
  util::Rng rng(12);
  std::vector<float> v(152064);
  for (auto& x : v) x = static_cast<float>(2.5 * rng.Normal());
  v[17] = 14.0f;
  for (double target : {0.3, 1.0, 2.0, 3.0, 4.0}) {
    const EntropyTargetResult e = EntropyTarget(FromLogits(v), target, 3.0);
    EXPECT_EQ(e.solution.clamp, EntropyClamp::kNone) << target;
    EXPECT_LT(std::abs(Entropy(e.kept) - target), 0.01) << target;
    EXPECT_LE(static_cast<double>(e.kept.items.size()), std::exp(target + 3.0)) << target;
    // Every kept token clears the probability floor e^-(H* + m).
    for (double p : Probabilities(e.kept)) EXPECT_GE(p, std::exp(-(target + 3.0 + 0.01))) << target;
  }
}

TEST(EntropyTarget, ClampsAndReportsUnreachableTargets) {
  const float ninf = -std::numeric_limits<float>::infinity();
  // A single finite entry: entropy 0 whatever the target.
  const EntropyTargetResult one =
      EntropyTarget(FromLogits(std::vector<float>{ninf, 2, ninf}), 1.5, 3);
  ASSERT_EQ(one.kept.items.size(), 1u);
  EXPECT_EQ(one.kept.items[0].id, 1);
  EXPECT_EQ(one.solution.clamp, EntropyClamp::kAboveMax);
  // Below the greedy limit: the three tied tokens, uniformly.
  const EntropyTargetResult low =
      EntropyTarget(FromLogits(std::vector<float>{5, 1, 5, 5, 0}), 0.2, 3);
  EXPECT_EQ(low.solution.clamp, EntropyClamp::kBelowGreedy);
  EXPECT_EQ(low.kept.items.size(), 3u);
  EXPECT_NEAR(Entropy(low.kept), std::log(3.0), 1e-9);
  // Above ln(n): uniform over every candidate.
  const EntropyTargetResult high =
      EntropyTarget(FromLogits(std::vector<float>{3, 2, 1, 0}), 2.0, 3);
  EXPECT_EQ(high.solution.clamp, EntropyClamp::kAboveMax);
  EXPECT_EQ(high.kept.items.size(), 4u);
  EXPECT_NEAR(Entropy(high.kept), std::log(4.0), 1e-9);
  // Target 0 with a unique maximum: greedy, no clamp.
  const EntropyTargetResult zero =
      EntropyTarget(FromLogits(std::vector<float>{3, 2, 1, 0}), 0.0, 3);
  EXPECT_EQ(zero.solution.clamp, EntropyClamp::kNone);
  EXPECT_LT(Entropy(zero.kept), 0.01);
}

}  // namespace
}  // namespace strata::sampling
