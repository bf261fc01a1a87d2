#include "model/hash_encoder.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "format/gguf_writer.h"
#include "kernels/kernels.h"
#include "util/hash.h"

namespace strata::model {
namespace {

using util::InvalidArgumentError;
using util::StatusOr;

bool IsWordByte(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80;
}

uint64_t TableFingerprint(const HashEncoderConfig& c, const std::vector<float>& table) {
  util::Hasher h(0x4841'5348'454e'4331ULL);
  h.UpdatePod(c.dim).UpdatePod(c.buckets).UpdatePod(c.seed);
  h.UpdatePod(c.word_bigrams).UpdatePod(c.char_trigrams);
  h.Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(table.data()),
                                    table.size() * sizeof(float)));
  return h.Digest();
}

}  // namespace

util::Status ValidateHashEncoderConfig(const HashEncoderConfig& c) {
  if (c.dim < 8 || c.dim > 4096) {
    return InvalidArgumentError(fmt::format("hash encoder dim {} is outside [8, 4096]", c.dim));
  }
  if (c.buckets < (1 << 8) || c.buckets > (1 << 24) || (c.buckets & (c.buckets - 1)) != 0) {
    return InvalidArgumentError(
        fmt::format("hash encoder buckets {} is not a power of two in [2^8, 2^24]", c.buckets));
  }
  return util::OkStatus();
}

bool IsHashEncoderFile(const format::GgufFile& gguf) {
  auto arch = gguf.GetStringOr("general.architecture", "");
  return arch.ok() && *arch == kHashEncoderArchitecture;
}

