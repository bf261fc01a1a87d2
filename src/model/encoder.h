// model/encoder.h — BERT-family sentence encoders loaded from GGUF: text in,
// one unit-length vector out.
//
// Promise: Encoder::Load accepts the architectures `bert` (learned absolute
// positions, biased projections, GELU feed-forward: bge, all-MiniLM) and
// `nomic-bert` (fused QKV, NEOX rotary positions, SwiGLU: nomic-embed-text)
// as llama.cpp's converter writes them, with a WordPiece vocabulary
// (text/tokenizer.h). The forward pass is bidirectional post-norm attention
// on strata's kernels, computed as the reference engine computes it (LayerNorm
// after each residual, GELU in its tanh form, token type 0 for every token);
// its vectors agree with llama.cpp's `llama-embedding` to cosine ≥ 0.9999
// (tests/model/encoder_test.cpp). The sentence vector pools the last hidden
// states as the file says (`<arch>.pooling_type`: 1 mean, 2 CLS; mean when
// absent) over every token including [CLS] and [SEP], then is L2-normalised.
// Texts longer than the trained context are cut to it, and the result says so.
// Every hyper-parameter and tensor shape is checked at load and named when
// wrong; weights stay in the memory-mapped file.
//
// Threading: an Encoder is immutable; Embed may run on several threads at
// once, each with its own pool (a ThreadPool has one owner at a time).
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto enc, Encoder::Load(fs, "bge-small.gguf", log));
//   STRATA_ASSIGN_OR_RETURN(Embedding e, enc->Embed("How do I reset it?", pool));
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.h"
#include "text/tokenizer.h"
#include "util/file_system.h"
#include "util/log.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace strata::model {

enum class Pooling { kMean, kCls };

struct EncoderConfig {
  std::string architecture;  // "bert" | "nomic-bert"
  std::string name;          // general.name
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;  // the longest input, in tokens
  int32_t n_embd = 0;       // the vector's dimension
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t head_dim = 0;
  int32_t n_ff = 0;
  int32_t n_token_types = 0;
  float norm_eps = 1e-12f;
  float rope_freq_base = 10000.0f;  // nomic-bert only
  Pooling pooling = Pooling::kMean;
  int64_t n_params = 0;
  uint64_t weight_bytes = 0;
};

struct Embedding {
  std::vector<float> vector;  // n_embd floats, unit length
  int32_t n_tokens = 0;       // tokens encoded, [CLS] and [SEP] included
  bool truncated = false;     // the text was longer than n_ctx_train tokens
};

struct EncoderWeights;

class Encoder {
 public:
  ~Encoder();
  static util::StatusOr<std::unique_ptr<Encoder>> Load(util::FileSystem& fs,
                                                       const std::string& path, util::Logger& log);
  static util::StatusOr<std::unique_ptr<Encoder>> FromGguf(std::unique_ptr<format::GgufFile> gguf,
                                                           util::Logger& log);
  // Whether general.architecture names an encoder this class loads (callers
  // choose between Encoder and Model by it).
  static bool IsEncoderArchitecture(std::string_view architecture);

  const EncoderConfig& config() const { return config_; }
  const text::Tokenizer& tokenizer() const { return *tokenizer_; }
  // Identifies these weights and vocabulary, as Model::fingerprint does.
  uint64_t fingerprint() const { return fingerprint_; }

  // The sentence vector of `text`: [CLS] tokens [SEP], cut to n_ctx_train.
  util::StatusOr<Embedding> Embed(std::string_view text, util::ThreadPool& pool) const;
  // The same for tokens already made (InvalidArgument for an empty span, an
  // id outside the vocabulary or more than n_ctx_train tokens).
  util::StatusOr<Embedding> EmbedTokens(std::span<const int32_t> tokens,
                                        util::ThreadPool& pool) const;

 private:
  Encoder();

  std::unique_ptr<format::GgufFile> gguf_;
  std::unique_ptr<text::Tokenizer> tokenizer_;
  EncoderConfig config_;
  std::unique_ptr<EncoderWeights> weights_;
  uint64_t fingerprint_ = 0;
};

}  // namespace strata::model
