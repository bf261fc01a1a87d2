// tests/kernels/kernel_bounds.h (included as "kernels/kernel_bounds.h": tests/ is
// an include root) — the error bounds the kernel tests hold every
// weight type's dot product to (tests/kernels/kernels_test.cpp, and the table
// walk in tests/kernels/type_traits_test.cpp), with the helpers that build a
// case and decode its weights independently of the library.
//
// Error bounds (u = 2^-24, γ(k) = k·u / (1 - k·u)):
//  - F32, F16, BF16 weights (F32 activations): the weights are exact in float,
//    so |dot - ref| ≤ γ(n+1) · Σ|w_i x_i|.
//  - Q8_0, Q4_0, Q5_0 weights (Q8 activations): activation quantization moves
//    each x_i by at most d_b/2 (d_b the block's activation scale), plus
//    rounding of the per-block scale products and their sum:
//    |dot - ref| ≤ Σ_i |w_i|·d_b/2 + γ(n/32 + 2) · Σ_b |s_b · dw_b · da_b| + γ(n+1)·Σ|w_i x_i|.
//  - The weights with two parts, w_i = A_i − B_i (dequantized with one rounding,
//    w_i = fl(A_i − B_i)); a_i are the int8 activations, x_i ≈ da_b·a_i:
//    · Q4_K, Q5_K, Q6_K (Q8K activations, blocks of 256, nb = n/256):
//      A_i = d·sc_j·q_i, B_i = dmin·m_j (Q6_K: A_i = d·sc_j·(q_i − 32), B_i = 0).
//      The kernels sum both parts exactly in integers per super-block b
//      (I_b = Σ sc_j·q_i·a_i, M_b = Σ m_j·a_i, split over up to 16 int32 lanes),
//      then per lane in float acc += (d_b·da_b)·float(I_b) and
//      acc −= (dmin_b·da_b)·float(M_b) for b in order, and sum the lanes at the
//      end. Each part of each term carries ≤ 2 roundings of its own (scale
//      product, int→float; the product is fused into the add), ≤ 2·nb in its
//      lane's running sum and ≤ 4 in the final 16-lane reduction (the scalar
//      reference: 3 and 2·nb), so with k = 2·nb + 6:
//    · Q4_1, Q5_1 (Q8 activations, nb = n/32): A_i = d·q_i, B_i = −m. Per block
//      the kernels add (d·da)·float(Σ q·a) and m·(da·float(Σ a)): ≤ 2 roundings
//      per term, ≤ 2·nb in the running sum, ≤ 3 in an 8-lane reduction:
//      k = 2·nb + 5 covers it.
//    Against the float64 reference Σ w_i·x_i over the dequantized weights:
//    |dot - ref| ≤ Σ_i |w_i|·da_b/2                           activation rounding
//                + γ(k) · Σ_i (|A_i| + |B_i|)·da_b·|a_i|          ≥ Σ over the lane parts of each
//                term
//                + γ(n+1)·Σ|w_i x_i| + γ(1)·Σ|w_i x_i|          as above, plus w_i's rounding
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/internal/blocks.h"
#include "kernels/kernels.h"
#include "util/random.h"

namespace strata::testing {

using kernels::ActFormat;
using kernels::ActFormatFor;
using kernels::DequantizeRow;
using kernels::HalfToFloat;
using kernels::QuantizeRow;
using kernels::RowBytes;
using kernels::TensorType;
using kernels::internal::ActBlockQ8;
using kernels::internal::ActBlockQ8K;
using kernels::internal::BlockQ6_K;

inline bool IsKQuant(TensorType t) {
  return t == TensorType::kQ4_K || t == TensorType::kQ5_K || t == TensorType::kQ6_K;
}
// Weights whose error bound counts two parts A_i and B_i (see the top).
inline bool HasTwoParts(TensorType t) {
  return IsKQuant(t) || t == TensorType::kQ4_1 || t == TensorType::kQ5_1;
}

inline double Gamma(double k) {
  const double u = std::ldexp(1.0, -24);
  return k * u / (1 - k * u);
}

struct Case {
  std::vector<float> x;         // activations
  std::vector<uint8_t> w;       // encoded weight row
  std::vector<double> w_exact;  // dequantized weights (exact)
};

// A k-quant element decoded straight from the bytes, independently of the
// library's helpers: w = a − b with a = d·sc·q (Q6_K: d·sc·(q − 32)) and
// b = dmin·m (Q6_K: 0), both exact in double.
struct KParts {
  double a, b;
};
inline KParts DecodeLegacy(TensorType t, const uint8_t* row, int64_t i) {
  // Q4_1: f16 d, f16 m, qs[16] (20 bytes); Q5_0: f16 d, qh[4], qs[16] (22);
  // Q5_1: f16 d, f16 m, qh[4], qs[16] (24). Element e < 32: nibble of
  // qs[e % 16] (low for e < 16), fifth bit = bit e of the little-endian qh.
  const int64_t blk = i / 32;
  const int e = static_cast<int>(i % 32);
  const size_t bytes = t == TensorType::kQ4_1 ? 20 : t == TensorType::kQ5_0 ? 22 : 24;
  const uint8_t* base = row + static_cast<size_t>(blk) * bytes;
  uint16_t d16, m16 = 0;
  std::memcpy(&d16, base, 2);
  if (t != TensorType::kQ5_0) std::memcpy(&m16, base + 2, 2);
  const uint8_t* qh = base + (t == TensorType::kQ5_0 ? 2 : 4);
  const uint8_t* qs = base + (t == TensorType::kQ4_1 ? 4 : t == TensorType::kQ5_0 ? 6 : 8);
  int q = e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
  if (t != TensorType::kQ4_1) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    q |= static_cast<int>((h >> e) & 1) << 4;
  }
  const double d = HalfToFloat(d16);
  if (t == TensorType::kQ5_0) return {d * (q - 16), 0.0};
  return {d * q, -static_cast<double>(HalfToFloat(m16))};
}

