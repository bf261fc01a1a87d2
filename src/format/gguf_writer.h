// format/gguf_writer.h — writes GGUF version 3 files.
//
// Promise: the files it writes are read back by GgufFile (and by other GGUF
// readers such as llama.cpp): metadata in insertion order, tensors aligned,
// data streamed row by row so a multi-gigabyte model never sits in memory.
// Rows are supplied as floats and quantized to the tensor's type with the
// reference codecs (kernels.h).
//
// Threading: thread-compatible. Fill callbacks may run on the threads of the
// pool passed to Write, several rows at once, so they must be safe to call
// concurrently for different rows (a row's content must depend only on its
// index).
//
// Usage:
//   GgufWriter w;
//   w.SetString("general.architecture", "llama");
//   w.AddTensor("output_norm.weight", {64}, kernels::TensorType::kF32,
//               [](int64_t row, std::span<float> out) { std::ranges::fill(out, 1.0f); });
//   STRATA_RETURN_IF_ERROR(w.Write(fs, "model.gguf"));
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "util/file_system.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace strata::format {

class GgufWriter {
 public:
  // Fills one row (shape[0] floats) of a tensor; rows are numbered from 0.
  using RowFiller = std::function<void(int64_t row, std::span<float> out)>;

  // alignment: a power of two; written as general.alignment when not 32.
  explicit GgufWriter(uint32_t alignment = 32);

  // Setting a key again replaces its value (keeping its position).
  void SetString(const std::string& key, std::string_view value);
  void SetUint32(const std::string& key, uint32_t value);
  void SetInt32(const std::string& key, int32_t value);
  void SetUint64(const std::string& key, uint64_t value);
  void SetFloat32(const std::string& key, float value);
  void SetBool(const std::string& key, bool value);
  void SetStringArray(const std::string& key, const std::vector<std::string>& values);
  void SetFloat32Array(const std::string& key, const std::vector<float>& values);
  void SetInt32Array(const std::string& key, const std::vector<int32_t>& values);
  // Copies a value read from another file, whatever its type.
  void CopyValue(const std::string& key, const GgufValue& value);
  void Remove(const std::string& key);

  // shape[0] must be a multiple of the type's block size and the type must have
  // a codec (kernels::HasCodec).
  util::Status AddTensor(const std::string& name, std::vector<int64_t> shape,
                         kernels::TensorType type, RowFiller fill);
  // Raw, already-encoded bytes (exactly kernels::RowBytes(type, shape[0]) * rows).
  util::Status AddTensorBytes(const std::string& name, std::vector<int64_t> shape,
                              kernels::TensorType type, std::vector<uint8_t> bytes);

  // Called after each tensor is written: (tensors done, tensor count, name).
  using Progress = std::function<void(size_t done, size_t total, const std::string& name)>;

  // Writes to `path` through a temporary sibling renamed at the end. `pool`
  // (optional) encodes rows in parallel.
  util::Status Write(util::FileSystem& fs, const std::string& path,
                     util::ThreadPool* pool = nullptr, const Progress& progress = nullptr) const;
  // The whole file in memory (small files: tests, fuzz seeds).
  util::StatusOr<std::string> ToBytes() const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    kernels::TensorType type;
    RowFiller fill;              // either fill ...
    std::vector<uint8_t> bytes;  // ... or bytes
    uint64_t n_bytes = 0;
  };
  class Sink;
  void Put(const std::string& key, std::string encoded);
  util::Status WriteTo(Sink& sink, util::ThreadPool* pool, const Progress& progress) const;

  uint32_t alignment_;
  std::vector<std::pair<std::string, std::string>> kv_;  // key -> type id + encoded value
  std::vector<Tensor> tensors_;
};

}  // namespace strata::format
