#include "model/synthetic.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "model/gguf_writer.h"
#include "util/random.h"

namespace strata::model {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // "▁"

// Words of the built-in vocabulary; every prefix of "▁word" becomes a token so
// that SentencePiece merges can build the whole word.
constexpr std::string_view kWords[] = {
    "the",   "a",     "and",   "to",    "of",    "in",    "was",   "he",    "she",  "it",
    "you",   "that",  "is",    "for",   "on",    "with",  "they",  "but",   "had",  "his",
    "her",   "at",    "one",   "day",   "there", "once",  "upon",  "time",  "little", "big",
    "said",  "saw",   "play",  "went",  "very",  "happy", "friend", "love", "tree", "sun",
    "ball",  "dog",   "cat",   "bird",  "house", "mom",   "dad",   "girl",  "boy",  "park",
    "run",   "jump",  "look",  "help",  "good",  "fun",   "all",   "not",   "so",   "we",
    "what",  "can",   "do",    "this",  "from",  "have",  "be",    "are",   "an",   "as",
    "model", "strata", "cache", "token", "hello", "world", "server", "fast",  "slow", "data",
};

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
};

Vocab BuiltinVocab() {
  Vocab v;
  auto add = [&](std::string text, float score, int32_t type) {
    v.tokens.push_back(std::move(text));
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0.0f, 2);
  add("<s>", 0.0f, 3);
  add("</s>", 0.0f, 3);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), 0.0f, 6);
  std::set<std::string> seen;
  auto add_normal = [&](const std::string& s, float score) {
    if (seen.insert(s).second) add(s, score, 1);
  };
  add_normal(std::string(kSpace), -1.0f);
  for (char c = 'a'; c <= 'z'; ++c) add_normal(std::string(1, c), -2.0f);
  for (char c = 'A'; c <= 'Z'; ++c) add_normal(std::string(1, c), -3.0f);
  for (char c = '0'; c <= '9'; ++c) add_normal(std::string(1, c), -3.0f);
  for (char c : std::string_view(".,!?'\"-:;()")) add_normal(std::string(1, c), -3.0f);
  for (std::string_view w : kWords) {
    const std::string full = std::string(kSpace) + std::string(w);
    // Longer prefixes score higher, so merges grow words left to right.
    for (size_t len = kSpace.size() + 1; len <= full.size(); ++len) {
      add_normal(full.substr(0, len), -10.0f + static_cast<float>(len));
    }
  }
  return v;
}

}  // namespace

SyntheticShape DemoShape() { return SyntheticShape{}; }

