#include "model/synthetic.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "format/gguf_writer.h"
#include "kernels/kernels.h"
#include "text/tokenizer.h"
#include "util/random.h"

namespace strata::model {
namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // "▁"

// Words of the built-in vocabulary; every prefix of "▁word" becomes a token so
// that SentencePiece merges can build the whole word.
constexpr std::string_view kWords[] = {
    "the",   "a",      "and",   "to",    "of",    "in",    "was",    "he",   "she",    "it",
    "you",   "that",   "is",    "for",   "on",    "with",  "they",   "but",  "had",    "his",
    "her",   "at",     "one",   "day",   "there", "once",  "upon",   "time", "little", "big",
    "said",  "saw",    "play",  "went",  "very",  "happy", "friend", "love", "tree",   "sun",
    "ball",  "dog",    "cat",   "bird",  "house", "mom",   "dad",    "girl", "boy",    "park",
    "run",   "jump",   "look",  "help",  "good",  "fun",   "all",    "not",  "so",     "we",
    "what",  "can",    "do",    "this",  "from",  "have",  "be",     "are",  "an",     "as",
    "model", "strata", "cache", "token", "hello", "world", "server", "fast", "slow",   "data",
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

// A small WordPiece vocabulary for encoders: BERT's special tokens, then every
// letter, digit and punctuation mark as a word start ("▁a") and as a
// continuation ("a"), then the built-in words. No text twice (the reference
// refuses a vocabulary with duplicates).
Vocab BuiltinWordPieceVocab() {
  Vocab v;
  std::set<std::string> seen;
  auto add = [&](std::string text, int32_t type) {
    if (!seen.insert(text).second) return;
    v.tokens.push_back(std::move(text));
    v.scores.push_back(0.0f);
    v.types.push_back(type);
  };
  for (std::string_view t : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) add(std::string(t), 3);
  std::string chars;
  for (char c = 'a'; c <= 'z'; ++c) chars.push_back(c);
  for (char c = '0'; c <= '9'; ++c) chars.push_back(c);
  chars += ".,!?'\"-:;()$%&*+/<=>@[]^_`{|}~#\\";
  for (char c : chars) add(std::string(kSpace) + c, 1);
  for (char c : chars) add(std::string(1, c), 1);
  for (std::string_view w : kWords) add(std::string(kSpace) + std::string(w), 1);
  return v;
}

bool IsEncoder(const std::string& arch) { return arch == "bert" || arch == "nomic-bert"; }

bool UseMoreBits(int32_t layer, int32_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// general.file_type: the numbering GGUF tools use for a file's dominant
// quantization (not the tensor type ids).
uint32_t FileType(kernels::TensorType t, QuantMix mix) {
  if (mix == QuantMix::kQ4_K_M) return 15;
  if (mix == QuantMix::kQ5_K_M) return 17;
  switch (t) {
    case kernels::TensorType::kF32:
      return 0;
    case kernels::TensorType::kF16:
      return 1;
    case kernels::TensorType::kQ4_0:
      return 2;
    case kernels::TensorType::kQ4_1:
      return 3;
    case kernels::TensorType::kQ8_0:
      return 7;
    case kernels::TensorType::kQ5_0:
      return 8;
    case kernels::TensorType::kQ5_1:
      return 9;
    case kernels::TensorType::kQ4_K:
      return 14;  // "Q4_K_S": uniform Q4_K
    case kernels::TensorType::kQ5_K:
      return 16;  // "Q5_K_S"
    case kernels::TensorType::kQ6_K:
      return 18;
    case kernels::TensorType::kBF16:
      return 32;
    default:
      return 0;
  }
}

}  // namespace

SyntheticShape DemoShape() { return SyntheticShape{}; }

std::optional<SyntheticShape> NamedShape(std::string_view name) {
  SyntheticShape s;
  if (name == "demo") return s;
  if (name == "llama-100m") {
    s.n_embd = 768;
    s.n_layers = 12;
    s.n_heads = 12;
    s.n_kv_heads = 4;
    s.n_ff = 2048;
    s.tied_embeddings = false;
    return s;
  }
  if (name == "llama-1b") {
    s.n_embd = 2048;
    s.n_layers = 22;
    s.n_heads = 32;
    s.n_kv_heads = 4;
    s.n_ff = 5632;
    s.tied_embeddings = false;
    return s;
  }
  if (name == "bge-small" || name == "minilm-l6") {
    s.architecture = "bert";
    s.n_embd = 384;
    s.n_layers = name == "bge-small" ? 12 : 6;
    s.n_heads = 12;
    s.n_kv_heads = 12;
    s.n_ff = 1536;
    s.n_ctx = 512;
    s.tied_embeddings = false;
    s.pooling_type = name == "bge-small" ? 2 : 1;
    return s;
  }
  if (name == "nomic-embed") {
    s.architecture = "nomic-bert";
    s.n_embd = 768;
    s.n_layers = 12;
    s.n_heads = 12;
    s.n_kv_heads = 12;
    s.n_ff = 3072;
    s.n_ctx = 2048;
    s.rope_freq_base = 1000.0f;
    s.tied_embeddings = false;
    return s;
  }
  if (name == "qwen2-0.5b") {
    s.architecture = "qwen2";
    s.n_embd = 896;
    s.n_layers = 24;
    s.n_heads = 14;
    s.n_kv_heads = 2;
    s.n_ff = 4864;
    s.n_ctx = 32768;
    s.rope_freq_base = 1000000.0f;
    s.tied_embeddings = true;
    return s;
  }
  return std::nullopt;
}

std::vector<std::string> NamedShapeNames() {
  return {"demo", "llama-100m", "llama-1b", "qwen2-0.5b", "bge-small", "minilm-l6", "nomic-embed"};
}

std::optional<std::pair<kernels::TensorType, QuantMix>> ParseTypeSpec(std::string_view spec) {
  std::string lower(spec);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "q4_k_m") return std::pair{kernels::TensorType::kQ4_K, QuantMix::kQ4_K_M};
  if (lower == "q5_k_m") return std::pair{kernels::TensorType::kQ5_K, QuantMix::kQ5_K_M};
  auto t = kernels::ParseTensorType(lower);
  if (!t || !kernels::HasCodec(*t)) return std::nullopt;
  return std::pair{*t, QuantMix::kUniform};
}

kernels::TensorType TypeForTensor(kernels::TensorType base, QuantMix mix, const std::string& name,
                                  int32_t layer, int32_t n_layers, int64_t row_length,
                                  bool tied_embeddings) {
  kernels::TensorType t = base;
  const bool k_mix = mix != QuantMix::kUniform;
  const bool is_output =
      name == "output.weight" || (tied_embeddings && name == "token_embd.weight");
  if (k_mix && is_output) {
    // The output head keeps more bits; where its rows are not whole 256-blocks, Q8_0.
    return row_length % 256 == 0 ? kernels::TensorType::kQ6_K : kernels::TensorType::kQ8_0;
  }
  if (k_mix && layer >= 0 && UseMoreBits(layer, n_layers) &&
      (EndsWith(name, "attn_v.weight") || EndsWith(name, "ffn_down.weight"))) {
    t = kernels::TensorType::kQ6_K;
  }
  const int32_t block = kernels::GetTypeInfo(t).block_size;
  if (row_length % block == 0) return t;
  switch (t) {
    case kernels::TensorType::kQ4_K:
      t = kernels::TensorType::kQ5_0;
      break;
    case kernels::TensorType::kQ5_K:
      t = kernels::TensorType::kQ5_1;
      break;
    case kernels::TensorType::kQ6_K:
      t = kernels::TensorType::kQ8_0;
      break;
    default:
      t = kernels::TensorType::kF16;
      break;
  }
  if (row_length % kernels::GetTypeInfo(t).block_size != 0 || !kernels::HasCodec(t))
    return kernels::TensorType::kF16;
  return t;
}

util::Status WriteSyntheticModel(util::FileSystem& fs, const std::string& path,
                                 const SyntheticOptions& options, util::Logger& log) {
  const SyntheticShape& s = options.shape;
  if (s.architecture != "llama" && s.architecture != "qwen2" && !IsEncoder(s.architecture)) {
    return util::InvalidArgumentError(
        fmt::format("synthetic models: architecture '{}' is not supported (llama, qwen2, bert, "
                    "nomic-bert)",
                    s.architecture));
  }
  const bool encoder = IsEncoder(s.architecture);
  if (encoder && (s.n_kv_heads != s.n_heads || (s.pooling_type != 1 && s.pooling_type != 2))) {
    return util::InvalidArgumentError(
        "synthetic encoders: n_kv_heads must equal n_heads and pooling be 1 (mean) or 2 (CLS)");
  }
  if (s.n_embd <= 0 || s.n_layers <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.n_ff <= 0 ||
      s.n_embd % s.n_heads != 0 || s.n_heads % s.n_kv_heads != 0 ||
      (s.n_embd / s.n_heads) % 2 != 0 || s.n_ctx <= 0) {
    return util::InvalidArgumentError(fmt::format(
        "synthetic models: inconsistent shape n_embd={} n_heads={} n_kv_heads={} n_ff={}", s.n_embd,
        s.n_heads, s.n_kv_heads, s.n_ff));
  }
  if (!kernels::HasCodec(options.type)) {
    return util::InvalidArgumentError(
        fmt::format("synthetic models: cannot encode type {}", kernels::TypeName(options.type)));
  }
  format::GgufWriter w;
  const std::string arch = s.architecture;
  w.SetString("general.architecture", arch);
  w.SetString("general.name", options.name);
  w.SetUint32(arch + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w.SetUint32(arch + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.SetUint32(arch + ".block_count", static_cast<uint32_t>(s.n_layers));
  w.SetUint32(arch + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.SetUint32(arch + ".attention.head_count", static_cast<uint32_t>(s.n_heads));
  if (encoder) {
    w.SetFloat32(arch + ".attention.layer_norm_epsilon", 1e-12f);
    w.SetBool(arch + ".attention.causal", false);
    w.SetUint32(arch + ".pooling_type", s.pooling_type);
    if (arch == "nomic-bert") w.SetFloat32(arch + ".rope.freq_base", s.rope_freq_base);
  } else {
    w.SetUint32(arch + ".attention.head_count_kv", static_cast<uint32_t>(s.n_kv_heads));
    w.SetUint32(arch + ".rope.dimension_count", static_cast<uint32_t>(s.n_embd / s.n_heads));
    w.SetFloat32(arch + ".rope.freq_base", s.rope_freq_base);
    w.SetFloat32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
  }

  int64_t n_vocab = 0;
  if (options.vocab != nullptr) {
    for (const auto& [key, value] : options.vocab->metadata()) {
      if (key.rfind("tokenizer.", 0) != 0) continue;
      if (key == "tokenizer.ggml.token_type" && options.byte_tokens_as_text && value.is_array()) {
        std::vector<int32_t> types(static_cast<size_t>(value.size()));
        for (uint64_t i = 0; i < value.size(); ++i) {
          const int64_t t = value.IntAt(i).value_or(1);
          types[i] = t == static_cast<int64_t>(text::TokenType::kByte)
                         ? static_cast<int32_t>(text::TokenType::kNormal)
                         : static_cast<int32_t>(t);
        }
        w.SetInt32Array(key, types);
        continue;
      }
      w.CopyValue(key, value);
    }
    const format::GgufValue* toks = options.vocab->Find("tokenizer.ggml.tokens");
    if (toks == nullptr || !toks->is_array()) {
      return util::InvalidArgumentError(
          fmt::format("vocabulary '{}' has no tokenizer.ggml.tokens", options.vocab->name()));
    }
    n_vocab = static_cast<int64_t>(toks->size());
  } else if (encoder) {
    Vocab v = BuiltinWordPieceVocab();
    n_vocab = static_cast<int64_t>(v.tokens.size());
    w.SetString("tokenizer.ggml.model", "bert");
    w.SetStringArray("tokenizer.ggml.tokens", v.tokens);
    w.SetInt32Array("tokenizer.ggml.token_type", v.types);
    w.SetUint32("tokenizer.ggml.token_type_count", 2);
    w.SetUint32("tokenizer.ggml.padding_token_id", 0);
    w.SetUint32("tokenizer.ggml.unknown_token_id", 1);
    w.SetUint32("tokenizer.ggml.cls_token_id", 2);
    w.SetUint32("tokenizer.ggml.bos_token_id", 2);  // what llama.cpp reads as [CLS]
    w.SetUint32("tokenizer.ggml.seperator_token_id", 3);
    w.SetUint32("tokenizer.ggml.mask_token_id", 4);
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
  w.SetUint32("general.file_type", FileType(options.type, options.mix));

  // Every tensor's rows come from generators seeded by (seed, tensor index,
  // row), so the bytes do not depend on the order or threads rows are made on.
  int tensor_index = 0;
  auto random_rows = [&](float stddev) {
    const uint64_t seed = options.seed * 1000003ULL + static_cast<uint64_t>(tensor_index++);
    return [seed, stddev](int64_t row, std::span<float> out) {
      util::Rng rng(seed ^ (static_cast<uint64_t>(row) * 0x9E3779B97F4A7C15ULL));
      for (float& x : out) x = static_cast<float>(rng.Normal()) * stddev;
    };
  };
  auto ones = [](int64_t, std::span<float> out) { std::fill(out.begin(), out.end(), 1.0f); };
  const int64_t E = s.n_embd, F = s.n_ff;
  const int64_t KV = static_cast<int64_t>(s.n_embd / s.n_heads) * s.n_kv_heads;
  const float sd = 0.02f;
  const float sd_out = 1.0f / std::sqrt(static_cast<float>(E));
  auto matrix = [&](const std::string& name, int32_t layer, int64_t cols, int64_t rows,
                    float stddev) {
    const kernels::TensorType t =
        TypeForTensor(options.type, options.mix, name, layer, s.n_layers, cols, s.tied_embeddings);
    return w.AddTensor(name, {cols, rows}, t, random_rows(stddev));
  };
  auto vector = [&](const std::string& name, int64_t n, bool is_ones) {
    if (is_ones) return w.AddTensor(name, {n}, kernels::TensorType::kF32, ones);
    return w.AddTensor(name, {n}, kernels::TensorType::kF32, random_rows(0.02f));
  };
  if (encoder) {
    // Scales near a trained BERT's: embeddings ~0.05, matrices ~0.04, norm
    // weights 1 ± 0.1, biases ~0.02.
    auto around_one = [&](const std::string& name, int64_t n) {
      auto noise = random_rows(0.1f);
      return w.AddTensor(name, {n}, kernels::TensorType::kF32,
                         [noise](int64_t row, std::span<float> out) {
                           noise(row, out);
                           for (float& x : out) x += 1.0f;
                         });
    };
    auto layer_norm = [&](const std::string& name) -> util::Status {
      STRATA_RETURN_IF_ERROR(around_one(name + ".weight", E));
      return vector(name + ".bias", E, false);
    };
    const float sd_embd = 0.05f, sd_mat = 0.04f;
    STRATA_RETURN_IF_ERROR(matrix("token_embd.weight", -1, E, n_vocab, sd_embd));
    // Quantizers keep position and token-type embeddings in F32.
    STRATA_RETURN_IF_ERROR(
        w.AddTensor("token_types.weight", {E, 2}, kernels::TensorType::kF32, random_rows(sd_embd)));
    if (arch == "bert") {
      STRATA_RETURN_IF_ERROR(w.AddTensor("position_embd.weight", {E, s.n_ctx},
                                         kernels::TensorType::kF32, random_rows(sd_embd)));
    }
    STRATA_RETURN_IF_ERROR(layer_norm("token_embd_norm"));
    for (int32_t l = 0; l < s.n_layers; ++l) {
      const std::string b = fmt::format("blk.{}.", l);
      if (arch == "bert") {
        for (const char* m : {"attn_q", "attn_k", "attn_v"}) {
          STRATA_RETURN_IF_ERROR(matrix(b + m + ".weight", l, E, E, sd_mat));
          STRATA_RETURN_IF_ERROR(vector(b + m + ".bias", E, false));
        }
      } else {
        STRATA_RETURN_IF_ERROR(matrix(b + "attn_qkv.weight", l, E, 3 * E, sd_mat));
      }
      STRATA_RETURN_IF_ERROR(matrix(b + "attn_output.weight", l, E, E, sd_mat));
      if (arch == "bert") STRATA_RETURN_IF_ERROR(vector(b + "attn_output.bias", E, false));
      STRATA_RETURN_IF_ERROR(layer_norm(b + "attn_output_norm"));
      STRATA_RETURN_IF_ERROR(matrix(b + "ffn_up.weight", l, E, F, sd_mat));
      if (arch == "bert") {
        STRATA_RETURN_IF_ERROR(vector(b + "ffn_up.bias", F, false));
      } else {
        STRATA_RETURN_IF_ERROR(matrix(b + "ffn_gate.weight", l, E, F, sd_mat));
      }
      STRATA_RETURN_IF_ERROR(matrix(b + "ffn_down.weight", l, F, E, sd_mat));
      if (arch == "bert") STRATA_RETURN_IF_ERROR(vector(b + "ffn_down.bias", E, false));
      STRATA_RETURN_IF_ERROR(layer_norm(b + "layer_output_norm"));
    }
  } else {
    STRATA_RETURN_IF_ERROR(matrix("token_embd.weight", -1, E, n_vocab, sd_out));
  }
  for (int32_t l = 0; !encoder && l < s.n_layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    STRATA_RETURN_IF_ERROR(vector(b + "attn_norm.weight", E, true));
    STRATA_RETURN_IF_ERROR(matrix(b + "attn_q.weight", l, E, E, sd));
    STRATA_RETURN_IF_ERROR(matrix(b + "attn_k.weight", l, E, KV, sd));
    STRATA_RETURN_IF_ERROR(matrix(b + "attn_v.weight", l, E, KV, sd));
    if (arch == "qwen2") {
      STRATA_RETURN_IF_ERROR(vector(b + "attn_q.bias", E, false));
      STRATA_RETURN_IF_ERROR(vector(b + "attn_k.bias", KV, false));
      STRATA_RETURN_IF_ERROR(vector(b + "attn_v.bias", KV, false));
    }
    STRATA_RETURN_IF_ERROR(matrix(b + "attn_output.weight", l, E, E, sd));
    STRATA_RETURN_IF_ERROR(vector(b + "ffn_norm.weight", E, true));
    STRATA_RETURN_IF_ERROR(matrix(b + "ffn_gate.weight", l, E, F, sd));
    STRATA_RETURN_IF_ERROR(matrix(b + "ffn_up.weight", l, E, F, sd));
    STRATA_RETURN_IF_ERROR(matrix(b + "ffn_down.weight", l, F, E, sd));
  }
  if (!encoder) STRATA_RETURN_IF_ERROR(vector("output_norm.weight", E, true));
  if (!encoder && !s.tied_embeddings) {
    STRATA_RETURN_IF_ERROR(matrix("output.weight", -1, E, n_vocab, sd_out));
  }
  log.Info("writing synthetic model '{}' ({} {} layers, n_embd {}, vocab {}, {}) to {}",
           options.name, arch, s.n_layers, s.n_embd, n_vocab, kernels::TypeName(options.type),
           path);
  return w.Write(fs, path, options.pool,
                 [&log](size_t done, size_t total, const std::string& name) {
                   if (done == total || done % 16 == 0) {
                     log.Info("  [{}/{}] {}", done, total, name);
                   }
                 });
}

}  // namespace strata::model
