#include "model/forward.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "model/internal/architecture.h"
#include "model/internal/weights.h"

namespace strata::model {
namespace {

using util::InvalidArgumentError;
using util::Status;
using util::StatusOr;

// Rows per chunk when a batch's matmul rows are shared out dynamically: a
// multiple of the kernels' 4-row tiles, a few hundred microseconds of work at
// 32 tokens, and 32 chunks for a 2,048-row matrix.
constexpr int64_t kMatMulRowChunk = 64;
static_assert(kMatMulRowChunk % kernels::kPackRows == 0, "packed rows split on groups");

// Pieces per thread of a decode's matrices (Forward::ShareRows): enough that
// a thread held up for a while leaves pieces the others can take, few enough
// that each thread's own still run as one stream.
constexpr int64_t kDecodePieces = 8;

// A thread's remaining decode pieces [front, back), in one atomic word.
uint64_t PackPieces(int64_t front, int64_t back) {
  return static_cast<uint64_t>(front) << 32 | static_cast<uint64_t>(back);
}
int64_t PieceFront(uint64_t r) { return static_cast<int64_t>(r >> 32); }
int64_t PieceBack(uint64_t r) { return static_cast<int64_t>(r & 0xFFFFFFFFu); }

// A residual add of one piece's columns, as soon as its product has them:
// x[t·stride + i] += y[t·stride + i] for t < n_tokens, i in [begin, end).
void AddColumns(float* x, const float* y, int64_t n_tokens, int64_t stride, int64_t begin,
                int64_t end) {
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = t * stride + begin; i < t * stride + end; ++i) x[i] += y[i];
  }
}

// The feed-forward block runs over chunks of kFfnChunk tokens, so its widest
// buffers (gate and up, n_ff floats per token) stay small however long the
// batch; each chunk's product still uses whole token tiles.
constexpr int64_t kFfnChunk = 64;

void Grow(std::vector<float>& v, int64_t n) {
  if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
}

// RMSNorm of one row: out = x / sqrt(mean(x^2) + eps) * w.
void RmsNormRow(const float* x, const float* w, int64_t n, float eps, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
}

// Rotates `n_rot` leading dimensions of one head vector by the position's angles.
void RopeHead(float* v, const float* cos_t, const float* sin_t, int32_t n_rot, RopeStyle style) {
  const int32_t half = n_rot / 2;
  if (style == RopeStyle::kNormal) {
    for (int32_t i = 0; i < half; ++i) {
      const float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * cos_t[i] - b * sin_t[i];
      v[2 * i + 1] = a * sin_t[i] + b * cos_t[i];
    }
  } else {
    for (int32_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cos_t[i] - b * sin_t[i];
      v[i + half] = a * sin_t[i] + b * cos_t[i];
    }
  }
}

}  // namespace

Forward::Forward(const Model& model, util::ThreadPool& pool, const kernels::KernelTable& kernels)
    : c_(model.config_),
      w_(*model.weights_),
      stages_(model.architecture_->stages),
      pool_(pool),
      kernels_(kernels),
      shares_(std::make_unique<DecodeShare[]>(static_cast<size_t>(pool.size()))) {}

Status Forward::Run(const ForwardBatch& batch, const KvBuffer& kv, std::span<float> logits,
                    std::span<float> hidden) {
  STRATA_ASSIGN_OR_RETURN(const Pass p, Validate(batch, kv, logits.size(), hidden.size()));
  if (p.n_tokens == 0) return util::OkStatus();
  GrowScratch(p);
  (this->*stages_.plan_attention)(p);
  (this->*stages_.embed)(p);
  for (int32_t l = 0; l < c_.n_layers; ++l) {
    (this->*stages_.attention)(p, l);
    (this->*stages_.feed_forward)(p, l);
  }
  (this->*stages_.head)(p, logits, hidden);
  return util::OkStatus();
}

