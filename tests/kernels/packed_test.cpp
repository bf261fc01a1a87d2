// The row-interleaved ("packed") weight layout (kernels.h, PackRows): its
// byte layout, its round trip, and every table's packed kernel against the
// scalar reference and the float64 dot, bitwise batch invariant.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/internal/blocks.h"
#include "kernels/kernel_bounds.h"
#include "kernels/kernels.h"
#include "testing/kernel_tables.h"
#include "util/random.h"

namespace strata::kernels {
namespace {

using internal::ActBlockQ8;
using testing::Gamma;

constexpr TensorType kPackable[] = {TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_1,
                                    TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ4_K,
                                    TensorType::kQ5_K, TensorType::kQ6_K};

// Rows of whole blocks of every packable type, in k super-blocks.
constexpr int64_t SuperBlocks(int64_t k) { return 256 * k; }

struct Matrix {
  std::vector<uint8_t> plain, packed;  // [rows][row_bytes], and PackRows of it
  size_t row_bytes = 0, packed_row_bytes = 0;
};

Matrix MakeMatrix(TensorType t, int64_t rows, int64_t n, util::Rng& rng) {
  Matrix m;
  m.row_bytes = RowBytes(t, n);
  m.plain.resize(m.row_bytes * static_cast<size_t>(rows));
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    // Rows of different magnitudes, so a mixed-up scale shows.
    const double scale = std::exp(rng.Normal());
    for (float& v : row) v = static_cast<float>(scale * rng.Normal());
    QuantizeRow(t, row.data(), n, m.plain.data() + static_cast<size_t>(r) * m.row_bytes);
  }
  m.packed_row_bytes = PackedRowBytes(t, n);
  m.packed.resize(m.packed_row_bytes * static_cast<size_t>(rows));
  PackRows(t, m.plain.data(), m.row_bytes, rows, n, m.packed.data());
  return m;
}

std::vector<uint8_t> MakeActs(const KernelTable& k, TensorType t, int64_t tokens, int64_t n,
                              util::Rng& rng) {
  const ActFormat fmt = ActFormatFor(t);
  const size_t ab = ActRowBytes(fmt, n);
  std::vector<uint8_t> act(ab * static_cast<size_t>(tokens));
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < tokens; ++i) {
    for (float& v : x) v = static_cast<float>(rng.Normal());
    k.quantize_act(fmt, x.data(), n, act.data() + static_cast<size_t>(i) * ab);
  }
  return act;
}

// out[t][r] for rows [r0, r1) and tokens [t0, t1) of `w` (plain or packed).
void MatMulRows(const KernelTable& k, TensorType t, const uint8_t* w, size_t row_bytes, bool packed,
                const std::vector<uint8_t>& act, int64_t n, int64_t rows, int64_t r0, int64_t r1,
                int64_t t0, int64_t t1, std::vector<float>& out) {
  const size_t ab = ActRowBytes(ActFormatFor(t), n);
  MatMulArgs a;
  a.w_type = t;
  a.w = w;
  a.w_row_bytes = row_bytes;
  a.row_begin = r0;
  a.row_end = r1;
  a.act = act.data() + static_cast<size_t>(t0) * ab;
  a.act_row_bytes = ab;
  a.n_tokens = t1 - t0;
  a.n = n;
  a.out = out.data() + t0 * rows;
  a.out_stride = rows;
  a.packed = packed;
  k.matmul(a);
}

TEST(PackedWeights, Q8_0GroupsHoldScalesThenFourByteChunksOfEachRow) {
  util::Rng rng(3);
  const int64_t n = 64, rows = 16;
  const Matrix m = MakeMatrix(TensorType::kQ8_0, rows, n, rng);
  ASSERT_EQ(m.packed_row_bytes, m.row_bytes);
  const auto* plain = reinterpret_cast<const internal::BlockQ8_0*>(m.plain.data());
  const int64_t nb = n / 32;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = r / 8, i = r % 8;
    for (int64_t b = 0; b < nb; ++b) {
      const internal::BlockQ8_0& src = plain[r * nb + b];
      // Group g starts where its first row did; block b of the group is 8 · 34 bytes.
      const uint8_t* blk = m.packed.data() + static_cast<size_t>(g * 8) * m.row_bytes +
                           static_cast<size_t>(b) * 8 * 34;
      uint16_t d;
      std::memcpy(&d, blk + 2 * i, 2);
      EXPECT_EQ(d, src.d) << "row " << r << " block " << b;
      for (int e = 0; e < 32; ++e) {
        EXPECT_EQ(static_cast<int8_t>(blk[16 + 32 * (e / 4) + 4 * i + e % 4]), src.qs[e])
            << "row " << r << " block " << b << " element " << e;
      }
    }
  }
  std::vector<uint8_t> back(m.plain.size());
  UnpackRows(TensorType::kQ8_0, m.packed.data(), m.row_bytes, rows, n, back.data());
  EXPECT_EQ(back, m.plain);
}

