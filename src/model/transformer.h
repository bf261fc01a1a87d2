// model/transformer.h — a llama-family decoder loaded from GGUF, and its
// batched forward pass.
//
// Promise: Model::Load validates every hyper-parameter and tensor shape against
// the metadata and names what is wrong ("tensor 'blk.2.ffn_up.weight' has shape
// [64, 100], expected [64, 172]"); weights stay in the memory-mapped file.
// Forward::Run evaluates one batch of (sequence, token, position) entries from
// any number of sequences in one pass: prefill is matrix-matrix work, decode
// many sequences at once. Each entry's result depends only on its own sequence,
// never on what else is in the batch (bitwise; see kernels.h).
//
// KV memory belongs to the caller (engine/): a KvBuffer of fixed-size blocks
// laid out as KvLayout says (kv_layout.h), and per sequence a block table mapping position p to
// block table[p / block_size], slot p % block_size.
//
// Threading: a Model is immutable and thread-safe. A Forward is owned by one
// thread (the engine's scheduler thread) and uses the thread pool it is given.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto model, Model::Load(fs, path, {}, log));
//   Forward fwd(*model, pool);
//   BatchEntry e[] = {{.token = 1, .pos = 0, .seq = 0, .logits = true}};
//   STRATA_RETURN_IF_ERROR(fwd.Run({e, tables}, kv, logits));
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "kernels/kernels.h"
#include "model/kv_layout.h"
#include "text/tokenizer.h"
#include "util/file_system.h"
#include "util/log.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace strata::model {

enum class RopeStyle {
  kNormal,  // rotate adjacent pairs (x[2i], x[2i+1]); GGUF llama
  kNeox,    // rotate halves (x[i], x[i + n_rot/2]); GGUF qwen2
};

struct ModelConfig {
  std::string architecture;  // "llama"
  std::string name;          // general.name
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;  // context length the model was trained for
  int32_t n_embd = 0;       // residual width
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t n_ff = 0;
  int32_t n_rot = 0;  // rotated dimensions per head
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // positions are multiplied by this (linear scaling)
  RopeStyle rope_style = RopeStyle::kNormal;
  bool tied_embeddings = false;
  int64_t n_params = 0;
  uint64_t weight_bytes = 0;

  int32_t kv_dim() const { return n_kv_heads * head_dim; }
  int32_t q_dim() const { return n_heads * head_dim; }
  // The layout of this model's KV memory in blocks of `block_size` positions.
  KvLayout kv_layout(int32_t block_size) const { return {n_layers, kv_dim(), block_size}; }
};

// One weight matrix, row-major: [n_rows][n_cols] in `type`, rows `row_bytes` apart.
struct Weight {
  std::string name;
  kernels::TensorType type = kernels::TensorType::kF32;
  const uint8_t* data = nullptr;
  int64_t n_cols = 0;  // elements per row (input features)
  int64_t n_rows = 0;  // output features
  size_t row_bytes = 0;
};

struct LoadOptions {
  bool prefetch = true;  // ask the OS to read the file ahead
};

class Model {
 public:
  static util::StatusOr<std::unique_ptr<Model>> Load(util::FileSystem& fs, const std::string& path,
                                                     const LoadOptions& options, util::Logger& log);
  static util::StatusOr<std::unique_ptr<Model>> FromGguf(std::unique_ptr<format::GgufFile> gguf,
                                                         util::Logger& log);

  const ModelConfig& config() const { return config_; }
  const text::Tokenizer& tokenizer() const { return *tokenizer_; }
  const format::GgufFile& gguf() const { return *gguf_; }
  // Identifies these weights and this vocabulary (header plus samples of every
  // tensor); used to key caches so nothing computed by one model serves another.
  uint64_t fingerprint() const { return fingerprint_; }
  // The dominant weight type, for display ("Q8_0", "mixed").
  std::string WeightTypeSummary() const;

 private:
  friend class Forward;
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;  // [n_embd]
    Weight wq, wk, wv, wo;                   // [q_dim|kv_dim|kv_dim|n_embd] x n_cols
    std::vector<float> bq, bk, bv;           // optional biases, empty when absent
    Weight w_gate, w_up, w_down;
  };
  Model() = default;
  util::Status LoadWeights(util::Logger& log);
  util::StatusOr<Weight> LoadMatrix(const std::string& name, int64_t n_cols, int64_t n_rows,
                                    util::Logger& log);
  util::StatusOr<std::vector<float>> LoadVector(const std::string& name, int64_t n, bool required);

  std::unique_ptr<format::GgufFile> gguf_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  ModelConfig config_;
  Weight token_embd_;  // [n_vocab] rows of n_embd
  Weight output_;      // [n_vocab] rows of n_embd (token_embd_ when tied)
  std::vector<float> output_norm_;
  std::vector<Layer> layers_;
  std::vector<double> rope_inv_freq_;        // [n_rot / 2]
  std::vector<std::vector<uint8_t>> owned_;  // weights converted at load (rare)
  uint64_t fingerprint_ = 0;
};

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

 private:
  struct Act {
    const uint8_t* data;
    size_t row_bytes;
  };
  void MatMul(const Weight& w, const Act& act, int64_t n_tokens, float* out, int64_t out_stride);
  // Quantizes rows [n_tokens][n] of `x` into the format `w` needs.
  Act PrepareAct(const Weight& w, const float* x, int64_t n_tokens, int64_t n);

  const Model& m_;
  util::ThreadPool& pool_;
  const kernels::KernelTable& kernels_;
  // Scratch, grown on demand; [n_tokens][width] row-major each.
  std::vector<float> x_, xn_, q_, k_, v_, att_, gate_, up_, rope_cos_, rope_sin_;
  std::vector<float> scores_;  // [threads][kernels::AttendScratchFloats(...)]
  // Attention work of a batch: per sequence the offset of each position's
  // row (KvLayout::SlotOffset; row_off_), where each entry's sequence starts
  // in it (entry_row_off_), and the (entries, KV head) tiles.
  struct AttendTile {
    int64_t first_entry = 0;
    int32_t n_entries = 0;
    int32_t kv_head = 0;
    int32_t head_begin = 0, n_heads = 0;  // query heads of that KV head, from its first
    int32_t shared_pos = 0;               // kernels::AttendArgs::shared_pos of the tile's entries
  };
  std::vector<size_t> row_off_;
  std::vector<size_t> entry_row_off_;
  std::vector<AttendTile> attend_tiles_;
  std::vector<uint8_t> act_[2];  // quantized activations per kernels::ActFormat
};

}  // namespace strata::model