StatusOr<Forward::Pass> Forward::Validate(const ForwardBatch& batch, const KvBuffer& kv,
                                          size_t logits_floats, size_t hidden_floats) const {
  const int64_t T = static_cast<int64_t>(batch.entries.size());
  Pass p{.batch = &batch,
         .kv = static_cast<uint8_t*>(kv.data),
         .layout = c_.kv_layout(kv.block_size, kv.type),
         .n_tokens = T};
  if (T == 0) return p;
  if (kv.data == nullptr || kv.block_size < 1) {
    return InvalidArgumentError("forward: KV buffer is empty");
  }
  if (!kernels::IsKvType(kv.type) ||
      (kv.type == kernels::TensorType::kQ8_0 && c_.head_dim % 32 != 0)) {
    return InvalidArgumentError(fmt::format("forward: a KV cache of {} with head dimension {}",
                                            kernels::TypeName(kv.type), c_.head_dim));
  }
  for (int64_t t = 0; t < T; ++t) {
    const BatchEntry& e = batch.entries[static_cast<size_t>(t)];
    if (e.token < 0 || e.token >= c_.n_vocab) {
      return InvalidArgumentError(
          fmt::format("forward: entry {}: token id {} is outside the vocabulary [0, {})", t,
                      e.token, c_.n_vocab));
    }
    if (e.seq < 0 || static_cast<size_t>(e.seq) >= batch.block_tables.size()) {
      return InvalidArgumentError(
          fmt::format("forward: entry {}: sequence {} has no block table", t, e.seq));
    }
    const auto& table = batch.block_tables[static_cast<size_t>(e.seq)];
    if (e.pos < 0 || static_cast<size_t>(p.layout.BlockIndex(e.pos)) >= table.size()) {
      return InvalidArgumentError(
          fmt::format("forward: entry {}: position {} is not covered by the sequence's {} blocks",
                      t, e.pos, table.size()));
    }
    for (size_t b = 0; b <= static_cast<size_t>(p.layout.BlockIndex(e.pos)); ++b) {
      if (table[b] < 0 || table[b] >= kv.n_blocks) {
        return InvalidArgumentError(fmt::format(
            "forward: sequence {}: block id {} is outside [0, {})", e.seq, table[b], kv.n_blocks));
      }
    }
    p.max_pos = std::max(p.max_pos, e.pos);
    p.n_logits += e.logits ? 1 : 0;
    p.n_hidden += e.hidden ? 1 : 0;
  }
  if (static_cast<int64_t>(logits_floats) < p.n_logits * c_.n_vocab) {
    return InvalidArgumentError(fmt::format("forward: logits buffer holds {} floats, needs {}",
                                            logits_floats, p.n_logits * c_.n_vocab));
  }
  if (static_cast<int64_t>(hidden_floats) < p.n_hidden * c_.n_embd) {
    return InvalidArgumentError(
        fmt::format("forward: hidden-state buffer holds {} floats, needs {}", hidden_floats,
                    p.n_hidden * c_.n_embd));
  }
  return p;
}

void Forward::GrowScratch(const Pass& p) {
  const int64_t T = p.n_tokens, D = c_.n_embd, QD = c_.q_dim(), KVD = c_.kv_dim();
  Grow(x_, T * D);
  Grow(xn_, T * std::max(D, QD));
  Grow(q_, T * QD);
  Grow(k_, T * KVD);
  Grow(v_, T * KVD);
  Grow(att_, T * QD);
  Grow(gate_, std::min(T, kFfnChunk) * c_.n_ff);
  Grow(up_, std::min(T, kFfnChunk) * c_.n_ff);
  Grow(rope_cos_, T * (c_.n_rot / 2));
  Grow(rope_sin_, T * (c_.n_rot / 2));
}

