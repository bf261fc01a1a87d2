// model/synthetic.h — random-weight models of a chosen shape, written as GGUF.
//
// Promise: WriteSyntheticModel writes a complete, loadable llama-family GGUF
// whose weights are drawn from a seeded generator (same options, same bytes).
// Its vocabulary is copied from a vocabulary GGUF when one is given, else a
// small built-in SentencePiece vocabulary (bytes, letters, common English
// words). Such models generate gibberish: they exist so strata runs without a
// downloaded model and so benchmarks run on realistic shapes, whose speed does
// not depend on whether the weights were trained.
//
// Threading: thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "model/gguf.h"
#include "model/tensor_type.h"
#include "util/file_system.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::model {

struct SyntheticShape {
  std::string architecture = "llama";
  int32_t n_embd = 256;
  int32_t n_layers = 4;
  int32_t n_heads = 8;
  int32_t n_kv_heads = 4;
  int32_t n_ff = 704;
  int32_t n_ctx = 2048;
  float rope_freq_base = 10000.0f;
  bool tied_embeddings = true;
};

struct SyntheticOptions {
  SyntheticShape shape;
  TensorType type = TensorType::kF32;  // matrices; norms stay F32
  uint64_t seed = 42;
  std::string name = "strata-synthetic";
  const GgufFile* vocab = nullptr;  // copy tokenizer.* from here; nullptr: built-in vocabulary
};

// The shape of the demo model strata writes when no model is available.
SyntheticShape DemoShape();

util::Status WriteSyntheticModel(util::FileSystem& fs, const std::string& path,
                                 const SyntheticOptions& options, util::Logger& log);

}  // namespace strata::model
