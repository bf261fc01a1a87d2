// model/forward.h — the batched forward pass of a Model.
//
// Promise: Forward::Run evaluates one batch of (sequence, token, position)
// entries from any number of sequences in one pass: prefill is matrix-matrix
// work, decode many sequences at once. Each entry's result depends only on
// its own sequence, never on what else is in the batch (bitwise; see
// kernels.h). The pass is the stage list of the model's architecture
// (model/internal/architecture.h): plan attention, embed, per layer an
// attention and a feed-forward block, the output head.
//
// KV memory belongs to the caller (engine/): a KvBuffer of fixed-size blocks
// laid out as KvLayout says, and per sequence a block table mapping position
// p to block table[p / block_size], slot p % block_size.
//
// Threading: a Forward is owned by one thread (the engine's scheduler thread)
// and uses the thread pool it is given; the Model it reads is shared.
//
// Usage:
//   Forward fwd(*model, pool);
//   BatchEntry e[] = {{.token = 1, .pos = 0, .seq = 0, .logits = true}};
//   STRATA_RETURN_IF_ERROR(fwd.Run({e, tables}, kv, logits));
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/kernels.h"
#include "model/kv_layout.h"
#include "model/transformer.h"
#include "util/clock.h"
#include "util/function_ref.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace strata::model {

struct BatchEntry {
  int32_t token = 0;
  int32_t pos = 0;      // position in its sequence; positions [0, pos) are already in the KV cache
  int32_t seq = 0;      // index into ForwardBatch::block_tables
  bool logits = false;  // produce this entry's logits
  bool hidden = false;  // produce this entry's final hidden state (after the output norm)
};

struct ForwardBatch {
  std::span<const BatchEntry> entries;
  std::span<const std::span<const int32_t>> block_tables;  // per seq: physical block ids
};

struct LayerWeights;
struct ModelWeights;

class Forward {
 public:
  Forward(const Model& model, util::ThreadPool& pool,
          const kernels::KernelTable& kernels = kernels::BestKernels());

  // Writes K/V of every entry into `kv` and, for entries with `logits`, their
  // next-token logits into `logits` ([n_logit_entries][n_vocab], entry order);
  // for entries with `hidden`, their final hidden state (normalised by the
  // output norm, as the output head sees it) into `hidden`
  // ([n_hidden_entries][n_embd], entry order). Invalid input (token,
  // position, block table, buffer sizes) is an InvalidArgument.
  util::Status Run(const ForwardBatch& batch, const KvBuffer& kv, std::span<float> logits,
                   std::span<float> hidden = {});

  const kernels::KernelTable& kernels() const { return kernels_; }

  // Profiling: with a clock, the wall time of the attention kernel calls
  // (every layer of every Run, on the calling thread's clock) adds up in
  // attention_seconds(); nullptr (the default) = untimed. Borrowed.
  void set_profile_clock(const util::Clock* clock) { profile_clock_ = clock; }
  double attention_seconds() const { return attention_seconds_; }

 private:
  friend struct Architecture;                            // names Stages
  friend std::span<const Architecture> Architectures();  // the table takes the stages' addresses

  // One Run's batch, validated: what every stage reads. Below, T is
  // n_tokens, D n_embd, QD q_dim, KVD kv_dim, F n_ff; buffers are row-major.
  struct Pass {
    const ForwardBatch* batch = nullptr;
    uint8_t* kv = nullptr;  // KvBuffer::data, laid out as `layout`
    KvLayout layout;
    int64_t n_tokens = 0;  // entries
    int32_t max_pos = 0;   // the largest position of any entry
    int64_t n_logits = 0;  // entries with `logits`
    int64_t n_hidden = 0;  // entries with `hidden`
  };
  // An architecture's forward pass, stage by stage (its table entry names
  // them); Run calls plan_attention, embed, then per layer attention and
  // feed_forward, then head.
  struct Stages {
    void (Forward::*plan_attention)(const Pass& p) = nullptr;
    void (Forward::*embed)(const Pass& p) = nullptr;
    void (Forward::*attention)(const Pass& p, int32_t layer) = nullptr;
    void (Forward::*feed_forward)(const Pass& p, int32_t layer) = nullptr;
    void (Forward::*head)(const Pass& p, std::span<float> logits,
                          std::span<float> hidden) = nullptr;
  };

  // Checks every entry and both output buffers before anything is written:
  // InvalidArgument naming the entry and value.
  util::StatusOr<Pass> Validate(const ForwardBatch& batch, const KvBuffer& kv, size_t logits_floats,
                                size_t hidden_floats) const;
  // Grows the scratch buffers below to the batch (they never shrink).
  void GrowScratch(const Pass& p);

  // --- The llama family's stages.
  // Causal attention: entry t's queries see positions [0, pos_t] of its own
  // sequence. Fills row_off_, entry_row_off_, attend_n_pos_ ([T] = pos + 1),
  // attend_tiles_, and grows scores_ to the largest tile.
  void PlanCausalAttention(const Pass& p);
  // x_: [T][D] <- token_embd rows of the entries' tokens;
  // rope_cos_, rope_sin_: [T][n_rot / 2] <- cos, sin of pos * freq_scale * rope_inv_freq[i].
  void EmbedTokens(const Pass& p);
  // Pre-norm self-attention: with n = RMSNorm(x_, attn_norm),
  // x_: [T][D] += wo · Attend(RoPE(wq·n + bq), RoPE(wk·n + bk), wv·n + bv);
  // every entry's K and V rows [KVD] go to its KV slot of `layer` first.
  void AttentionBlock(const Pass& p, int32_t layer);
  // Pre-norm SwiGLU: with n = RMSNorm(x_, ffn_norm),
  // x_: [T][D] += w_down · (silu(w_gate·n) * (w_up·n)), kFfnChunk entries at a time.
  void SwiGluBlock(const Pass& p, int32_t layer);
  // hidden: [n_hidden][D] <- RMSNorm(x_, output_norm) of the entries with `hidden`;
  // logits: [n_logits][n_vocab] <- output · RMSNorm(x_, output_norm) of those with `logits`.
  void OutputHead(const Pass& p, std::span<float> logits, std::span<float> hidden);