void Forward::PlanCausalAttention(const Pass& p) {
  attend_n_pos_.resize(static_cast<size_t>(p.n_tokens));
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    attend_n_pos_[static_cast<size_t>(t)] = p.batch->entries[static_cast<size_t>(t)].pos + 1;
  }
  PlanKvRows(p);
  PlanAttendTiles(p);
  attend_scratch_floats_ =
      kernels::AttendScratchFloats(kernels::kMaxAttendQueries, p.max_pos + 1, c_.head_dim);
  Grow(scores_, static_cast<int64_t>(pool_.size()) * static_cast<int64_t>(attend_scratch_floats_));
}

void Forward::PlanKvRows(const Pass& p) {
  const ForwardBatch& batch = *p.batch;
  const KvLayout& kv = p.layout;
  std::vector<int32_t> seq_max(batch.block_tables.size(), -1);
  for (const BatchEntry& e : batch.entries) {
    seq_max[static_cast<size_t>(e.seq)] = std::max(seq_max[static_cast<size_t>(e.seq)], e.pos);
  }
  std::vector<size_t> seq_at(seq_max.size(), 0);
  row_off_.clear();
  for (size_t s = 0; s < seq_max.size(); ++s) {
    seq_at[s] = row_off_.size();
    const auto& table = batch.block_tables[s];
    for (int32_t pos = 0; pos <= seq_max[s]; ++pos) {
      row_off_.push_back(
          kv.SlotOffset(table[static_cast<size_t>(kv.BlockIndex(pos))], kv.Slot(pos)));
    }
  }
  entry_row_off_.resize(static_cast<size_t>(p.n_tokens));
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    entry_row_off_[static_cast<size_t>(t)] =
        seq_at[static_cast<size_t>(batch.entries[static_cast<size_t>(t)].seq)];
  }
}

void Forward::PlanAttendTiles(const Pass& p) {
  const ForwardBatch& batch = *p.batch;
  const int64_t T = p.n_tokens;
  const int32_t group = c_.n_heads / c_.n_kv_heads;
  // Positions from 0 that sequences a and b hold in the same KV blocks.
  auto common_prefix = [&](int32_t a, int32_t b) {
    const auto& ta = batch.block_tables[static_cast<size_t>(a)];
    const auto& tb = batch.block_tables[static_cast<size_t>(b)];
    size_t i = 0;
    while (i < ta.size() && i < tb.size() && ta[i] == tb[i]) ++i;
    return static_cast<int64_t>(i) * p.layout.block_size();
  };
  // The end of the run of entries of from's sequence, at most `limit`.
  auto run_end = [&](int64_t from, int64_t limit) {
    const int32_t seq = batch.entries[static_cast<size_t>(from)].seq;
    int64_t e = from + 1;
    while (e < limit && batch.entries[static_cast<size_t>(e)].seq == seq) ++e;
    return e;
  };
  // `bound`, lowered to the fewest positions any entry in [from, to) sees.
  auto min_positions = [&](int64_t from, int64_t to, int64_t bound) {
    for (int64_t e = from; e < to; ++e) {
      bound = std::min<int64_t>(bound, attend_n_pos_[static_cast<size_t>(e)]);
    }
    return bound;
  };
  // A tile is a run of consecutive entries of one sequence, joined by the
  // runs after it while they fit and every one shares at least one
  // 16-position key tile of KV blocks with the first (decode tokens of
  // conversations on one system prompt): the kernel then reads the shared
  // rows once for all of them. A group wider than a tile (not in any model
  // we know) is split by heads.
  const int32_t heads_per_tile = std::min(group, kernels::kMaxAttendQueries);
  const int32_t per_tile = std::max(1, kernels::kMaxAttendQueries / group);
  attend_tiles_.clear();
  for (int64_t t = 0; t < T;) {
    const int32_t first_seq = batch.entries[static_cast<size_t>(t)].seq;
    int64_t end = run_end(t, std::min<int64_t>(T, t + per_tile));
    int64_t shared = min_positions(t, end, std::numeric_limits<int64_t>::max());
    int32_t n_runs = 1;
    while (end < T && end - t < per_tile) {
      const int64_t next_end = run_end(end, T);
      if (next_end - t > per_tile) break;
      const int64_t s = min_positions(
          end, next_end, common_prefix(first_seq, batch.entries[static_cast<size_t>(end)].seq));
      if (s < 16) break;
      shared = std::min(shared, s);
      end = next_end;
      ++n_runs;
    }
    const int32_t shared_pos = n_runs > 1 ? static_cast<int32_t>(shared / 16 * 16) : 0;
    for (int32_t g = 0; g < c_.n_kv_heads; ++g) {
      for (int32_t h0 = 0; h0 < group; h0 += heads_per_tile) {
        attend_tiles_.push_back({t, static_cast<int32_t>(end - t), g, h0,
                                 std::min(heads_per_tile, group - h0), shared_pos});
      }
    }
    t = end;
  }
}

