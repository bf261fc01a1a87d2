#include "model/encoder.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "kernels/kernels.h"
#include "model/internal/weights.h"

namespace strata::model {

using util::InvalidArgumentError;
using util::Status;
using util::StatusOr;

// Biases are optional (empty when the file has none), as in the reference.
struct EncoderLayer {
  bool fused_qkv = false;
  Weight wqkv;                    // fused: [3 n_embd] x n_embd, rows Q, then K, then V
  std::vector<float> bqkv;        // fused: [3 n_embd]
  Weight wq, wk, wv;              // separate: [n_embd] x n_embd each
  std::vector<float> bq, bk, bv;  // separate
  Weight wo;
  std::vector<float> bo;
  std::vector<float> attn_norm_w, attn_norm_b;
  Weight w_up, w_gate, w_down;  // with w_gate (nomic-bert): SiLU(gate) · up; else GELU(up)
  std::vector<float> b_up, b_down;
  std::vector<float> out_norm_w, out_norm_b;
};

struct EncoderWeights {
  Weight token_embd;     // [n_vocab] rows
  Weight position_embd;  // bert: [n_ctx_train] rows
  std::vector<float> type0;
  std::vector<float> embd_norm_w, embd_norm_b;
  std::vector<EncoderLayer> layers;
  std::vector<double> rope_inv_freq;  // nomic-bert: [head_dim / 2]
  std::vector<std::vector<uint8_t>> owned;
};

namespace {

bool IsNomic(const EncoderConfig& c) { return c.architecture == "nomic-bert"; }

Status ReadEncoderConfig(const format::GgufFile& g, EncoderConfig& c) {
  const std::string p = c.architecture + ".";
  auto dim = [&](const std::string& key, uint64_t max,
                 std::optional<uint64_t> fallback) -> StatusOr<int32_t> {
    uint64_t v = 0;
    if (fallback && !g.Find(key)) {
      v = *fallback;
    } else {
      STRATA_ASSIGN_OR_RETURN(v, g.GetUint(key));
    }
    if (v < 1 || v > max) {
      return InvalidArgumentError(
          fmt::format("model metadata '{}' = {} is outside [1, {}]", key, v, max));
    }
    return static_cast<int32_t>(v);
  };
  STRATA_ASSIGN_OR_RETURN(c.n_embd, dim(p + "embedding_length", 1 << 16, std::nullopt));
  STRATA_ASSIGN_OR_RETURN(c.n_layers, dim(p + "block_count", 1024, std::nullopt));
  STRATA_ASSIGN_OR_RETURN(c.n_ff, dim(p + "feed_forward_length", 1 << 20, std::nullopt));
  STRATA_ASSIGN_OR_RETURN(c.n_heads, dim(p + "attention.head_count", 1024, std::nullopt));
  STRATA_ASSIGN_OR_RETURN(c.n_ctx_train, dim(p + "context_length", 1 << 16, std::nullopt));
  STRATA_ASSIGN_OR_RETURN(c.n_token_types, dim("tokenizer.ggml.token_type_count", 1 << 16, 2));
  STRATA_ASSIGN_OR_RETURN(int32_t kv_heads, dim(p + "attention.head_count_kv", 1024, c.n_heads));
  if (kv_heads != c.n_heads) {
    return util::UnimplementedError(fmt::format(
        "encoder attention.head_count_kv {} differs from head_count {}", kv_heads, c.n_heads));
  }
  if (c.n_embd % c.n_heads != 0 || (c.n_embd / c.n_heads) % 2 != 0) {
    return InvalidArgumentError(
        fmt::format("embedding_length {} is not an even multiple of attention.head_count {}",
                    c.n_embd, c.n_heads));
  }
  c.head_dim = c.n_embd / c.n_heads;
  STRATA_ASSIGN_OR_RETURN(double eps, g.GetFloatOr(p + "attention.layer_norm_epsilon", 1e-12));
  if (!(eps > 0.0 && eps < 1.0)) {
    return InvalidArgumentError(fmt::format(
        "model metadata '{}attention.layer_norm_epsilon' = {} is outside (0, 1)", p, eps));
  }
  c.norm_eps = static_cast<float>(eps);
  STRATA_ASSIGN_OR_RETURN(bool causal, g.GetBoolOr(p + "attention.causal", false));
  if (causal) {
    return util::UnimplementedError(
        fmt::format("{}attention.causal = true: strata's encoders are bidirectional", p));
  }
  STRATA_ASSIGN_OR_RETURN(uint64_t pooling, g.GetUintOr(p + "pooling_type", 1));
  if (pooling == 1) {
    c.pooling = Pooling::kMean;
  } else if (pooling == 2) {
    c.pooling = Pooling::kCls;
  } else {
    return util::UnimplementedError(
        fmt::format("{}pooling_type = {} is not supported (1 = mean, 2 = CLS)", p, pooling));
  }
  if (IsNomic(c)) {
    STRATA_ASSIGN_OR_RETURN(double base, g.GetFloatOr(p + "rope.freq_base", 10000.0));
    if (!(base > 1.0 && std::isfinite(base))) {
      return InvalidArgumentError(fmt::format("{}rope.freq_base = {} must be > 1", p, base));
    }
    c.rope_freq_base = static_cast<float>(base);
  }
  return util::OkStatus();
}

Status LoadEncoderTensors(TensorLoader& loader, const EncoderConfig& c, EncoderWeights& w) {
  const int64_t E = c.n_embd, F = c.n_ff;
  const bool nomic = IsNomic(c);
  STRATA_ASSIGN_OR_RETURN(w.token_embd, loader.Matrix("token_embd.weight", E, c.n_vocab));
  w.type0.assign(static_cast<size_t>(E), 0.0f);
  if (loader.Has("token_types.weight")) {
    STRATA_ASSIGN_OR_RETURN(Weight types, loader.Matrix("token_types.weight", E, c.n_token_types));
    kernels::DequantizeRow(types.type, types.data, E, w.type0.data());
  }
  if (!nomic) {
    STRATA_ASSIGN_OR_RETURN(w.position_embd,
                            loader.Matrix("position_embd.weight", E, c.n_ctx_train));
  }
  STRATA_ASSIGN_OR_RETURN(w.embd_norm_w, loader.Vector("token_embd_norm.weight", E, true));
  STRATA_ASSIGN_OR_RETURN(w.embd_norm_b, loader.Vector("token_embd_norm.bias", E, true));
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int32_t l = 0; l < c.n_layers; ++l) {
    EncoderLayer& L = w.layers[static_cast<size_t>(l)];
    const std::string b = fmt::format("blk.{}.", l);
    L.fused_qkv = loader.Has(b + "attn_qkv.weight");
    if (L.fused_qkv) {
      STRATA_ASSIGN_OR_RETURN(L.wqkv, loader.Matrix(b + "attn_qkv.weight", E, 3 * E));
      STRATA_ASSIGN_OR_RETURN(L.bqkv, loader.Vector(b + "attn_qkv.bias", 3 * E, false));
    } else {
      STRATA_ASSIGN_OR_RETURN(L.wq, loader.Matrix(b + "attn_q.weight", E, E));
      STRATA_ASSIGN_OR_RETURN(L.wk, loader.Matrix(b + "attn_k.weight", E, E));
      STRATA_ASSIGN_OR_RETURN(L.wv, loader.Matrix(b + "attn_v.weight", E, E));
      STRATA_ASSIGN_OR_RETURN(L.bq, loader.Vector(b + "attn_q.bias", E, false));
      STRATA_ASSIGN_OR_RETURN(L.bk, loader.Vector(b + "attn_k.bias", E, false));
      STRATA_ASSIGN_OR_RETURN(L.bv, loader.Vector(b + "attn_v.bias", E, false));
    }
    if (nomic) {
      STRATA_ASSIGN_OR_RETURN(L.w_gate, loader.Matrix(b + "ffn_gate.weight", E, F));
    }
    STRATA_ASSIGN_OR_RETURN(L.bo, loader.Vector(b + "attn_output.bias", E, false));
    STRATA_ASSIGN_OR_RETURN(L.b_up, loader.Vector(b + "ffn_up.bias", F, false));
    STRATA_ASSIGN_OR_RETURN(L.b_down, loader.Vector(b + "ffn_down.bias", E, false));
    STRATA_ASSIGN_OR_RETURN(L.wo, loader.Matrix(b + "attn_output.weight", E, E));
    STRATA_ASSIGN_OR_RETURN(L.attn_norm_w, loader.Vector(b + "attn_output_norm.weight", E, true));
    STRATA_ASSIGN_OR_RETURN(L.attn_norm_b, loader.Vector(b + "attn_output_norm.bias", E, true));
    STRATA_ASSIGN_OR_RETURN(L.w_up, loader.Matrix(b + "ffn_up.weight", E, F));
    STRATA_ASSIGN_OR_RETURN(L.w_down, loader.Matrix(b + "ffn_down.weight", F, E));
    STRATA_ASSIGN_OR_RETURN(L.out_norm_w, loader.Vector(b + "layer_output_norm.weight", E, true));
    STRATA_ASSIGN_OR_RETURN(L.out_norm_b, loader.Vector(b + "layer_output_norm.bias", E, true));
  }
  if (nomic) {
    const int32_t half = c.head_dim / 2;
    w.rope_inv_freq.resize(static_cast<size_t>(half));
    for (int32_t i = 0; i < half; ++i) {
      w.rope_inv_freq[static_cast<size_t>(i)] =
          std::pow(static_cast<double>(c.rope_freq_base), -2.0 * i / c.head_dim);
    }
  }
  return util::OkStatus();
}

// out = LayerNorm(x) · w + b over n floats (in place allowed).
void LayerNormRow(const float* x, const float* w, const float* b, int64_t n, float eps,
                  float* out) {
  double mean = 0.0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= static_cast<double>(n);
  double var = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = x[i] - mean;
    var += d * d;
  }
  var /= static_cast<double>(n);
  const float scale = static_cast<float>(1.0 / std::sqrt(var + eps));
  const auto m = static_cast<float>(mean);
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - m) * scale * w[i] + b[i];
}

