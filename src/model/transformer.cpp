#include "model/transformer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "util/hash.h"

namespace strata::model {
namespace {

using util::InvalidArgumentError;
using util::Status;
using util::StatusOr;

constexpr std::string_view kSupportedArchitectures = "llama, qwen2";

// Rows per chunk when a batch's matmul rows are shared out dynamically: a
// multiple of the kernels' 4-row tiles, a few hundred microseconds of work at
// 32 tokens, and 32 chunks for a 2,048-row matrix.
constexpr int64_t kMatMulRowChunk = 64;

std::string ShapeString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

// RMSNorm of one row: out = x / sqrt(mean(x^2) + eps) * w.
void RmsNormRow(const float* x, const float* w, int64_t n, float eps, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
}

// Rotates `n_rot` leading dimensions of one head vector by the position's angles.
void RopeHead(float* v, const float* cos_t, const float* sin_t, int32_t n_rot, RopeStyle style) {
  const int32_t half = n_rot / 2;
  if (style == RopeStyle::kNormal) {
    for (int32_t i = 0; i < half; ++i) {
      const float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * cos_t[i] - b * sin_t[i];
      v[2 * i + 1] = a * sin_t[i] + b * cos_t[i];
    }
  } else {
    for (int32_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cos_t[i] - b * sin_t[i];
      v[i + half] = a * sin_t[i] + b * cos_t[i];
    }
  }
}

}  // namespace

// ---------------------------------------------------------------------------
// Loading

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

  m->rope_inv_freq_.resize(static_cast<size_t>(c.n_rot / 2));
  for (int32_t i = 0; i < c.n_rot / 2; ++i) {
    m->rope_inv_freq_[static_cast<size_t>(i)] =
        std::pow(static_cast<double>(c.rope_freq_base), -2.0 * i / c.n_rot);
  }
  // Llama 3.1-style frequency scaling: converters store one divisor per
  // rotated pair in rope_freqs.weight.
  if (m->gguf_->FindTensor("rope_freqs.weight") != nullptr) {
    STRATA_ASSIGN_OR_RETURN(std::vector<float> factors,
                            m->LoadVector("rope_freqs.weight", c.n_rot / 2, true));
    for (size_t i = 0; i < factors.size(); ++i) {
      if (!(factors[i] > 0.0f) || !std::isfinite(factors[i])) {
        return InvalidArgumentError(
            fmt::format("rope_freqs.weight[{}] = {} must be finite and > 0", i, factors[i]));
      }
      m->rope_inv_freq_[i] /= factors[i];
    }
  }