void Forward::EmbedTokens(const Pass& p) {
  const int64_t D = c_.n_embd;
  const int32_t half_rot = c_.n_rot / 2;
  pool_.ParallelFor(p.n_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const BatchEntry& e = p.batch->entries[static_cast<size_t>(t)];
      const Weight& te = w_.token_embd;
      if (te.packed) {
        const int64_t group = e.token / kernels::kPackRows;
        kernels::DequantizePackedRow(
            te.type, te.data + static_cast<size_t>(group * kernels::kPackRows) * te.row_bytes, D,
            e.token - group * kernels::kPackRows, x_.data() + t * D);
      } else {
        kernels::DequantizeRow(te.type, te.data + static_cast<size_t>(e.token) * te.row_bytes, D,
                               x_.data() + t * D);
      }
      const double pos = static_cast<double>(e.pos) * c_.rope_freq_scale;
      for (int32_t i = 0; i < half_rot; ++i) {
        const double ang = pos * w_.rope_inv_freq[static_cast<size_t>(i)];
        rope_cos_[static_cast<size_t>(t * half_rot + i)] = static_cast<float>(std::cos(ang));
        rope_sin_[static_cast<size_t>(t * half_rot + i)] = static_cast<float>(std::sin(ang));
      }
    }
  });
}

void Forward::AttentionBlock(const Pass& p, int32_t layer) {
  const LayerWeights& L = w_.layers[static_cast<size_t>(layer)];
  const int64_t T = p.n_tokens;
  NormRows(L.attn_norm, T);
  ProjectQkv(L, T);
  RopeAndStoreKv(p, L, layer);
  Attend(p, layer);
  const Act act = PrepareAct(L.wo, att_.data(), T, c_.q_dim());
  const RowSpan span = SpanOf(L.wo);
  const int64_t D = c_.n_embd;
  // x_ += wo · att, each piece's columns as soon as they are computed.
  ShareRows({&span, 1}, T, [&](size_t, int64_t begin, int64_t end) {
    MatMulRows(L.wo, act, T, xn_.data(), D, begin, end);
    AddColumns(x_.data(), xn_.data(), T, D, begin, end);
  });
}

void Forward::NormRows(const std::vector<float>& w, int64_t n_tokens) {
  const int64_t D = c_.n_embd;
  pool_.ParallelFor(n_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      RmsNormRow(x_.data() + t * D, w.data(), D, c_.rms_eps, xn_.data() + t * D);
    }
  });
}

void Forward::ProjectQkv(const LayerWeights& L, int64_t n_tokens) {
  const int64_t D = c_.n_embd;
  // The normed rows are quantized once per activation format the three
  // weights need, then the three products share one dispatch.
  const Weight* w[3] = {&L.wq, &L.wk, &L.wv};
  float* out[3] = {q_.data(), k_.data(), v_.data()};
  const int64_t stride[3] = {c_.q_dim(), c_.kv_dim(), c_.kv_dim()};
  Act act[3];
  RowSpan spans[3];
  for (int i = 0; i < 3; ++i) {
    const kernels::ActFormat fmt = kernels::ActFormatFor(w[i]->type);
    int same = 0;
    while (same < i && kernels::ActFormatFor(w[same]->type) != fmt) ++same;
    act[i] = same < i ? act[same] : PrepareAct(*w[i], xn_.data(), n_tokens, D);
    spans[i] = SpanOf(*w[i]);
  }
  ShareRows(spans, n_tokens, [&](size_t i, int64_t begin, int64_t end) {
    MatMulRows(*w[i], act[i], n_tokens, out[i], stride[i], begin, end);
  });
}

