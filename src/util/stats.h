// util/stats.h — small statistics over counts and samples, shared by the
// components that judge a rate from what they observed (the semantic tier's
// false-hit bound, the canary's gates).
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <span>
#include <utility>

namespace strata::util {

// The Wilson score interval (95 %) of k successes in n trials: {lower,
// upper}, within [0, 1]; {0, 1} when n is 0.
std::pair<double, double> WilsonInterval(size_t k, size_t n);

// The q-quantile (q in [0, 1]) of `values` by the nearest-rank method (the
// smallest value with at least q·n values at or below it); `values` is
// reordered. 0 for no values.
double NearestRankQuantile(std::span<double> values, double q);

}  // namespace strata::util
