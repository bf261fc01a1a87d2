// K-quants: Q4_K, Q5_K, Q6_K (layouts in kernels/internal/blocks.h and
// docs/formats/gguf.md): their reference codecs and dot products.
//
// Quantizers. Each 256-element super-block is first scaled by a power of two
// (exact) so that its largest magnitude lies in [1, 2): the search then sees
// the same numbers whatever the magnitude of the input, nothing in it
// overflows or underflows, and only the final f16 super-block scales meet the
// format's range (they saturate at the largest finite half, 65504).
//  - Q4_K/Q5_K: each sub-block of 32 is fitted as x ≈ s·l − m with l in
//    [0, nmax] (15 or 31), s > 0, m ≥ 0. A candidate c gives
//    l = min(nmax, round(c·(x − lo)/(hi − lo))) with lo = min(min x, 0),
//    hi = max x; (s, m) is the least-squares fit to those l, and the candidate
//    explaining the most of Σx² (least squared error) wins. Candidates: c =
//    nmax + 0.3k for |k| ≤ 3, then c* ± 0.1 around the best c* (9 in all; a
//    0.1-spaced grid of 21, like llama.cpp's reference quantizer, gains < 0.5%
//    RMS on Gaussian data at over twice the cost). The 8 scales
//    and mins are then quantized to 6 bits against d = max s / 63 and
//    dmin = max m / 63, and every element is rounded again against its
//    sub-block's quantized scale and min.
//  - Q6_K: each sub-block of 16 is fitted as x ≈ s·l with l in [−32, 31]; the
//    candidates l = clamp(round(−c·x/v)) map the element v of largest magnitude
//    to about −32 (so the longer side of the range goes where it is needed),
//    with c on the same grid around 32, least squares again. The 16 scales are
//    quantized to int8 against d = −s_max/128, s_max the scale of largest
//    magnitude (it maps to −128), and every element is rounded again.
// The error measure is the plain (unweighted) squared error. The search works
// on 4-float vectors (GCC/Clang vector extensions: SSE2 on x86-64, NEON on Arm;
// no ISA-specific code): Q4_K/Q5_K with 4 partial sums per sub-block, Q6_K with
// four sub-blocks side by side. Every operation is IEEE per lane and the order
// is fixed, so the output is a deterministic function of the input.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/internal/blocks.h"
#include "kernels/tensor_type.h"