void Forward::RopeAndStoreKv(const Pass& p, const LayerWeights& L, int32_t layer) {
  const int64_t QD = c_.q_dim(), KVD = c_.kv_dim(), HD = c_.head_dim;
  const int32_t half_rot = c_.n_rot / 2;
  const KvLayout& kv = p.layout;
  pool_.ParallelFor(p.n_tokens, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const BatchEntry& e = p.batch->entries[static_cast<size_t>(t)];
      float* qt = q_.data() + t * QD;
      float* kt = k_.data() + t * KVD;
      float* vt = v_.data() + t * KVD;
      if (!L.bq.empty())
        for (int64_t i = 0; i < QD; ++i) qt[i] += L.bq[static_cast<size_t>(i)];
      if (!L.bk.empty())
        for (int64_t i = 0; i < KVD; ++i) kt[i] += L.bk[static_cast<size_t>(i)];
      if (!L.bv.empty())
        for (int64_t i = 0; i < KVD; ++i) vt[i] += L.bv[static_cast<size_t>(i)];
      const float* ct = rope_cos_.data() + t * half_rot;
      const float* st = rope_sin_.data() + t * half_rot;
      for (int32_t h = 0; h < c_.n_heads; ++h)
        RopeHead(qt + h * HD, ct, st, c_.n_rot, c_.rope_style);
      for (int32_t h = 0; h < c_.n_kv_heads; ++h)
        RopeHead(kt + h * HD, ct, st, c_.n_rot, c_.rope_style);
      const int32_t block =
          p.batch
              ->block_tables[static_cast<size_t>(e.seq)][static_cast<size_t>(kv.BlockIndex(e.pos))];
      const int32_t slot = kv.Slot(e.pos);
      uint8_t* kd = p.kv + kv.Bytes(kv.RowOffset(block, layer, KvPart::kKey, slot));
      uint8_t* vd = p.kv + kv.Bytes(kv.RowOffset(block, layer, KvPart::kValue, slot));
      if (kv.type() == kernels::TensorType::kF32) {
        std::memcpy(kd, kt, static_cast<size_t>(KVD) * sizeof(float));
        std::memcpy(vd, vt, static_cast<size_t>(KVD) * sizeof(float));
      } else {
        // F16: round to nearest even; Q8_0: blocks of 32 along the row, each
        // head's own (head_dim is a multiple of 32).
        kernels::QuantizeRow(kv.type(), kt, KVD, kd);
        kernels::QuantizeRow(kv.type(), vt, KVD, vd);
      }
    }
  });
}

