// The llama family: pre-norm decoders with RMSNorm, rotary positions and a
// SwiGLU feed-forward block (llama, qwen2). Their hyper-parameters and
// tensors are read the same way; what differs is in their table entries.
#include <cmath>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "model/internal/architecture.h"

namespace strata::model {

using util::InvalidArgumentError;
using util::Status;
using util::StatusOr;

Status ReadLlamaConfig(const format::GgufFile& g, ModelConfig& c) {
  const std::string p = c.architecture + ".";
  auto get_dim = [&](const std::string& key, int64_t max,
                     std::optional<int64_t> fallback) -> StatusOr<int32_t> {
    uint64_t v;
    if (fallback && !g.Find(key)) {
      v = static_cast<uint64_t>(*fallback);
    } else {
      STRATA_ASSIGN_OR_RETURN(v, g.GetUint(key));
    }
    if (v < 1 || v > static_cast<uint64_t>(max)) {
      return InvalidArgumentError(
          fmt::format("model metadata '{}' = {} is outside [1, {}]", key, v, max));
    }
    return static_cast<int32_t>(v);
  };
  STRATA_ASSIGN_OR_RETURN(c.n_embd, get_dim(p + "embedding_length", 1 << 16, std::nullopt));
  STRATA_ASSIGN_OR_RETURN(c.n_layers, get_dim(p + "block_count", 1024, std::nullopt));
  STRATA_ASSIGN_OR_RETURN(c.n_ff, get_dim(p + "feed_forward_length", 1 << 20, std::nullopt));
  STRATA_ASSIGN_OR_RETURN(c.n_heads, get_dim(p + "attention.head_count", 1024, std::nullopt));
  STRATA_ASSIGN_OR_RETURN(c.n_kv_heads,
                          get_dim(p + "attention.head_count_kv", c.n_heads, c.n_heads));
  STRATA_ASSIGN_OR_RETURN(c.n_ctx_train, get_dim(p + "context_length", 1 << 24, 2048));
  if (c.n_heads % c.n_kv_heads != 0) {
    return InvalidArgumentError(
        fmt::format("attention.head_count {} is not a multiple of attention.head_count_kv {}",
                    c.n_heads, c.n_kv_heads));
  }
  if (c.n_embd % c.n_heads != 0 && !g.Find(p + "attention.key_length")) {
    return InvalidArgumentError(fmt::format(
        "embedding_length {} is not a multiple of attention.head_count {}", c.n_embd, c.n_heads));
  }
  STRATA_ASSIGN_OR_RETURN(c.head_dim,
                          get_dim(p + "attention.key_length", 4096, c.n_embd / c.n_heads));
  STRATA_ASSIGN_OR_RETURN(int32_t v_dim, get_dim(p + "attention.value_length", 4096, c.head_dim));
  if (v_dim != c.head_dim) {
    return util::UnimplementedError(
        fmt::format("attention.value_length {} differs from key_length {}", v_dim, c.head_dim));
  }
  STRATA_ASSIGN_OR_RETURN(c.n_rot, get_dim(p + "rope.dimension_count", c.head_dim, c.head_dim));
  if (c.n_rot % 2 != 0) {
    return InvalidArgumentError(fmt::format("rope.dimension_count {} is odd", c.n_rot));
  }
  STRATA_ASSIGN_OR_RETURN(double eps, g.GetFloatOr(p + "attention.layer_norm_rms_epsilon", 1e-5));
  STRATA_ASSIGN_OR_RETURN(double base, g.GetFloatOr(p + "rope.freq_base", 10000.0));
  if (!(eps > 0 && eps < 1)) {
    return InvalidArgumentError(fmt::format("layer_norm_rms_epsilon {} is outside (0, 1)", eps));
  }
  if (!(base > 1 && std::isfinite(base))) {
    return InvalidArgumentError(fmt::format("rope.freq_base {} must be finite and > 1", base));
  }
  c.rms_eps = static_cast<float>(eps);
  c.rope_freq_base = static_cast<float>(base);
  STRATA_ASSIGN_OR_RETURN(std::string_view scaling, g.GetStringOr(p + "rope.scaling.type", "none"));
  if (scaling == "linear") {
    STRATA_ASSIGN_OR_RETURN(double factor, g.GetFloat(p + "rope.scaling.factor"));
    if (!(factor >= 1.0 && std::isfinite(factor))) {
      return InvalidArgumentError(fmt::format("rope.scaling.factor {} must be >= 1", factor));
    }
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none") {
    return util::UnimplementedError(
        fmt::format("rope.scaling.type '{}' is not supported", scaling));
  }
  return util::OkStatus();
}

namespace {

// rope_inv_freq[i] = freq_base^(-2i / n_rot), divided by rope_freqs.weight[i]
// where the file has it.
Status LoadRopeFrequencies(const Architecture& arch, TensorLoader& loader, const ModelConfig& c,
                           ModelWeights& w) {
  w.rope_inv_freq.resize(static_cast<size_t>(c.n_rot / 2));
  for (int32_t i = 0; i < c.n_rot / 2; ++i) {
    w.rope_inv_freq[static_cast<size_t>(i)] =
        std::pow(static_cast<double>(c.rope_freq_base), -2.0 * i / c.n_rot);
  }
  // Llama 3.1-style frequency scaling: converters store one divisor per
  // rotated pair in rope_freqs.weight.
  if (arch.optional.rope_freqs && loader.Has("rope_freqs.weight")) {
    STRATA_ASSIGN_OR_RETURN(std::vector<float> factors,
                            loader.Vector("rope_freqs.weight", c.n_rot / 2, true));
    for (size_t i = 0; i < factors.size(); ++i) {
      if (!(factors[i] > 0.0f) || !std::isfinite(factors[i])) {
        return InvalidArgumentError(
            fmt::format("rope_freqs.weight[{}] = {} must be finite and > 0", i, factors[i]));
      }
      w.rope_inv_freq[i] /= factors[i];
    }
  }
  return util::OkStatus();
}

}  // namespace

Status LoadLlamaTensors(const Architecture& arch, TensorLoader& loader, ModelConfig& c,
                        ModelWeights& w) {
  STRATA_RETURN_IF_ERROR(LoadRopeFrequencies(arch, loader, c, w));
  STRATA_ASSIGN_OR_RETURN(w.token_embd, loader.Matrix("token_embd.weight", c.n_embd, c.n_vocab));
  STRATA_ASSIGN_OR_RETURN(w.output_norm, loader.Vector("output_norm.weight", c.n_embd, true));
  if (arch.optional.output && loader.Has("output.weight")) {
    STRATA_ASSIGN_OR_RETURN(w.output, loader.Matrix("output.weight", c.n_embd, c.n_vocab));
  } else {
    w.output = w.token_embd;
    c.tied_embeddings = true;
  }
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int32_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[static_cast<size_t>(l)];
    const std::string b = fmt::format("blk.{}.", l);
    STRATA_ASSIGN_OR_RETURN(L.attn_norm, loader.Vector(b + "attn_norm.weight", c.n_embd, true));
    STRATA_ASSIGN_OR_RETURN(L.ffn_norm, loader.Vector(b + "ffn_norm.weight", c.n_embd, true));
    STRATA_ASSIGN_OR_RETURN(L.wq, loader.Matrix(b + "attn_q.weight", c.n_embd, c.q_dim()));
    STRATA_ASSIGN_OR_RETURN(L.wk, loader.Matrix(b + "attn_k.weight", c.n_embd, c.kv_dim()));
    STRATA_ASSIGN_OR_RETURN(L.wv, loader.Matrix(b + "attn_v.weight", c.n_embd, c.kv_dim()));
    STRATA_ASSIGN_OR_RETURN(L.wo, loader.Matrix(b + "attn_output.weight", c.q_dim(), c.n_embd));
    if (arch.optional.qkv_bias) {
      STRATA_ASSIGN_OR_RETURN(L.bq, loader.Vector(b + "attn_q.bias", c.q_dim(), false));
      STRATA_ASSIGN_OR_RETURN(L.bk, loader.Vector(b + "attn_k.bias", c.kv_dim(), false));
      STRATA_ASSIGN_OR_RETURN(L.bv, loader.Vector(b + "attn_v.bias", c.kv_dim(), false));
    }
    STRATA_ASSIGN_OR_RETURN(L.w_gate, loader.Matrix(b + "ffn_gate.weight", c.n_embd, c.n_ff));
    STRATA_ASSIGN_OR_RETURN(L.w_up, loader.Matrix(b + "ffn_up.weight", c.n_embd, c.n_ff));
    STRATA_ASSIGN_OR_RETURN(L.w_down, loader.Matrix(b + "ffn_down.weight", c.n_ff, c.n_embd));
  }
  return util::OkStatus();
}

}  // namespace strata::model
