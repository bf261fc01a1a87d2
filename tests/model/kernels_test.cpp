// Every weight type's dot product against a float64 reference on fresh random
// data, with a stated error bound, for the scalar reference and every SIMD
// table this CPU has.
//
// Error bounds (u = 2^-24, γ(k) = k·u / (1 - k·u)):
//  - F32, F16, BF16 weights (F32 activations): the weights are exact in float,
//    so |dot - ref| ≤ γ(n+1) · Σ|w_i x_i|.
//  - Q8_0, Q4_0 weights (Q8 activations): activation quantization moves each
//    x_i by at most d_b/2 (d_b the block's activation scale), plus rounding of
//    the per-block scale products and their sum:
//    |dot - ref| ≤ Σ_i |w_i|·d_b/2 + γ(n/32 + 2) · Σ_b |s_b · dw_b · da_b| + γ(n+1)·Σ|w_i x_i|.
#include "model/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "model/internal/blocks.h"
#include "util/random.h"

namespace strata::model {
namespace {

using internal::ActBlockQ8;

constexpr TensorType kTypes[] = {TensorType::kF32, TensorType::kF16, TensorType::kBF16,
                                 TensorType::kQ8_0, TensorType::kQ4_0};

double Gamma(double k) {
  const double u = std::ldexp(1.0, -24);
  return k * u / (1 - k * u);
}

std::vector<const KernelTable*> AvailableTables() {
  std::vector<const KernelTable*> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (const KernelTable* k = GetKernels(isa)) out.push_back(k);
  }
  return out;
}

struct Case {
  std::vector<float> x;            // activations
  std::vector<uint8_t> w;          // encoded weight row
  std::vector<double> w_exact;     // dequantized weights (exact)
};

Case MakeCase(TensorType t, int64_t n, util::Rng& rng, float scale) {
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

double Bound(TensorType t, const Case& c, const std::vector<uint8_t>& act, int64_t n) {
  double abs_terms = 0;
  for (int64_t i = 0; i < n; ++i) abs_terms += std::fabs(c.w_exact[static_cast<size_t>(i)] * c.x[static_cast<size_t>(i)]);
  double bound = Gamma(static_cast<double>(n + 1)) * abs_terms;
  if (ActFormatFor(t) == ActFormat::kQ8) {
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
  return bound * 1.0001 + 1e-30;
}

TEST(Kernels, EveryTypeMatchesTheFloat64ReferenceWithinItsBound) {
  util::Rng rng(1234);
  for (const KernelTable* k : AvailableTables()) {
    for (TensorType t : kTypes) {
      for (int64_t n : {32, 64, 256, 1024, 4096}) {
        for (float scale : {1e-3f, 1.0f, 300.0f}) {
          Case c = MakeCase(t, n, rng, scale);
          std::vector<uint8_t> act(ActRowBytes(ActFormatFor(t), n));
          k->quantize_act(ActFormatFor(t), c.x.data(), n, act.data());
          double ref = 0;
          for (int64_t i = 0; i < n; ++i) ref += c.w_exact[static_cast<size_t>(i)] * c.x[static_cast<size_t>(i)];
          float out = 0;
          MatMulArgs a;
          a.w_type = t;
          a.w = c.w.data();
          a.w_row_bytes = c.w.size();
          a.row_begin = 0;
          a.row_end = 1;
          a.act = act.data();
          a.act_row_bytes = act.size();
          a.n_tokens = 1;
          a.n = n;
          a.out = &out;
          a.out_stride = 1;
          k->matmul(a);
          EXPECT_LE(std::fabs(out - ref), Bound(t, c, act, n))
              << IsaName(k->isa) << " " << TypeName(t) << " n=" << n << " scale=" << scale
              << " got " << out << " want " << ref;
        }
      }
    }
  }
}

TEST(Kernels, MatMulIsBatchInvariantBitForBit) {
  // Any grouping of rows and tokens gives identical floats.
  util::Rng rng(99);
  const int64_t n = 512, rows = 37, tokens = 9;
  for (const KernelTable* k : AvailableTables()) {
    for (TensorType t : kTypes) {
      std::vector<float> wf(static_cast<size_t>(n * rows)), x(static_cast<size_t>(n * tokens));
      for (auto& v : wf) v = static_cast<float>(rng.Normal());
      for (auto& v : x) v = static_cast<float>(rng.Normal());
      const size_t rb = RowBytes(t, n);
      std::vector<uint8_t> w(rb * rows);
      for (int64_t r = 0; r < rows; ++r) QuantizeRow(t, wf.data() + r * n, n, w.data() + r * rb);
      const ActFormat fmt = ActFormatFor(t);
      const size_t ab = ActRowBytes(fmt, n);
      std::vector<uint8_t> act(ab * tokens);
      for (int64_t i = 0; i < tokens; ++i) k->quantize_act(fmt, x.data() + i * n, n, act.data() + i * ab);

      auto run = [&](int64_t r0, int64_t r1, int64_t t0, int64_t t1, std::vector<float>& out) {
        MatMulArgs a;
        a.w_type = t;
        a.w = w.data();
        a.w_row_bytes = rb;
        a.row_begin = r0;
        a.row_end = r1;
        a.act = act.data() + t0 * ab;
        a.act_row_bytes = ab;
        a.n_tokens = t1 - t0;
        a.n = n;
        a.out = out.data() + t0 * rows;
        a.out_stride = rows;
        k->matmul(a);
      };
      std::vector<float> all(static_cast<size_t>(rows * tokens)), pieces(all.size());
      run(0, rows, 0, tokens, all);
      for (int64_t tok = 0; tok < tokens; ++tok) {
        for (int64_t r = 0; r < rows; r += 5) run(r, std::min(rows, r + 5), tok, tok + 1, pieces);
      }
      EXPECT_EQ(0, std::memcmp(all.data(), pieces.data(), all.size() * sizeof(float)))
          << IsaName(k->isa) << " " << TypeName(t);
    }
  }
}

TEST(Kernels, QuantizeDequantizeRoundTripIsClose) {
  util::Rng rng(5);
  for (TensorType t : kTypes) {
    std::vector<float> x(256), y(256);
    for (auto& v : x) v = static_cast<float>(rng.Normal());
    std::vector<uint8_t> enc(RowBytes(t, 256));
    QuantizeRow(t, x.data(), 256, enc.data());
    DequantizeRow(t, enc.data(), 256, y.data());
    for (int b = 0; b < 8; ++b) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * 32 + i)]));
      // Q8_0 steps are amax/127, Q4_0 steps amax/8: error at most half a step (plus the f16 scale).
      const float tol = t == TensorType::kQ4_0 ? amax / 8.0f * 0.51f + 1e-3f * amax
                        : t == TensorType::kQ8_0 ? amax / 127.0f * 0.51f + 1e-3f * amax
                        : t == TensorType::kF32  ? 0.0f
                                                 : amax * 0.01f;
      for (int i = 0; i < 32; ++i) {
        const size_t j = static_cast<size_t>(b * 32 + i);
        EXPECT_LE(std::fabs(x[j] - y[j]), tol) << TypeName(t);
      }
    }
  }
}

TEST(Kernels, BestTableIsAvailable) {
  const KernelTable& best = BestKernels();
  EXPECT_EQ(GetKernels(best.isa), &best);
}

}  // namespace
}  // namespace strata::model
