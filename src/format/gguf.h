// format/gguf.h — GGUF reader (versions 2 and 3).
//
// Promise: Parse never crashes and never reads outside the file, whatever the
// bytes: a truncated, corrupt or hostile file yields an error that names the
// field and its byte offset ("gguf: offset 4113: tensor 'blk.0.attn_q.weight':
// data [4096, 69632) ends past the end of the file (65536 bytes)"). Every
// metadata value type and nested arrays are supported; strings and numeric
// arrays are views into the file, never copies. Tensor data is a view into the
// memory-mapped file: weights are never copied whole.
//
// Threading: a parsed GgufFile is immutable and thread-safe.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto gguf, GgufFile::Open(fs, "model.gguf"));
//   STRATA_ASSIGN_OR_RETURN(uint64_t n_layers, gguf->GetUint("llama.block_count"));
//   const GgufTensorInfo* wq = gguf->FindTensor("blk.0.attn_q.weight");
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kernels/tensor_type.h"
#include "util/file_system.h"
#include "util/status.h"

namespace strata::format {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string_view GgufValueTypeName(GgufValueType t);

// The elements of a GGUF array of strings, read in place: element i is found
// through a 4-byte offset to its length prefix in the file, so a 150k-entry
// vocabulary costs 0.6 MB of index instead of 2.4 MB of string_views.
class GgufStrings {
 public:
  GgufStrings() = default;
  GgufStrings(const uint8_t* base, std::span<const uint32_t> offsets)
      : base_(base), offsets_(offsets) {}
  size_t size() const { return offsets_.size(); }
  bool empty() const { return offsets_.empty(); }
  std::string_view operator[](size_t i) const;

  class Iterator {
   public:
    using value_type = std::string_view;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    Iterator(const GgufStrings* owner, size_t i) : owner_(owner), i_(i) {}
    std::string_view operator*() const { return (*owner_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      ++i_;
      return old;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }

   private:
    const GgufStrings* owner_ = nullptr;
    size_t i_ = 0;
  };
  Iterator begin() const { return Iterator(this, 0); }
  Iterator end() const { return Iterator(this, size()); }

 private:
  const uint8_t* base_ = nullptr;
  std::span<const uint32_t> offsets_;
};

// One metadata value. Scalars are held by value; strings and arrays of
// numbers point into the file's bytes.
class GgufValue {
 public:
  GgufValueType type() const { return type_; }
  bool is_array() const { return type_ == GgufValueType::kArray; }

  // Scalars. Integers convert between widths when the value fits; floats from
  // float32/float64 (and integers). nullopt when the type does not convert.
  std::optional<int64_t> AsInt() const;
  std::optional<uint64_t> AsUint() const;
  std::optional<double> AsFloat() const;
  std::optional<bool> AsBool() const;
  std::optional<std::string_view> AsString() const;

  // Arrays.
  GgufValueType element_type() const { return element_type_; }
  uint64_t size() const { return count_; }
  // Element i of a numeric/bool array, converted like the scalar accessors.
  std::optional<int64_t> IntAt(uint64_t i) const;
  std::optional<double> FloatAt(uint64_t i) const;
  // Elements of an array of strings (empty for other arrays).
  GgufStrings strings() const { return GgufStrings(raw_, string_offsets_); }
  // Elements of an array of arrays (empty for other arrays).
  std::span<const GgufValue> arrays() const { return arrays_; }

  // The little-endian bytes of a scalar, or of all elements of a numeric/bool
  // array (empty for strings and arrays of strings/arrays).
  std::span<const uint8_t> raw_bytes() const;

  // A short human-readable rendering (arrays abbreviated), for `strata inspect`.
  std::string DebugString(size_t max_items = 8) const;

 private:
  friend class GgufParser;
  std::optional<int64_t> ScalarInt(GgufValueType t, const uint8_t* p) const;

  GgufValueType type_ = GgufValueType::kUint8;
  // Scalar payload: the raw little-endian bytes widened to 8.
  uint8_t scalar_[8] = {};
  std::string_view str_;
  // Arrays.
  GgufValueType element_type_ = GgufValueType::kUint8;
  uint64_t count_ = 0;
  // Numeric/bool elements, packed little-endian; for an array of strings, the
  // first element's length prefix, which string_offsets_ count from.
  const uint8_t* raw_ = nullptr;
  std::vector<uint32_t> string_offsets_;
  std::vector<GgufValue> arrays_;
};

struct GgufTensorInfo {
  std::string name;
  // ggml order: shape[0] is the number of elements in one row (fastest varying).
  std::vector<int64_t> shape;
  kernels::TensorType type = kernels::TensorType::kF32;
  uint64_t offset = 0;  // from the start of the data section
  uint64_t n_bytes = 0;
  std::span<const uint8_t> data;  // the tensor's bytes inside the file

  int64_t n_elements() const;
  int64_t row_length() const { return shape.empty() ? 0 : shape[0]; }
  int64_t n_rows() const { return row_length() == 0 ? 0 : n_elements() / row_length(); }
  // True when each row is a whole number of blocks (always for non-block types).
  bool rows_block_aligned() const;
};

class GgufFile {
 public:
  // Maps and parses `path`.
  static util::StatusOr<std::unique_ptr<GgufFile>> Open(util::FileSystem& fs,
                                                        const std::string& path);
  // Parses a mapped file; the result owns it.
  static util::StatusOr<std::unique_ptr<GgufFile>> Parse(std::unique_ptr<util::MappedFile> file);
  // Parses caller-owned bytes, which must outlive the result (tests, fuzzing).
  static util::StatusOr<std::unique_ptr<GgufFile>> ParseBytes(std::span<const uint8_t> bytes,
                                                              std::string name);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  std::span<const uint8_t> bytes() const { return bytes_; }
  uint64_t header_bytes() const { return data_offset_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* Find(std::string_view key) const;

  // Typed getters: NotFound if absent, InvalidArgument (naming the key and the
  // stored type) if present with a type that does not convert.
  util::StatusOr<std::string_view> GetString(std::string_view key) const;
  util::StatusOr<uint64_t> GetUint(std::string_view key) const;
  util::StatusOr<int64_t> GetInt(std::string_view key) const;
  util::StatusOr<double> GetFloat(std::string_view key) const;
  util::StatusOr<bool> GetBool(std::string_view key) const;
  util::StatusOr<const GgufValue*> GetArray(std::string_view key) const;
  // As above, but `fallback` when absent (a wrong type is still an error).
  util::StatusOr<uint64_t> GetUintOr(std::string_view key, uint64_t fallback) const;
  util::StatusOr<double> GetFloatOr(std::string_view key, double fallback) const;
  util::StatusOr<bool> GetBoolOr(std::string_view key, bool fallback) const;
  util::StatusOr<std::string_view> GetStringOr(std::string_view key,
                                               std::string_view fallback) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* FindTensor(std::string_view name) const;

  // Advises the OS to read the whole file ahead (model load with cold cache).
  void Prefetch() const;
  // The mapping the bytes live in (its identity and whether a read of it
  // faulted); null for ParseBytes.
  const util::MappedFile* file() const { return file_.get(); }

 private:
  friend class GgufParser;
  GgufFile() = default;

  std::unique_ptr<util::MappedFile> file_;  // may be null (ParseBytes)
  std::string name_;
  std::span<const uint8_t> bytes_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string, size_t> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// Constants of the format (docs/formats/gguf.md).
inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint64_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxDims = 4;

}  // namespace strata::format
