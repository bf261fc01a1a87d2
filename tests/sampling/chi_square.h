// tests/sampling/chi_square.h — goodness-of-fit helpers for the sampling tests.
//
// Every chi-square test in tests/sampling/ runs at significance level
// alpha = 0.001: a correct sampler fails a given test with probability 0.1%
// for a random seed. Seeds are fixed, so the suite is deterministic.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

namespace strata::sampling::testing {

inline constexpr double kAlpha = 0.001;

// Upper alpha = 0.001 quantile of chi-square with df degrees of freedom
// (Wilson-Hilferty; within 1% for df >= 1 at this level).
inline double ChiSquareCritical(int df) {
  const double z = 3.090232306;  // standard normal 0.999 quantile
  const double k = df;
  const double a = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

struct ChiSquareResult {
  double statistic = 0;
  int df = 0;
  double critical = 0;
  bool unexpected = false;  // a token with expected probability 0 was drawn
  bool Passes() const { return !unexpected && statistic < critical; }
};

// Tests observed counts (token -> count over n draws) against expected
// probabilities (token -> p). Cells with expected count < 5 are pooled.
inline ChiSquareResult ChiSquare(const std::map<int32_t, int64_t>& observed,
                                 const std::map<int32_t, double>& expected, int64_t n) {
  ChiSquareResult r;
  for (const auto& [id, c] : observed) {
    if (!expected.contains(id) || expected.at(id) <= 0) r.unexpected = true;
  }
  double pooled_e = 0, pooled_o = 0;
  int cells = 0;
  for (const auto& [id, p] : expected) {
    const double e = p * static_cast<double>(n);
    const double o = observed.contains(id) ? static_cast<double>(observed.at(id)) : 0.0;
    if (e < 5) {
      pooled_e += e;
      pooled_o += o;
      continue;
    }
    r.statistic += (o - e) * (o - e) / e;
    ++cells;
  }
  if (pooled_e > 0) {
    r.statistic += (pooled_o - pooled_e) * (pooled_o - pooled_e) / std::max(pooled_e, 1e-12);
    ++cells;
  }
  r.df = std::max(1, cells - 1);
  r.critical = ChiSquareCritical(r.df);
  return r;
}

}  // namespace strata::sampling::testing
