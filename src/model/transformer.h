// model/transformer.h — a transformer loaded from GGUF: its hyper-parameters,
// tokenizer and weights.
//
// Promise: Model::Load accepts the architectures of the architecture table
// (llama, qwen2; model/internal/architecture.h), validates every
// hyper-parameter and tensor shape against the metadata and names what is
// wrong ("tensor 'blk.2.ffn_up.weight' has shape [64, 100], expected
// [64, 172]"); weights stay in the memory-mapped file, except the matrices
// it packs (row-interleaved, kernels.h PackRows; LoadOptions::pack), which
// it copies into memory of its own and whose file pages it then releases.
// The forward pass over a Model is model::Forward (forward.h).
//
// Threading: a Model is immutable and thread-safe once loaded; PackWeights
// runs before it is shared.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto model, Model::Load(fs, path, {}, log));
//   log.Info("{} layers", model->config().n_layers);
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "format/gguf.h"
#include "kernels/kernels.h"
#include "model/kv_layout.h"
#include "text/tokenizer.h"
#include "util/clock.h"
#include "util/file_system.h"
#include "util/log.h"
#include "util/status.h"

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
  // The layout of this model's KV memory in blocks of `block_size` positions
  // of `type` elements (kernels::IsKvType).
  KvLayout kv_layout(int32_t block_size,
                     kernels::TensorType type = kernels::TensorType::kF32) const {
    return {n_layers, kv_dim(), block_size, type};
  }
};

// One weight matrix, row-major: [n_rows][n_cols] in `type`, rows `row_bytes`
// apart; or, when `packed`, in kernels::PackRows' row-interleaved layout of
// those rows (row_bytes then kernels::PackedRowBytes).
struct Weight {
  std::string name;
  kernels::TensorType type = kernels::TensorType::kF32;
  const uint8_t* data = nullptr;
  int64_t n_cols = 0;  // elements per row (input features)
  int64_t n_rows = 0;  // output features
  size_t row_bytes = 0;
  bool packed = false;
};

// Which matrices to store row-interleaved (kernels.h, PackRows):
//   kAuto  those whose type the kernel table prefers packed
//          (KernelTable::prefers_packed), when the copies fit in the memory
//          available (MemAvailable of /proc/meminfo);
//   kOn    every packable matrix;
//   kOff   none: the file's layout.
// A token embedding that is only read by row stays plain; one that is also
// the output head (tied) is packed as the head, and its lookups unpack the
// token's group (kernels::DequantizePackedRow).
enum class PackMode { kAuto, kOn, kOff };
util::StatusOr<PackMode> ParsePackMode(std::string_view name);  // "auto", "on", "off"
std::string_view PackModeName(PackMode mode);

struct PackOptions {
  PackMode mode = PackMode::kAuto;
  const kernels::KernelTable* kernels = nullptr;  // whose preference kAuto follows; null: Best
  int32_t threads = 1;                            // packing threads
  const util::Clock* clock = nullptr;             // times the packing (log); null: untimed
};

struct LoadOptions {
  bool prefetch = true;  // ask the OS to read the file ahead
  PackOptions pack;      // packed at the end of Load (Model::PackWeights)
};

struct Architecture;
struct ModelWeights;

class Model {
 public:
  ~Model();
  static util::StatusOr<std::unique_ptr<Model>> Load(util::FileSystem& fs, const std::string& path,
                                                     const LoadOptions& options, util::Logger& log);
  static util::StatusOr<std::unique_ptr<Model>> FromGguf(std::unique_ptr<format::GgufFile> gguf,
                                                         util::Logger& log);

  // Packs the matrices `options` selects (once; later calls pack nothing
  // more) and releases their pages of the mapped file. `fs` reads
  // /proc/meminfo for kAuto's memory check (nullptr: no check). Call before
  // the model is shared.
  void PackWeights(const PackOptions& options, util::FileSystem* fs, util::Logger& log);
  // The bytes of the matrices held packed.
  uint64_t packed_bytes() const { return packed_bytes_; }

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
  Model();

  std::unique_ptr<format::GgufFile> gguf_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  const Architecture* architecture_ = nullptr;  // its entry in the architecture table
  ModelConfig config_;
  std::unique_ptr<ModelWeights> weights_;
  uint64_t fingerprint_ = 0;
  uint64_t packed_bytes_ = 0;
};

}  // namespace strata::model
