#include "format/gguf_writer.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "kernels/kernels.h"

namespace strata::format {
namespace {

template <typename T>
void PutPod(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void PutString(std::string& out, std::string_view s) {
  PutPod<uint64_t>(out, s.size());
  out.append(s);
}

void PutType(std::string& out, GgufValueType t) { PutPod<uint32_t>(out, static_cast<uint32_t>(t)); }

// Encodes a value read from a file, without its type tag.
void EncodeValue(std::string& out, const GgufValue& v) {
  switch (v.type()) {
    case GgufValueType::kString:
      PutString(out, *v.AsString());
      return;
    case GgufValueType::kArray: {
      PutType(out, v.element_type());
      PutPod<uint64_t>(out, v.size());
      if (v.element_type() == GgufValueType::kString) {
        for (std::string_view s : v.strings()) PutString(out, s);
      } else if (v.element_type() == GgufValueType::kArray) {
        for (const GgufValue& inner : v.arrays()) EncodeValue(out, inner);
      } else {
        const auto raw = v.raw_bytes();
        out.append(reinterpret_cast<const char*>(raw.data()), raw.size());
      }
      return;
    }
    default: {
      const auto raw = v.raw_bytes();
      out.append(reinterpret_cast<const char*>(raw.data()), raw.size());
      return;
    }
  }
}

}  // namespace

// Buffers output and forwards it to a WritableFile or a string.
class GgufWriter::Sink {
 public:
  explicit Sink(util::WritableFile* file) : file_(file) {}
  explicit Sink(std::string* str) : str_(str) {}
  util::Status Append(const void* data, size_t n) {
    if (str_) {
      str_->append(static_cast<const char*>(data), n);
      offset_ += n;
      return util::OkStatus();
    }
    buf_.append(static_cast<const char*>(data), n);
    offset_ += n;
    if (buf_.size() >= (1u << 20)) return Flush();
    return util::OkStatus();
  }
  util::Status Pad(uint64_t alignment) {
    static const char kZeros[64] = {};
    uint64_t pad = (alignment - offset_ % alignment) % alignment;
    while (pad > 0) {
      const size_t k = std::min<uint64_t>(pad, sizeof(kZeros));
      STRATA_RETURN_IF_ERROR(Append(kZeros, k));
      pad -= k;
    }
    return util::OkStatus();
  }
  util::Status Flush() {
    if (file_ && !buf_.empty()) {
      STRATA_RETURN_IF_ERROR(file_->Append(buf_));
      buf_.clear();
    }
    return util::OkStatus();
  }
  uint64_t offset() const { return offset_; }

 private:
  util::WritableFile* file_ = nullptr;
  std::string* str_ = nullptr;
  std::string buf_;
  uint64_t offset_ = 0;
};

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  if (alignment_ != kGgufDefaultAlignment) SetUint32("general.alignment", alignment_);
}

void GgufWriter::Put(const std::string& key, std::string encoded) {
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(encoded);
      return;
    }
  }
  kv_.emplace_back(key, std::move(encoded));
}

void GgufWriter::Remove(const std::string& key) {
  kv_.erase(std::remove_if(kv_.begin(), kv_.end(), [&](const auto& e) { return e.first == key; }),
            kv_.end());
}

void GgufWriter::SetString(const std::string& key, std::string_view value) {
  std::string e;
  PutType(e, GgufValueType::kString);
  PutString(e, value);
  Put(key, std::move(e));
}

#define STRATA_GGUF_SCALAR_SETTER(Name, CType, Tag)            \
  void GgufWriter::Name(const std::string& key, CType value) { \
    std::string e;                                             \
    PutType(e, GgufValueType::Tag);                            \
    PutPod(e, value);                                          \
    Put(key, std::move(e));                                    \
  }
STRATA_GGUF_SCALAR_SETTER(SetUint32, uint32_t, kUint32)
STRATA_GGUF_SCALAR_SETTER(SetInt32, int32_t, kInt32)
STRATA_GGUF_SCALAR_SETTER(SetUint64, uint64_t, kUint64)
STRATA_GGUF_SCALAR_SETTER(SetFloat32, float, kFloat32)
#undef STRATA_GGUF_SCALAR_SETTER