namespace strata::kernels::internal {
namespace {

constexpr float kRoundMagic = 12582912.0f;  // 1.5 · 2^23
constexpr double kHalfMax = 65504.0;        // largest finite f16

// Four floats; arithmetic is per lane, `a < b ? a : b` selects per lane.
typedef float Float4 __attribute__((vector_size(16)));
constexpr int kLanes = 4;

inline Float4 Load4(const float* p) {
  Float4 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void Store4(float* p, Float4 v) { std::memcpy(p, &v, sizeof(v)); }
// Round to nearest, ties to even, exact for |v| < 2^22; larger magnitudes keep
// their sign and stay large (callers clamp).
inline Float4 Round4(Float4 v) { return (v + kRoundMagic) - kRoundMagic; }
inline Float4 Min4(Float4 a, Float4 b) { return a < b ? a : b; }
inline Float4 Max4(Float4 a, Float4 b) { return a > b ? a : b; }
inline double Sum4(Float4 v) { return static_cast<double>((v[0] + v[1]) + (v[2] + v[3])); }
inline float MaxLane(Float4 v) { return std::max(std::max(v[0], v[1]), std::max(v[2], v[3])); }
inline float MinLane(Float4 v) { return std::min(std::min(v[0], v[1]), std::min(v[2], v[3])); }

// One super-block scaled by 2^-e so that its largest magnitude is in [1, 2).
// Returns false (and leaves xn alone) when the block is all zero or not finite.
bool NormalizeSuperBlock(const float* x, float* xn, int* e) {
  Float4 amax4 = {};
  for (int i = 0; i < kQK_K; i += kLanes) {
    const Float4 v = Load4(x + i);
    amax4 = Max4(amax4, Max4(v, -v));
  }
  const float amax = MaxLane(amax4);
  if (!(amax > 0.0f) || !std::isfinite(amax)) return false;
  *e = std::ilogb(amax);
  if (*e >= -126) {
    // 2^-e is a float (possibly subnormal for e = 127) and the product is exact.
    const float f = std::ldexp(1.0f, -*e);
    for (int i = 0; i < kQK_K; i += kLanes) Store4(xn + i, Load4(x + i) * f);
  } else {
    // Subnormal amax: 2^-e exceeds the float range.
    const double f = std::ldexp(1.0, -*e);
    for (int i = 0; i < kQK_K; ++i) xn[i] = static_cast<float>(static_cast<double>(x[i]) * f);
  }
  return true;
}

// A super-block scale for the file: v_norm·2^e as f16, its magnitude saturated
// at 65504. Returns the f16 bits and the stored value scaled back by 2^-e.
struct HalfScale {
  uint16_t bits;
  float norm;  // HalfToFloat(bits) · 2^-e
};
HalfScale ToHalfScale(double v_norm, int e) {
  double v = std::ldexp(v_norm, e);
  if (std::fabs(v) > kHalfMax) v = v > 0 ? kHalfMax : -kHalfMax;
  const uint16_t bits = FloatToHalf(static_cast<float>(v));
  return {bits, static_cast<float>(std::ldexp(static_cast<double>(HalfToFloat(bits)), -e))};
}

// Clamp to [lo, hi] for one scalar; NaN becomes lo.
inline float Clamp(float v, float lo, float hi) { return v > lo ? (v < hi ? v : hi) : lo; }
inline float RoundSmall(float v) { return (v + kRoundMagic) - kRoundMagic; }

// Search grids: the coarse candidates c = center + k·kCoarseStep, |k| ≤ kCoarseHalf,
// then the two neighbours c* ± kFineStep of the best coarse c*.
constexpr float kCoarseStep = 0.3f;
constexpr int kCoarseHalf = 3;
constexpr float kFineStep = 0.1f;

// Runs the coarse-then-fine search: `eval(c)` scores candidate c and returns
// whether it became the best so far.
template <typename Eval>
void SearchGrid(float center, Eval&& eval) {
  float best_c = center;
  for (int k = -kCoarseHalf; k <= kCoarseHalf; ++k) {
    const float c = center + static_cast<float>(k) * kCoarseStep;
    if (eval(c)) best_c = c;
  }
  eval(best_c - kFineStep);
  eval(best_c + kFineStep);
}

// ---------------------------------------------------------------------------
// Q4_K / Q5_K: affine fit of 32 elements.

constexpr int kSub = 32;  // sub-block size of Q4_K/Q5_K

struct AffineFit {
  float scale;  // s ≥ 0
  float min;    // m ≥ 0; x ≈ s·l − m
};

AffineFit FitAffine(const float* x, int nmax_int) {
  Float4 xv[kSub / kLanes];
  Float4 lo4 = Load4(x), hi4 = lo4, sum4 = {};
  for (int i = 0; i < kSub / kLanes; ++i) {
    xv[i] = Load4(x + kLanes * i);
    lo4 = Min4(xv[i], lo4);
    hi4 = Max4(xv[i], hi4);
    sum4 += xv[i];
  }
  const float lo = std::min(MinLane(lo4), 0.0f);
  const float hi = MaxLane(hi4);
  if (!(hi > lo)) return {0.0f, -lo};  // constant block ≤ 0 (all zero included)
  const double sum_x = Sum4(sum4);
  const double n = kSub;
  const float nmax = static_cast<float>(nmax_int);
  const float inv_range = 1.0f / (hi - lo);
  Float4 xs[kSub / kLanes];  // x − lo ≥ 0
  for (int i = 0; i < kSub / kLanes; ++i) xs[i] = xv[i] - lo;

  // Best candidate so far: the fraction num/den of Σx² it explains, and the
  // sums that give its least-squares (s, m).
  double best_num = -1, best_den = 1;
  double b_s1 = 0, b_s2 = 0, b_sx = 0;
  bool b_clamped = false;
  SearchGrid(nmax, [&](float c) {
    const float iscale = c * inv_range;
    Float4 l1 = {}, l2 = {}, lx = {};
    for (int i = 0; i < kSub / kLanes; ++i) {
      const Float4 l = Min4(Round4(xs[i] * iscale), Float4{} + nmax);  // in [0, nmax]
      l1 += l;
      l2 += l * l;
      lx += l * xv[i];
    }
    // Σl, Σl² (exact integers in float), Σl·x.
    const double s1 = Sum4(l1), s2 = Sum4(l2), sx = Sum4(lx);
    // Least squares x ≈ s·l + o: with D = n·Σl² − (Σl)², s = (n·Σlx − Σx·Σl)/D,
    // o = (Σl²·Σx − Σl·Σlx)/D, and the explained part of Σx² is
    // (n·Σlx² − 2·Σl·Σlx·Σx + Σl²·Σx²)/D. A positive offset is not representable
    // (m ≥ 0): then o = 0, s = Σlx/Σl², explained Σlx²/Σl².
    const double det = n * s2 - s1 * s1;
    double num, den;
    bool clamped;
    if (det > 0 && s2 * sum_x - s1 * sx <= 0) {
      if (!(n * sx - sum_x * s1 > 0)) return false;  // s must be positive
      num = n * sx * sx - 2 * s1 * sx * sum_x + s2 * sum_x * sum_x;
      den = det;
      clamped = false;
    } else {
      if (!(s2 > 0 && sx > 0)) return false;
      num = sx * sx;
      den = s2;
      clamped = true;
    }
    if (!(num * best_den > best_num * den)) return false;
    best_num = num;
    best_den = den;
    b_s1 = s1;
    b_s2 = s2;
    b_sx = sx;
    b_clamped = clamped;
    return true;
  });
  if (best_num < 0) return {(hi - lo) / nmax, -lo};  // no candidate fitted: plain min/max
  if (b_clamped) return {static_cast<float>(b_sx / b_s2), 0.0f};
  const double det = n * b_s2 - b_s1 * b_s1;
  const double s = (n * b_sx - sum_x * b_s1) / det;
  const double o = (b_s2 * sum_x - b_s1 * b_sx) / det;
  return {static_cast<float>(s), static_cast<float>(-o)};
}

// One Q4_K/Q5_K super-block: the f16 scales, the packed 6-bit scales and mins,
// and l[256] in [0, nmax].
struct AffineSuperBlock {
  uint16_t d = 0, dmin = 0;
  std::array<uint8_t, kKScaleBytes> scales{};
};
AffineSuperBlock QuantizeAffineSuperBlock(const float* x, int nmax_int, uint8_t* l) {
  AffineSuperBlock out;
  float xn[kQK_K];
  int e = 0;
  if (!NormalizeSuperBlock(x, xn, &e)) {
    std::memset(l, 0, kQK_K);  // all zero (or not finite: unsupported, encoded as zero)
    return out;
  }
  AffineFit fit[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    fit[j] = FitAffine(xn + kSub * j, nmax_int);
    max_scale = std::max(max_scale, fit[j].scale);
    max_min = std::max(max_min, fit[j].min);
  }
  const HalfScale d = ToHalfScale(max_scale / 63.0, e);
  const HalfScale dmin = ToHalfScale(max_min / 63.0, e);
  out.d = d.bits;
  out.dmin = dmin.bits;
  ScaleMin sm[8];
  for (int j = 0; j < 8; ++j) {
    sm[j].scale =
        d.norm > 0 ? static_cast<uint8_t>(Clamp(RoundSmall(fit[j].scale / d.norm), 0, 63)) : 0;
    sm[j].min =
        dmin.norm > 0 ? static_cast<uint8_t>(Clamp(RoundSmall(fit[j].min / dmin.norm), 0, 63)) : 0;
  }
  out.scales = PackScaleMinK4(sm);

  // Every element again, against its sub-block's quantized scale and min.
  const Float4 nmax = Float4{} + static_cast<float>(nmax_int);
  for (int j = 0; j < 8; ++j) {
    const float s = d.norm * static_cast<float>(sm[j].scale);
    const float m = dmin.norm * static_cast<float>(sm[j].min);
    if (!(s > 0)) {
      std::memset(l + kSub * j, 0, kSub);
      continue;
    }
    for (int i = kSub * j; i < kSub * (j + 1); i += kLanes) {
      float q[kLanes];
      Store4(q, Max4(Min4(Round4((Load4(xn + i) + m) / s), nmax), Float4{}));
      for (int v = 0; v < kLanes; ++v) l[i + v] = static_cast<uint8_t>(q[v]);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------
// Q6_K: symmetric fit of 16 elements, l in [−32, 31].

constexpr int kSub6 = 16;

typedef int32_t Int4 __attribute__((vector_size(16)));  // lane masks of Float4 comparisons

// Fits four consecutive sub-blocks of 16 (x[64]) at once, sub-block v in lane
// v, so that the candidates' bookkeeping is vector work too. Returns each
// sub-block's least-squares scale s (x ≈ s·l), 0 for an all-zero sub-block.
Float4 FitSymmetric4(const float* x) {
  Float4 xt[kSub6];  // xt[i][v] = x[16·v + i]
  Float4 amax = {};
  for (int i = 0; i < kSub6; ++i) {
    xt[i] = Float4{x[i], x[kSub6 + i], x[2 * kSub6 + i], x[3 * kSub6 + i]};
    amax = Max4(amax, Max4(xt[i], -xt[i]));
  }
  // Candidates map each sub-block's first element of largest magnitude to about −32.
  Float4 inv = {};
  for (int v = 0; v < kLanes; ++v) {
    for (int i = 0; i < kSub6 && amax[v] > 0; ++i) {
      if (std::fabs(x[kSub6 * v + i]) == amax[v]) {
        inv[v] = -1.0f / x[kSub6 * v + i];
        break;
      }
    }
  }
  // Per lane, the best candidate's Σl·x and Σl² (explained part of Σx²: (Σl·x)²/Σl²).
  Float4 best_num = Float4{} - 1.0f, best_den = Float4{} + 1.0f;
  Float4 best_sx = {}, best_s2 = Float4{} + 1.0f, best_c = Float4{} + 32.0f;
  auto eval = [&](Float4 c) {
    const Float4 iscale = c * inv;
    Float4 l2 = {}, lx = {};
    for (int i = 0; i < kSub6; ++i) {
      const Float4 l = Max4(Min4(Round4(xt[i] * iscale), Float4{} + 31.0f), Float4{} - 32.0f);
      l2 += l * l;  // exact: integers ≤ 16·32²
      lx += l * xt[i];
    }
    const Float4 num = lx * lx;
    const Int4 better = (l2 > 0.0f) & (num * best_den > best_num * l2);
    best_num = better ? num : best_num;
    best_den = better ? l2 : best_den;
    best_sx = better ? lx : best_sx;
    best_s2 = better ? l2 : best_s2;
    best_c = better ? c : best_c;
  };
  for (int k = -kCoarseHalf; k <= kCoarseHalf; ++k)
    eval(Float4{} + (32.0f + static_cast<float>(k) * kCoarseStep));
  const Float4 center = best_c;
  eval(center - kFineStep);
  eval(center + kFineStep);
  return best_num < 0.0f ? Float4{} : best_sx / best_s2;
}

}  // namespace

// ---------------------------------------------------------------------------
// Dequantization. Q4_K/Q5_K: d·sc (11 + 6 significant bits), (d·sc)·q (+5) and
// dmin·m are exact in float, so the one rounding is the final subtraction: the
// result is the correctly rounded value of d·sc·q − dmin·m. Q6_K: d·sc·(q − 32)
// has at most 11 + 7 + 5 significant bits and is exact.

namespace {

template <typename Block>
void DequantizeK4(const Block* src, int64_t n_blocks, float* dst) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const Block& blk = src[b];
    const float d = HalfToFloat(blk.d), dmin = HalfToFloat(blk.dmin);
    float* y = dst + b * kQK_K;
    for (int j = 0; j < 8; ++j) {
      const ScaleMin sm = UnpackScaleMinK4(blk.scales, j);
      const float s = d * static_cast<float>(sm.scale), m = dmin * static_cast<float>(sm.min);
      uint8_t q[kSub];
      SubBlockCodesK4(blk, j, q);
      for (int l = 0; l < kSub; ++l) y[kSub * j + l] = s * static_cast<float>(q[l]) - m;
    }
  }
}

}  // namespace

void Dequantize(const BlockQ4_K* src, int64_t n_blocks, float* dst) {
  DequantizeK4(src, n_blocks, dst);
}
void Dequantize(const BlockQ5_K* src, int64_t n_blocks, float* dst) {
  DequantizeK4(src, n_blocks, dst);
}

void Dequantize(const BlockQ6_K* src, int64_t n_blocks, float* dst) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const BlockQ6_K& blk = src[b];
    const float d = HalfToFloat(blk.d);
    float* y = dst + b * kQK_K;
    for (int i = 0; i < kQK_K; ++i) {
      y[i] =
          d * static_cast<float>(blk.scales[i / kSub6]) * static_cast<float>(QuantQ6K(blk, i) - 32);
    }
  }
}

// ---------------------------------------------------------------------------
// Dot products with Q8K activations. Per super-block b, with the sub-block
// scales sc_j and mins m_j (integers) and a_i the activation's int8 values:
//   isum_b = Σ_j sc_j · Σ_{i in sub-block j} q_i·a_i         (int32, exact)
//   imin_b = Σ_j m_j · Σ_{i in sub-block j} a_i  (from bsums) (int32, exact)
// and then, in float, for b = 0, 1, ... in order:
//   acc += (d_b·da_b)·float(isum_b);  acc -= (dmin_b·da_b)·float(imin_b)
// Q6_K has no mins: isum_b = Σ_j sc_j·(Σ q_i·a_i − 32·Σ a_i), acc += (d_b·da_b)·float(isum_b).
// The integer sums are exact (|isum_b| < 2^28 for every type), so any order of
// the integer work gives the same bits; only the float steps above are ordered.

namespace {

template <typename Block>
float DotK4(const Block* w, const ActBlockQ8K* a, int64_t n_blocks) {
  float acc = 0.0f;
  for (int64_t ib = 0; ib < n_blocks; ++ib) {
    const Block& wb = w[ib];
    const ActBlockQ8K& ab = a[ib];
    int32_t isum = 0, imin = 0;
    for (int j = 0; j < 8; ++j) {
      const ScaleMin sm = UnpackScaleMinK4(wb.scales, j);
      uint8_t q[kSub];
      SubBlockCodesK4(wb, j, q);
      int32_t s = 0;
      for (int l = 0; l < kSub; ++l) s += q[l] * ab.q[kSub * j + l];
      isum += sm.scale * s;
      imin += sm.min * (ab.bsums[2 * j] + ab.bsums[2 * j + 1]);
    }
    acc += (HalfToFloat(wb.d) * ab.d) * static_cast<float>(isum);
    acc -= (HalfToFloat(wb.dmin) * ab.d) * static_cast<float>(imin);
  }
  return acc;
}

}  // namespace

float Dot(const BlockQ4_K* w, const ActBlockQ8K* a, int64_t n_blocks) {
  return DotK4(w, a, n_blocks);
}
float Dot(const BlockQ5_K* w, const ActBlockQ8K* a, int64_t n_blocks) {
  return DotK4(w, a, n_blocks);
}

float Dot(const BlockQ6_K* w, const ActBlockQ8K* a, int64_t n_blocks) {
  float acc = 0.0f;
  for (int64_t ib = 0; ib < n_blocks; ++ib) {
    const BlockQ6_K& wb = w[ib];
    const ActBlockQ8K& ab = a[ib];
    int32_t isum = 0;
    for (int j = 0; j < kQK_K / kSub6; ++j) {
      int32_t s = 0;
      for (int l = 0; l < kSub6; ++l) s += QuantQ6K(wb, kSub6 * j + l) * ab.q[kSub6 * j + l];
      isum += wb.scales[j] * (s - 32 * ab.bsums[j]);
    }
    acc += (HalfToFloat(wb.d) * ab.d) * static_cast<float>(isum);
  }
  return acc;
}

// ---------------------------------------------------------------------------
// Quantization.

void Quantize(const float* src, int64_t n_blocks, BlockQ4_K* dst) {
  uint8_t l[kQK_K];
  for (int64_t b = 0; b < n_blocks; ++b) {
    const AffineSuperBlock sb = QuantizeAffineSuperBlock(src + b * kQK_K, 15, l);
    BlockQ4_K& blk = dst[b];
    blk.d = sb.d;
    blk.dmin = sb.dmin;
    std::memcpy(blk.scales, sb.scales.data(), kKScaleBytes);
    for (int c = 0; c < 4; ++c) {
      for (int i = 0; i < 32; ++i) {
        blk.qs[32 * c + i] = static_cast<uint8_t>(l[64 * c + i] | (l[64 * c + 32 + i] << 4));
      }
    }
  }
}

void Quantize(const float* src, int64_t n_blocks, BlockQ5_K* dst) {
  uint8_t l[kQK_K];
  for (int64_t b = 0; b < n_blocks; ++b) {
    const AffineSuperBlock sb = QuantizeAffineSuperBlock(src + b * kQK_K, 31, l);
    BlockQ5_K& blk = dst[b];
    blk.d = sb.d;
    blk.dmin = sb.dmin;
    std::memcpy(blk.scales, sb.scales.data(), kKScaleBytes);
    for (int c = 0; c < 4; ++c) {
      for (int i = 0; i < 32; ++i) {
        const int lo = l[64 * c + i], hi = l[64 * c + 32 + i];
        blk.qs[32 * c + i] = static_cast<uint8_t>((lo & 15) | ((hi & 15) << 4));
      }
    }
    for (int i = 0; i < 32; ++i) {
      int h = 0;
      for (int j = 0; j < 8; ++j) h |= (l[32 * j + i] >> 4) << j;
      blk.qh[i] = static_cast<uint8_t>(h);
    }
  }
}

void Quantize(const float* src, int64_t n_blocks, BlockQ6_K* dst) {
  float xn[kQK_K];
  uint8_t q[kQK_K];  // l + 32, in [0, 63]
  for (int64_t b = 0; b < n_blocks; ++b) {
    BlockQ6_K& blk = dst[b];
    std::memset(blk.scales, 0, sizeof(blk.scales));
    blk.d = 0;
    std::memset(q, 32, sizeof(q));
    int e = 0;
    if (NormalizeSuperBlock(src + b * kQK_K, xn, &e)) {
      float scale[kQK_K / kSub6];
      for (int j = 0; j < kQK_K / kSub6; j += kLanes)
        Store4(scale + j, FitSymmetric4(xn + kSub6 * j));
      float smax = 0;  // the sub-block scale of largest magnitude, with its sign
      for (float sc : scale) {
        if (std::fabs(sc) > std::fabs(smax)) smax = sc;
      }
      const HalfScale d = ToHalfScale(smax / -128.0, e);
      blk.d = d.bits;
      for (int j = 0; j < kQK_K / kSub6 && d.norm != 0; ++j) {
        const float sc = Clamp(RoundSmall(scale[j] / d.norm), -128, 127);
        blk.scales[j] = static_cast<int8_t>(sc);
        const float s = d.norm * sc;
        if (s == 0) continue;
        // Every element again, against its sub-block's quantized scale.
        for (int i = kSub6 * j; i < kSub6 * (j + 1); i += kLanes) {
          float v[kLanes];
          Store4(v,
                 Max4(Min4(Round4(Load4(xn + i) / s), Float4{} + 31.0f), Float4{} - 32.0f) + 32.0f);
          for (int k = 0; k < kLanes; ++k) q[i + k] = static_cast<uint8_t>(v[k]);
        }
      }
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* qq = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        blk.ql[64 * h + l] = static_cast<uint8_t>((qq[l] & 15) | ((qq[l + 64] & 15) << 4));
        blk.ql[64 * h + 32 + l] =
            static_cast<uint8_t>((qq[l + 32] & 15) | ((qq[l + 96] & 15) << 4));
        blk.qh[32 * h + l] =
            static_cast<uint8_t>((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) |
                                 ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace strata::kernels::internal
