#include "model/transformer.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "model/internal/architecture.h"
#include "model/internal/weights.h"
#include "util/hash.h"

namespace strata::model {
namespace {

using util::InvalidArgumentError;
using util::Status;
using util::StatusOr;

std::string ShapeString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace

uint64_t FingerprintOf(const format::GgufFile& g) {
  util::Hasher h(0x5354524154414d31ULL);
  h.Update(g.bytes().subspan(0, g.data_offset()));
  for (const auto& t : g.tensors()) {
    const size_t k = std::min<size_t>(64, t.data.size());
    h.Update(t.data.subspan(0, k));
    h.Update(t.data.subspan(t.data.size() - k, k));
  }
  return h.Digest();
}

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
  m->architecture_ = FindArchitecture(arch);
  if (m->architecture_ == nullptr) {
    return util::UnimplementedError(
        fmt::format("model architecture '{}' is not supported (supported: {})", arch,
                    SupportedArchitectureNames()));
  }
  c.architecture = std::string(arch);
  STRATA_ASSIGN_OR_RETURN(std::string_view name, g.GetStringOr("general.name", ""));
  c.name = std::string(name);
  STRATA_ASSIGN_OR_RETURN(m->tokenizer_, text::Tokenizer::FromGguf(g));
  c.n_vocab = m->tokenizer_->n_vocab();

  const Architecture& a = *m->architecture_;
  STRATA_RETURN_IF_ERROR(a.read_config(g, c));
  c.rope_style = a.rope_style;
  TensorLoader loader(g, m->weights_->owned, log);
  STRATA_RETURN_IF_ERROR(a.load_tensors(a, loader, c, *m->weights_));

  m->fingerprint_ = FingerprintOf(g);

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
    return util::UnimplementedError(
        fmt::format("tensor '{}' has type {}, which strata cannot compute (supported: {})", name,
                    kernels::TypeName(t->type), kernels::ComputeSupportedTypeNames()));
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