void GgufWriter::SetBool(const std::string& key, bool value) {
  std::string e;
  PutType(e, GgufValueType::kBool);
  PutPod<uint8_t>(e, value ? 1 : 0);
  Put(key, std::move(e));
}

void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& values) {
  std::string e;
  PutType(e, GgufValueType::kArray);
  PutType(e, GgufValueType::kString);
  PutPod<uint64_t>(e, values.size());
  for (const auto& s : values) PutString(e, s);
  Put(key, std::move(e));
}

void GgufWriter::SetFloat32Array(const std::string& key, const std::vector<float>& values) {
  std::string e;
  PutType(e, GgufValueType::kArray);
  PutType(e, GgufValueType::kFloat32);
  PutPod<uint64_t>(e, values.size());
  for (float f : values) PutPod(e, f);
  Put(key, std::move(e));
}

void GgufWriter::SetInt32Array(const std::string& key, const std::vector<int32_t>& values) {
  std::string e;
  PutType(e, GgufValueType::kArray);
  PutType(e, GgufValueType::kInt32);
  PutPod<uint64_t>(e, values.size());
  for (int32_t v : values) PutPod(e, v);
  Put(key, std::move(e));
}

void GgufWriter::CopyValue(const std::string& key, const GgufValue& value) {
  std::string e;
  PutType(e, value.type());
  EncodeValue(e, value);
  Put(key, std::move(e));
}

util::Status GgufWriter::AddTensor(const std::string& name, std::vector<int64_t> shape,
                                   kernels::TensorType type, RowFiller fill) {
  if (shape.empty() || shape.size() > static_cast<size_t>(kGgufMaxDims)) {
    return util::InvalidArgumentError(fmt::format("tensor '{}': 1 to 4 dimensions", name));
  }
  if (!kernels::HasCodec(type)) {
    return util::UnimplementedError(
        fmt::format("tensor '{}': cannot encode type {}", name, kernels::TypeName(type)));
  }
  if (shape[0] % kernels::GetTypeInfo(type).block_size != 0) {
    return util::InvalidArgumentError(
        fmt::format("tensor '{}': row length {} is not a multiple of the {} block size {}", name,
                    shape[0], kernels::TypeName(type), kernels::GetTypeInfo(type).block_size));
  }
  Tensor t;
  t.name = name;
  int64_t rows = 1;
  for (size_t i = 1; i < shape.size(); ++i) rows *= shape[i];
  t.n_bytes = kernels::RowBytes(type, shape[0]) * static_cast<uint64_t>(rows);
  t.shape = std::move(shape);
  t.type = type;
  t.fill = std::move(fill);
  tensors_.push_back(std::move(t));
  return util::OkStatus();
}

util::Status GgufWriter::AddTensorBytes(const std::string& name, std::vector<int64_t> shape,
                                        kernels::TensorType type, std::vector<uint8_t> bytes) {
  if (shape.empty() || shape.size() > static_cast<size_t>(kGgufMaxDims)) {
    return util::InvalidArgumentError(fmt::format("tensor '{}': 1 to 4 dimensions", name));
  }
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const kernels::TypeInfo info = kernels::GetTypeInfo(type);
  const uint64_t want = static_cast<uint64_t>(n / info.block_size) * info.block_bytes;
  if (n % info.block_size != 0 || bytes.size() != want) {
    return util::InvalidArgumentError(
        fmt::format("tensor '{}': {} bytes given, {} elements of {} need {}", name, bytes.size(), n,
                    info.name, want));
  }
  Tensor t;
  t.name = name;
  t.shape = std::move(shape);
  t.type = type;
  t.n_bytes = want;
  t.bytes = std::move(bytes);
  tensors_.push_back(std::move(t));
  return util::OkStatus();
}

