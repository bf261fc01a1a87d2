// util/random.h — the injected random source.
//
// Promise: a small, fast, seedable generator (xoshiro256**, seeded through
// splitmix64) whose sequence is fixed by this file, not by the standard
// library, so a seed means the same draws on every platform and release.
//
// Threading: a value type; thread-compatible (one Rng per thread or request).
#pragma once

#include <cstdint>

namespace strata::util {

class Rng {
 public:
  explicit Rng(uint64_t seed) {
    uint64_t x = seed;
    for (auto& s : s_) s = SplitMix64(x);
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1) with 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform float in [lo, hi).
  float UniformFloat(float lo, float hi) { return lo + static_cast<float>(Uniform()) * (hi - lo); }
  // Uniform integer in [0, n), n > 0 (Lemire's nearly-divisionless method).
  uint64_t Below(uint64_t n) {
    __extension__ typedef unsigned __int128 U128;
    U128 m = static_cast<U128>(Next()) * n;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = static_cast<U128>(Next()) * n;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }
  // Standard normal (Box-Muller; one value per call).
  double Normal();

  static uint64_t SplitMix64(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  static uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace strata::util
