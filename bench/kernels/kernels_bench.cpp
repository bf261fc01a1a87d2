// Matrix-product throughput of each weight type and kernel table.
//
// Decode (1 token) streams a weight matrix far larger than the caches, so its
// figure is weight bytes per second and is bounded by memory bandwidth;
// prefill (64 tokens) reuses each weight tile across tokens, so its figure is
// multiply-adds per second.
//
//   build/release/bench/kernels_bench --benchmark_filter='Q8_0'
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "util/random.h"

namespace strata::kernels {
namespace {

struct Fixture {
  std::vector<uint8_t> w;    // [rows][row_bytes]
  std::vector<uint8_t> act;  // [tokens][act_row_bytes]
  size_t row_bytes = 0, act_row_bytes = 0;
};

Fixture Make(TensorType type, int64_t n, int64_t rows, int64_t tokens) {
  Fixture f;
  util::Rng rng(7);
  f.row_bytes = RowBytes(type, n);
  f.w.resize(f.row_bytes * static_cast<size_t>(rows));
  std::vector<float> row(static_cast<size_t>(n));
  // Quantizing is slow for the k-quants (a search per sub-block): the first
  // kDistinctRows rows are quantized and the rest copy them in turn, so a
  // 256 MB matrix is ready in a moment and still streams from memory.
  constexpr int64_t kDistinctRows = 1024;
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* dst = f.w.data() + static_cast<size_t>(r) * f.row_bytes;
    if (r >= kDistinctRows) {
      std::memcpy(dst, f.w.data() + static_cast<size_t>(r % kDistinctRows) * f.row_bytes,
                  f.row_bytes);
      continue;
    }
    for (auto& v : row) v = static_cast<float>(rng.Normal());
    QuantizeRow(type, row.data(), n, dst);
  }
  const ActFormat fmt = ActFormatFor(type);
  f.act_row_bytes = ActRowBytes(fmt, n);
  f.act.resize(f.act_row_bytes * static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) {
    for (auto& v : row) v = static_cast<float>(rng.Normal());
    GetKernels(Isa::kScalar)
        ->quantize_act(fmt, row.data(), n, f.act.data() + static_cast<size_t>(t) * f.act_row_bytes);
  }
  return f;
}

// `cached`: a 1-token product over ~512 KiB of weights that stay in L2, the
// kernel's own decode speed without the memory-bandwidth bound. `packed`: the
// weights in the row-interleaved layout (kernels.h, PackRows).
void BM_MatMul(benchmark::State& state, Isa isa, TensorType type, int64_t tokens, bool cached,
               bool packed) {
  const KernelTable* k = GetKernels(isa);
  if (k == nullptr) {
    state.SkipWithError("ISA not available on this CPU");
    return;
  }
  const int64_t n = 2048;
  // Decode: ~256 MB of weights (beyond any cache); a batch of 32 decode
  // tokens: a 5632-row matrix (a feed-forward one of a 1B model), from ~64 MB
  // of copies taken in turn as a forward pass takes its layers', so the
  // weights come from memory; prefill: 1024 rows.
  const size_t decode_bytes = cached ? (512u << 10) : (256u << 20);
  const int64_t rows = (tokens == 1    ? static_cast<int64_t>(decode_bytes / RowBytes(type, n))
                        : tokens == 32 ? 5632
                                       : 1024) /
                       kPackRows * kPackRows;
  const int64_t copies =
      tokens == 32
          ? static_cast<int64_t>((64u << 20) / (RowBytes(type, n) * static_cast<size_t>(rows)))
          : 1;
  Fixture f = Make(type, n, rows * copies, tokens);
  if (packed) {
    const std::vector<uint8_t> plain = f.w;
    f.row_bytes = PackedRowBytes(type, n);
    f.w.resize(f.row_bytes * static_cast<size_t>(rows * copies));
    PackRows(type, plain.data(), RowBytes(type, n), rows * copies, n, f.w.data());
  }
  std::vector<float> out(static_cast<size_t>(rows * tokens));
  MatMulArgs a;
  a.w_type = type;
  a.w_row_bytes = f.row_bytes;
  a.row_begin = 0;
  a.row_end = rows;
  a.act = f.act.data();
  a.act_row_bytes = f.act_row_bytes;
  a.n_tokens = tokens;
  a.n = n;
  a.out = out.data();
  a.out_stride = rows;
  a.packed = packed;
  int64_t copy = 0;
  for (auto _ : state) {
    a.w = f.w.data() + static_cast<size_t>(copy * rows) * f.row_bytes;
    k->matmul(a);
    benchmark::DoNotOptimize(out.data());
    copy = copy + 1 == copies ? 0 : copy + 1;
  }
  state.counters["weight_GB/s"] =
      benchmark::Counter(static_cast<double>(f.w.size() / static_cast<size_t>(copies)) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(rows * n * tokens) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// Times `k` on random queries (head_dim 64) whose key rows are kv +
// row_offs[m][p] and value rows `v_offset` elements further on, stored as
// `type` (the KV cache's element type); with `layers` above 1, iteration i
// reads the rows of layer i % layers, layer_floats further on per layer.
// Counts two MACs per (query, position below `positions`, dimension): the
// score and the value sum.
void TimeAttend(benchmark::State& state, const KernelTable& k, const std::vector<float>& kv,
                size_t v_offset, const std::vector<const size_t*>& row_offs,
                const std::vector<int32_t>& n_pos, int32_t positions, int32_t shared_pos,
                int layers = 1, size_t layer_floats = 0, TensorType type = TensorType::kF32) {
  const int64_t hd = 64;
  const int queries = static_cast<int>(n_pos.size());
  util::Rng rng(7);
  std::vector<float> q(static_cast<size_t>(queries * hd)), out(q.size());
  for (float& x : q) x = static_cast<float>(rng.Normal());
  std::vector<const float*> qp;
  std::vector<float*> op;
  for (int m = 0; m < queries; ++m) {
    qp.push_back(q.data() + m * hd);
    op.push_back(out.data() + m * hd);
  }
  std::vector<float> scratch(AttendScratchFloats(queries, positions, hd));
  // Every offset here is a multiple of 32 elements: whole Q8_0 blocks.
  std::vector<uint8_t> stored(KvRowBytes(type, kv.size()));
  if (type == TensorType::kF32) {
    std::memcpy(stored.data(), kv.data(), stored.size());
  } else {
    QuantizeRow(type, kv.data(), static_cast<int64_t>(kv.size()), stored.data());
  }
  AttendArgs a;
  a.head_dim = hd;
  a.n_q = queries;
  a.q = qp.data();
  a.n_pos = n_pos.data();
  a.scale = 0.125f;
  a.kv_type = type;
  a.row_off = row_offs.data();
  a.shared_pos = shared_pos;
  a.out = op.data();
  a.scratch = scratch.data();
  int layer = 0;
  for (auto _ : state) {
    const size_t at = static_cast<size_t>(layer) * layer_floats;
    a.k_base = stored.data() + KvRowBytes(type, at);
    a.v_base = stored.data() + KvRowBytes(type, at + v_offset);
    k.attend(a);
    benchmark::DoNotOptimize(out.data());
    layer = layer + 1 == layers ? 0 : layer + 1;
  }
  state.counters["GMAC/s"] = benchmark::Counter(2.0 * queries * positions * hd * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// Attention of `queries` query vectors (8 queries: one decode token's 8
// heads of a KV head; 64: a prefill tile of 8 tokens of one sequence) over
// `positions` cached positions, rows stored as in a KV block (kv_dim 256
// floats apart).
void BM_Attend(benchmark::State& state, Isa isa, int queries, int32_t positions, TensorType type) {
  const KernelTable* k = GetKernels(isa);
  if (k == nullptr) {
    state.SkipWithError("ISA not available on this CPU");
    return;
  }
  const int64_t stride = 256;
  util::Rng rng(5);
  std::vector<float> kv(static_cast<size_t>(2 * positions * stride));
  for (float& x : kv) x = static_cast<float>(rng.Normal());
  std::vector<size_t> row_off(static_cast<size_t>(positions));
  for (int32_t p = 0; p < positions; ++p)
    row_off[static_cast<size_t>(p)] = static_cast<size_t>(p * stride);
  std::vector<int32_t> n_pos;
  for (int m = 0; m < queries; ++m) {
    n_pos.push_back(positions - (queries - 1 - m) / 8);  // consecutive tokens, 8 heads each
  }
  TimeAttend(state, *k, kv, static_cast<size_t>(positions * stride),
             std::vector<const size_t*>(static_cast<size_t>(queries), row_off.data()), n_pos,
             positions, 0, 1, 0, type);
}

// Decode of 8 sequences on one system prompt: one token each (8 query heads),
// 1,024 positions of which the first 992 are the same rows (shared KV blocks)
// and the last 32 each sequence's own; `claimed` says so to the kernel
// (AttendArgs::shared_pos), else it forms every sequence's key tiles itself.
// With `layers` above 1 the rows are laid out as the KV block pool holds them
// (per 16-position block, each layer's 16 key rows, then its 16 value rows)
// and each iteration takes the next layer, so the rows come from memory as in
// a forward pass (55 MiB at 22 layers) rather than from a warm cache.
void BM_AttendShared(benchmark::State& state, Isa isa, bool claimed, int layers) {
  const KernelTable* k = GetKernels(isa);
  if (k == nullptr) {
    state.SkipWithError("ISA not available on this CPU");
    return;
  }
  const int64_t stride = 256, bs = 16;
  const int n_seq = 8, queries = 64;
  const int32_t positions = 1024, own = 32, shared = positions - own;
  const int32_t rows = shared + n_seq * own;
  const size_t layer_floats = static_cast<size_t>(2 * bs * stride);
  util::Rng rng(6);
  std::vector<float> kv(static_cast<size_t>(2 * rows * stride) * static_cast<size_t>(layers));
  for (float& x : kv) x = static_cast<float>(rng.Normal());
  // Key row `row` of layer 0 (one layer: key rows, then every value row).
  auto row_at = [&](int32_t row) {
    if (layers == 1) return static_cast<size_t>(row * stride);
    return static_cast<size_t>(row / bs) * static_cast<size_t>(layers) * layer_floats +
           static_cast<size_t>(row % bs * stride);
  };
  std::vector<std::vector<size_t>> seq_rows(n_seq);
  for (int s = 0; s < n_seq; ++s) {
    for (int32_t p = 0; p < positions; ++p) {
      seq_rows[static_cast<size_t>(s)].push_back(
          row_at(p < shared ? p : shared + s * own + (p - shared)));
    }
  }
  std::vector<const size_t*> row_offs;
  for (int m = 0; m < queries; ++m) row_offs.push_back(seq_rows[static_cast<size_t>(m / 8)].data());
  const size_t v_offset =
      layers == 1 ? static_cast<size_t>(rows * stride) : static_cast<size_t>(bs * stride);
  TimeAttend(state, *k, kv, v_offset, row_offs,
             std::vector<int32_t>(static_cast<size_t>(queries), positions), positions,
             claimed ? shared : 0, layers, layers == 1 ? 0 : layer_floats);
}

void Register() {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    for (bool claimed : {false, true}) {
      const std::string name = std::string("Attend/") + std::string(IsaName(isa)) +
                               "/8_sequences_sharing_992_of_1024/" +
                               (claimed ? "shared_pos" : "unclaimed");
      benchmark::RegisterBenchmark(name.c_str(), BM_AttendShared, isa, claimed, 1)
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.3);
    }
    const std::string pooled = std::string("Attend/") + std::string(IsaName(isa)) +
                               "/8_sequences_sharing_992_of_1024/shared_pos/pool_22_layers";
    benchmark::RegisterBenchmark(pooled.c_str(), BM_AttendShared, isa, true, 22)
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.3);
  }
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    for (TensorType type : {TensorType::kF32, TensorType::kF16, TensorType::kQ8_0}) {
      for (int queries : {8, 64}) {
        for (int32_t positions : {128, 1024, 16384}) {
          // The long context: decode only (8 queries), and not on the scalar table.
          if (positions > 1024 && (queries > 8 || isa == Isa::kScalar)) continue;
          const std::string name = std::string("Attend/") + std::string(IsaName(isa)) + "/" +
                                   std::string(TypeName(type)) +
                                   "/queries:" + std::to_string(queries) +
                                   "/positions:" + std::to_string(positions);
          benchmark::RegisterBenchmark(name.c_str(), BM_Attend, isa, queries, positions, type)
              ->Unit(benchmark::kMicrosecond)
              ->MinTime(0.3);
        }
      }
    }
  }
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    for (TensorType t : {TensorType::kF16, TensorType::kQ8_0, TensorType::kQ4_0, TensorType::kQ4_1,
                         TensorType::kQ5_0, TensorType::kQ5_1, TensorType::kQ4_K, TensorType::kQ5_K,
                         TensorType::kQ6_K}) {
      for (int64_t tokens : {1, 32, 64}) {
        if (isa == Isa::kScalar && tokens > 1) continue;
        const std::string name = std::string("MatMul/") + std::string(IsaName(isa)) + "/" +
                                 std::string(TypeName(t)) + "/tokens:" + std::to_string(tokens);
        for (bool packed : {false, true}) {
          if (packed && (!IsPackable(t) || isa == Isa::kScalar)) continue;
          const std::string full = name + (packed ? "/packed" : "");
          benchmark::RegisterBenchmark(full.c_str(), BM_MatMul, isa, t, tokens, false, packed)
              ->Unit(benchmark::kMillisecond)
              ->MinTime(0.5);
          if (tokens == 1 && isa != Isa::kScalar) {
            benchmark::RegisterBenchmark((full + "/cached").c_str(), BM_MatMul, isa, t, tokens,
                                         true, packed)
                ->Unit(benchmark::kMillisecond)
                ->MinTime(0.5);
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata::kernels

int main(int argc, char** argv) {
  strata::kernels::Register();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