// GELU in the tanh form the reference computes.
float Gelu(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
}

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

// One pass's activations; sized for n tokens.
class Pass {
 public:
  Pass(const EncoderConfig& c, const EncoderWeights& w, util::ThreadPool& pool, int64_t n)
      : c_(c), w_(w), pool_(pool), k_(kernels::BestKernels()), n_(n) {
    const auto E = static_cast<size_t>(c.n_embd), N = static_cast<size_t>(n);
    x_.resize(N * E);
    qkv_.resize(N * 3 * E);
    attn_.resize(N * E);
    tmp_.resize(N * E);
    ff_.resize(N * static_cast<size_t>(c.n_ff) * (IsNomic(c) ? 2 : 1));
  }

  std::vector<float> Run(std::span<const int32_t> tokens) {
    const int64_t E = c_.n_embd;
    pool_.ParallelFor(n_, [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(E));
      for (int64_t t = begin; t < end; ++t) {
        float* x = x_.data() + t * E;
        const Weight& te = w_.token_embd;
        kernels::DequantizeRow(te.type, te.data + static_cast<size_t>(tokens[t]) * te.row_bytes, E,
                               x);
        for (int64_t i = 0; i < E; ++i) x[i] += w_.type0[static_cast<size_t>(i)];
        if (!IsNomic(c_)) {
          const Weight& pe = w_.position_embd;
          kernels::DequantizeRow(pe.type, pe.data + static_cast<size_t>(t) * pe.row_bytes, E,
                                 row.data());
          for (int64_t i = 0; i < E; ++i) x[i] += row[static_cast<size_t>(i)];
        }
        LayerNormRow(x, w_.embd_norm_w.data(), w_.embd_norm_b.data(), E, c_.norm_eps, x);
      }
    });
    for (const EncoderLayer& L : w_.layers) Layer(L);
    return Pool();
  }

 private:
  void Layer(const EncoderLayer& L) {
    const int64_t E = c_.n_embd, F = c_.n_ff, N = n_;
    // Q, K and V side by side in qkv_ rows of 3E.
    if (L.fused_qkv) {
      MatMul(L.wqkv, x_.data(), E, qkv_.data(), 3 * E);
      AddBias(L.bqkv, qkv_.data(), 0, 3 * E);
    } else {
      MatMul(L.wq, x_.data(), E, qkv_.data(), 3 * E);
      MatMul(L.wk, x_.data(), E, qkv_.data() + E, 3 * E);
      MatMul(L.wv, x_.data(), E, qkv_.data() + 2 * E, 3 * E);
      AddBias(L.bq, qkv_.data(), 0, 3 * E);
      AddBias(L.bk, qkv_.data(), E, 3 * E);
      AddBias(L.bv, qkv_.data(), 2 * E, 3 * E);
    }
    if (IsNomic(c_)) Rope();
    Attention();
    MatMul(L.wo, attn_.data(), E, tmp_.data(), E);
    ResidualNorm(L.bo, L.attn_norm_w, L.attn_norm_b);
    if (!L.w_gate.name.empty()) {
      float* up = ff_.data();
      float* gate = ff_.data() + N * F;
      MatMul(L.w_up, x_.data(), E, up, F);
      MatMul(L.w_gate, x_.data(), E, gate, F);
      pool_.ParallelFor(N * F, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) up[i] *= Silu(gate[i]);
      });
    } else {
      MatMul(L.w_up, x_.data(), E, ff_.data(), F);
      pool_.ParallelFor(N, [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          float* r = ff_.data() + t * F;
          for (int64_t i = 0; i < F; ++i) {
            r[i] = Gelu(r[i] + (L.b_up.empty() ? 0.0f : L.b_up[static_cast<size_t>(i)]));
          }
        }
      });
    }
    MatMul(L.w_down, ff_.data(), F, tmp_.data(), E);
    ResidualNorm(L.b_down, L.out_norm_w, L.out_norm_b);
  }

  // rows[t * stride + offset + i] += bias[i] for every token t (nothing when bias is empty).
  void AddBias(const std::vector<float>& bias, float* rows, int64_t offset, int64_t stride) {
    if (bias.empty()) return;
    pool_.ParallelFor(n_, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        float* r = rows + t * stride + offset;
        for (size_t i = 0; i < bias.size(); ++i) r[i] += bias[i];
      }
    });
  }

  // x = LayerNorm(tmp + bias + x).
  void ResidualNorm(const std::vector<float>& bias, const std::vector<float>& w,
                    const std::vector<float>& b) {
    const int64_t E = c_.n_embd;
    pool_.ParallelFor(n_, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        float* x = x_.data() + t * E;
        const float* y = tmp_.data() + t * E;
        for (int64_t i = 0; i < E; ++i) {
          x[i] += y[i] + (bias.empty() ? 0.0f : bias[static_cast<size_t>(i)]);
        }
        LayerNormRow(x, w.data(), b.data(), E, c_.norm_eps, x);
      }
    });
  }

  // NEOX rotation of every head of Q and K: pairs (i, i + head_dim / 2).
  void Rope() {
    const int64_t E = c_.n_embd, hd = c_.head_dim, half = hd / 2;
    pool_.ParallelFor(n_, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        for (int64_t i = 0; i < half; ++i) {
          const double ang = static_cast<double>(t) * w_.rope_inv_freq[static_cast<size_t>(i)];
          const auto cs = static_cast<float>(std::cos(ang));
          const auto sn = static_cast<float>(std::sin(ang));
          for (int64_t h = 0; h < 2 * c_.n_heads; ++h) {  // the Q heads, then the K heads
            float* v = qkv_.data() + t * 3 * E + h * hd;
            const float a = v[i], b = v[i + half];
            v[i] = a * cs - b * sn;
            v[i + half] = a * sn + b * cs;
          }
        }
      }
    });
  }

  // Every token attends to every token (no mask), head by head.
  void Attention() {
    const int64_t E = c_.n_embd, hd = c_.head_dim, N = n_;
    const auto n_pos = static_cast<int32_t>(N);
    std::vector<size_t> offsets(static_cast<size_t>(N));
    for (int64_t p = 0; p < N; ++p)
      offsets[static_cast<size_t>(p)] = static_cast<size_t>(p * 3 * E);
    const int64_t tiles_per_head =
        (N + kernels::kMaxAttendQueries - 1) / kernels::kMaxAttendQueries;
    pool_.ParallelFor(c_.n_heads * tiles_per_head, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(
          kernels::AttendScratchFloats(kernels::kMaxAttendQueries, n_pos, hd));
      const float* q[kernels::kMaxAttendQueries];
      float* out[kernels::kMaxAttendQueries];
      int32_t npos[kernels::kMaxAttendQueries];
      const size_t* row_off[kernels::kMaxAttendQueries];
      for (int64_t job = begin; job < end; ++job) {
        const int64_t h = job / tiles_per_head;
        const int64_t first = (job % tiles_per_head) * kernels::kMaxAttendQueries;
        const int n_q = static_cast<int>(std::min<int64_t>(kernels::kMaxAttendQueries, N - first));
        for (int m = 0; m < n_q; ++m) {
          q[m] = qkv_.data() + (first + m) * 3 * E + h * hd;
          out[m] = attn_.data() + (first + m) * E + h * hd;
          npos[m] = n_pos;
          row_off[m] = offsets.data();
        }
        kernels::AttendArgs a;
        a.head_dim = hd;
        a.n_q = n_q;
        a.q = q;
        a.n_pos = npos;
        a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
        a.k_base = qkv_.data() + E + h * hd;
        a.v_base = qkv_.data() + 2 * E + h * hd;
        a.row_off = row_off;
        a.shared_pos = n_pos;
        a.out = out;
        a.scratch = scratch.data();
        k_.attend(a);
      }
    });
  }

  std::vector<float> Pool() const {
    const int64_t E = c_.n_embd;
    std::vector<double> sum(static_cast<size_t>(E), 0.0);
    const int64_t rows = c_.pooling == Pooling::kCls ? 1 : n_;
    for (int64_t t = 0; t < rows; ++t) {
      for (int64_t i = 0; i < E; ++i)
        sum[static_cast<size_t>(i)] += x_[static_cast<size_t>(t * E + i)];
    }
    double norm = 0.0;
    for (double v : sum) norm += v * v;
    norm = std::sqrt(norm);
    std::vector<float> out(static_cast<size_t>(E));
    for (int64_t i = 0; i < E; ++i) {
      out[static_cast<size_t>(i)] =
          norm > 0.0 ? static_cast<float>(sum[static_cast<size_t>(i)] / norm) : 0.0f;
    }
    return out;
  }

  // out[t * out_stride + r] = W row r · x row t, for every token t.
  void MatMul(const Weight& w, const float* x, int64_t n, float* out, int64_t out_stride) {
    const kernels::ActFormat fmt = kernels::ActFormatFor(w.type);
    const size_t rb = kernels::ActRowBytes(fmt, n);
    act_.resize(rb * static_cast<size_t>(n_));
    pool_.ParallelFor(n_, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        k_.quantize_act(fmt, x + t * n, n, act_.data() + static_cast<size_t>(t) * rb);
      }
    });
    pool_.ParallelFor(w.n_rows, [&](int64_t begin, int64_t end) {
      kernels::MatMulArgs a;
      a.w_type = w.type;
      a.w = w.data;
      a.w_row_bytes = w.row_bytes;
      a.row_begin = begin;
      a.row_end = end;
      a.act = act_.data();
      a.act_row_bytes = rb;
      a.n_tokens = n_;
      a.n = n;
      a.out = out;
      a.out_stride = out_stride;
      k_.matmul(a);
    });
  }

  const EncoderConfig& c_;
  const EncoderWeights& w_;
  util::ThreadPool& pool_;
  const kernels::KernelTable& k_;
  const int64_t n_;
  std::vector<float> x_;     // [n][E]: the residual stream
  std::vector<float> qkv_;   // [n][3E]
  std::vector<float> attn_;  // [n][E]
  std::vector<float> tmp_;   // [n][E]: a block's output before the residual
  std::vector<float> ff_;    // [n][F] (nomic-bert: up, then gate)
  std::vector<uint8_t> act_;
};

}  // namespace