void Forward::Attend(const Pass& p, int32_t layer) {
  const int64_t QD = c_.q_dim(), HD = c_.head_dim;
  const int32_t group = c_.n_heads / c_.n_kv_heads;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(HD));
  // One tile (entries x the query heads of one KV head) at a time; the kernel
  // computes each query the same way in whatever tile it lands. Tiles are
  // taken from a shared counter, last first (in a prefill the latest
  // positions, the longest), so the threads finish together.
  const uint8_t* k_layer = p.kv + p.layout.Bytes(p.layout.PartOffset(layer, KvPart::kKey));
  const uint8_t* v_layer = p.kv + p.layout.Bytes(p.layout.PartOffset(layer, KvPart::kValue));
  std::atomic<int64_t> next{0};
  const int64_t n_tiles = static_cast<int64_t>(attend_tiles_.size());
  const auto t0 =
      profile_clock_ != nullptr ? profile_clock_->Now() : std::chrono::steady_clock::time_point();
  pool_.RunOnAll([&](int thread) {
    float* scratch = scores_.data() + static_cast<size_t>(thread) * attend_scratch_floats_;
    const float* q[kernels::kMaxAttendQueries];
    float* out[kernels::kMaxAttendQueries];
    int32_t n_pos[kernels::kMaxAttendQueries];
    const size_t* roff[kernels::kMaxAttendQueries];
    for (int64_t i = next.fetch_add(1); i < n_tiles; i = next.fetch_add(1)) {
      const AttendTile& tile = attend_tiles_[static_cast<size_t>(n_tiles - 1 - i)];
      int n_q = 0;
      for (int32_t k = 0; k < tile.n_entries; ++k) {
        const int64_t t = tile.first_entry + k;
        for (int32_t j = tile.head_begin; j < tile.head_begin + tile.n_heads; ++j) {
          const int64_t h = static_cast<int64_t>(tile.kv_head) * group + j;
          q[n_q] = q_.data() + t * QD + h * HD;
          out[n_q] = att_.data() + t * QD + h * HD;
          n_pos[n_q] = attend_n_pos_[static_cast<size_t>(t)];
          roff[n_q] = row_off_.data() + entry_row_off_[static_cast<size_t>(t)];
          ++n_q;
        }
      }
      kernels::AttendArgs a;
      a.head_dim = HD;
      a.n_q = n_q;
      a.q = q;
      a.n_pos = n_pos;
      a.scale = kq_scale;
      a.kv_type = p.layout.type();
      a.k_base = k_layer + p.layout.Bytes(static_cast<size_t>(tile.kv_head) * HD);
      a.v_base = v_layer + p.layout.Bytes(static_cast<size_t>(tile.kv_head) * HD);
      a.row_off = roff;
      a.shared_pos = tile.shared_pos;
      a.out = out;
      a.scratch = scratch;
      kernels_.attend(a);
    }
  });
  if (profile_clock_ != nullptr) {
    attention_seconds_ += util::SecondsBetween(t0, profile_clock_->Now());
  }
}

void Forward::SwiGluBlock(const Pass& p, int32_t layer) {
  const LayerWeights& L = w_.layers[static_cast<size_t>(layer)];
  const int64_t T = p.n_tokens, D = c_.n_embd, F = c_.n_ff;
  NormRows(L.ffn_norm, T);
  // Per chunk: its rows of xn_ are read by gate/up, then overwritten with
  // the chunk's down projection (no other chunk reads them).
  for (int64_t t0 = 0; t0 < T; t0 += kFfnChunk) {
    const int64_t n = std::min(kFfnChunk, T - t0);
    float* xc = xn_.data() + t0 * D;
    const Act gate_act = PrepareAct(L.w_gate, xc, n, D);
    const Act up_act = kernels::ActFormatFor(L.w_up.type) == kernels::ActFormatFor(L.w_gate.type)
                           ? gate_act
                           : PrepareAct(L.w_up, xc, n, D);
    // Gate and up rows in the same pieces, so each piece ends with its
    // columns' SwiGLU: gate_ <- silu(gate) * up.
    const RowSpan gate = SpanOf(L.w_gate), up = SpanOf(L.w_up);
    const RowSpan both{F, gate.row_bytes + up.row_bytes, std::max(gate.unit, up.unit)};
    ShareRows({&both, 1}, n, [&](size_t, int64_t begin, int64_t end) {
      MatMulRows(L.w_gate, gate_act, n, gate_.data(), F, begin, end);
      MatMulRows(L.w_up, up_act, n, up_.data(), F, begin, end);
      for (int64_t t = 0; t < n; ++t) {
        kernels_.swiglu(gate_.data() + t * F + begin, up_.data() + t * F + begin, end - begin);
      }
    });
    // x_ += w_down · gate_, each piece's columns as soon as they are computed.
    const Act down_act = PrepareAct(L.w_down, gate_.data(), n, F);
    const RowSpan down = SpanOf(L.w_down);
    float* xr = x_.data() + t0 * D;
    ShareRows({&down, 1}, n, [&](size_t, int64_t begin, int64_t end) {
      MatMulRows(L.w_down, down_act, n, xc, D, begin, end);
      AddColumns(xr, xc, n, D, begin, end);
    });
  }
}