  // --- Pieces of the stages.
  // row_off_: per sequence of the batch, the KvLayout::SlotOffset of each of
  // its positions 0 .. its largest in the batch; entry_row_off_: [T], where
  // the entry's sequence starts in row_off_.
  void PlanKvRows(const Pass& p);
  // attend_tiles_: runs of consecutive entries (of one sequence, or of
  // several that share leading KV blocks), at most kernels::kMaxAttendQueries
  // query heads each, times the KV heads. Reads attend_n_pos_.
  void PlanAttendTiles(const Pass& p);
  // xn_: [T][D] <- RMSNorm(x_) with weight `w` [D].
  void NormRows(const std::vector<float>& w, int64_t n_tokens);
  // q_: [T][QD], k_, v_: [T][KVD] <- xn_ times wq, wk, wv.
  void ProjectQkv(const LayerWeights& layer, int64_t n_tokens);
  // q_, k_, v_ += biases (where the layer has them); q_ and k_ rotated by
  // each entry's angles; k_, v_ rows copied to the entry's KV slot of `layer`.
  void RopeAndStoreKv(const Pass& p, const LayerWeights& weights, int32_t layer);
  // att_: [T][QD] <- per query head, softmax attention over the KV rows of
  // `layer` the plan gives its entry.
  void Attend(const Pass& p, int32_t layer);
  struct Act {
    const uint8_t* data;
    size_t row_bytes;
  };
  // out: [n_tokens][out_stride], columns [row_begin, row_end) <- those rows of
  // `w` times the activation rows.
  void MatMulRows(const Weight& w, const Act& act, int64_t n_tokens, float* out, int64_t out_stride,
                  int64_t row_begin, int64_t row_end) const;
  // The rows of one or more matrices, shared out in one dispatch of the pool:
  // `fn(span, begin, end)` is called once per piece, on some thread, and the
  // pieces of each span cover its rows [0, n_rows) exactly once, split on
  // multiples of its `unit`. Decode (one token) gives each thread a
  // contiguous share of equal bytes, which the others may take pieces of
  // from the back once done with theirs; a batch takes kMatMulRowChunk-row
  // pieces from a shared counter.
  // So a layer's matrices that read the same input (q, k and v; gate and up)
  // cost one fork-join, not one each, and `fn` can finish its rows' outputs
  // (a residual, the SwiGLU) while they are in cache.
  struct RowSpan {
    int64_t n_rows = 0;
    size_t row_bytes = 0;  // streamed per row: the cost a decode shares out
    int64_t unit = 1;      // pieces start and end on multiples of it
  };
  void ShareRows(std::span<const RowSpan> spans, int64_t n_tokens,
                 util::FunctionRef<void(size_t span, int64_t begin, int64_t end)> fn);
  static RowSpan SpanOf(const Weight& w);
  void MatMul(const Weight& w, const Act& act, int64_t n_tokens, float* out, int64_t out_stride);
  // Quantizes rows [n_tokens][n] of `x` into the format `w` needs, in that
  // format's buffer (one per format: q, k and v may need two at once).
  Act PrepareAct(const Weight& w, const float* x, int64_t n_tokens, int64_t n);

  const ModelConfig& c_;
  const ModelWeights& w_;
  const Stages& stages_;
  util::ThreadPool& pool_;
  const kernels::KernelTable& kernels_;
  const util::Clock* profile_clock_ = nullptr;
  double attention_seconds_ = 0;
  // Scratch, grown on demand; [n_tokens][width] row-major each.
  std::vector<float> x_, xn_, q_, k_, v_, att_, gate_, up_, rope_cos_, rope_sin_;
  std::vector<float> scores_;  // [threads][attend_scratch_floats_]
  size_t attend_scratch_floats_ = 0;
  // Attention work of a batch: per sequence the offset of each position's
  // row (KvLayout::SlotOffset; row_off_), where each entry's sequence starts
  // in it (entry_row_off_), the positions each entry's queries see
  // (attend_n_pos_), and the (entries, KV head) tiles.
  struct AttendTile {
    int64_t first_entry = 0;
    int32_t n_entries = 0;
    int32_t kv_head = 0;
    int32_t head_begin = 0, n_heads = 0;  // query heads of that KV head, from its first
    int32_t shared_pos = 0;               // kernels::AttendArgs::shared_pos of the tile's entries
  };
  std::vector<size_t> row_off_;
  std::vector<size_t> entry_row_off_;
  std::vector<int32_t> attend_n_pos_;
  std::vector<AttendTile> attend_tiles_;
  std::vector<uint8_t> act_[3];  // activations, per kernels::ActFormat
  // Per pool thread, the decode pieces of ShareRows it has not started
  // ([front, back) packed in one word): set by the owner thread before each
  // dispatch, then taken by compare-and-swap, the thread itself from the
  // front, the others from the back. One cache line each.
  struct alignas(64) DecodeShare {
    std::atomic<uint64_t> pieces{0};
  };
  std::unique_ptr<DecodeShare[]> shares_;
};

}  // namespace strata::model