  STRATA_RETURN_IF_ERROR(m->LoadWeights(log));

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

StatusOr<Weight> Model::LoadMatrix(const std::string& name, int64_t n_cols, int64_t n_rows,
                                   util::Logger& log) {
  const format::GgufTensorInfo* t = gguf_->FindTensor(name);
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
  log.Warn("tensor '{}' ({}, rows of {} are not whole blocks): converted to F32 at load", name,
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

StatusOr<std::vector<float>> Model::LoadVector(const std::string& name, int64_t n, bool required) {
  const format::GgufTensorInfo* t = gguf_->FindTensor(name);
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

Status Model::LoadWeights(util::Logger& log) {
  const ModelConfig& c = config_;
  STRATA_ASSIGN_OR_RETURN(token_embd_, LoadMatrix("token_embd.weight", c.n_embd, c.n_vocab, log));
  STRATA_ASSIGN_OR_RETURN(output_norm_, LoadVector("output_norm.weight", c.n_embd, true));
  if (gguf_->FindTensor("output.weight") != nullptr) {
    STRATA_ASSIGN_OR_RETURN(output_, LoadMatrix("output.weight", c.n_embd, c.n_vocab, log));
  } else {
    output_ = token_embd_;
    config_.tied_embeddings = true;
  }
  layers_.resize(static_cast<size_t>(c.n_layers));
  for (int32_t l = 0; l < c.n_layers; ++l) {
    Layer& L = layers_[static_cast<size_t>(l)];
    const std::string b = fmt::format("blk.{}.", l);
    STRATA_ASSIGN_OR_RETURN(L.attn_norm, LoadVector(b + "attn_norm.weight", c.n_embd, true));
    STRATA_ASSIGN_OR_RETURN(L.ffn_norm, LoadVector(b + "ffn_norm.weight", c.n_embd, true));
    STRATA_ASSIGN_OR_RETURN(L.wq, LoadMatrix(b + "attn_q.weight", c.n_embd, c.q_dim(), log));
    STRATA_ASSIGN_OR_RETURN(L.wk, LoadMatrix(b + "attn_k.weight", c.n_embd, c.kv_dim(), log));
    STRATA_ASSIGN_OR_RETURN(L.wv, LoadMatrix(b + "attn_v.weight", c.n_embd, c.kv_dim(), log));
    STRATA_ASSIGN_OR_RETURN(L.wo, LoadMatrix(b + "attn_output.weight", c.q_dim(), c.n_embd, log));
    STRATA_ASSIGN_OR_RETURN(L.bq, LoadVector(b + "attn_q.bias", c.q_dim(), false));
    STRATA_ASSIGN_OR_RETURN(L.bk, LoadVector(b + "attn_k.bias", c.kv_dim(), false));
    STRATA_ASSIGN_OR_RETURN(L.bv, LoadVector(b + "attn_v.bias", c.kv_dim(), false));
    STRATA_ASSIGN_OR_RETURN(L.w_gate, LoadMatrix(b + "ffn_gate.weight", c.n_embd, c.n_ff, log));
    STRATA_ASSIGN_OR_RETURN(L.w_up, LoadMatrix(b + "ffn_up.weight", c.n_embd, c.n_ff, log));
    STRATA_ASSIGN_OR_RETURN(L.w_down, LoadMatrix(b + "ffn_down.weight", c.n_ff, c.n_embd, log));
  }
  return util::OkStatus();
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

// ---------------------------------------------------------------------------
// Forward pass

Forward::Forward(const Model& model, util::ThreadPool& pool, const kernels::KernelTable& kernels)
    : m_(model), pool_(pool), kernels_(kernels) {}

void Forward::MatMul(const Weight& w, const Act& act, int64_t n_tokens, float* out,
                     int64_t out_stride) {
  auto rows = [&](int64_t begin, int64_t end) {
    kernels::MatMulArgs a;
    a.w_type = w.type;
    a.w = w.data;
    a.w_row_bytes = w.row_bytes;
    a.row_begin = begin;
    a.row_end = end;
    a.act = act.data;
    a.act_row_bytes = act.row_bytes;
    a.n_tokens = n_tokens;
    a.n = w.n_cols;
    a.out = out;
    a.out_stride = out_stride;
    kernels_.matmul(a);
  };
  // A batch takes its rows in chunks from a shared counter rather than one
  // half per thread: a thread held up by anything (an interrupt, the
  // hypervisor, a neighbour) then no longer keeps the other spinning at the
  // join, which cost up to 12 % of a 32-token batch's time in a profile. Every
  // output is computed the same way whatever chunk or thread it lands in.
  // Decode (one token) keeps one contiguous half per thread: it streams
  // weights from memory, where one long run per thread reads fastest.
  const int64_t n_chunks = (w.n_rows + kMatMulRowChunk - 1) / kMatMulRowChunk;
  if (n_tokens == 1 || pool_.size() == 1 || n_chunks < 2 * pool_.size()) {
    pool_.ParallelFor(w.n_rows, rows);
    return;
  }
  std::atomic<int64_t> next{0};
  pool_.RunOnAll([&](int) {
    for (int64_t i = next.fetch_add(1); i < n_chunks; i = next.fetch_add(1)) {
      rows(i * kMatMulRowChunk, std::min(w.n_rows, (i + 1) * kMatMulRowChunk));
    }
  });
}

Forward::Act Forward::PrepareAct(const Weight& w, const float* x, int64_t n_tokens, int64_t n) {
  const kernels::ActFormat fmt = kernels::ActFormatFor(w.type);
  const size_t rb = kernels::ActRowBytes(fmt, n);
  std::vector<uint8_t>& buf = act_[fmt == kernels::ActFormat::kF32 ? 0 : 1];
  if (buf.size() < rb * static_cast<size_t>(n_tokens))
    buf.resize(rb * static_cast<size_t>(n_tokens));
  uint8_t* dst = buf.data();
  auto quantize = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      kernels_.quantize_act(fmt, x + t * n, n, dst + static_cast<size_t>(t) * rb);
    }
  };
  if (n_tokens >= 8) {
    pool_.ParallelFor(n_tokens, quantize);
  } else {
    quantize(0, n_tokens);
  }
  return Act{dst, rb};
}

Status Forward::Run(const ForwardBatch& batch, const KvBuffer& kv, std::span<float> logits,
                    std::span<float> hidden) {
  const ModelConfig& c = m_.config_;
  const int64_t T = static_cast<int64_t>(batch.entries.size());
  if (T == 0) return util::OkStatus();
  if (kv.data == nullptr || kv.block_size < 1) {
    return InvalidArgumentError("forward: KV buffer is empty");
  }

  // Validate the batch before touching any memory.
  int64_t n_logits = 0, n_hidden = 0;
  int32_t max_pos = 0;
  for (int64_t t = 0; t < T; ++t) {
    const BatchEntry& e = batch.entries[static_cast<size_t>(t)];
    if (e.token < 0 || e.token >= c.n_vocab) {
      return InvalidArgumentError(
          fmt::format("forward: entry {}: token id {} is outside the vocabulary [0, {})", t,
                      e.token, c.n_vocab));
    }
    if (e.seq < 0 || static_cast<size_t>(e.seq) >= batch.block_tables.size()) {
      return InvalidArgumentError(
          fmt::format("forward: entry {}: sequence {} has no block table", t, e.seq));
    }
    const auto& table = batch.block_tables[static_cast<size_t>(e.seq)];
    if (e.pos < 0 || static_cast<size_t>(e.pos / kv.block_size) >= table.size()) {
      return InvalidArgumentError(
          fmt::format("forward: entry {}: position {} is not covered by the sequence's {} blocks",
                      t, e.pos, table.size()));
    }
    for (size_t b = 0; b <= static_cast<size_t>(e.pos / kv.block_size); ++b) {
      if (table[b] < 0 || table[b] >= kv.n_blocks) {
        return InvalidArgumentError(fmt::format(
            "forward: sequence {}: block id {} is outside [0, {})", e.seq, table[b], kv.n_blocks));
      }
    }
    max_pos = std::max(max_pos, e.pos);
    n_logits += e.logits ? 1 : 0;
    n_hidden += e.hidden ? 1 : 0;
  }
  if (static_cast<int64_t>(logits.size()) < n_logits * c.n_vocab) {
    return InvalidArgumentError(fmt::format("forward: logits buffer holds {} floats, needs {}",
                                            logits.size(), n_logits * c.n_vocab));
  }
  if (static_cast<int64_t>(hidden.size()) < n_hidden * c.n_embd) {
    return InvalidArgumentError(
        fmt::format("forward: hidden-state buffer holds {} floats, needs {}", hidden.size(),
                    n_hidden * c.n_embd));
  }

  const int64_t D = c.n_embd, QD = c.q_dim(), KVD = c.kv_dim(), F = c.n_ff, HD = c.head_dim;
  const int32_t half_rot = c.n_rot / 2;
  auto grow = [](std::vector<float>& v, int64_t n) {
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
  };
  grow(x_, T * D);
  grow(xn_, T * std::max(D, QD));
  grow(q_, T * QD);
  grow(k_, T * KVD);
  grow(v_, T * KVD);
  grow(att_, T * QD);
  // The feed-forward block runs over chunks of kFfnChunk tokens, so its
  // widest buffers (gate and up, n_ff floats per token) stay small however
  // long the batch; each chunk's product still uses whole token tiles.
  constexpr int64_t kFfnChunk = 64;
  grow(gate_, std::min(T, kFfnChunk) * F);
  grow(up_, std::min(T, kFfnChunk) * F);
  grow(rope_cos_, T * half_rot);
  grow(rope_sin_, T * half_rot);

  // Token embeddings and per-entry rotation angles.
  pool_.ParallelFor(T, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const BatchEntry& e = batch.entries[static_cast<size_t>(t)];
      kernels::DequantizeRow(
          m_.token_embd_.type,
          m_.token_embd_.data + static_cast<size_t>(e.token) * m_.token_embd_.row_bytes, D,
          x_.data() + t * D);
      const double p = static_cast<double>(e.pos) * c.rope_freq_scale;
      for (int32_t i = 0; i < half_rot; ++i) {
        const double ang = p * m_.rope_inv_freq_[static_cast<size_t>(i)];
        rope_cos_[static_cast<size_t>(t * half_rot + i)] = static_cast<float>(std::cos(ang));
        rope_sin_[static_cast<size_t>(t * half_rot + i)] = static_cast<float>(std::sin(ang));
      }
    }
  });

  const int32_t bs = kv.block_size;
  const size_t layer_floats = 2 * static_cast<size_t>(bs) * static_cast<size_t>(KVD);
  auto kv_row = [&](int32_t seq, int32_t pos, int32_t layer, int which) -> float* {
    const int32_t block =
        batch.block_tables[static_cast<size_t>(seq)][static_cast<size_t>(pos / bs)];
    return kv.data + (static_cast<size_t>(block) * c.n_layers + layer) * layer_floats +
           static_cast<size_t>(which) * bs * KVD + static_cast<size_t>(pos % bs) * KVD;
  };
  const int32_t group = c.n_heads / c.n_kv_heads;
  const float kq_scale = 1.0f / std::sqrt(static_cast<float>(HD));

  // Attention tiles: runs of consecutive entries of one sequence, at most
  // kernels::kMaxAttendQueries query heads each, times the KV heads; and each
  // sequence's row offsets, positions 0 .. its largest position in the batch.
  {
    std::vector<int32_t> seq_max(batch.block_tables.size(), -1);
    for (const BatchEntry& e : batch.entries) {
      seq_max[static_cast<size_t>(e.seq)] = std::max(seq_max[static_cast<size_t>(e.seq)], e.pos);
    }
    std::vector<size_t> seq_at(seq_max.size(), 0);
    row_off_.clear();
    for (size_t s = 0; s < seq_max.size(); ++s) {
      seq_at[s] = row_off_.size();
      const auto& table = batch.block_tables[s];
      for (int32_t p = 0; p <= seq_max[s]; ++p) {
        const size_t block = static_cast<size_t>(table[static_cast<size_t>(p / bs)]);
        row_off_.push_back(block * static_cast<size_t>(c.n_layers) * layer_floats +
                           static_cast<size_t>(p % bs) * static_cast<size_t>(KVD));
      }
    }
    entry_row_off_.resize(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) {
      entry_row_off_[static_cast<size_t>(t)] =
          seq_at[static_cast<size_t>(batch.entries[static_cast<size_t>(t)].seq)];
    }
    // Positions from 0 that sequences a and b hold in the same KV blocks.
    auto common_prefix = [&](int32_t a, int32_t b) {
      const auto& ta = batch.block_tables[static_cast<size_t>(a)];
      const auto& tb = batch.block_tables[static_cast<size_t>(b)];
      size_t i = 0;
      while (i < ta.size() && i < tb.size() && ta[i] == tb[i]) ++i;
      return static_cast<int64_t>(i) * bs;
    };
    // A tile is a run of consecutive entries of one sequence, joined by the
    // runs after it while they fit and every one shares at least one
    // 16-position key tile of KV blocks with the first (decode tokens of
    // conversations on one system prompt): the kernel then reads the shared
    // rows once for all of them. A group wider than a tile (not in any model
    // we know) is split by heads.
    const int32_t heads_per_tile = std::min(group, kernels::kMaxAttendQueries);
    const int32_t per_tile = std::max(1, kernels::kMaxAttendQueries / group);
    attend_tiles_.clear();
    // The end of the run of entries of from's sequence, at most `limit`.
    auto run_end = [&](int64_t from, int64_t limit) {
      const int32_t seq = batch.entries[static_cast<size_t>(from)].seq;
      int64_t e = from + 1;
      while (e < limit && batch.entries[static_cast<size_t>(e)].seq == seq) ++e;
      return e;
    };
    // `bound`, lowered to the fewest positions any entry in [from, to) sees.
    auto min_positions = [&](int64_t from, int64_t to, int64_t bound) {
      for (int64_t e = from; e < to; ++e) {
        bound = std::min<int64_t>(bound, batch.entries[static_cast<size_t>(e)].pos + 1);
      }
      return bound;
    };
    for (int64_t t = 0; t < T;) {
      const int32_t first_seq = batch.entries[static_cast<size_t>(t)].seq;
      int64_t end = run_end(t, std::min<int64_t>(T, t + per_tile));
      int64_t shared = min_positions(t, end, std::numeric_limits<int64_t>::max());
      int32_t n_runs = 1;
      while (end < T && end - t < per_tile) {
        const int64_t next_end = run_end(end, T);
        if (next_end - t > per_tile) break;
        const int64_t s = min_positions(
            end, next_end, common_prefix(first_seq, batch.entries[static_cast<size_t>(end)].seq));
        if (s < 16) break;
        shared = std::min(shared, s);
        end = next_end;
        ++n_runs;
      }
      const int32_t shared_pos = n_runs > 1 ? static_cast<int32_t>(shared / 16 * 16) : 0;
      for (int32_t g = 0; g < c.n_kv_heads; ++g) {
        for (int32_t h0 = 0; h0 < group; h0 += heads_per_tile) {
          attend_tiles_.push_back({t, static_cast<int32_t>(end - t), g, h0,
                                   std::min(heads_per_tile, group - h0), shared_pos});
        }
      }
      t = end;
    }
  }
  const size_t scratch_per_thread =
      kernels::AttendScratchFloats(kernels::kMaxAttendQueries, max_pos + 1, HD);
  grow(scores_, static_cast<int64_t>(pool_.size()) * static_cast<int64_t>(scratch_per_thread));

  for (int32_t l = 0; l < c.n_layers; ++l) {
    const Model::Layer& L = m_.layers_[static_cast<size_t>(l)];

    // Attention block.
    pool_.ParallelFor(T, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        RmsNormRow(x_.data() + t * D, L.attn_norm.data(), D, c.rms_eps, xn_.data() + t * D);
      }
    });
    Act act = PrepareAct(L.wq, xn_.data(), T, D);
    MatMul(L.wq, act, T, q_.data(), QD);
    if (kernels::ActFormatFor(L.wk.type) != kernels::ActFormatFor(L.wq.type))
      act = PrepareAct(L.wk, xn_.data(), T, D);
    MatMul(L.wk, act, T, k_.data(), KVD);
    if (kernels::ActFormatFor(L.wv.type) != kernels::ActFormatFor(L.wk.type))
      act = PrepareAct(L.wv, xn_.data(), T, D);
    MatMul(L.wv, act, T, v_.data(), KVD);