void Forward::OutputHead(const Pass& p, std::span<float> logits, std::span<float> hidden) {
  const int64_t T = p.n_tokens, D = c_.n_embd;
  const std::span<const BatchEntry> entries = p.batch->entries;
  if (p.n_hidden > 0) {
    int64_t h = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (!entries[static_cast<size_t>(t)].hidden) continue;
      RmsNormRow(x_.data() + t * D, w_.output_norm.data(), D, c_.rms_eps, hidden.data() + h * D);
      ++h;
    }
  }
  if (p.n_logits == 0) return;
  // Final norm of the entries that want logits, then the output head.
  int64_t j = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (!entries[static_cast<size_t>(t)].logits) continue;
    RmsNormRow(x_.data() + t * D, w_.output_norm.data(), D, c_.rms_eps, xn_.data() + j * D);
    ++j;
  }
  const Act act = PrepareAct(w_.output, xn_.data(), p.n_logits, D);
  MatMul(w_.output, act, p.n_logits, logits.data(), c_.n_vocab);
}

void Forward::MatMulRows(const Weight& w, const Act& act, int64_t n_tokens, float* out,
                         int64_t out_stride, int64_t row_begin, int64_t row_end) const {
  kernels::MatMulArgs a;
  a.w_type = w.type;
  a.w = w.data;
  a.w_row_bytes = w.row_bytes;
  a.row_begin = row_begin;
  a.row_end = row_end;
  a.act = act.data;
  a.act_row_bytes = act.row_bytes;
  a.n_tokens = n_tokens;
  a.n = w.n_cols;
  a.out = out;
  a.out_stride = out_stride;
  a.packed = w.packed;
  kernels_.matmul(a);
}

Forward::RowSpan Forward::SpanOf(const Weight& w) {
  // Packed rows split on their groups (kMatMulRowChunk is a multiple too).
  return {w.n_rows, w.row_bytes, w.packed ? kernels::kPackRows : 1};
}