std::vector<uint32_t> HashFeatures(std::string_view text, const HashEncoderConfig& config,
                                   size_t max_features) {
  std::vector<std::string> words;
  std::string word;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (IsWordByte(c)) {
      word.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : ch);
    } else if (!word.empty()) {
      words.push_back(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  const auto mask = static_cast<uint64_t>(config.buckets - 1);
  std::vector<uint32_t> out;
  auto add = [&](char kind, std::string_view bytes) {
    if (out.size() >= max_features) return;
    util::Hasher h(config.seed);
    h.UpdatePod(kind).Update(bytes);
    out.push_back(static_cast<uint32_t>(h.Digest() & mask));
  };
  for (size_t i = 0; i < words.size(); ++i) {
    add('w', words[i]);
    if (config.word_bigrams && i + 1 < words.size()) add('b', words[i] + " " + words[i + 1]);
    if (config.char_trigrams) {
      const std::string marked = "<" + words[i] + ">";
      for (size_t j = 0; j + 3 <= marked.size(); ++j)
        add('c', std::string_view(marked).substr(j, 3));
    }
  }
  return out;
}

StatusOr<std::unique_ptr<HashEncoder>> HashEncoder::Create(const HashEncoderConfig& config,
                                                           std::vector<float> table,
                                                           std::string name) {
  STRATA_RETURN_IF_ERROR(ValidateHashEncoderConfig(config));
  if (table.size() != static_cast<size_t>(config.buckets) * static_cast<size_t>(config.dim)) {
    return InvalidArgumentError(fmt::format("a hash encoder table of {} floats; {} x {} needed",
                                            table.size(), config.buckets, config.dim));
  }
  for (float x : table) {
    if (!std::isfinite(x)) return InvalidArgumentError("the hash encoder table is not finite");
  }
  std::unique_ptr<HashEncoder> e(new HashEncoder());
  e->config_ = config;
  e->table_ = std::move(table);
  e->name_ = std::move(name);
  e->fingerprint_ = TableFingerprint(e->config_, e->table_);
  return e;
}

StatusOr<std::unique_ptr<HashEncoder>> HashEncoder::Load(util::FileSystem& fs,
                                                         const std::string& path,
                                                         util::Logger& log) {
  STRATA_ASSIGN_OR_RETURN(auto gguf, format::GgufFile::Open(fs, path));
  return FromGguf(*gguf, log);
}

StatusOr<std::unique_ptr<HashEncoder>> HashEncoder::FromGguf(const format::GgufFile& g,
                                                             util::Logger& log) {
  STRATA_ASSIGN_OR_RETURN(std::string_view arch, g.GetString("general.architecture"));
  if (arch != kHashEncoderArchitecture) {
    return util::UnimplementedError(fmt::format(
        "model architecture '{}' is not a hash encoder ({})", arch, kHashEncoderArchitecture));
  }
  HashEncoderConfig c;
  const std::string p = std::string(kHashEncoderArchitecture) + ".";
  STRATA_ASSIGN_OR_RETURN(uint64_t dim, g.GetUint(p + "embedding_length"));
  STRATA_ASSIGN_OR_RETURN(uint64_t buckets, g.GetUint(p + "buckets"));
  STRATA_ASSIGN_OR_RETURN(c.seed, g.GetUint(p + "hash_seed"));
  STRATA_ASSIGN_OR_RETURN(c.word_bigrams, g.GetBoolOr(p + "word_bigrams", true));
  STRATA_ASSIGN_OR_RETURN(c.char_trigrams, g.GetBoolOr(p + "char_trigrams", true));
  if (dim > 4096 || buckets > (1u << 24)) {
    return InvalidArgumentError(
        fmt::format("hash encoder of {} x {} is out of range", buckets, dim));
  }
  c.dim = static_cast<int32_t>(dim);
  c.buckets = static_cast<int32_t>(buckets);
  STRATA_RETURN_IF_ERROR(ValidateHashEncoderConfig(c));
  const format::GgufTensorInfo* t = g.FindTensor("hash.embd");
  if (t == nullptr) return InvalidArgumentError("tensor 'hash.embd' is missing");
  if (t->shape != std::vector<int64_t>{c.dim, c.buckets} || !kernels::HasCodec(t->type) ||
      !t->rows_block_aligned()) {
    return InvalidArgumentError(fmt::format(
        "tensor 'hash.embd' must be [{}, {}] of a type strata decodes", c.dim, c.buckets));
  }
  std::vector<float> table(static_cast<size_t>(c.dim) * static_cast<size_t>(c.buckets));
  const size_t row_bytes = kernels::RowBytes(t->type, c.dim);
  for (int64_t r = 0; r < c.buckets; ++r) {
    kernels::DequantizeRow(t->type, t->data.data() + static_cast<size_t>(r) * row_bytes, c.dim,
                           table.data() + static_cast<size_t>(r) * static_cast<size_t>(c.dim));
  }
  STRATA_ASSIGN_OR_RETURN(std::string_view name, g.GetStringOr("general.name", ""));
  STRATA_ASSIGN_OR_RETURN(auto e, Create(c, std::move(table), std::string(name)));
  log.Info("hash encoder '{}': {} buckets x {} dimensions ({}), word bigrams {}, char trigrams {}",
           e->name(), c.buckets, c.dim, kernels::TypeName(t->type), c.word_bigrams ? "on" : "off",
           c.char_trigrams ? "on" : "off");
  return e;
}

util::Status HashEncoder::Write(util::FileSystem& fs, const std::string& path,
                                kernels::TensorType type) const {
  if (type != kernels::TensorType::kF32 && type != kernels::TensorType::kF16 &&
      type != kernels::TensorType::kQ8_0) {
    return InvalidArgumentError("a hash encoder table is written as F32, F16 or Q8_0");
  }
  format::GgufWriter w;
  const std::string p = std::string(kHashEncoderArchitecture) + ".";
  w.SetString("general.architecture", std::string(kHashEncoderArchitecture));
  w.SetString("general.name", name_);
  w.SetUint32(p + "embedding_length", static_cast<uint32_t>(config_.dim));
  w.SetUint32(p + "buckets", static_cast<uint32_t>(config_.buckets));
  w.SetUint64(p + "hash_seed", config_.seed);
  w.SetBool(p + "word_bigrams", config_.word_bigrams);
  w.SetBool(p + "char_trigrams", config_.char_trigrams);
  STRATA_RETURN_IF_ERROR(w.AddTensor(
      "hash.embd", {config_.dim, config_.buckets}, type, [this](int64_t row, std::span<float> out) {
        std::memcpy(out.data(), Row(static_cast<uint32_t>(row)), out.size() * sizeof(float));
      }));
  return w.Write(fs, path);
}

std::vector<float> HashEncoder::Embed(std::string_view text) const {
  return EmbedFeatures(HashFeatures(text, config_));
}

std::vector<float> HashEncoder::EmbedFeatures(std::span<const uint32_t> features) const {
  std::vector<float> v(static_cast<size_t>(config_.dim), 0.0f);
  for (uint32_t b : features) {
    const float* row = Row(b);
    for (int32_t i = 0; i < config_.dim; ++i) v[static_cast<size_t>(i)] += row[i];
  }
  double n = 0.0;
  for (float x : v) n += static_cast<double>(x) * x;
  if (n > 0.0) {
    const auto inv = static_cast<float>(1.0 / std::sqrt(n));
    for (float& x : v) x *= inv;
  }
  return v;
}

}  // namespace strata::model
