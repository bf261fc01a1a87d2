#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "model/internal/weights.h"
#include "util/hash.h"

namespace strata::model {
namespace {

using util::InvalidArgumentError;
using util::Status;
using util::StatusOr;

constexpr std::string_view kSupportedArchitectures = "llama, qwen2";

std::string ShapeString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// rope_inv_freq[i] = freq_base^(-2i / n_rot), divided by rope_freqs.weight[i]
// where the file has it.
Status LoadRopeFrequencies(TensorLoader& loader, const ModelConfig& c, ModelWeights& w) {
  w.rope_inv_freq.resize(static_cast<size_t>(c.n_rot / 2));
  for (int32_t i = 0; i < c.n_rot / 2; ++i) {
    w.rope_inv_freq[static_cast<size_t>(i)] =
        std::pow(static_cast<double>(c.rope_freq_base), -2.0 * i / c.n_rot);
  }
  // Llama 3.1-style frequency scaling: converters store one divisor per
  // rotated pair in rope_freqs.weight.
  if (loader.Has("rope_freqs.weight")) {
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

// Every tensor but rope_freqs.weight; sets c.tied_embeddings.
Status LoadWeights(TensorLoader& loader, ModelConfig& c, ModelWeights& w) {
  STRATA_ASSIGN_OR_RETURN(w.token_embd, loader.Matrix("token_embd.weight", c.n_embd, c.n_vocab));
  STRATA_ASSIGN_OR_RETURN(w.output_norm, loader.Vector("output_norm.weight", c.n_embd, true));
  if (loader.Has("output.weight")) {
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
    STRATA_ASSIGN_OR_RETURN(L.bq, loader.Vector(b + "attn_q.bias", c.q_dim(), false));
    STRATA_ASSIGN_OR_RETURN(L.bk, loader.Vector(b + "attn_k.bias", c.kv_dim(), false));
    STRATA_ASSIGN_OR_RETURN(L.bv, loader.Vector(b + "attn_v.bias", c.kv_dim(), false));
    STRATA_ASSIGN_OR_RETURN(L.w_gate, loader.Matrix(b + "ffn_gate.weight", c.n_embd, c.n_ff));
    STRATA_ASSIGN_OR_RETURN(L.w_up, loader.Matrix(b + "ffn_up.weight", c.n_embd, c.n_ff));
    STRATA_ASSIGN_OR_RETURN(L.w_down, loader.Matrix(b + "ffn_down.weight", c.n_ff, c.n_embd));
  }
  return util::OkStatus();
}

}  // namespace

Model::Model() : weights_(std::make_unique<ModelWeights>()) {}
Model::~Model() = default;

StatusOr<std::unique_ptr<Model>> Model::Load(util::FileSystem& fs, const std::string& path,
                                             const LoadOptions& options, util::Logger& log) {
  STRATA_ASSIGN_OR_RETURN(auto gguf, format::GgufFile::Open(fs, path));
  if (options.prefetch) gguf->Prefetch();
  return FromGguf(std::move(gguf), log);
}

StatusOr<std::unique_ptr<Model>> Model::FromGguf(std::unique_ptr<format::GgufFile> gguf,
                                                 util::Logger& log) {
  std::unique_ptr<Model> m(new Model());
  m->gguf_ = std::move(gguf);
  const format::GgufFile& g = *m->gguf_;
  ModelConfig& c = m->config_;

  STRATA_ASSIGN_OR_RETURN(std::string_view arch, g.GetString("general.architecture"));
  if (arch != "llama" && arch != "qwen2") {
    return util::UnimplementedError(fmt::format(
        "model architecture '{}' is not supported (supported: {})", arch, kSupportedArchitectures));
  }
  c.architecture = std::string(arch);
  STRATA_ASSIGN_OR_RETURN(std::string_view name, g.GetStringOr("general.name", ""));
  c.name = std::string(name);
  STRATA_ASSIGN_OR_RETURN(m->tokenizer_, text::Tokenizer::FromGguf(g));
  c.n_vocab = m->tokenizer_->n_vocab();

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
  // GGUF llama weights are permuted for adjacent-pair rotation; qwen2 keeps the
  // original layout and rotates halves.
  c.rope_style = c.architecture == "qwen2" ? RopeStyle::kNeox : RopeStyle::kNormal;

  TensorLoader loader(g, m->weights_->owned, log);
  STRATA_RETURN_IF_ERROR(LoadRopeFrequencies(loader, c, *m->weights_));
  STRATA_RETURN_IF_ERROR(LoadWeights(loader, c, *m->weights_));

  // Fingerprint: the header (metadata and tensor table) plus the first and last
  // bytes of every tensor, so files that differ only in weights differ here too.
  util::Hasher h(0x5354524154414d31ULL);
  h.Update(g.bytes().subspan(0, g.data_offset()));
  for (const auto& t : g.tensors()) {
    const size_t k = std::min<size_t>(64, t.data.size());
    h.Update(t.data.subspan(0, k));
    h.Update(t.data.subspan(t.data.size() - k, k));
  }
  m->fingerprint_ = h.Digest();

  for (const auto& t : g.tensors()) {
    c.n_params += t.n_elements();
    c.weight_bytes += t.n_bytes;
  }
  log.Info(
      "model '{}': {} {} layers, n_embd {}, {} heads ({} kv), n_ff {}, vocab {}, {:.2f} M params, "
      "{}, {:.1f} MiB",
      c.name, c.architecture, c.n_layers, c.n_embd, c.n_heads, c.n_kv_heads, c.n_ff, c.n_vocab,
      static_cast<double>(c.n_params) / 1e6, m->WeightTypeSummary(),
      static_cast<double>(c.weight_bytes) / (1024.0 * 1024.0));
  return m;
}

std::string Model::WeightTypeSummary() const {
  // The type holding most bytes among the 2-D weights.
  std::vector<std::pair<uint64_t, kernels::TensorType>> totals;
  for (const auto& t : gguf_->tensors()) {
    if (t.shape.size() < 2) continue;
    auto it = std::find_if(totals.begin(), totals.end(),
                           [&](const auto& e) { return e.second == t.type; });
    if (it == totals.end()) {
      totals.emplace_back(t.n_bytes, t.type);
    } else {
      it->first += t.n_bytes;
    }
  }
  if (totals.empty()) return "none";
  std::sort(totals.begin(), totals.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string s(kernels::TypeName(totals[0].second));
  if (totals.size() > 1) s += " (mixed)";
  return s;
}

StatusOr<Weight> TensorLoader::Matrix(const std::string& name, int64_t n_cols, int64_t n_rows) {
  const format::GgufTensorInfo* t = gguf_.FindTensor(name);
  if (t == nullptr) return InvalidArgumentError(fmt::format("tensor '{}' is missing", name));
  const std::vector<int64_t> want = {n_cols, n_rows};
  if (t->shape != want) {
    return InvalidArgumentError(fmt::format("tensor '{}' has shape {}, expected {}", name,
                                            ShapeString(t->shape), ShapeString(want)));
  }
  if (!kernels::HasCodec(t->type)) {
    return util::UnimplementedError(fmt::format(
        "tensor '{}' has type {}, which strata cannot compute (supported: F32, F16, BF16, Q8_0, "
        "Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)",
        name, kernels::TypeName(t->type)));
  }
  Weight w;
  w.name = name;
  w.n_cols = n_cols;
  w.n_rows = n_rows;
  if (t->rows_block_aligned()) {
    w.type = t->type;
    w.data = t->data.data();
    w.row_bytes = kernels::RowBytes(t->type, n_cols);
    return w;
  }
  // Rows that straddle quantization blocks (some early converters wrote these):
  // only the tensor as a whole is a sequence of blocks, so dequantize it flat.
  log_.Warn("tensor '{}' ({}, rows of {} are not whole blocks): converted to F32 at load", name,
            kernels::TypeName(t->type), n_cols);
  std::vector<uint8_t> buf(static_cast<size_t>(t->n_elements()) * sizeof(float));
  kernels::DequantizeRow(t->type, t->data.data(), t->n_elements(),
                         reinterpret_cast<float*>(buf.data()));
  w.type = kernels::TensorType::kF32;
  w.data = buf.data();
  w.row_bytes = static_cast<size_t>(n_cols) * sizeof(float);
  owned_.push_back(std::move(buf));
  return w;
}

StatusOr<std::vector<float>> TensorLoader::Vector(const std::string& name, int64_t n,
                                                  bool required) {
  const format::GgufTensorInfo* t = gguf_.FindTensor(name);
  if (t == nullptr) {
    if (required) return InvalidArgumentError(fmt::format("tensor '{}' is missing", name));
    return std::vector<float>();
  }
  if (t->shape != std::vector<int64_t>{n}) {
    return InvalidArgumentError(
        fmt::format("tensor '{}' has shape {}, expected [{}]", name, ShapeString(t->shape), n));
  }
  if (!kernels::HasCodec(t->type)) {
    return util::UnimplementedError(
        fmt::format("tensor '{}' has unsupported type {}", name, kernels::TypeName(t->type)));
  }
  std::vector<float> v(static_cast<size_t>(n));
  kernels::DequantizeRow(t->type, t->data.data(), n, v.data());
  return v;
}

}  // namespace strata::model
