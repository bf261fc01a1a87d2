// model/internal/architecture.h — the architectures strata runs, as one table.
//
// Promise: an architecture is one entry of Architectures(): the name GGUF
// files give it (general.architecture, also the prefix of its metadata keys),
// how its hyper-parameters and tensors are read, its rope style, which
// optional tensors it may have, and the stages its forward pass is made of
// (Forward::Stages). The loader accepts exactly the names in the table, and
// says which those are when it refuses one. Adding an architecture means
// adding an entry (and any stage, reader or loader functions it needs that
// no entry has yet); nothing branches on the name elsewhere.
//
// Threading: the table is immutable; thread-safe.
#pragma once

#include <span>
#include <string>
#include <string_view>

#include "format/gguf.h"
#include "model/forward.h"
#include "model/internal/weights.h"
#include "model/transformer.h"
#include "util/status.h"

namespace strata::model {

// Tensors a file of the architecture may have or leave out; without the flag
// the loader does not look for them.
struct OptionalTensors {
  bool qkv_bias = false;    // blk.N.attn_{q,k,v}.bias, added to Q, K and V
  bool rope_freqs = false;  // rope_freqs.weight: one divisor per rotated pair (Llama 3.1)
  bool output = false;      // output.weight; without it the head is token_embd.weight (tied)
};

struct Architecture {
  std::string_view name;
  RopeStyle rope_style = RopeStyle::kNormal;
  OptionalTensors optional;
  // Reads the hyper-parameters from the `<name>.` metadata keys into
  // `config`, whose architecture, name and n_vocab are set. InvalidArgument
  // or Unimplemented naming the key and value on anything out of range.
  util::Status (*read_config)(const format::GgufFile& gguf, ModelConfig& config) = nullptr;
  // Loads and checks every tensor against `config` (and may set what the
  // tensors decide, such as tied_embeddings).
  util::Status (*load_tensors)(const Architecture& arch, TensorLoader& loader, ModelConfig& config,
                               ModelWeights& weights) = nullptr;
  Forward::Stages stages;
};

// Every entry, in the order the supported list names them.
std::span<const Architecture> Architectures();
// The entry named `name`; nullptr if there is none.
const Architecture* FindArchitecture(std::string_view name);
// "llama, qwen2": the names of the table, for messages.
std::string SupportedArchitectureNames();

// The llama family (llama, qwen2: pre-norm decoders with RMSNorm, RoPE and a
// SwiGLU feed-forward block), in llama_family.cpp.
util::Status ReadLlamaConfig(const format::GgufFile& gguf, ModelConfig& config);
util::Status LoadLlamaTensors(const Architecture& arch, TensorLoader& loader, ModelConfig& config,
                              ModelWeights& weights);

}  // namespace strata::model