void Forward::ShareRows(std::span<const RowSpan> spans, int64_t n_tokens,
                        util::FunctionRef<void(size_t span, int64_t begin, int64_t end)> fn) {
  int64_t n_chunks = 0;
  for (const RowSpan& s : spans) n_chunks += (s.n_rows + kMatMulRowChunk - 1) / kMatMulRowChunk;
  const int64_t P = pool_.size();
  // A batch takes its rows in chunks from a shared counter rather than one
  // share per thread: a thread held up by anything (an interrupt, the
  // hypervisor, a neighbour) then no longer keeps the other spinning at the
  // join, which cost up to 12 % of a 32-token batch's time in a profile. Every
  // output is computed the same way whatever piece or thread it lands in.
  if (n_tokens > 1 && P > 1 && n_chunks >= 2 * P) {
    std::atomic<int64_t> next{0};
    pool_.RunOnAll([&](int) {
      for (int64_t i = next.fetch_add(1); i < n_chunks; i = next.fetch_add(1)) {
        size_t s = 0;
        int64_t c = i;
        for (;; ++s) {
          const int64_t in_span = (spans[s].n_rows + kMatMulRowChunk - 1) / kMatMulRowChunk;
          if (c < in_span) break;
          c -= in_span;
        }
        fn(s, c * kMatMulRowChunk, std::min(spans[s].n_rows, (c + 1) * kMatMulRowChunk));
      }
    });
    return;
  }
  if (P == 1) {
    for (size_t s = 0; s < spans.size(); ++s) {
      if (spans[s].n_rows > 0) fn(s, 0, spans[s].n_rows);
    }
    return;
  }
  // Decode: the spans, laid end to end, are cut into pieces of equal bytes,
  // kDecodePieces per thread. Thread i owns pieces [i·K, (i+1)·K) and runs
  // them front to back, one long run (which streams weights fastest); a
  // thread done with its own takes the others' last pieces, from the back, so
  // one held up (an interrupt, the hypervisor) no longer keeps the rest
  // spinning at the join. A piece boundary inside a span moves to the nearest
  // multiple of its unit, the same for the pieces on either side of it.
  int64_t total = 0;
  for (const RowSpan& s : spans) total += s.n_rows * static_cast<int64_t>(s.row_bytes);
  const int64_t n_pieces = P * kDecodePieces;
  auto boundary = [&](const RowSpan& s, int64_t span_start, int64_t piece) {
    if (piece == 0) return int64_t{0};
    if (piece == n_pieces) return s.n_rows;
    const int64_t byte = total / n_pieces * piece + total % n_pieces * piece / n_pieces;
    const int64_t rb = std::max<int64_t>(1, static_cast<int64_t>(s.row_bytes));
    const int64_t row = std::clamp<int64_t>((byte - span_start + rb / 2) / rb, 0, s.n_rows);
    return std::min(s.n_rows, (row + s.unit / 2) / s.unit * s.unit);
  };
  auto run_piece = [&](int64_t j) {
    int64_t start = 0;
    for (size_t s = 0; s < spans.size(); ++s) {
      const int64_t begin = boundary(spans[s], start, j);
      const int64_t end = boundary(spans[s], start, j + 1);
      if (begin < end) fn(s, begin, end);
      start += spans[s].n_rows * static_cast<int64_t>(spans[s].row_bytes);
    }
  };
  for (int64_t i = 0; i < P; ++i) {
    shares_[static_cast<size_t>(i)].pieces.store(
        PackPieces(i * kDecodePieces, (i + 1) * kDecodePieces), std::memory_order_relaxed);
  }
  pool_.RunOnAll([&](int i) {
    // Its own pieces from the front, then the others' from the back.
    for (int64_t k = 0; k < P; ++k) {
      std::atomic<uint64_t>& pieces = shares_[static_cast<size_t>((i + k) % P)].pieces;
      uint64_t r = pieces.load(std::memory_order_acquire);
      while (PieceFront(r) < PieceBack(r)) {
        const bool own = k == 0;
        const int64_t j = own ? PieceFront(r) : PieceBack(r) - 1;
        const uint64_t taken = own ? PackPieces(j + 1, PieceBack(r)) : PackPieces(PieceFront(r), j);
        if (pieces.compare_exchange_weak(r, taken, std::memory_order_acq_rel)) {
          run_piece(j);
          r = pieces.load(std::memory_order_acquire);
        }
      }
    }
  });
}

void Forward::MatMul(const Weight& w, const Act& act, int64_t n_tokens, float* out,
                     int64_t out_stride) {
  const RowSpan span = SpanOf(w);
  ShareRows({&span, 1}, n_tokens, [&](size_t, int64_t begin, int64_t end) {
    MatMulRows(w, act, n_tokens, out, out_stride, begin, end);
  });
}

Forward::Act Forward::PrepareAct(const Weight& w, const float* x, int64_t n_tokens, int64_t n) {
  const kernels::ActFormat fmt = kernels::ActFormatFor(w.type);
  const size_t rb = kernels::ActRowBytes(fmt, n);
  std::vector<uint8_t>& buf = act_[static_cast<size_t>(fmt)];
  if (buf.size() < rb * static_cast<size_t>(n_tokens))
    buf.resize(rb * static_cast<size_t>(n_tokens));
  uint8_t* dst = buf.data();
  auto quantize = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      kernels_.quantize_act(fmt, x + t * n, n, dst + static_cast<size_t>(t) * rb);
    }
  };
  if (n_tokens >= 8) {
    pool_.ParallelFor(n_tokens, quantize);
  } else {
    quantize(0, n_tokens);
  }
  return Act{dst, rb};
}

}  // namespace strata::model
