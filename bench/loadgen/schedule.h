// bench/loadgen/schedule.h — open-loop arrival schedules.
//
// Promise: a Poisson process of the given rate as a list of arrival offsets
// (seconds from the start of the run, non-decreasing, first > 0), fixed by the
// seed: the inter-arrival gaps are -ln(1 - U) / rate with U drawn from
// util::Rng (xoshiro256**, 53-bit uniforms), so a seed gives the same schedule
// on every platform and standard library.
//
// Pure functions. Thread-compatible.
#pragma once

#include <cstdint>
#include <vector>

namespace strata::loadgen {

// The first `count` arrivals of a Poisson process of `rate_per_s` (> 0).
std::vector<double> PoissonArrivals(double rate_per_s, int64_t count, uint64_t seed);

// Every arrival of the same process strictly before `duration_s`.
std::vector<double> PoissonArrivalsUntil(double rate_per_s, double duration_s, uint64_t seed);

}  // namespace strata::loadgen
