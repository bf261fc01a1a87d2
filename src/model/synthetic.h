// model/synthetic.h — random-weight models of a chosen shape, written as GGUF.
//
// Promise: WriteSyntheticModel writes a complete, loadable GGUF (decoders:
// architecture llama or qwen2, loaded by Model; sentence encoders: bert or
// nomic-bert, loaded by Encoder) whose weights are drawn from a seeded
// generator: the same options give the same bytes, whatever the thread count.
// Its vocabulary is copied from a vocabulary GGUF when one is given, else a
// small built-in one (bytes, letters, common English words): SentencePiece for
// decoders, WordPiece for encoders. Encoder norms and biases are random too
// (scales near 1), so every tensor a forward pass reads shapes its output. Such models
// generate gibberish: they exist so strata runs without a downloaded model and
// so benchmarks run on realistic shapes, whose speed does not depend on whether
// the weights were trained. Quantization mixes follow the rules GGUF
// quantizers use for Q4_K_M and Q5_K_M files, so a synthetic file has the same
// per-tensor types as a downloaded one of that shape.
//
// Threading: thread-compatible; writing uses the pool given in the options.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "kernels/tensor_type.h"
#include "util/file_system.h"
#include "util/log.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace strata::model {

struct SyntheticShape {
  std::string architecture = "llama";  // llama | qwen2 (q/k/v biases, NEOX rotation) |
                                       // bert | nomic-bert (encoders)
  int32_t n_embd = 256;
  int32_t n_layers = 4;
  int32_t n_heads = 8;
  int32_t n_kv_heads = 4;
  int32_t n_ff = 704;
  int32_t n_ctx = 2048;
  float rope_freq_base = 10000.0f;
  bool tied_embeddings = true;
  uint32_t pooling_type = 1;  // encoders: 1 mean, 2 CLS
};

// Named shapes: "demo" (the built-in demo), "llama-100m" (~100M parameters
// with a 32k vocabulary), "llama-1b" (TinyLlama 1.1B: 2048 wide, 22 layers, 32
// heads, 4 KV heads), "qwen2-0.5b" (Qwen2.5 0.5B: 896 wide, 24 layers, 14
// heads, 2 KV heads, tied embeddings); encoders "bge-small" (bert: 384 wide, 12
// layers, 12 heads, FFN 1536, 512 positions, CLS pooling), "minilm-l6" (bert:
// all-MiniLM-L6-v2, 6 layers, mean pooling) and "nomic-embed" (nomic-bert:
// nomic-embed-text-v1.5, 768 wide, 12 layers, FFN 3072, 2048 positions, mean).
std::optional<SyntheticShape> NamedShape(std::string_view name);
std::vector<std::string> NamedShapeNames();

// How tensor types are chosen.
enum class QuantMix {
  kUniform,  // every matrix in `type` (rows that are not whole blocks: see TypeForTensor)
  kQ4_K_M,   // Q4_K, with Q6_K for the output head and some attn_v/ffn_down layers
  kQ5_K_M,   // Q5_K, likewise
};

// Parses "f32", "q8_0", "q4_k", "q4_k_m", ... into a base type and a mix.
std::optional<std::pair<kernels::TensorType, QuantMix>> ParseTypeSpec(std::string_view spec);

// The type a tensor gets: `name` is its GGUF name, `layer` its block index (-1
// outside blocks), `row_length` its shape[0]. Where the chosen type's block
// does not divide the row, falls back as GGUF quantizers do (Q4_K→Q5_0,
// Q5_K→Q5_1, Q6_K→Q8_0, else F16).
kernels::TensorType TypeForTensor(kernels::TensorType base, QuantMix mix, const std::string& name,
                                  int32_t layer, int32_t n_layers, int64_t row_length,
                                  bool tied_embeddings);

struct SyntheticOptions {
  SyntheticShape shape;
  kernels::TensorType type = kernels::TensorType::kF32;  // matrices; norms and biases stay F32
  QuantMix mix = QuantMix::kUniform;
  uint64_t seed = 42;
  std::string name = "strata-synthetic";
  const format::GgufFile* vocab =
      nullptr;  // copy tokenizer.* from here; nullptr: built-in vocabulary
  // Give the copied vocabulary's byte tokens ("<0xNN>", token type 6) the
  // normal type, so they print as that literal text. Random weights emit byte
  // tokens that do not form valid UTF-8, which some servers refuse to send;
  // with this, every token decodes to valid text (for server comparisons).
  bool byte_tokens_as_text = false;
  util::ThreadPool* pool = nullptr;  // encode rows in parallel
};

// The shape of the demo model strata writes when no model is available.
SyntheticShape DemoShape();

util::Status WriteSyntheticModel(util::FileSystem& fs, const std::string& path,
                                 const SyntheticOptions& options, util::Logger& log);

}  // namespace strata::model