Encoder::Encoder() : weights_(std::make_unique<EncoderWeights>()) {}
Encoder::~Encoder() = default;

bool Encoder::IsEncoderArchitecture(std::string_view architecture) {
  return architecture == "bert" || architecture == "nomic-bert";
}

StatusOr<std::unique_ptr<Encoder>> Encoder::Load(util::FileSystem& fs, const std::string& path,
                                                 util::Logger& log) {
  STRATA_ASSIGN_OR_RETURN(auto gguf, format::GgufFile::Open(fs, path));
  gguf->Prefetch();
  return FromGguf(std::move(gguf), log);
}

StatusOr<std::unique_ptr<Encoder>> Encoder::FromGguf(std::unique_ptr<format::GgufFile> gguf,
                                                     util::Logger& log) {
  std::unique_ptr<Encoder> e(new Encoder());
  e->gguf_ = std::move(gguf);
  const format::GgufFile& g = *e->gguf_;
  EncoderConfig& c = e->config_;
  STRATA_ASSIGN_OR_RETURN(std::string_view arch, g.GetString("general.architecture"));
  if (!IsEncoderArchitecture(arch)) {
    return util::UnimplementedError(fmt::format(
        "model architecture '{}' is not a supported encoder (supported: bert, nomic-bert)", arch));
  }
  c.architecture = std::string(arch);
  STRATA_ASSIGN_OR_RETURN(std::string_view name, g.GetStringOr("general.name", ""));
  c.name = std::string(name);
  STRATA_ASSIGN_OR_RETURN(e->tokenizer_, text::Tokenizer::FromGguf(g));
  c.n_vocab = e->tokenizer_->n_vocab();
  STRATA_RETURN_IF_ERROR(ReadEncoderConfig(g, c));
  TensorLoader loader(g, e->weights_->owned, log);
  STRATA_RETURN_IF_ERROR(LoadEncoderTensors(loader, c, *e->weights_));
  e->fingerprint_ = FingerprintOf(g);
  for (const auto& t : g.tensors()) {
    c.n_params += t.n_elements();
    c.weight_bytes += t.n_bytes;
  }
  log.Info(
      "encoder '{}': {} {} layers, n_embd {}, {} heads, n_ff {}, vocab {}, {} pooling, "
      "{:.2f} M params, {:.1f} MiB",
      c.name, c.architecture, c.n_layers, c.n_embd, c.n_heads, c.n_ff, c.n_vocab,
      c.pooling == Pooling::kCls ? "CLS" : "mean", static_cast<double>(c.n_params) / 1e6,
      static_cast<double>(c.weight_bytes) / (1024.0 * 1024.0));
  return e;
}

