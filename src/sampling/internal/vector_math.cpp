#include "sampling/internal/vector_math.h"

#include <cstring>

#include "sampling/internal/fast_exp.h"

namespace strata::sampling::internal {

// Clones per ISA; see the header for why they agree bit for bit.
#define STRATA_SAMPLING_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace {
constexpr int kLanes = 8;
}  // namespace

STRATA_SAMPLING_CLONES
ExpSums SumExp(std::span<const Candidate> c, float shift) {
  ExpSums s;
  size_t i = 0;
  const size_t n = c.size();
  while (i < n) {
    const size_t end = i + kExpBlock < n ? i + kExpBlock : n;
    float z[kLanes] = {}, zx[kLanes] = {};
    for (; i + kLanes <= end; i += kLanes) {
      float x[kLanes], w[kLanes];
      for (int j = 0; j < kLanes; ++j) x[j] = Gap(c[i + j].logit, shift);
      for (int j = 0; j < kLanes; ++j) w[j] = FastExp(x[j]);
      for (int j = 0; j < kLanes; ++j) {
        z[j] += w[j];
        zx[j] += w[j] * x[j];
      }
    }
    for (; i < end; ++i) {
      const float x = Gap(c[i].logit, shift);
      const float w = FastExp(x);
      z[0] += w;
      zx[0] += w * x;
    }
    for (int j = 0; j < kLanes; ++j) {
      s.z += z[j];
      s.zx += zx[j];
    }
  }
  return s;
}

STRATA_SAMPLING_CLONES
ExpMoments SumMoments(std::span<const Candidate> c, float shift, float beta) {
  ExpMoments s;
  size_t i = 0;
  const size_t n = c.size();
  while (i < n) {
    const size_t end = i + kExpBlock < n ? i + kExpBlock : n;
    float z[kLanes] = {};
    double zx[kLanes] = {}, zxx[kLanes] = {};
    for (; i + kLanes <= end; i += kLanes) {
      float x[kLanes], w[kLanes];
      for (int j = 0; j < kLanes; ++j) x[j] = Gap(c[i + j].logit, shift);
      for (int j = 0; j < kLanes; ++j) w[j] = FastExp(beta * x[j]);
      for (int j = 0; j < kLanes; ++j) {
        const double wx = static_cast<double>(w[j]) * x[j];
        z[j] += w[j];
        zx[j] += wx;
        zxx[j] += wx * x[j];
      }
    }
    for (; i < end; ++i) {
      const float x = Gap(c[i].logit, shift);
      const float w = FastExp(beta * x);
      const double wx = static_cast<double>(w) * x;
      z[0] += w;
      zx[0] += wx;
      zxx[0] += wx * x;
    }
    for (int j = 0; j < kLanes; ++j) {
      s.z += z[j];
      s.zx += zx[j];
      s.zxx += zxx[j];
    }
  }
  return s;
}

STRATA_SAMPLING_CLONES
float MaxOf(std::span<const Candidate> c) {
  float m[kLanes];
  for (int j = 0; j < kLanes; ++j) m[j] = c[0].logit;
  size_t i = 0;
  for (; i + kLanes <= c.size(); i += kLanes) {
    for (int j = 0; j < kLanes; ++j) m[j] = c[i + j].logit > m[j] ? c[i + j].logit : m[j];
  }
  for (; i < c.size(); ++i) m[0] = c[i].logit > m[0] ? c[i].logit : m[0];
  float r = m[0];
  for (int j = 1; j < kLanes; ++j) r = m[j] > r ? m[j] : r;
  return r;
}

STRATA_SAMPLING_CLONES
void ExpWeights(std::span<const Candidate> c, float shift, float* w) {
  for (size_t i = 0; i < c.size(); ++i) w[i] = FastExp(Gap(c[i].logit, shift));
}

STRATA_SAMPLING_CLONES
LogitScan ScanLogits(std::span<const float> l) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // GCC vector types: explicit lanes that every clone maps onto its
  // registers (the loop vectoriser will not turn a float max into maxps
  // without -ffinite-math-only). A max (+inf if any logit is) and a NaN mask.
  typedef float V4f __attribute__((vector_size(16)));
  typedef int32_t V4i __attribute__((vector_size(16)));
  V4f m0 = {-kInf, -kInf, -kInf, -kInf}, m1 = m0;
  V4i nan0 = {}, nan1 = {};
  size_t i = 0;
  for (; i + 8 <= l.size(); i += 8) {
    V4f x0, x1;
    std::memcpy(&x0, l.data() + i, sizeof x0);
    std::memcpy(&x1, l.data() + i + 4, sizeof x1);
    nan0 |= x0 != x0;
    nan1 |= x1 != x1;
    m0 = x0 > m0 ? x0 : m0;
    m1 = x1 > m1 ? x1 : m1;
  }
  bool any_nan = false;
  float mx = -kInf;
  for (; i < l.size(); ++i) {
    any_nan |= l[i] != l[i];
    mx = l[i] > mx ? l[i] : mx;
  }
  for (int j = 0; j < 4; ++j) {
    any_nan |= (nan0[j] | nan1[j]) != 0;
    mx = m0[j] > mx ? m0[j] : mx;
    mx = m1[j] > mx ? m1[j] : mx;
  }
  LogitScan s;
  s.invalid = any_nan || mx == kInf;
  s.any_finite = mx > -kInf;
  s.max = mx;
  return s;
}

}  // namespace strata::sampling::internal