inline KParts DecodeK(TensorType t, const uint8_t* row, int64_t i) {
  if (!IsKQuant(t)) return DecodeLegacy(t, row, i);
  const int64_t blk = i / 256;
  const int e = static_cast<int>(i % 256);
  if (t == TensorType::kQ6_K) {
    const auto& b = reinterpret_cast<const BlockQ6_K*>(row)[blk];
    const int h = e / 128, g = (e % 128) / 32, l = e % 32;
    const int lo = (b.ql[64 * h + 32 * (g % 2) + l] >> (g < 2 ? 0 : 4)) & 15;
    const int hi = (b.qh[32 * h + l] >> (2 * g)) & 3;
    return {static_cast<double>(HalfToFloat(b.d)) * b.scales[e / 16] * ((lo | (hi << 4)) - 32),
            0.0};
  }
  // Q4_K (144 bytes) and Q5_K (176) both start f16 d, f16 dmin, u8 scales[12];
  // Q5_K then has qh[32] before qs.
  const uint8_t* base = row + blk * (t == TensorType::kQ4_K ? 144 : 176);
  uint16_t d16, dmin16;
  std::memcpy(&d16, base, 2);
  std::memcpy(&dmin16, base + 2, 2);
  const uint8_t* sc = base + 4;
  const uint8_t* qh = base + 16;
  const uint8_t* qs = t == TensorType::kQ4_K ? base + 16 : base + 48;
  const int j = e / 32, l = e % 32;
  int scale, min;
  if (j < 4) {
    scale = sc[j] & 63;
    min = sc[j + 4] & 63;
  } else {
    scale = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
    min = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
  int q = (qs[32 * (j / 2) + l] >> (j % 2 == 0 ? 0 : 4)) & 15;
  if (t == TensorType::kQ5_K) q |= ((qh[l] >> j) & 1) << 4;
  return {static_cast<double>(HalfToFloat(d16)) * scale * q,
          static_cast<double>(HalfToFloat(dmin16)) * min};
}

inline Case MakeCase(TensorType t, int64_t n, util::Rng& rng, float scale) {
  Case c;
  c.x.resize(static_cast<size_t>(n));
  std::vector<float> wf(static_cast<size_t>(n));
  for (auto& v : c.x) v = static_cast<float>(rng.Normal()) * scale;
  for (auto& v : wf) v = static_cast<float>(rng.Normal()) * 0.05f;
  if (n >= 64) {  // include an all-zero block and a spike
    for (int i = 0; i < 32; ++i) wf[static_cast<size_t>(i)] = 0.0f;
    c.x[static_cast<size_t>(n / 2)] *= 100.0f;
  }
  c.w.resize(RowBytes(t, n));
  QuantizeRow(t, wf.data(), n, c.w.data());
  std::vector<float> deq(static_cast<size_t>(n));
  DequantizeRow(t, c.w.data(), n, deq.data());
  c.w_exact.assign(deq.begin(), deq.end());
  return c;
}

// The rounding count k of the two-part bound (see the top).
inline double TwoPartRoundings(TensorType t, int64_t n) {
  return IsKQuant(t) ? static_cast<double>(2 * (n / 256) + 6)
                     : static_cast<double>(2 * (n / 32) + 5);
}

// Element i of a quantized activation row (Q8 or Q8K): its block's d and its q.
struct ActScale {
  double d;
  int q;
};
inline ActScale ActAt(TensorType t, const std::vector<uint8_t>& act, int64_t i) {
  if (ActFormatFor(t) == ActFormat::kQ8K) {
    const ActBlockQ8K& ab = reinterpret_cast<const ActBlockQ8K*>(act.data())[i / 256];
    return {ab.d, ab.q[i % 256]};
  }
  const ActBlockQ8& ab = reinterpret_cast<const ActBlockQ8*>(act.data())[i / 32];
  return {ab.d, ab.q[i % 32]};
}

inline double Bound(TensorType t, const Case& c, const std::vector<uint8_t>& act, int64_t n) {
  double abs_terms = 0;
  for (int64_t i = 0; i < n; ++i)
    abs_terms += std::fabs(c.w_exact[static_cast<size_t>(i)] * c.x[static_cast<size_t>(i)]);
  double bound = Gamma(static_cast<double>(n + 1)) * abs_terms;
  if (ActFormatFor(t) == ActFormat::kQ8 && !HasTwoParts(t)) {
    const auto* blocks = reinterpret_cast<const ActBlockQ8*>(act.data());
    double block_terms = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
      double wabs = 0, s = 0;
      for (int i = 0; i < 32; ++i) {
        const double wi = c.w_exact[static_cast<size_t>(b * 32 + i)];
        wabs += std::fabs(wi);
        s += wi * blocks[b].q[i];
      }
      bound += wabs * blocks[b].d / 2;
      block_terms += std::fabs(s * blocks[b].d);
    }
    bound += Gamma(static_cast<double>(n / 32 + 2)) * block_terms;
  }
  if (HasTwoParts(t)) {
    double part_terms = 0;
    for (int64_t i = 0; i < n; ++i) {
      const ActScale as = ActAt(t, act, i);
      const KParts p = DecodeK(t, c.w.data(), i);
      bound += std::fabs(c.w_exact[static_cast<size_t>(i)]) * as.d / 2;
      part_terms += (std::fabs(p.a) + std::fabs(p.b)) * as.d * std::abs(as.q);
    }
    bound += Gamma(TwoPartRoundings(t, n)) * part_terms + Gamma(1) * abs_terms;
  }
  return bound * 1.0001 + 1e-30;
}