TEST(PackedWeights, Q4_KGroupsHoldUnpackedScalesAndFourByteCodeChunksAndRoundTrip) {
  util::Rng rng(5);
  const int64_t n = SuperBlocks(2), rows = 16;
  const Matrix m = MakeMatrix(TensorType::kQ4_K, rows, n, rng);
  const auto* plain = reinterpret_cast<const internal::BlockQ4_K*>(m.plain.data());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = r / 8, i = r % 8;
    for (int64_t b = 0; b < n / 256; ++b) {
      const internal::BlockQ4_K& src = plain[r * (n / 256) + b];
      const uint8_t* blk = m.packed.data() + static_cast<size_t>(g * 8) * m.packed_row_bytes +
                           static_cast<size_t>(b) * 1184;
      uint16_t d, dmin;
      std::memcpy(&d, blk + 2 * i, 2);
      std::memcpy(&dmin, blk + 16 + 2 * i, 2);
      EXPECT_EQ(d, src.d);
      EXPECT_EQ(dmin, src.dmin);
      for (int j = 0; j < 8; ++j) {
        const internal::ScaleMin sm = internal::UnpackScaleMinK4(src.scales, j);
        EXPECT_EQ(blk[32 + 8 * j + i], sm.scale) << "row " << r << " sub-block " << j;
        EXPECT_EQ(blk[96 + 16 * (j / 2) + 2 * i + j % 2], sm.min)
            << "row " << r << " sub-block " << j;
      }
      for (int l = 0; l < 128; ++l) {
        EXPECT_EQ(blk[160 + 32 * (8 * (l / 32) + (l % 32) / 4) + 4 * i + l % 4], src.qs[l])
            << "row " << r << " code byte " << l;
      }
    }
  }
  std::vector<uint8_t> back(m.plain.size());
  UnpackRows(TensorType::kQ4_K, m.packed.data(), m.row_bytes, rows, n, back.data());
  EXPECT_EQ(back, m.plain);
}

TEST(PackedWeights, EveryPackableTypeRoundTripsAndPacksEveryByteOnce) {
  util::Rng rng(9);
  for (TensorType t : kPackable) {
    const int64_t n = SuperBlocks(2), rows = 24;
    const Matrix m = MakeMatrix(t, rows, n, rng);
    std::vector<uint8_t> back(m.plain.size());
    UnpackRows(t, m.packed.data(), m.row_bytes, rows, n, back.data());
    EXPECT_EQ(back, m.plain) << TypeName(t);
    // A packer that wrote a byte twice would leave another unset: pack a
    // matrix of distinct rows over a poisoned buffer and unpack it again.
    std::vector<uint8_t> poisoned(m.packed.size(), 0xA5);
    PackRows(t, m.plain.data(), m.row_bytes, rows, n, poisoned.data());
    EXPECT_EQ(poisoned, m.packed) << TypeName(t);
  }
}

TEST(PackedWeights, APackedRowDequantizesAsItsPlainRow) {
  util::Rng rng(13);
  for (TensorType t : kPackable) {
    const int64_t n = SuperBlocks(2), rows = 16;
    const Matrix m = MakeMatrix(t, rows, n, rng);
    std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(t, m.plain.data() + static_cast<size_t>(r) * m.row_bytes, n, want.data());
      const int64_t g = r / kPackRows;
      DequantizePackedRow(t,
                          m.packed.data() + static_cast<size_t>(g * kPackRows) * m.packed_row_bytes,
                          n, r % kPackRows, got.data());
      EXPECT_EQ(got, want) << TypeName(t) << " row " << r;
    }
  }
}

