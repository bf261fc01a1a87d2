// model/internal/weights.h — a loaded model's tensors, and the loader that
// checks them.
//
// Promise: TensorLoader hands out a GGUF file's tensors as weights only after
// checking their shape and type against what the architecture expects, and
// names what is wrong ("tensor 'blk.2.ffn_up.weight' has shape [64, 100],
// expected [64, 172]"). Matrices stay in the memory-mapped file; vectors are
// dequantized to F32.
//
// Threading: ModelWeights is immutable once loaded (read by any thread);
// TensorLoader is used by the loading thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "model/transformer.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::model {

// One decoder layer. Matrices are [n_rows][n_cols] (output x input features).
struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;  // [n_embd]
  Weight wq, wk, wv;                       // [q_dim | kv_dim | kv_dim] x n_embd
  Weight wo;                               // [n_embd] x q_dim
  std::vector<float> bq, bk, bv;           // [q_dim | kv_dim | kv_dim]; empty when absent
  Weight w_gate, w_up;                     // [n_ff] x n_embd
  Weight w_down;                           // [n_embd] x n_ff
};

struct ModelWeights {
  Weight token_embd;                        // [n_vocab] rows of n_embd
  Weight output;                            // [n_vocab] rows of n_embd (token_embd when tied)
  std::vector<float> output_norm;           // [n_embd]
  std::vector<LayerWeights> layers;         // [n_layers]
  std::vector<double> rope_inv_freq;        // [n_rot / 2]: angle per position of each rotated pair
  std::vector<std::vector<uint8_t>> owned;  // weights converted at load (rare)
  std::vector<std::unique_ptr<uint8_t[]>> packed;  // the packed matrices' bytes
};

class TensorLoader {
 public:
  // Borrows `gguf` and `log`; matrices converted at load are kept in `owned`.
  TensorLoader(const format::GgufFile& gguf, std::vector<std::vector<uint8_t>>& owned,
               util::Logger& log)
      : gguf_(gguf), owned_(owned), log_(log) {}

  bool Has(const std::string& name) const { return gguf_.FindTensor(name) != nullptr; }
  // The matrix `name`, GGUF shape [n_cols, n_rows], in a type the kernels
  // compute (InvalidArgument when missing or misshapen, Unimplemented for other types).
  util::StatusOr<Weight> Matrix(const std::string& name, int64_t n_cols, int64_t n_rows);
  // The vector `name` of n floats; empty when it is absent and not `required`.
  util::StatusOr<std::vector<float>> Vector(const std::string& name, int64_t n, bool required);

 private:
  const format::GgufFile& gguf_;
  std::vector<std::vector<uint8_t>>& owned_;
  util::Logger& log_;
};

// Identifies a file's weights and vocabulary: its header (metadata and tensor
// table) plus the first and last bytes of every tensor, so files that differ
// only in weights differ here too.
uint64_t FingerprintOf(const format::GgufFile& gguf);

}  // namespace strata::model
