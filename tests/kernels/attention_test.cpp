// The attention kernels (KernelTable::attend) of every table this CPU has:
// against a float64 softmax reference, and bitwise independent of which
// other queries share the call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/kernels.h"
#include "testing/kernel_tables.h"
#include "util/random.h"

namespace strata::kernels {
namespace {

// Key and value rows of `n_rows` positions, stored out of order (as KV blocks
// are) with a row stride wider than a head.
struct Kv {
  int64_t head_dim = 0;
  std::vector<float> k, v;
  std::vector<size_t> row_off;
  // With another type than F32 (MakeKv): the rows as the kernels read
  // them; k and v then hold the values they represent.
  TensorType type = TensorType::kF32;
  std::vector<uint8_t> k_stored, v_stored;
};

// Rows stored as `type`: for F32 with a row stride wider than a head and
// rows that start off any alignment; otherwise with offsets that are
// multiples of 32 (whole Q8_0 blocks), kv.k and kv.v rounded to what the
// stored rows hold, so the float64 reference sees the same values.
Kv MakeKv(util::Rng& rng, int32_t n_rows, int64_t head_dim, TensorType type = TensorType::kF32) {
  Kv kv;
  kv.head_dim = head_dim;
  kv.type = type;
  const bool f32 = type == TensorType::kF32;
  const int64_t stride = head_dim + (f32 ? 24 : 32);
  const size_t first = f32 ? 8 : 32;
  kv.k.resize(static_cast<size_t>(n_rows * stride));
  kv.v.resize(kv.k.size());
  for (float& x : kv.k) x = static_cast<float>(rng.Normal());
  for (float& x : kv.v) x = static_cast<float>(rng.Normal());
  std::vector<size_t> slot(static_cast<size_t>(n_rows));
  std::iota(slot.begin(), slot.end(), size_t{0});
  for (size_t i = slot.size(); i > 1; --i) std::swap(slot[i - 1], slot[rng.Below(i)]);
  for (size_t s : slot) kv.row_off.push_back(s * static_cast<size_t>(stride) + first);
  if (f32) return kv;
  kv.k_stored.assign(KvRowBytes(type, kv.k.size()), 0);
  kv.v_stored.assign(kv.k_stored.size(), 0);
  for (size_t off : kv.row_off) {
    for (auto [values, stored] : {std::pair{&kv.k, &kv.k_stored}, std::pair{&kv.v, &kv.v_stored}}) {
      uint8_t* row = stored->data() + KvRowBytes(type, off);
      QuantizeRow(type, values->data() + off, head_dim, row);
      DequantizeRow(type, row, head_dim, values->data() + off);
    }
  }
  return kv;
}

// Runs `table` on queries q (head_dim floats each) with their n_pos, in one
// call: every query reads the rows of kv.row_off, or query m those of
// row_off[m] (with `shared_pos` as in AttendArgs).
std::vector<std::vector<float>> Attend(const KernelTable& table, const Kv& kv,
                                       const std::vector<std::vector<float>>& q,
                                       const std::vector<int32_t>& n_pos, float scale,
                                       std::vector<const size_t*> row_off = {},
                                       int32_t shared_pos = 0) {
  const int n_q = static_cast<int>(q.size());
  std::vector<std::vector<float>> out(q.size(),
                                      std::vector<float>(static_cast<size_t>(kv.head_dim), -7.0f));
  std::vector<const float*> qp;
  std::vector<float*> op;
  for (int m = 0; m < n_q; ++m) {
    qp.push_back(q[static_cast<size_t>(m)].data());
    op.push_back(out[static_cast<size_t>(m)].data());
  }
  const int32_t n_max = *std::max_element(n_pos.begin(), n_pos.end());
  std::vector<float> scratch(AttendScratchFloats(n_q, n_max, kv.head_dim), 0.0f);
  AttendArgs a;
  a.head_dim = kv.head_dim;
  a.n_q = n_q;
  a.q = qp.data();
  a.n_pos = n_pos.data();
  a.scale = scale;
  a.kv_type = kv.type;
  a.k_base =
      kv.type == TensorType::kF32 ? static_cast<const void*>(kv.k.data()) : kv.k_stored.data();
  a.v_base =
      kv.type == TensorType::kF32 ? static_cast<const void*>(kv.v.data()) : kv.v_stored.data();
  if (row_off.empty()) row_off.assign(q.size(), kv.row_off.data());
  a.row_off = row_off.data();
  a.shared_pos = shared_pos;
  a.out = op.data();
  a.scratch = scratch.data();
  table.attend(a);
  return out;
}

std::vector<double> Reference(const Kv& kv, const std::vector<float>& q, int32_t n, double scale,
                              const std::vector<size_t>& row_off) {
  std::vector<double> s(static_cast<size_t>(n));
  double mx = -std::numeric_limits<double>::infinity();
  for (int32_t p = 0; p < n; ++p) {
    double d = 0.0;
    for (int64_t i = 0; i < kv.head_dim; ++i) {
      d += static_cast<double>(q[static_cast<size_t>(i)]) *
           kv.k[row_off[static_cast<size_t>(p)] + static_cast<size_t>(i)];
    }
    s[static_cast<size_t>(p)] = d * scale;
    mx = std::max(mx, d * scale);
  }
  double sum = 0.0;
  for (double& x : s) sum += (x = std::exp(x - mx));
  std::vector<double> out(static_cast<size_t>(kv.head_dim), 0.0);
  for (int32_t p = 0; p < n; ++p) {
    for (int64_t i = 0; i < kv.head_dim; ++i) {
      out[static_cast<size_t>(i)] += s[static_cast<size_t>(p)] / sum *
                                     kv.v[row_off[static_cast<size_t>(p)] + static_cast<size_t>(i)];
    }
  }
  return out;
}

std::vector<float> RandomQuery(util::Rng& rng, int64_t head_dim, float gain) {
  std::vector<float> q(static_cast<size_t>(head_dim));
  for (float& x : q) x = gain * static_cast<float>(rng.Normal());
  return q;
}

TEST(Attention, MatchesTheFloat64SoftmaxReference) {
  util::Rng rng(41);
  for (const KernelTable* table : testing::AvailableKernelTables()) {
    for (int64_t hd : {16, 40, 64, 128}) {
      const Kv kv = MakeKv(rng, 320, hd);
      // gain 1: soft weights; gain 6: a few positions dominate (scores of
      // magnitude ~50, exponentials down to e^-100 and below).
      for (float gain : {1.0f, 6.0f}) {
        std::vector<std::vector<float>> q;
        std::vector<int32_t> n_pos;
        for (int32_t n : {1, 2, 15, 16, 17, 31, 100, 320}) {
          q.push_back(RandomQuery(rng, hd, gain));
          n_pos.push_back(n);
        }
        const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
        const auto out = Attend(*table, kv, q, n_pos, scale);
        for (size_t m = 0; m < q.size(); ++m) {
          const auto ref = Reference(kv, q[m], n_pos[m], scale, kv.row_off);
          // Outputs are convex combinations of N(0, 1) values; float rounding
          // of ~hd-term dots and ~n-term sums stays far below 1e-4.
          for (size_t i = 0; i < ref.size(); ++i) {
            ASSERT_NEAR(out[m][i], ref[i], 1e-4)
                << IsaName(table->isa) << " head_dim " << hd << " gain " << gain << " n_pos "
                << n_pos[m] << " element " << i;
          }
        }
      }
    }
  }
}

TEST(Attention, EachQueryIsBitwiseTheSameAloneOrInAnyGroup) {
  util::Rng rng(42);
  for (const KernelTable* table : testing::AvailableKernelTables()) {
    for (int64_t hd : {48, 64}) {
      Kv kv = MakeKv(rng, 260, hd);
      // A few rows of huge magnitude: they dominate whoever sees them.
      for (int p : {3, 77, 200}) kv.k[kv.row_off[static_cast<size_t>(p)]] = 1e4f;
      for (int round = 0; round < 6; ++round) {
        const int n_q = round == 0 ? kMaxAttendQueries : 1 + static_cast<int>(rng.Below(40));
        std::vector<std::vector<float>> q;
        std::vector<int32_t> n_pos;
        for (int m = 0; m < n_q; ++m) {
          q.push_back(RandomQuery(rng, hd, 1.0f));
          n_pos.push_back(1 + static_cast<int32_t>(rng.Below(260)));
        }
        const auto together = Attend(*table, kv, q, n_pos, 0.125f);
        for (int m = 0; m < n_q; ++m) {
          const auto alone = Attend(*table, kv, {q[static_cast<size_t>(m)]},
                                    {n_pos[static_cast<size_t>(m)]}, 0.125f);
          ASSERT_EQ(0, std::memcmp(alone[0].data(), together[static_cast<size_t>(m)].data(),
                                   static_cast<size_t>(hd) * sizeof(float)))
              << IsaName(table->isa) << " head_dim " << hd << " query " << m << " of " << n_q
              << " n_pos " << n_pos[static_cast<size_t>(m)];
        }
      }
    }
  }
}

TEST(Attention, SequencesSharingAPrefixGiveEachQueryItsOwnBitsAndRows) {
  // Five sequences whose first `prefix` positions are the same rows (shared
  // KV blocks) and whose later positions are rows of their own; their
  // queries in one call, as runs, must give what each gives alone, and what
  // the float64 reference gives over its own sequence's rows.
  util::Rng rng(44);
  for (const KernelTable* table : testing::AvailableKernelTables()) {
    for (int64_t hd : {48, 64}) {
      const int32_t prefix = 100, own = 90, n_seq = 5;
      const Kv kv = MakeKv(rng, prefix + n_seq * own, hd);
      std::vector<std::vector<size_t>> seq_rows(static_cast<size_t>(n_seq));
      for (int32_t s = 0; s < n_seq; ++s) {
        auto& rows = seq_rows[static_cast<size_t>(s)];
        rows.assign(kv.row_off.begin(), kv.row_off.begin() + prefix);
        rows.insert(rows.end(), kv.row_off.begin() + prefix + s * own,
                    kv.row_off.begin() + prefix + (s + 1) * own);
      }
      for (int round = 0; round < 4; ++round) {
        std::vector<std::vector<float>> q;
        std::vector<int32_t> n_pos;
        std::vector<const size_t*> row_off;
        std::vector<int32_t> seq_of;
        int32_t min_pos = prefix + own;
        for (int32_t s = 0; s < n_seq && q.size() < static_cast<size_t>(kMaxAttendQueries) - 8;
             ++s) {
          const int per_seq = 1 + static_cast<int>(rng.Below(8));
          for (int k = 0; k < per_seq; ++k) {
            q.push_back(RandomQuery(rng, hd, 2.0f));
            // Mostly past the prefix; in round 3 some inside it.
            const int32_t lo = round == 3 ? 20 : prefix;
            n_pos.push_back(
                lo + static_cast<int32_t>(rng.Below(static_cast<uint64_t>(prefix + own - lo + 1))));
            min_pos = std::min(min_pos, n_pos.back());
            row_off.push_back(seq_rows[static_cast<size_t>(s)].data());
            seq_of.push_back(s);
          }
        }
        // shared_pos: 0 (no sharing claimed), and the largest allowed.
        for (int32_t shared : {0, std::min(prefix, min_pos) / 16 * 16}) {
          const auto together = Attend(*table, kv, q, n_pos, 0.125f, row_off, shared);
          for (size_t m = 0; m < q.size(); ++m) {
            const auto alone = Attend(*table, kv, {q[m]}, {n_pos[m]}, 0.125f, {row_off[m]});
            ASSERT_EQ(0, std::memcmp(alone[0].data(), together[m].data(),
                                     static_cast<size_t>(hd) * sizeof(float)))
                << IsaName(table->isa) << " head_dim " << hd << " round " << round << " shared "
                << shared << " query " << m << " of sequence " << seq_of[m] << " n_pos "
                << n_pos[m];
            const auto ref =
                Reference(kv, q[m], n_pos[m], 0.125, seq_rows[static_cast<size_t>(seq_of[m])]);
            for (size_t i = 0; i < ref.size(); ++i) {
              ASSERT_NEAR(together[m][i], ref[i], 1e-4)
                  << IsaName(table->isa) << " query " << m << " element " << i;
            }
          }
        }
      }
    }
  }
}

TEST(Attention, F16AndQ8_0RowsGiveTheSoftmaxOfTheValuesTheyHold) {
  util::Rng rng(45);
  for (const KernelTable* table : testing::AvailableKernelTables()) {
    for (TensorType type : {TensorType::kF16, TensorType::kQ8_0}) {
      for (int64_t hd : {32, 64, 128}) {
        const Kv kv = MakeKv(rng, 300, hd, type);
        for (float gain : {1.0f, 6.0f}) {
          std::vector<std::vector<float>> q;
          std::vector<int32_t> n_pos;
          for (int32_t n : {1, 15, 16, 17, 33, 100, 300}) {
            q.push_back(RandomQuery(rng, hd, gain));
            n_pos.push_back(n);
          }
          const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
          const auto out = Attend(*table, kv, q, n_pos, scale);
          for (size_t m = 0; m < q.size(); ++m) {
            const auto ref = Reference(kv, q[m], n_pos[m], scale, kv.row_off);
            // The stored values are exact inputs; only the arithmetic rounds.
            for (size_t i = 0; i < ref.size(); ++i) {
              ASSERT_NEAR(out[m][i], ref[i], 1e-4)
                  << IsaName(table->isa) << " " << TypeName(type) << " head_dim " << hd << " gain "
                  << gain << " n_pos " << n_pos[m] << " element " << i;
            }
            // Alone, bitwise the same (batch invariance holds for every type).
            const auto alone = Attend(*table, kv, {q[m]}, {n_pos[m]}, scale);
            ASSERT_EQ(0, std::memcmp(alone[0].data(), out[m].data(),
                                     static_cast<size_t>(hd) * sizeof(float)))
                << IsaName(table->isa) << " " << TypeName(type) << " query " << m;
          }
        }
      }
    }
  }
}

TEST(Attention, KvRowBytesCountsWholeBlocks) {
  EXPECT_EQ(KvRowBytes(TensorType::kF32, 64), 256u);
  EXPECT_EQ(KvRowBytes(TensorType::kF16, 64), 128u);
  EXPECT_EQ(KvRowBytes(TensorType::kQ8_0, 64), 68u);
  for (TensorType t : {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0}) {
    EXPECT_TRUE(IsKvType(t));
    EXPECT_EQ(KvRowBytes(t, 256), RowBytes(t, 256)) << TypeName(t);
  }
  EXPECT_FALSE(IsKvType(TensorType::kQ4_K));
}

TEST(Attention, RowsPastAQuerysPositionsNeverReachIt) {
  util::Rng rng(43);
  for (const KernelTable* table : testing::AvailableKernelTables()) {
    Kv kv = MakeKv(rng, 64, 64);
    const std::vector<float> qa = RandomQuery(rng, 64, 1.0f), qb = RandomQuery(rng, 64, 1.0f);
    const auto alone = Attend(*table, kv, {qa}, {10}, 0.125f);
    // Positions 10.. are read for the second query only; poison them.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t p = 10; p < 64; ++p) {
      kv.k[kv.row_off[p] + 5] = nan;
      kv.v[kv.row_off[p] + 9] = nan;
    }
    const auto both = Attend(*table, kv, {qa, qb}, {10, 64}, 0.125f);
    EXPECT_EQ(0, std::memcmp(alone[0].data(), both[0].data(), 64 * sizeof(float)))
        << IsaName(table->isa);
    EXPECT_TRUE(std::isnan(both[1][9])) << IsaName(table->isa);
  }
}

}  // namespace
}  // namespace strata::kernels