util::Status WriteSyntheticModel(util::FileSystem& fs, const std::string& path,
                                 const SyntheticOptions& options, util::Logger& log) {
  const SyntheticShape& s = options.shape;
  if (s.architecture != "llama") {
    return util::InvalidArgumentError(
        fmt::format("synthetic models: architecture '{}' is not supported", s.architecture));
  }
  if (s.n_embd <= 0 || s.n_layers <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.n_ff <= 0 ||
      s.n_embd % s.n_heads != 0 || s.n_heads % s.n_kv_heads != 0 ||
      (s.n_embd / s.n_heads) % 2 != 0) {
    return util::InvalidArgumentError(fmt::format(
        "synthetic models: inconsistent shape n_embd={} n_heads={} n_kv_heads={} n_ff={}",
        s.n_embd, s.n_heads, s.n_kv_heads, s.n_ff));
  }
  GgufWriter w;
  const std::string arch = s.architecture;
  w.SetString("general.architecture", arch);
  w.SetString("general.name", options.name);
  w.SetUint32(arch + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w.SetUint32(arch + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.SetUint32(arch + ".block_count", static_cast<uint32_t>(s.n_layers));
  w.SetUint32(arch + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.SetUint32(arch + ".attention.head_count", static_cast<uint32_t>(s.n_heads));
  w.SetUint32(arch + ".attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
  w.SetUint32(arch + ".rope.dimension_count", static_cast<uint32_t>(s.n_embd / s.n_heads));
  w.SetFloat32(arch + ".rope.freq_base", s.rope_freq_base);
  w.SetFloat32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);

  int64_t n_vocab = 0;
  if (options.vocab != nullptr) {
    for (const auto& [key, value] : options.vocab->metadata()) {
      if (key.rfind("tokenizer.", 0) == 0) w.CopyValue(key, value);
    }
    const GgufValue* toks = options.vocab->Find("tokenizer.ggml.tokens");
    if (toks == nullptr || !toks->is_array()) {
      return util::InvalidArgumentError(
          fmt::format("vocabulary '{}' has no tokenizer.ggml.tokens", options.vocab->name()));
    }
    n_vocab = static_cast<int64_t>(toks->size());
  } else {
    Vocab v = BuiltinVocab();
    n_vocab = static_cast<int64_t>(v.tokens.size());
    w.SetString("tokenizer.ggml.model", "llama");
    w.SetStringArray("tokenizer.ggml.tokens", v.tokens);
    w.SetFloat32Array("tokenizer.ggml.scores", v.scores);
    w.SetInt32Array("tokenizer.ggml.token_type", v.types);
    w.SetUint32("tokenizer.ggml.bos_token_id", 1);
    w.SetUint32("tokenizer.ggml.eos_token_id", 2);
    w.SetUint32("tokenizer.ggml.unknown_token_id", 0);
    w.SetBool("tokenizer.ggml.add_bos_token", true);
  }
  w.SetUint32("general.file_type", static_cast<uint32_t>(options.type));

  // Every tensor gets its own generator seeded from (seed, tensor index), so
  // the bytes do not depend on the order rows are requested in.
  int tensor_index = 0;
  auto random_matrix = [&](float stddev) {
    const uint64_t seed = options.seed * 1000003ULL + static_cast<uint64_t>(tensor_index++);
    return [seed, stddev](int64_t row, std::span<float> out) {
      util::Rng rng(seed ^ (static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ULL));
      for (float& x : out) x = static_cast<float>(rng.Normal()) * stddev;
    };
  };
  auto ones = [](int64_t, std::span<float> out) { std::fill(out.begin(), out.end(), 1.0f); };
  const int64_t E = s.n_embd, F = s.n_ff, KV = static_cast<int64_t>(s.n_embd / s.n_heads) * s.n_kv_heads;
  const float sd = 0.02f;
  const float sd_out = 1.0f / std::sqrt(static_cast<float>(E));
  const TensorType t = options.type;
  STRATA_RETURN_IF_ERROR(w.AddTensor("token_embd.weight", {E, n_vocab}, t, random_matrix(sd_out)));
  for (int32_t l = 0; l < s.n_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    STRATA_RETURN_IF_ERROR(w.AddTensor(b + "attn_norm.weight", {E}, TensorType::kF32, ones));
    STRATA_RETURN_IF_ERROR(w.AddTensor(b + "attn_q.weight", {E, E}, t, random_matrix(sd)));
    STRATA_RETURN_IF_ERROR(w.AddTensor(b + "attn_k.weight", {E, KV}, t, random_matrix(sd)));
    STRATA_RETURN_IF_ERROR(w.AddTensor(b + "attn_v.weight", {E, KV}, t, random_matrix(sd)));
    STRATA_RETURN_IF_ERROR(w.AddTensor(b + "attn_output.weight", {E, E}, t, random_matrix(sd)));
    STRATA_RETURN_IF_ERROR(w.AddTensor(b + "ffn_norm.weight", {E}, TensorType::kF32, ones));
    STRATA_RETURN_IF_ERROR(w.AddTensor(b + "ffn_gate.weight", {E, F}, t, random_matrix(sd)));
    STRATA_RETURN_IF_ERROR(w.AddTensor(b + "ffn_up.weight", {E, F}, t, random_matrix(sd)));
    STRATA_RETURN_IF_ERROR(w.AddTensor(b + "ffn_down.weight", {F, E}, t, random_matrix(sd)));
  }
  STRATA_RETURN_IF_ERROR(w.AddTensor("output_norm.weight", {E}, TensorType::kF32, ones));
  if (!s.tied_embeddings) {
    STRATA_RETURN_IF_ERROR(w.AddTensor("output.weight", {E, n_vocab}, t, random_matrix(sd_out)));
  }
  log.Info("writing synthetic model '{}' ({} layers, n_embd {}, vocab {}, {}) to {}", options.name,
           s.n_layers, s.n_embd, n_vocab, TypeName(t), path);
  return w.Write(fs, path);
}

}  // namespace strata::model