    pool_.ParallelFor(T, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const BatchEntry& e = batch.entries[static_cast<size_t>(t)];
        float* qt = q_.data() + t * QD;
        float* kt = k_.data() + t * KVD;
        float* vt = v_.data() + t * KVD;
        if (!L.bq.empty())
          for (int64_t i = 0; i < QD; ++i) qt[i] += L.bq[static_cast<size_t>(i)];
        if (!L.bk.empty())
          for (int64_t i = 0; i < KVD; ++i) kt[i] += L.bk[static_cast<size_t>(i)];
        if (!L.bv.empty())
          for (int64_t i = 0; i < KVD; ++i) vt[i] += L.bv[static_cast<size_t>(i)];
        const float* ct = rope_cos_.data() + t * half_rot;
        const float* st = rope_sin_.data() + t * half_rot;
        for (int32_t h = 0; h < c.n_heads; ++h)
          RopeHead(qt + h * HD, ct, st, c.n_rot, c.rope_style);
        for (int32_t h = 0; h < c.n_kv_heads; ++h)
          RopeHead(kt + h * HD, ct, st, c.n_rot, c.rope_style);
        std::memcpy(kv_row(e.seq, e.pos, l, 0), kt, static_cast<size_t>(KVD) * sizeof(float));
        std::memcpy(kv_row(e.seq, e.pos, l, 1), vt, static_cast<size_t>(KVD) * sizeof(float));
      }
    });

    // Causal attention, one tile (entries of one sequence x the query heads
    // of one KV head) at a time; the kernel computes each query the same way
    // in whatever tile it lands. Tiles are taken from a shared counter, last
    // first (in a prefill the latest positions, the longest), so the threads
    // finish together.
    {
      const float* layer_base = kv.data + static_cast<size_t>(l) * layer_floats;
      std::atomic<int64_t> next{0};
      const int64_t n_tiles = static_cast<int64_t>(attend_tiles_.size());
      pool_.RunOnAll([&](int thread) {
        float* scratch = scores_.data() + static_cast<size_t>(thread) * scratch_per_thread;
        const float* q[kernels::kMaxAttendQueries];
        float* out[kernels::kMaxAttendQueries];
        int32_t n_pos[kernels::kMaxAttendQueries];
        const size_t* roff[kernels::kMaxAttendQueries];
        for (int64_t i = next.fetch_add(1); i < n_tiles; i = next.fetch_add(1)) {
          const AttendTile& tile = attend_tiles_[static_cast<size_t>(n_tiles - 1 - i)];
          int n_q = 0;
          for (int32_t k = 0; k < tile.n_entries; ++k) {
            const int64_t t = tile.first_entry + k;
            for (int32_t j = tile.head_begin; j < tile.head_begin + tile.n_heads; ++j) {
              const int64_t h = static_cast<int64_t>(tile.kv_head) * group + j;
              q[n_q] = q_.data() + t * QD + h * HD;
              out[n_q] = att_.data() + t * QD + h * HD;
              n_pos[n_q] = batch.entries[static_cast<size_t>(t)].pos + 1;
              roff[n_q] = row_off_.data() + entry_row_off_[static_cast<size_t>(t)];
              ++n_q;
            }
          }
          kernels::AttendArgs a;
          a.head_dim = HD;
          a.n_q = n_q;
          a.q = q;
          a.n_pos = n_pos;
          a.scale = kq_scale;
          a.k_base = layer_base + static_cast<size_t>(tile.kv_head) * HD;
          a.v_base = a.k_base + static_cast<size_t>(bs) * KVD;
          a.row_off = roff;
          a.shared_pos = tile.shared_pos;
          a.out = out;
          a.scratch = scratch;
          kernels_.attend(a);
        }
      });
    }

    act = PrepareAct(L.wo, att_.data(), T, QD);
    MatMul(L.wo, act, T, xn_.data(), D);
    pool_.ParallelFor(T * D, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        x_[static_cast<size_t>(i)] += xn_[static_cast<size_t>(i)];
    });

    // Feed-forward block: down(silu(gate(x)) * up(x)).
    pool_.ParallelFor(T, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        RmsNormRow(x_.data() + t * D, L.ffn_norm.data(), D, c.rms_eps, xn_.data() + t * D);
      }
    });
    // Per chunk: its rows of xn_ are read by gate/up, then overwritten with
    // the chunk's down projection (no other chunk reads them).
    for (int64_t t0 = 0; t0 < T; t0 += kFfnChunk) {
      const int64_t n = std::min(kFfnChunk, T - t0);
      float* xc = xn_.data() + t0 * D;
      act = PrepareAct(L.w_gate, xc, n, D);
      MatMul(L.w_gate, act, n, gate_.data(), F);
      if (kernels::ActFormatFor(L.w_up.type) != kernels::ActFormatFor(L.w_gate.type))
        act = PrepareAct(L.w_up, xc, n, D);
      MatMul(L.w_up, act, n, up_.data(), F);
      pool_.ParallelFor(n * F, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const float g = gate_[static_cast<size_t>(i)];
          gate_[static_cast<size_t>(i)] = g / (1.0f + std::exp(-g)) * up_[static_cast<size_t>(i)];
        }
      });
      act = PrepareAct(L.w_down, gate_.data(), n, F);
      MatMul(L.w_down, act, n, xc, D);
    }
    pool_.ParallelFor(T * D, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        x_[static_cast<size_t>(i)] += xn_[static_cast<size_t>(i)];
    });
  }

  if (n_hidden > 0) {
    int64_t h = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (!batch.entries[static_cast<size_t>(t)].hidden) continue;
      RmsNormRow(x_.data() + t * D, m_.output_norm_.data(), D, c.rms_eps, hidden.data() + h * D);
      ++h;
    }
  }
  if (n_logits == 0) return util::OkStatus();
  // Final norm of the entries that want logits, then the output head.
  int64_t j = 0;
  for (int64_t t = 0; t < T; ++t) {
    if (!batch.entries[static_cast<size_t>(t)].logits) continue;
    RmsNormRow(x_.data() + t * D, m_.output_norm_.data(), D, c.rms_eps, xn_.data() + j * D);
    ++j;
  }
  const Act act = PrepareAct(m_.output_, xn_.data(), n_logits, D);
  MatMul(m_.output_, act, n_logits, logits.data(), c.n_vocab);
  return util::OkStatus();
}

}  // namespace strata::model