util::Status GgufWriter::WriteTo(Sink& sink, util::ThreadPool* pool,
                                 const Progress& progress) const {
  std::string head;
  PutPod<uint32_t>(head, kGgufMagic);
  PutPod<uint32_t>(head, 3);
  PutPod<uint64_t>(head, tensors_.size());
  PutPod<uint64_t>(head, kv_.size());
  for (const auto& [key, value] : kv_) {
    PutString(head, key);
    head += value;
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    PutString(head, t.name);
    PutPod<uint32_t>(head, static_cast<uint32_t>(t.shape.size()));
    for (int64_t d : t.shape) PutPod<uint64_t>(head, static_cast<uint64_t>(d));
    PutPod<uint32_t>(head, static_cast<uint32_t>(t.type));
    PutPod<uint64_t>(head, offset);
    offset += (t.n_bytes + alignment_ - 1) / alignment_ * alignment_;
  }
  STRATA_RETURN_IF_ERROR(sink.Append(head.data(), head.size()));
  STRATA_RETURN_IF_ERROR(sink.Pad(alignment_));

  // Rows are encoded a chunk at a time (in parallel when a pool is given) and
  // appended in order.
  const int n_threads = pool ? pool->size() : 1;
  std::vector<std::vector<float>> row_scratch(static_cast<size_t>(n_threads));
  std::vector<uint8_t> encoded;
  for (size_t ti = 0; ti < tensors_.size(); ++ti) {
    const Tensor& t = tensors_[ti];
    if (t.fill) {
      const int64_t n = t.shape[0];
      const size_t rb = kernels::RowBytes(t.type, n);
      const int64_t rows = static_cast<int64_t>(t.n_bytes / rb);
      const int64_t chunk =
          std::max<int64_t>(1, static_cast<int64_t>((8u << 20) / std::max<size_t>(rb, 1)));
      for (auto& r : row_scratch) r.resize(static_cast<size_t>(n));
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t r1 = std::min(rows, r0 + chunk);
        encoded.resize(static_cast<size_t>(r1 - r0) * rb);
        auto encode = [&](int thread, int64_t begin, int64_t end) {
          std::vector<float>& row = row_scratch[static_cast<size_t>(thread)];
          for (int64_t r = begin; r < end; ++r) {
            t.fill(r0 + r, std::span<float>(row));
            kernels::QuantizeRow(t.type, row.data(), n,
                                 encoded.data() + static_cast<size_t>(r) * rb);
          }
        };
        if (pool != nullptr && r1 - r0 > 1) {
          pool->RunOnAll([&](int thread) {
            const auto [b, e] = util::ThreadPool::Chunk(r1 - r0, pool->size(), thread);
            encode(thread, b, e);
          });
        } else {
          encode(0, 0, r1 - r0);
        }
        STRATA_RETURN_IF_ERROR(sink.Append(encoded.data(), encoded.size()));
      }
    } else {
      STRATA_RETURN_IF_ERROR(sink.Append(t.bytes.data(), t.bytes.size()));
    }
    STRATA_RETURN_IF_ERROR(sink.Pad(alignment_));
    if (progress) progress(ti + 1, tensors_.size(), t.name);
  }
  return sink.Flush();
}

util::Status GgufWriter::Write(util::FileSystem& fs, const std::string& path,
                               util::ThreadPool* pool, const Progress& progress) const {
  const std::string tmp = path + ".partial";
  STRATA_ASSIGN_OR_RETURN(auto file, fs.NewWritableFile(tmp));
  Sink sink(file.get());
  STRATA_RETURN_IF_ERROR(WriteTo(sink, pool, progress));
  STRATA_RETURN_IF_ERROR(file->Sync());
  STRATA_RETURN_IF_ERROR(file->Close());
  return fs.Rename(tmp, path);
}

util::StatusOr<std::string> GgufWriter::ToBytes() const {
  std::string out;
  Sink sink(&out);
  STRATA_RETURN_IF_ERROR(WriteTo(sink, nullptr, nullptr));
  return out;
}

}  // namespace strata::format