TEST(PackedWeights, ScalarPackedKernelIsThePlainScalarKernelBitForBit) {
  util::Rng rng(11);
  const KernelTable& scalar = *GetKernels(Isa::kScalar);
  for (TensorType t : kPackable) {
    const int64_t n = SuperBlocks(2), rows = 24, tokens = 5;
    const Matrix m = MakeMatrix(t, rows, n, rng);
    const std::vector<uint8_t> act = MakeActs(scalar, t, tokens, n, rng);
    std::vector<float> plain(static_cast<size_t>(rows * tokens)), packed(plain.size());
    MatMulRows(scalar, t, m.plain.data(), m.row_bytes, false, act, n, rows, 0, rows, 0, tokens,
               plain);
    MatMulRows(scalar, t, m.packed.data(), m.packed_row_bytes, true, act, n, rows, 0, rows, 0,
               tokens, packed);
    EXPECT_EQ(0, std::memcmp(plain.data(), packed.data(), plain.size() * sizeof(float)))
        << TypeName(t);
  }
}

// Against the float64 dot of the weights with the activations as quantized:
// only the kernel's own arithmetic remains, within the plain kernels' bounds
// (kernels_test.cpp): γ(n/32 + 2)·Σ_b |s_b·dw_b·da_b| for Q8_0, the
// two-part bound γ(k)·Σ_i (|A_i| + |B_i|)·|a_i| + γ(1)·Σ|w_i·a_i| for Q4_K.
TEST(PackedWeights, EveryTableMatchesTheFloat64DotOfTheQuantizedActivations) {
  util::Rng rng(17);
  for (const KernelTable* k : testing::AvailableKernelTables()) {
    for (TensorType t : kPackable) {
      for (int64_t n : {256, 1024, 4096}) {
        const int64_t rows = 16, tokens = 9;
        std::vector<testing::Case> cases;
        Matrix m;
        m.row_bytes = RowBytes(t, n);
        for (int64_t r = 0; r < rows; ++r) {
          cases.push_back(testing::MakeCase(t, n, rng, r % 2 == 0 ? 1.0f : 300.0f));
          m.plain.insert(m.plain.end(), cases.back().w.begin(), cases.back().w.end());
        }
        m.packed_row_bytes = PackedRowBytes(t, n);
        m.packed.resize(m.packed_row_bytes * static_cast<size_t>(rows));
        PackRows(t, m.plain.data(), m.row_bytes, rows, n, m.packed.data());
        const std::vector<uint8_t> act = MakeActs(*k, t, tokens, n, rng);
        std::vector<float> out(static_cast<size_t>(rows * tokens));
        MatMulRows(*k, t, m.packed.data(), m.packed_row_bytes, true, act, n, rows, 0, rows, 0,
                   tokens, out);
        const size_t ab = ActRowBytes(ActFormatFor(t), n);
        for (int64_t tok = 0; tok < tokens; ++tok) {
          const std::vector<uint8_t> x(act.begin() + static_cast<std::ptrdiff_t>(tok * ab),
                                       act.begin() + static_cast<std::ptrdiff_t>((tok + 1) * ab));
          for (int64_t r = 0; r < rows; ++r) {
            const testing::Case& c = cases[static_cast<size_t>(r)];
            double ref = 0, bound = 0;
            if (!testing::HasTwoParts(t)) {
              for (int64_t b = 0; b < n / 32; ++b) {
                double sum = 0;
                for (int64_t i = 32 * b; i < 32 * b + 32; ++i) {
                  const testing::ActScale as = testing::ActAt(t, x, i);
                  sum += c.w_exact[static_cast<size_t>(i)] * as.q * as.d;
                }
                ref += sum;
                bound += std::fabs(sum);
              }
              bound *= Gamma(static_cast<double>(n / 32 + 2));
            } else {
              double parts = 0, abs_terms = 0;
              for (int64_t i = 0; i < n; ++i) {
                const testing::ActScale as = testing::ActAt(t, x, i);
                const double xq = as.d * as.q;
                const testing::KParts kp = testing::DecodeK(t, c.w.data(), i);
                ref += c.w_exact[static_cast<size_t>(i)] * xq;
                parts += (std::fabs(kp.a) + std::fabs(kp.b)) * std::fabs(xq);
                abs_terms += std::fabs(c.w_exact[static_cast<size_t>(i)] * xq);
              }
              bound = Gamma(testing::TwoPartRoundings(t, n)) * parts + Gamma(1) * abs_terms;
            }
            const float got = out[static_cast<size_t>(tok * rows + r)];
            EXPECT_LE(std::fabs(got - ref), bound * 1.0001 + 1e-30)
                << IsaName(k->isa) << " " << TypeName(t) << " n=" << n << " row " << r << " token "
                << tok << " got " << got << " want " << ref;
          }
        }
      }
    }
  }
}

