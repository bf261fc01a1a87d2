#include "model/transformer.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "model/internal/architecture.h"
#include "model/internal/weights.h"
#include "util/hash.h"
#include "util/thread_pool.h"

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
  STRATA_ASSIGN_OR_RETURN(auto model, FromGguf(std::move(gguf), log));
  // The header (metadata, the vocabulary's strings: 5.9 MiB of a qwen2 file)
  // has been read into the tokenizer's own tables: its pages leave the
  // process's memory, and come back from the page cache if anything reads
  // the metadata again.
  if (const util::MappedFile* file = model->gguf_->file()) {
    file->Release(file->bytes().first(static_cast<size_t>(model->gguf_->header_bytes())));
  }
  model->PackWeights(options.pack, &fs, log);
  return model;
}

StatusOr<PackMode> ParsePackMode(std::string_view name) {
  if (name == "auto") return PackMode::kAuto;
  if (name == "on") return PackMode::kOn;
  if (name == "off") return PackMode::kOff;
  return util::InvalidArgumentError(
      fmt::format("unknown weight packing '{}' (expected auto, on or off)", name));
}

std::string_view PackModeName(PackMode mode) {
  switch (mode) {
    case PackMode::kAuto:
      return "auto";
    case PackMode::kOn:
      return "on";
    case PackMode::kOff:
      return "off";
  }
  return "?";
}

namespace {

// MemAvailable of /proc/meminfo in bytes; nullopt when it cannot be read.
std::optional<uint64_t> MemAvailableBytes(util::FileSystem& fs) {
  const StatusOr<std::string> meminfo = fs.ReadFile("/proc/meminfo");
  if (!meminfo.ok()) return std::nullopt;
  const size_t at = meminfo->find("MemAvailable:");
  if (at == std::string::npos) return std::nullopt;
  size_t p = at + std::string_view("MemAvailable:").size();
  while (p < meminfo->size() && (*meminfo)[p] == ' ') ++p;
  uint64_t kb = 0;
  const auto [end, ec] =
      std::from_chars(meminfo->data() + p, meminfo->data() + meminfo->size(), kb);
  if (ec != std::errc() || end == meminfo->data() + p) return std::nullopt;
  return kb * 1024;
}

}  // namespace

void Model::PackWeights(const PackOptions& options, util::FileSystem* fs, util::Logger& log) {
  if (options.mode == PackMode::kOff) return;
  const kernels::KernelTable& table =
      options.kernels != nullptr ? *options.kernels : kernels::BestKernels();
  ModelWeights& w = *weights_;
  std::vector<Weight*> chosen;
  uint64_t bytes = 0;
  auto consider = [&](Weight& x) {
    if (x.packed || x.data == nullptr || !kernels::IsPackable(x.type) ||
        x.n_rows % kernels::kPackRows != 0) {
      return;
    }
    if (options.mode == PackMode::kAuto &&
        (table.prefers_packed == nullptr || !table.prefers_packed(x.type))) {
      return;
    }
    chosen.push_back(&x);
    bytes += kernels::PackedRowBytes(x.type, x.n_cols) * static_cast<uint64_t>(x.n_rows);
  };
  for (LayerWeights& L : w.layers) {
    for (Weight* x : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) consider(*x);
  }
  // A head tied to the token embedding is packed as the embedding (whose
  // lookups then unpack one group: Forward::EmbedTokens).
  const bool tied = w.output.data == w.token_embd.data;
  consider(tied ? w.token_embd : w.output);
  if (chosen.empty()) return;
  if (options.mode == PackMode::kAuto && fs != nullptr) {
    const std::optional<uint64_t> available = MemAvailableBytes(*fs);
    if (available && bytes > *available) {
      log.Warn(
          "model '{}': weights not packed: the packed copies ({:.0f} MiB) would not fit in the "
          "memory available ({:.0f} MiB)",
          config_.name, static_cast<double>(bytes) / (1 << 20),
          static_cast<double>(*available) / (1 << 20));
      return;
    }
  }
  const auto t0 = options.clock ? options.clock->Now() : std::chrono::steady_clock::time_point{};
  util::ThreadPool pool(std::max(1, options.threads));
  const util::MappedFile* file = gguf_->file();
  // Groups packed between two releases of the file's pages by one thread:
  // the copy and the original coexist only for these (about 4 MiB per
  // thread for 2,048-wide Q8_0 rows), not for a whole matrix, so a large one
  // (a tied head of 136 MiB) does not raise the peak resident size.
  constexpr int64_t kGroupsPerRelease = 256;
  for (Weight* x : chosen) {
    const size_t packed_row = kernels::PackedRowBytes(x->type, x->n_cols);
    const size_t n = packed_row * static_cast<size_t>(x->n_rows);
    std::unique_ptr<uint8_t[]> copy(new uint8_t[n]);
    const size_t group_bytes = static_cast<size_t>(kernels::kPackRows) * x->row_bytes;
    const size_t packed_group_bytes = static_cast<size_t>(kernels::kPackRows) * packed_row;
    pool.ParallelFor(x->n_rows / kernels::kPackRows, [&](int64_t begin, int64_t end) {
      for (int64_t g0 = begin; g0 < end; g0 += kGroupsPerRelease) {
        const int64_t g1 = std::min(end, g0 + kGroupsPerRelease);
        const uint8_t* src = x->data + static_cast<size_t>(g0) * group_bytes;
        kernels::PackRows(x->type, src, x->row_bytes, (g1 - g0) * kernels::kPackRows, x->n_cols,
                          copy.get() + static_cast<size_t>(g0) * packed_group_bytes);
        // The copy replaces the file's pages: their memory goes back (read
        // again from the file should anything touch them).
        if (file != nullptr) file->Release({src, static_cast<size_t>(g1 - g0) * group_bytes});
      }
    });
    // The pages the chunks' edges shared.
    if (file != nullptr) file->Release({x->data, x->row_bytes * static_cast<size_t>(x->n_rows)});
    x->data = copy.get();
    x->row_bytes = packed_row;
    x->packed = true;
    w.packed.push_back(std::move(copy));
  }
  if (tied) w.output = w.token_embd;
  packed_bytes_ += bytes;
  const double seconds = options.clock ? util::SecondsBetween(t0, options.clock->Now()) : 0.0;
  log.Info("model '{}': {} matrices ({:.0f} MiB) packed row-interleaved for {} in {:.0f} ms",
           config_.name, chosen.size(), static_cast<double>(bytes) / (1 << 20),
           kernels::IsaName(table.isa), seconds * 1e3);
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
