#include "loadgen/schedule.h"

#include <cmath>

#include "util/random.h"

namespace strata::loadgen {
namespace {

// One exponential gap; 1 - U is in (0, 1], so the log is finite.
double NextGap(util::Rng& rng, double rate_per_s) {
  return -std::log(1.0 - rng.Uniform()) / rate_per_s;
}

}  // namespace

std::vector<double> PoissonArrivals(double rate_per_s, int64_t count, uint64_t seed) {
  std::vector<double> out;
  if (!(rate_per_s > 0) || count <= 0) return out;
  out.reserve(static_cast<size_t>(count));
  util::Rng rng(seed);
  double t = 0;
  for (int64_t i = 0; i < count; ++i) {
    t += NextGap(rng, rate_per_s);
    out.push_back(t);
  }
  return out;
}

std::vector<double> PoissonArrivalsUntil(double rate_per_s, double duration_s, uint64_t seed) {
  std::vector<double> out;
  if (!(rate_per_s > 0) || !(duration_s > 0)) return out;
  util::Rng rng(seed);
  double t = NextGap(rng, rate_per_s);
  while (t < duration_s) {
    out.push_back(t);
    t += NextGap(rng, rate_per_s);
  }
  return out;
}

}  // namespace strata::loadgen