TEST(PackedWeights, PackedKernelsAreBatchInvariantBitForBit) {
  // Any grouping of tokens, and row ranges on group boundaries, give identical
  // floats: partial token tiles, more than one 64-token chunk, single tokens.
  util::Rng rng(23);
  const int64_t n = SuperBlocks(3), rows = 40, tokens = 70;
  for (const KernelTable* k : testing::AvailableKernelTables()) {
    for (TensorType t : kPackable) {
      const Matrix m = MakeMatrix(t, rows, n, rng);
      const std::vector<uint8_t> act = MakeActs(*k, t, tokens, n, rng);
      auto run = [&](int64_t r0, int64_t r1, int64_t t0, int64_t t1, std::vector<float>& out) {
        MatMulRows(*k, t, m.packed.data(), m.packed_row_bytes, true, act, n, rows, r0, r1, t0, t1,
                   out);
      };
      std::vector<float> all(static_cast<size_t>(rows * tokens)), pieces(all.size()),
          groups(all.size());
      run(0, rows, 0, tokens, all);
      for (int64_t tok = 0; tok < tokens; ++tok) run(0, rows, tok, tok + 1, pieces);
      EXPECT_EQ(0, std::memcmp(all.data(), pieces.data(), all.size() * sizeof(float)))
          << IsaName(k->isa) << " " << TypeName(t) << " (one token at a time)";
      for (int64_t r = 0; r < rows; r += 8) {
        for (int64_t tok = 0; tok < tokens; tok += 3) {
          run(r, r + 8, tok, std::min(tokens, tok + 3), groups);
        }
      }
      EXPECT_EQ(0, std::memcmp(all.data(), groups.data(), all.size() * sizeof(float)))
          << IsaName(k->isa) << " " << TypeName(t) << " (groups, 3 tokens at a time)";
    }
  }
}

TEST(PackedWeights, OnlyTablesWithTheirOwnPackedKernelPreferIt) {
  EXPECT_TRUE(IsPackable(TensorType::kQ8_0));
  EXPECT_FALSE(IsPackable(TensorType::kF32));
  EXPECT_TRUE(IsPackable(TensorType::kQ4_K));
  EXPECT_TRUE(IsPackable(TensorType::kQ5_0));
  EXPECT_FALSE(IsPackable(TensorType::kBF16));
  EXPECT_EQ(PackedRowBytes(TensorType::kQ8_0, 64), RowBytes(TensorType::kQ8_0, 64));
  EXPECT_EQ(PackedRowBytes(TensorType::kQ4_K, 512), 2u * 148);  // 144 + the unpacked scales
  EXPECT_TRUE(IsPackable(TensorType::kQ6_K));
  EXPECT_EQ(PackedRowBytes(TensorType::kQ6_K, 512), RowBytes(TensorType::kQ6_K, 512));
  for (TensorType t : {TensorType::kQ4_0, TensorType::kQ4_1, TensorType::kQ5_0, TensorType::kQ5_1})
    EXPECT_EQ(PackedRowBytes(t, 64), RowBytes(t, 64)) << TypeName(t);
  EXPECT_EQ(PackedRowBytes(TensorType::kQ5_K, 512), 2u * 180);  // 176 + the unpacked scales
  const KernelTable& scalar = *GetKernels(Isa::kScalar);
  ASSERT_NE(scalar.prefers_packed, nullptr);
  EXPECT_FALSE(scalar.prefers_packed(TensorType::kQ8_0));  // it unpacks
  for (const KernelTable* k : testing::AvailableKernelTables()) {
    ASSERT_NE(k->prefers_packed, nullptr) << IsaName(k->isa);
    EXPECT_FALSE(k->prefers_packed(TensorType::kF16)) << IsaName(k->isa);
  }
  // Measured faster on AVX2 (docs/benchmarks.md, "Row-interleaved weights").
  if (const KernelTable* avx2 = GetKernels(Isa::kAvx2)) {
    EXPECT_TRUE(avx2->prefers_packed(TensorType::kQ8_0));
  }
}

}  // namespace
}  // namespace strata::kernels