// How far quantize → dequantize may move element i of the row x (x.size() a
// multiple of 32 and of the type's block size): within a step of the type's
// grid over the elements that share its scale (K-quants: one step of the
// sub-block's span; Q8_0, Q4_1, Q5_1: half a step; Q4_0, Q5_0: a whole step,
// as the side opposite the largest magnitude ends a step short of it; the
// 32-blocks also allow for the f16 scale's rounding), the float types within
// their rounding. Negative for a type without a stated bound.
inline double RoundTripTolerance(TensorType t, const std::vector<float>& x, size_t i) {
  const auto span_of = [&](size_t group) {
    const auto first = x.begin() + static_cast<std::ptrdiff_t>(i / group * group);
    const auto last = first + static_cast<std::ptrdiff_t>(group);
    struct Span {
      double lo, hi, amax;
    } s{*std::min_element(first, last), *std::max_element(first, last), 0};
    for (auto it = first; it != last; ++it) s.amax = std::max(s.amax, std::fabs(double{*it}));
    return s;
  };
  switch (t) {
    case TensorType::kF32:
      return 0;
    case TensorType::kF16:  // 11 significant bits; subnormal halves are 2^-24 apart
      return std::max(std::fabs(x[i]) * std::ldexp(1.0, -11), std::ldexp(1.0, -25));
    case TensorType::kBF16:  // 8 significant bits
      return std::fabs(x[i]) * std::ldexp(1.0, -8);
    case TensorType::kQ4_K:
    case TensorType::kQ5_K: {
      const auto s = span_of(32);
      return (s.hi - std::min(0.0, s.lo)) / (t == TensorType::kQ4_K ? 15.0 : 31.0);
    }
    case TensorType::kQ6_K: {
      const auto s = span_of(16);
      return std::max(s.hi, -std::min(0.0, s.lo)) / 32.0;
    }
    default:
      break;
  }
  const auto s = span_of(32);
  const double range = s.hi - s.lo, slack = 1e-3 * s.amax;
  switch (t) {
    case TensorType::kQ8_0:
      return s.amax / 127.0 * 0.51 + slack;
    case TensorType::kQ4_0:
      return s.amax / 8.0 + slack;
    case TensorType::kQ5_0:
      return s.amax / 16.0 + slack;
    case TensorType::kQ4_1:
      return range / 15.0 * 0.51 + slack;
    case TensorType::kQ5_1:
      return range / 31.0 * 0.51 + slack;
    default:
      return -1;
  }
}

}  // namespace strata::testing