StatusOr<Embedding> Encoder::Embed(std::string_view text, util::ThreadPool& pool) const {
  std::vector<int32_t> tokens = tokenizer_->Encode(text, {.add_special = true});
  bool truncated = false;
  if (tokens.size() > static_cast<size_t>(config_.n_ctx_train)) {
    // Keep [CLS] and the first tokens, and end with the closing [SEP] again.
    const int32_t last = tokens.back();
    tokens.resize(static_cast<size_t>(config_.n_ctx_train));
    if (tokenizer_->add_eos()) tokens.back() = last;
    truncated = true;
  }
  STRATA_ASSIGN_OR_RETURN(Embedding e, EmbedTokens(tokens, pool));
  e.truncated = truncated;
  return e;
}

StatusOr<Embedding> Encoder::EmbedTokens(std::span<const int32_t> tokens,
                                         util::ThreadPool& pool) const {
  if (tokens.empty()) return InvalidArgumentError("an encoder needs at least one token");
  if (tokens.size() > static_cast<size_t>(config_.n_ctx_train)) {
    return InvalidArgumentError(fmt::format("{} tokens is more than the encoder's context of {}",
                                            tokens.size(), config_.n_ctx_train));
  }
  for (int32_t t : tokens) {
    if (!tokenizer_->IsValid(t)) {
      return InvalidArgumentError(fmt::format("token {} is outside the vocabulary", t));
    }
  }
  Pass pass(config_, *weights_, pool, static_cast<int64_t>(tokens.size()));
  Embedding e;
  e.vector = pass.Run(tokens);
  e.n_tokens = static_cast<int32_t>(tokens.size());
  return e;
}

}  // namespace strata::model
