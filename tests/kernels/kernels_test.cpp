// Every weight type's dot product against a float64 reference on fresh random
// data, with a stated error bound (tests/kernels/kernel_bounds.h), for the
// scalar reference and every SIMD table this CPU has.
#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/internal/blocks.h"
#include "kernels/kernel_bounds.h"
#include "testing/kernel_tables.h"
#include "util/random.h"

namespace strata::kernels {
namespace {

using internal::ActBlockQ8;
using internal::ActBlockQ8K;
using internal::BlockQ4_1;
using internal::BlockQ4_K;
using internal::BlockQ5_0;
using internal::BlockQ5_1;
using internal::BlockQ5_K;
using internal::BlockQ6_K;

constexpr TensorType kTypes[] = {TensorType::kF32,  TensorType::kF16,  TensorType::kBF16,
                                 TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_1,
                                 TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ4_K,
                                 TensorType::kQ5_K, TensorType::kQ6_K};
constexpr TensorType kKTypes[] = {TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K};
// The legacy 32-blocks with a min or a fifth bit.
constexpr TensorType kLegacyTypes[] = {TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1};

using testing::ActAt;
using testing::ActScale;
using testing::Bound;
using testing::Case;
using testing::DecodeK;
using testing::Gamma;
using testing::HasTwoParts;
using testing::IsKQuant;
using testing::KParts;
using testing::MakeCase;
using testing::TwoPartRoundings;

TEST(Kernels, EveryTypeMatchesTheFloat64ReferenceWithinItsBound) {
  util::Rng rng(1234);
  for (const KernelTable* k : testing::AvailableKernelTables()) {
    for (TensorType t : kTypes) {
      for (int64_t n : {32, 64, 256, 1024, 4096}) {
        if (n % GetTypeInfo(t).block_size != 0) continue;
        for (float scale : {1e-3f, 1.0f, 300.0f}) {
          Case c = MakeCase(t, n, rng, scale);
          std::vector<uint8_t> act(ActRowBytes(ActFormatFor(t), n));
          k->quantize_act(ActFormatFor(t), c.x.data(), n, act.data());
          double ref = 0;
          for (int64_t i = 0; i < n; ++i)
            ref += c.w_exact[static_cast<size_t>(i)] * c.x[static_cast<size_t>(i)];
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

// The bounds above are dominated by activation rounding, a worst case that
// hides small systematic errors. Against the float64 dot of the weights with
// the activations as quantized (d_b·q_i), only the kernels' own arithmetic
// remains: for Q8_0/Q4_0/Q5_0 γ(n/32 + 2)·Σ_b |s_b·dw_b·da_b| (d·q is exact in
// float), for the two-part types γ(k)·Σ_i (|A_i| + |B_i|)·da_b·|a_i| + γ(1)·Σ|w_i·da_b·a_i|.
TEST(Kernels, QuantizedTypesMatchTheFloat64DotOfTheirQuantizedActivations) {
  util::Rng rng(4321);
  for (const KernelTable* k : testing::AvailableKernelTables()) {
    for (TensorType t : kTypes) {
      const ActFormat fmt = ActFormatFor(t);
      if (fmt == ActFormat::kF32) continue;
      for (int64_t n : {256, 1024, 4096}) {
        for (float scale : {1e-3f, 1.0f, 300.0f}) {
          Case c = MakeCase(t, n, rng, scale);
          std::vector<uint8_t> act(ActRowBytes(fmt, n));
          k->quantize_act(fmt, c.x.data(), n, act.data());
          double ref = 0, bound = 0;
          if (!HasTwoParts(t)) {
            const auto* blocks = reinterpret_cast<const ActBlockQ8*>(act.data());
            for (int64_t b = 0; b < n / 32; ++b) {
              double s = 0;
              for (int i = 0; i < 32; ++i)
                s += c.w_exact[static_cast<size_t>(b * 32 + i)] * blocks[b].q[i];
              ref += s * blocks[b].d;
              bound += std::fabs(s * blocks[b].d);
            }
            bound *= Gamma(static_cast<double>(n / 32 + 2));
          } else {
            double parts = 0, abs_terms = 0;
            for (int64_t i = 0; i < n; ++i) {
              const ActScale as = ActAt(t, act, i);
              const double xq = as.d * as.q;
              const KParts p = DecodeK(t, c.w.data(), i);
              ref += c.w_exact[static_cast<size_t>(i)] * xq;
              parts += (std::fabs(p.a) + std::fabs(p.b)) * std::fabs(xq);
              abs_terms += std::fabs(c.w_exact[static_cast<size_t>(i)] * xq);
            }
            bound = Gamma(TwoPartRoundings(t, n)) * parts + Gamma(1) * abs_terms;
          }
          float out = 0;
          MatMulArgs a;
          a.w_type = t;
          a.w = c.w.data();
          a.w_row_bytes = c.w.size();
          a.row_end = 1;
          a.act = act.data();
          a.act_row_bytes = act.size();
          a.n_tokens = 1;
          a.n = n;
          a.out = &out;
          a.out_stride = 1;
          k->matmul(a);
          EXPECT_LE(std::fabs(out - ref), bound * 1.0001 + 1e-30)
              << IsaName(k->isa) << " " << TypeName(t) << " n=" << n << " scale=" << scale
              << " got " << out << " want " << ref;
        }
      }
    }
  }
}

TEST(Kernels, MatMulIsBatchInvariantBitForBit) {
  // Any grouping of rows and tokens gives identical floats. The shape reaches
  // every path of the tiled kernels: partial row and token tiles, more than
  // one 64-token chunk, batches that share one decode of a row tile and
  // single tokens that decode it themselves, rows of 11 super-blocks (the
  // shared decode goes 8 at a time), and row ranges that start anywhere.
  util::Rng rng(99);
  const int64_t n = 11 * 256, rows = 37, tokens = 70;
  for (const KernelTable* k : testing::AvailableKernelTables()) {
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
      for (int64_t i = 0; i < tokens; ++i)
        k->quantize_act(fmt, x.data() + i * n, n, act.data() + i * ab);

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
      // Whole batches over row ranges that start anywhere (threads get row
      // chunks; the shared-decode path stages 16 rows at a time).
      std::vector<float> row_pieces(all.size());
      for (int64_t r = 0; r < rows; r += 7) run(r, std::min(rows, r + 7), 0, tokens, row_pieces);
      EXPECT_EQ(0, std::memcmp(all.data(), row_pieces.data(), all.size() * sizeof(float)))
          << IsaName(k->isa) << " " << TypeName(t) << " (row ranges)";
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
    if (IsKQuant(t)) {
      // Within one quantization step of the sub-block: Q4_K/Q5_K steps are
      // about (max − min(min, 0))/nmax over 32 elements, Q6_K steps about
      // max|x|/32 over 16 (the least-squares scales, the 6-/8-bit sub-block
      // scales and the f16 super-block scales move them a little).
      const int sub = t == TensorType::kQ6_K ? 16 : 32;
      for (int b = 0; b < 256 / sub; ++b) {
        const auto first = x.begin() + b * sub;
        const float hi = *std::max_element(first, first + sub);
        const float lo = std::min(0.0f, *std::min_element(first, first + sub));
        const float tol = t == TensorType::kQ4_K   ? (hi - lo) / 15.0f
                          : t == TensorType::kQ5_K ? (hi - lo) / 31.0f
                                                   : std::max(hi, -lo) / 32.0f;
        for (int i = 0; i < sub; ++i) {
          const size_t j = static_cast<size_t>(b * sub + i);
          EXPECT_LE(std::fabs(x[j] - y[j]), tol) << TypeName(t) << " element " << j;
        }
      }
      continue;
    }
    for (int b = 0; b < 8; ++b) {
      const auto first = x.begin() + b * 32;
      float amax = 0;
      for (int i = 0; i < 32; ++i)
        amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * 32 + i)]));
      const float range =
          *std::max_element(first, first + 32) - *std::min_element(first, first + 32);
      // Q8_0 steps are amax/127, Q4_0 steps amax/8, Q5_0 amax/16, Q4_1 and Q5_1
      // (max − min)/15 and /31: error at most half a step (plus the f16 scale and min).
      const float tol = t == TensorType::kQ4_0   ? amax / 8.0f * 0.51f + 1e-3f * amax
                        : t == TensorType::kQ5_0 ? amax / 16.0f * 0.51f + 1e-3f * amax
                        : t == TensorType::kQ4_1 ? range / 15.0f * 0.51f + 1e-3f * amax
                        : t == TensorType::kQ5_1 ? range / 31.0f * 0.51f + 1e-3f * amax
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

// ---------------------------------------------------------------------------
// K-quants: layouts, quantizer quality and edge cases, Q8K activations.

// Expected values below are worked out by hand from docs/formats/gguf.md.
TEST(KQuants, HandBuiltQ4KBlockDecodesToTheValuesItsLayoutDefines) {
  BlockQ4_K b{};
  b.d = 0x3C00;     // 1.0
  b.dmin = 0x3800;  // 0.5
  // Sub-block 0: sc 2, m 3. Sub-block 1: sc 17, m 9. Sub-block 5: sc 45 = 0b10'1101,
  // m 60 = 0b11'1100: low nibbles in byte 9, high bits in the top of bytes 1 and 5.
  b.scales[0] = 2;
  b.scales[4] = 3;
  b.scales[1] = 17 | (2 << 6);
  b.scales[5] = 9 | (3 << 6);
  b.scales[9] = 13 | (12 << 4);
  b.qs[0] = 0x07;   // element 0 (sub-block 0, low nibble): q 7
  b.qs[1] = 0xF0;   // element 33 (sub-block 1, high nibble): q 15
  b.qs[68] = 0x90;  // element 164 (sub-block 5 = high nibbles of bytes 64..95, l 4): q 9
  std::array<float, 256> want{};
  for (int i = 0; i < 32; ++i) want[static_cast<size_t>(i)] = -1.5f;      // −0.5·3
  for (int i = 32; i < 64; ++i) want[static_cast<size_t>(i)] = -4.5f;     // −0.5·9
  for (int i = 160; i < 192; ++i) want[static_cast<size_t>(i)] = -30.0f;  // −0.5·60
  want[0] = 12.5f;                                                        // 1·2·7 − 1.5
  want[33] = 250.5f;                                                      // 1·17·15 − 4.5
  want[164] = 375.0f;                                                     // 1·45·9 − 30
  std::array<float, 256> got{};
  DequantizeRow(TensorType::kQ4_K, &b, 256, got.data());
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
}

TEST(KQuants, HandBuiltQ5KBlockDecodesToTheValuesItsLayoutDefines) {
  BlockQ5_K b{};
  b.d = 0x3C00;
  b.dmin = 0x3800;
  b.scales[0] = 2;
  b.scales[4] = 3;
  b.scales[1] = 17 | (2 << 6);
  b.scales[5] = 9 | (3 << 6);
  b.scales[9] = 13 | (12 << 4);
  b.qs[0] = 0x07;
  b.qs[1] = 0xF0;
  b.qs[68] = 0x90;
  b.qh[1] = 1 << 1;  // element 33: fifth bit of sub-block 1 → q 31
  b.qh[2] = 1 << 0;  // element 2: fifth bit only → q 16
  b.qh[4] = 1 << 5;  // element 164: sub-block 5 → q 25
  std::array<float, 256> want{};
  for (int i = 0; i < 32; ++i) want[static_cast<size_t>(i)] = -1.5f;
  for (int i = 32; i < 64; ++i) want[static_cast<size_t>(i)] = -4.5f;
  for (int i = 160; i < 192; ++i) want[static_cast<size_t>(i)] = -30.0f;
  want[0] = 12.5f;      // 2·7 − 1.5
  want[2] = 30.5f;      // 2·16 − 1.5
  want[33] = 522.5f;    // 17·31 − 4.5
  want[164] = 1095.0f;  // 45·25 − 30
  std::array<float, 256> got{};
  DequantizeRow(TensorType::kQ5_K, &b, 256, got.data());
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
}

TEST(KQuants, HandBuiltQ6KBlockDecodesToTheValuesItsLayoutDefines) {
  BlockQ6_K b{};
  b.d = 0x3400;  // 0.25
  b.scales[0] = -3;
  b.scales[6] = 7;
  b.scales[9] = 100;
  b.scales[12] = -128;
  // Element 0: q 37 = 0b10'0101: ql[0] low nibble 5, qh[0] bits 0-1 = 2.
  b.ql[0] = 0x05;
  b.qh[0] = 0x02;
  // Element 111 (h 0, g 3, l 15): q 42 = 0b10'1010: ql[47] high nibble, qh[15] bits 6-7.
  b.ql[47] = 0xA0;
  b.qh[15] = 0x80;
  // Element 150 (h 1, g 0, l 22): q 63: ql[86] low nibble, qh[54] bits 0-1.
  b.ql[86] = 0x0F;
  b.qh[54] = 0x03;
  // Element 200 (h 1, g 2, l 8): q 33 = 0b10'0001: ql[72] high nibble, qh[40] bits 4-5.
  b.ql[72] = 0x10;
  b.qh[40] = 0x20;
  std::array<float, 256> want{};
  // Every other q is 0, i.e. −32 after the offset: d·sc·(−32).
  for (int i = 0; i < 16; ++i) want[static_cast<size_t>(i)] = 24.0f;       // 0.25·−3·−32
  for (int i = 96; i < 112; ++i) want[static_cast<size_t>(i)] = -56.0f;    // 0.25·7·−32
  for (int i = 144; i < 160; ++i) want[static_cast<size_t>(i)] = -800.0f;  // 0.25·100·−32
  for (int i = 192; i < 208; ++i) want[static_cast<size_t>(i)] = 1024.0f;  // 0.25·−128·−32
  want[0] = -3.75f;                                                        // 0.25·−3·5
  want[111] = 17.5f;                                                       // 0.25·7·10
  want[150] = 775.0f;                                                      // 0.25·100·31
  want[200] = -32.0f;                                                      // 0.25·−128·1
  std::array<float, 256> got{};
  DequantizeRow(TensorType::kQ6_K, &b, 256, got.data());
  for (size_t i = 0; i < 256; ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
}

TEST(KQuants, KernelOnHandBuiltBlocksMatchesTheirDecodedValues) {
  // The activation row is built by hand too: d 0.5, q[i] = i % 7 − 3.
  ActBlockQ8K a{};
  a.d = 0.5f;
  for (int i = 0; i < 256; ++i) a.q[i] = static_cast<int8_t>(i % 7 - 3);
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += a.q[16 * g + i];
    a.bsums[g] = static_cast<int16_t>(sum);
  }
  util::Rng rng(17);
  for (TensorType t : kKTypes) {
    // Random bytes are valid blocks of every k-quant type; small f16 scales.
    std::vector<uint8_t> w(RowBytes(t, 256));
    for (auto& byte : w) byte = static_cast<uint8_t>(rng.Below(256));
    const uint16_t small = 0x2400;  // 2^-6
    if (t == TensorType::kQ6_K) {
      std::memcpy(w.data() + 208, &small, 2);
    } else {
      std::memcpy(w.data(), &small, 2);
      std::memcpy(w.data() + 2, &small, 2);
    }
    std::vector<float> deq(256);
    DequantizeRow(t, w.data(), 256, deq.data());
    double want = 0;
    for (int i = 0; i < 256; ++i)
      want += static_cast<double>(deq[static_cast<size_t>(i)]) * 0.5 * a.q[i];
    double mag = 0;
    for (int i = 0; i < 256; ++i) {
      const KParts p = DecodeK(t, w.data(), i);
      EXPECT_EQ(deq[static_cast<size_t>(i)], static_cast<float>(p.a - p.b))
          << TypeName(t) << " " << i;
      mag += (std::fabs(p.a) + std::fabs(p.b)) * 0.5 * std::abs(a.q[i]);
    }
    for (const KernelTable* k : testing::AvailableKernelTables()) {
      float out = 0;
      MatMulArgs args;
      args.w_type = t;
      args.w = w.data();
      args.w_row_bytes = w.size();
      args.row_end = 1;
      args.act = reinterpret_cast<const uint8_t*>(&a);
      args.act_row_bytes = sizeof(a);
      args.n_tokens = 1;
      args.n = 256;
      args.out = &out;
      args.out_stride = 1;
      k->matmul(args);
      EXPECT_LE(std::fabs(out - want), Gamma(8) * mag + 1e-30)
          << IsaName(k->isa) << " " << TypeName(t);
    }
  }
}

// RMS error of quantize → dequantize on N(0, 1) data, against the error of a
// plain uniform grid spanning each sub-block (step/√12 with the step from the
// RMS range of Gaussian samples: E[(max − min(min, 0))²]^½ ≈ 4.19 over 32,
// E[max|x|²]^½ ≈ 2.13 over 16): Q4_K 4.19/15/√12 = 0.0807, Q5_K 4.19/31/√12 =
// 0.0391, Q6_K 2.13/32/√12 = 0.0192. A quantizer that searches its scales must
// beat those. Measured (seed 11): Q4_K 0.0712, Q5_K 0.0359, Q6_K 0.0173.
TEST(KQuants, GaussianRoundTripErrorBeatsAPlainGridAndOrdersByBits) {
  util::Rng rng(11);
  const int64_t n = 256 * 256;
  std::vector<float> x(static_cast<size_t>(n)), y(x.size());
  for (auto& v : x) v = static_cast<float>(rng.Normal());
  auto rms = [&](TensorType t) {
    std::vector<uint8_t> enc(RowBytes(t, n));
    QuantizeRow(t, x.data(), n, enc.data());
    DequantizeRow(t, enc.data(), n, y.data());
    double e2 = 0;
    for (size_t i = 0; i < x.size(); ++i) e2 += (static_cast<double>(x[i]) - y[i]) * (x[i] - y[i]);
    return std::sqrt(e2 / static_cast<double>(n));
  };
  const double q4k = rms(TensorType::kQ4_K), q5k = rms(TensorType::kQ5_K);
  const double q6k = rms(TensorType::kQ6_K), q40 = rms(TensorType::kQ4_0);
  EXPECT_LT(q4k, 0.0807);
  EXPECT_LT(q5k, 0.0391);
  EXPECT_LT(q6k, 0.0192);
  EXPECT_LT(q6k, q5k);
  EXPECT_LT(q5k, q4k);
  EXPECT_LT(q4k, q40);  // the same 4.5 bits per weight as Q4_0, used better
  RecordProperty("rms_q4_k", std::to_string(q4k));
  RecordProperty("rms_q5_k", std::to_string(q5k));
  RecordProperty("rms_q6_k", std::to_string(q6k));
}

TEST(KQuants, ZeroTinyHugeAndConstantBlocksEncodeWithoutNaN) {
  util::Rng rng(23);
  std::vector<float> normal(256);
  for (auto& v : normal) v = static_cast<float>(rng.Normal());
  struct Input {
    const char* name;
    std::vector<float> x;
  };
  std::vector<Input> inputs;
  inputs.push_back({"zeros", std::vector<float>(256, 0.0f)});
  for (float scale :
       {std::numeric_limits<float>::denorm_min() * 64, 1e-30f, 1e-6f, 1e4f, 1e12f, 3e38f}) {
    Input in{"scaled", normal};
    for (auto& v : in.x) v = std::clamp(v, -1.0f, 1.0f) * scale;
    inputs.push_back(std::move(in));
  }
  Input mixed{"one huge among tiny", normal};
  for (auto& v : mixed.x) v *= 1e-30f;
  mixed.x[77] = -1e30f;
  inputs.push_back(std::move(mixed));
  inputs.push_back({"constant 5", std::vector<float>(256, 5.0f)});
  inputs.push_back({"constant -5", std::vector<float>(256, -5.0f)});
  Input spike{"single nonzero", std::vector<float>(256, 0.0f)};
  spike.x[100] = 3.0f;
  inputs.push_back(std::move(spike));

  for (TensorType t : kKTypes) {
    for (const Input& in : inputs) {
      std::vector<uint8_t> enc(RowBytes(t, 256));
      QuantizeRow(t, in.x.data(), 256, enc.data());
      std::vector<float> y(256);
      DequantizeRow(t, enc.data(), 256, y.data());
      float amax = 0;
      for (float v : in.x) amax = std::max(amax, std::fabs(v));
      for (size_t i = 0; i < 256; ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << TypeName(t) << " " << in.name << " element " << i;
        // Saturation and underflow lose accuracy, never bound: at most the
        // largest input (the f16 scales round up by at most 2^-11, the 6- and
        // 8-bit codes by at most half a step of the largest).
        EXPECT_LE(std::fabs(y[i]), amax * 1.1f)
            << TypeName(t) << " " << in.name << " element " << i;
      }
      const std::string name = in.name;
      if (name == "zeros") {
        for (float v : y) EXPECT_EQ(v, 0.0f) << TypeName(t);
      } else if (name == "constant 5" || name == "constant -5" || name == "single nonzero") {
        // Representable exactly up to the f16 super-block scale (2^-11 relative).
        for (size_t i = 0; i < 256; ++i) {
          EXPECT_NEAR(y[i], in.x[i], 3e-3) << TypeName(t) << " " << name << " element " << i;
        }
      }
    }
    // At 1e4 the f16 scales are normal halves: the error is the unit-scale error, scaled.
    std::vector<float> x(256), y(256);
    for (size_t i = 0; i < 256; ++i) x[i] = normal[i] * 1e4f;
    std::vector<uint8_t> enc(RowBytes(t, 256));
    QuantizeRow(t, x.data(), 256, enc.data());
    DequantizeRow(t, enc.data(), 256, y.data());
    double e2 = 0;
    for (size_t i = 0; i < 256; ++i) e2 += (static_cast<double>(x[i]) - y[i]) * (x[i] - y[i]);
    EXPECT_LT(std::sqrt(e2 / 256) / 1e4, 0.1) << TypeName(t);
  }
}

TEST(KQuants, ScalingByAPowerOfTwoOnlyScalesTheSuperBlockScales) {
  util::Rng rng(29);
  const int64_t n = 1024;
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = static_cast<float>(rng.Normal());
  for (TensorType t : kKTypes) {
    std::vector<uint8_t> base(RowBytes(t, n));
    QuantizeRow(t, x.data(), n, base.data());
    for (int p : {-2, 8}) {
      std::vector<float> xs(x.size());
      for (size_t i = 0; i < x.size(); ++i) xs[i] = std::ldexp(x[i], p);
      std::vector<uint8_t> enc(base.size());
      QuantizeRow(t, xs.data(), n, enc.data());
      const size_t bb = static_cast<size_t>(GetTypeInfo(t).block_bytes);
      for (size_t b = 0; b < enc.size() / bb; ++b) {
        const uint8_t* e = enc.data() + b * bb;
        const uint8_t* r = base.data() + b * bb;
        // f16 scales: d and dmin at the front (Q4_K/Q5_K), d at the end (Q6_K).
        const size_t scales_at = t == TensorType::kQ6_K ? bb - 2 : 0;
        const size_t n_scales = t == TensorType::kQ6_K ? 1 : 2;
        for (size_t s = 0; s < n_scales; ++s) {
          uint16_t he, hr;
          std::memcpy(&he, e + scales_at + 2 * s, 2);
          std::memcpy(&hr, r + scales_at + 2 * s, 2);
          EXPECT_EQ(HalfToFloat(he), std::ldexp(HalfToFloat(hr), p))
              << TypeName(t) << " block " << b;
        }
        const size_t rest_at = t == TensorType::kQ6_K ? 0 : 4;
        EXPECT_EQ(0, std::memcmp(e + rest_at, r + rest_at, bb - 2 * n_scales))
            << TypeName(t) << " block " << b << " scale " << p;
      }
    }
  }
}

TEST(KQuants, Q8KActivationsFollowTheirFormat) {
  EXPECT_EQ(ActFormatFor(TensorType::kQ4_K), ActFormat::kQ8K);
  EXPECT_EQ(ActFormatFor(TensorType::kQ5_K), ActFormat::kQ8K);
  EXPECT_EQ(ActFormatFor(TensorType::kQ6_K), ActFormat::kQ8K);
  EXPECT_EQ(ActBlockSize(ActFormat::kQ8K), 256);
  EXPECT_EQ(ActRowBytes(ActFormat::kQ8K, 768), 3 * sizeof(ActBlockQ8K));
  util::Rng rng(31);
  const int64_t n = 768;
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = static_cast<float>(rng.Normal()) * 3.0f;
  x[300] = -250.0f;
  std::fill(x.begin() + 512, x.end(), 0.0f);  // an all-zero block
  for (const KernelTable* k : testing::AvailableKernelTables()) {
    std::vector<ActBlockQ8K> act(3);
    k->quantize_act(ActFormat::kQ8K, x.data(), n, act.data());
    for (int64_t b = 0; b < 3; ++b) {
      const ActBlockQ8K& ab = act[static_cast<size_t>(b)];
      float amax = 0;
      for (int i = 0; i < 256; ++i)
        amax = std::max(amax, std::fabs(x[static_cast<size_t>(b * 256 + i)]));
      EXPECT_EQ(ab.d, amax / 127.0f) << IsaName(k->isa) << " block " << b;
      for (int g = 0; g < 16; ++g) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) {
          const int idx = 16 * g + i;
          EXPECT_LE(std::abs(ab.q[idx]), 127);
          EXPECT_LE(std::fabs(x[static_cast<size_t>(b * 256 + idx)] - ab.d * ab.q[idx]),
                    ab.d / 2 * 1.0001f)
              << IsaName(k->isa) << " element " << b * 256 + idx;
          sum += ab.q[idx];
        }
        EXPECT_EQ(ab.bsums[g], sum) << IsaName(k->isa) << " block " << b << " group " << g;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// Legacy 32-blocks: Q4_1, Q5_0, Q5_1.

// Expected values below are worked out by hand from docs/formats/gguf.md.
TEST(LegacyQuants, HandBuiltQ4_1BlockDecodesToTheValuesItsLayoutDefines) {
  BlockQ4_1 b{};
  b.d = 0x3800;     // 0.5
  b.m = 0xC000;     // −2
  b.qs[0] = 0x3A;   // element 0: q 10; element 16: q 3
  b.qs[15] = 0xF0;  // element 15: q 0; element 31: q 15
  std::array<float, 32> want;
  want.fill(-2.0f);  // q 0: the min
  want[0] = 3.0f;    // 0.5·10 − 2
  want[16] = -0.5f;  // 0.5·3 − 2
  want[31] = 5.5f;   // 0.5·15 − 2
  std::array<float, 32> got{};
  DequantizeRow(TensorType::kQ4_1, &b, 32, got.data());
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
}

TEST(LegacyQuants, HandBuiltQ5_0BlockDecodesToTheValuesItsLayoutDefines) {
  BlockQ5_0 b{};
  b.d = 0x3400;  // 0.25
  // Fifth bits of elements 0, 17 and 31: bit i of the little-endian qh.
  b.qh[0] = 0x01;
  b.qh[2] = 0x02;
  b.qh[3] = 0x80;
  b.qs[0] = 0x05;  // element 0: nibble 5 → q 21; element 16: q 0
  b.qs[1] = 0x70;  // element 1: q 0; element 17: nibble 7 → q 23
  std::array<float, 32> want;
  want.fill(-4.0f);  // q 0: 0.25·(0 − 16)
  want[0] = 1.25f;   // 0.25·(21 − 16)
  want[17] = 1.75f;  // 0.25·(23 − 16)
  want[31] = 0.0f;   // nibble 0, fifth bit: q 16
  std::array<float, 32> got{};
  DequantizeRow(TensorType::kQ5_0, &b, 32, got.data());
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
}

TEST(LegacyQuants, HandBuiltQ5_1BlockDecodesToTheValuesItsLayoutDefines) {
  BlockQ5_1 b{};
  b.d = 0x3C00;    // 1
  b.m = 0x3800;    // 0.5
  b.qh[0] = 0x04;  // element 2
  b.qh[2] = 0x10;  // element 20
  b.qs[2] = 0x9F;  // element 2: nibble 15 → q 31; element 18: q 9
  b.qs[4] = 0x30;  // element 4: q 0; element 20: nibble 3 → q 19
  std::array<float, 32> want;
  want.fill(0.5f);
  want[2] = 31.5f;
  want[18] = 9.5f;
  want[20] = 19.5f;
  std::array<float, 32> got{};
  DequantizeRow(TensorType::kQ5_1, &b, 32, got.data());
  for (size_t i = 0; i < 32; ++i) EXPECT_EQ(got[i], want[i]) << "element " << i;
}

TEST(LegacyQuants, KernelOnHandBuiltBlocksMatchesTheirDecodedValues) {
  // The activation row is built by hand too: d 0.5, q[i] = i % 7 − 3, 8 blocks.
  std::array<ActBlockQ8, 8> a{};
  for (int b = 0; b < 8; ++b) {
    a[static_cast<size_t>(b)].d = 0.5f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      a[static_cast<size_t>(b)].q[i] = static_cast<int8_t>((32 * b + i) % 7 - 3);
      sum += a[static_cast<size_t>(b)].q[i];
    }
    a[static_cast<size_t>(b)].sum = sum;
  }
  util::Rng rng(19);
  for (TensorType t : kLegacyTypes) {
    // Random bytes are valid blocks; small f16 scales (and mins, signed).
    std::vector<uint8_t> w(RowBytes(t, 256));
    for (auto& byte : w) byte = static_cast<uint8_t>(rng.Below(256));
    const size_t bb = static_cast<size_t>(GetTypeInfo(t).block_bytes);
    for (size_t b = 0; b < 8; ++b) {
      const uint16_t d = 0x2400;                                            // 2^-6
      const uint16_t m = b % 2 == 0 ? uint16_t{0x2C00} : uint16_t{0xAC00};  // ±2^-4
      std::memcpy(w.data() + b * bb, &d, 2);
      if (t != TensorType::kQ5_0) std::memcpy(w.data() + b * bb + 2, &m, 2);
    }
    std::vector<float> deq(256);
    DequantizeRow(t, w.data(), 256, deq.data());
    double want = 0, mag = 0;
    for (int i = 0; i < 256; ++i) {
      const int aq = a[static_cast<size_t>(i / 32)].q[i % 32];
      want += static_cast<double>(deq[static_cast<size_t>(i)]) * 0.5 * aq;
      const KParts p = DecodeK(t, w.data(), i);
      EXPECT_EQ(deq[static_cast<size_t>(i)], static_cast<float>(p.a - p.b))
          << TypeName(t) << " " << i;
      mag += (std::fabs(p.a) + std::fabs(p.b)) * 0.5 * std::abs(aq);
    }
    for (const KernelTable* k : testing::AvailableKernelTables()) {
      float out = 0;
      MatMulArgs args;
      args.w_type = t;
      args.w = w.data();
      args.w_row_bytes = w.size();
      args.row_end = 1;
      args.act = reinterpret_cast<const uint8_t*>(a.data());
      args.act_row_bytes = sizeof(a);
      args.n_tokens = 1;
      args.n = 256;
      args.out = &out;
      args.out_stride = 1;
      k->matmul(args);
      EXPECT_LE(std::fabs(out - want), Gamma(2 * 8 + 5) * mag + 1e-30)
          << IsaName(k->isa) << " " << TypeName(t);
    }
  }
}

// RMS error of quantize → dequantize on N(0, 1) data. These are plain
// round-to-nearest grids, so the error is about step/√12 with the step from
// the RMS of each block's span over 32 Gaussian samples (range ≈ 4.16,
// max|x| ≈ 2.42): Q4_1 4.16/15/√12 = 0.0801, Q5_1 4.16/31/√12 = 0.0387,
// Q5_0 2.42/16/√12 = 0.0437, Q4_0 2.42/8/√12 = 0.0873; the bounds allow 3%.
// Measured (seed 13): Q4_1 0.0782, Q5_0 0.0424, Q5_1 0.0376, Q4_0 0.0851.
TEST(LegacyQuants, GaussianRoundTripErrorIsThatOfTheirGridsAndOrdersByBits) {
  util::Rng rng(13);
  const int64_t n = 256 * 256;
  std::vector<float> x(static_cast<size_t>(n)), y(x.size());
  for (auto& v : x) v = static_cast<float>(rng.Normal());
  auto rms = [&](TensorType t) {
    std::vector<uint8_t> enc(RowBytes(t, n));
    QuantizeRow(t, x.data(), n, enc.data());
    DequantizeRow(t, enc.data(), n, y.data());
    double e2 = 0;
    for (size_t i = 0; i < x.size(); ++i) e2 += (static_cast<double>(x[i]) - y[i]) * (x[i] - y[i]);
    const double r = std::sqrt(e2 / static_cast<double>(n));
    RecordProperty("rms_" + std::string(TypeName(t)), std::to_string(r));
    return r;
  };
  const double q41 = rms(TensorType::kQ4_1), q50 = rms(TensorType::kQ5_0);
  const double q51 = rms(TensorType::kQ5_1), q40 = rms(TensorType::kQ4_0);
  EXPECT_LT(q41, 0.0801 * 1.03);
  EXPECT_LT(q51, 0.0387 * 1.03);
  EXPECT_LT(q50, 0.0437 * 1.03);
  EXPECT_LT(q51, q50);
  EXPECT_LT(q50, q41);
  EXPECT_LT(q41, q40);
}

TEST(LegacyQuants, ZeroConstantAndHugeBlocksEncodeWithoutNaN) {
  util::Rng rng(37);
  std::vector<float> normal(64);
  for (auto& v : normal) v = static_cast<float>(rng.Normal());
  std::vector<std::vector<float>> inputs = {
      std::vector<float>(64, 0.0f), std::vector<float>(64, 5.0f), std::vector<float>(64, -5.0f)};
  for (float scale : {1e-6f, 1e4f, 1e9f}) {
    inputs.push_back(normal);
    for (auto& v : inputs.back()) v *= scale;
  }
  for (TensorType t : kLegacyTypes) {
    for (const auto& x : inputs) {
      std::vector<uint8_t> enc(RowBytes(t, 64));
      QuantizeRow(t, x.data(), 64, enc.data());
      std::vector<float> y(64);
      DequantizeRow(t, enc.data(), 64, y.data());
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      for (size_t i = 0; i < 64; ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << TypeName(t) << " element " << i;
        if (amax <= 1e4f) {  // within the f16 range: within a step of the input
          EXPECT_LE(std::fabs(y[i] - x[i]), amax / 7.0f + 1e-30f)
              << TypeName(t) << " element " << i;
        }
      }
      if (amax == 0) {
        for (float v : y) EXPECT_EQ(v, 0.0f) << TypeName(t);
      }
    }
  }
}

TEST(Kernels, SimdActivationQuantizationMatchesTheScalarBytes) {
  util::Rng rng(41);
  const int64_t n = 1024;
  std::vector<std::vector<float>> rows;
  for (float scale : {1e-30f, 1e-3f, 1.0f, 300.0f, 1e30f}) {
    rows.emplace_back(static_cast<size_t>(n));
    for (auto& v : rows.back()) v = static_cast<float>(rng.Normal()) * scale;
  }
  // Edge cases: an all-zero block, a spike, ties (x/d exactly k + 0.5), a
  // subnormal block (1/max overflows), an infinity and a NaN.
  std::vector<float> edge(static_cast<size_t>(n), 0.0f);
  for (int64_t i = 256; i < 512; ++i)
    edge[static_cast<size_t>(i)] = static_cast<float>(i % 9) - 4.0f;
  edge[300] = 127.0f;  // d = 1: the others are whole numbers or ties below
  for (int64_t i = 512; i < 544; ++i)
    edge[static_cast<size_t>(i)] = static_cast<float>(i - 512) * 0.5f;
  edge[543] = 127.0f;
  for (int64_t i = 544; i < 768; ++i)
    edge[static_cast<size_t>(i)] =
        std::numeric_limits<float>::denorm_min() * static_cast<float>(i % 5);
  edge[800] = std::numeric_limits<float>::infinity();
  edge[900] = std::numeric_limits<float>::quiet_NaN();
  rows.push_back(edge);
  const KernelTable* scalar = GetKernels(Isa::kScalar);
  for (const KernelTable* k : testing::AvailableKernelTables()) {
    for (ActFormat fmt : {ActFormat::kF32, ActFormat::kQ8, ActFormat::kQ8K}) {
      for (size_t r = 0; r < rows.size(); ++r) {
        std::vector<uint8_t> want(ActRowBytes(fmt, n)), got(want.size(), 0xAA);
        scalar->quantize_act(fmt, rows[r].data(), n, want.data());
        k->quantize_act(fmt, rows[r].data(), n, got.data());
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size()))
            << IsaName(k->isa) << " format " << static_cast<int>(fmt) << " row " << r;
      }
    }
  }
}

// SwiGLU's gate: within a few float roundings of the float64 formula over
// the range activations take and beyond (where e^-g overflows a float), NaN
// kept, and each result the same bits whatever range, offset or length it
// is computed in (ForwardBatch's split of rows must not change it).
TEST(Kernels, SwiGluMatchesFloat64AndIgnoresWhereAnElementLies) {
  util::Rng rng(43);
  std::vector<float> gate, up;
  for (int i = 0; i < 997; ++i) {
    gate.push_back(static_cast<float>(rng.Normal()) * (i % 3 == 0 ? 30.0f : 3.0f));
    up.push_back(static_cast<float>(rng.Normal()));
  }
  for (float g : {0.0f, -0.0f, 88.0f, -88.0f, 89.0f, -89.0f, 1e30f, -1e30f, 1e-30f}) {
    gate.push_back(g);
    up.push_back(1.5f);
  }
  const int64_t n = static_cast<int64_t>(gate.size());
  for (const KernelTable* k : testing::AvailableKernelTables()) {
    std::vector<float> whole = gate;
    k->swiglu(whole.data(), up.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[static_cast<size_t>(i)];
      const double want = g / (1.0 + std::exp(-g)) * up[static_cast<size_t>(i)];
      EXPECT_NEAR(whole[static_cast<size_t>(i)], want, 1e-6 * std::fabs(want) + 1e-35)
          << IsaName(k->isa) << " gate " << g;
    }
    for (int64_t begin : {0, 1, 5, 8, 13, 500}) {
      for (int64_t len : {1, 3, 7, 8, 9, 15, 16, 17, 31, 100}) {
        std::vector<float> part = gate;
        k->swiglu(part.data() + begin, up.data() + begin, len);
        for (int64_t i = begin; i < begin + len; ++i) {
          ASSERT_EQ(0, std::memcmp(&part[static_cast<size_t>(i)], &whole[static_cast<size_t>(i)],
                                   sizeof(float)))
              << IsaName(k->isa) << " element " << i << " of [" << begin << ", +" << len << ")";
        }
        EXPECT_EQ(part[static_cast<size_t>(begin + len)], gate[static_cast<size_t>(begin + len)])
            << "wrote past the range";
      }
    }
    float nan = std::numeric_limits<float>::quiet_NaN();
    const float one = 1.0f;
    k->swiglu(&nan, &one, 1);
    EXPECT_TRUE(std::isnan(nan)) << IsaName(k->isa);
  }
}

TEST(Kernels, BestTableIsAvailable) {
  const KernelTable& best = BestKernels();
  EXPECT_EQ(GetKernels(best.isa), &best);
}

}  // namespace
}  // namespace strata::kernels
