#include "format/gguf.h"

#include <cstring>
#include <limits>

#include <fmt/format.h>

namespace strata::format {
namespace {

using util::InvalidArgumentError;
using util::Status;
using util::StatusOr;

constexpr int kMaxArrayNesting = 8;
constexpr uint64_t kMaxKeyLength = 65535;

// Bytes of one element of a scalar type; 0 for string/array.
size_t ScalarSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
    case GgufValueType::kArray:
      return 0;
  }
  return 0;
}

bool IsKnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

std::string_view GgufValueTypeName(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
      return "uint8";
    case GgufValueType::kInt8:
      return "int8";
    case GgufValueType::kUint16:
      return "uint16";
    case GgufValueType::kInt16:
      return "int16";
    case GgufValueType::kUint32:
      return "uint32";
    case GgufValueType::kInt32:
      return "int32";
    case GgufValueType::kFloat32:
      return "float32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "uint64";
    case GgufValueType::kInt64:
      return "int64";
    case GgufValueType::kFloat64:
      return "float64";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------
// GgufValue

std::optional<int64_t> GgufValue::ScalarInt(GgufValueType t, const uint8_t* p) const {
  switch (t) {
    case GgufValueType::kUint8:
      return Load<uint8_t>(p);
    case GgufValueType::kInt8:
      return Load<int8_t>(p);
    case GgufValueType::kUint16:
      return Load<uint16_t>(p);
    case GgufValueType::kInt16:
      return Load<int16_t>(p);
    case GgufValueType::kUint32:
      return Load<uint32_t>(p);
    case GgufValueType::kInt32:
      return Load<int32_t>(p);
    case GgufValueType::kInt64:
      return Load<int64_t>(p);
    case GgufValueType::kUint64: {
      const uint64_t u = Load<uint64_t>(p);
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(u);
    }
    default:
      return std::nullopt;
  }
}

std::optional<int64_t> GgufValue::AsInt() const { return ScalarInt(type_, scalar_); }

std::optional<uint64_t> GgufValue::AsUint() const {
  if (type_ == GgufValueType::kUint64) return Load<uint64_t>(scalar_);
  auto i = ScalarInt(type_, scalar_);
  if (!i || *i < 0) return std::nullopt;
  return static_cast<uint64_t>(*i);
}

std::optional<double> GgufValue::AsFloat() const {
  if (type_ == GgufValueType::kFloat32) return Load<float>(scalar_);
  if (type_ == GgufValueType::kFloat64) return Load<double>(scalar_);
  if (type_ == GgufValueType::kUint64) return static_cast<double>(Load<uint64_t>(scalar_));
  auto i = ScalarInt(type_, scalar_);
  if (!i) return std::nullopt;
  return static_cast<double>(*i);
}

std::optional<bool> GgufValue::AsBool() const {
  if (type_ != GgufValueType::kBool) return std::nullopt;
  return scalar_[0] != 0;
}

std::optional<std::string_view> GgufValue::AsString() const {
  if (type_ != GgufValueType::kString) return std::nullopt;
  return str_;
}

std::optional<int64_t> GgufValue::IntAt(uint64_t i) const {
  if (!is_array() || i >= count_ || raw_ == nullptr || element_type_ == GgufValueType::kString) {
    return std::nullopt;
  }
  const size_t sz = ScalarSize(element_type_);
  if (element_type_ == GgufValueType::kBool) return raw_[i] != 0 ? 1 : 0;
  return ScalarInt(element_type_, raw_ + i * sz);
}

std::optional<double> GgufValue::FloatAt(uint64_t i) const {
  if (!is_array() || i >= count_ || raw_ == nullptr || element_type_ == GgufValueType::kString) {
    return std::nullopt;
  }
  const size_t sz = ScalarSize(element_type_);
  const uint8_t* p = raw_ + i * sz;
  if (element_type_ == GgufValueType::kFloat32) return Load<float>(p);
  if (element_type_ == GgufValueType::kFloat64) return Load<double>(p);
  if (element_type_ == GgufValueType::kUint64) return static_cast<double>(Load<uint64_t>(p));
  auto v = ScalarInt(element_type_, p);
  if (!v) return std::nullopt;
  return static_cast<double>(*v);
}

std::string_view GgufStrings::operator[](size_t i) const {
  // The parser checked every length prefix and that each string fits.
  const uint8_t* p = base_ + offsets_[i];
  uint64_t len = 0;
  std::memcpy(&len, p, sizeof len);
  return {reinterpret_cast<const char*>(p + sizeof len), static_cast<size_t>(len)};
}

std::span<const uint8_t> GgufValue::raw_bytes() const {
  if (type_ == GgufValueType::kString) return {};
  if (element_type_ == GgufValueType::kString) return {};
  if (type_ != GgufValueType::kArray) return {scalar_, ScalarSize(type_)};
  if (raw_ == nullptr) return {};
  return {raw_, static_cast<size_t>(count_) * ScalarSize(element_type_)};
}

std::string GgufValue::DebugString(size_t max_items) const {
  switch (type_) {
    case GgufValueType::kString: {
      std::string s(str_.substr(0, 120));
      for (char& c : s) {
        if (c == '\n' || c == '\r' || c == '\t') c = ' ';
      }
      return fmt::format("\"{}\"{}", s, str_.size() > 120 ? "..." : "");
    }
    case GgufValueType::kBool:
      return *AsBool() ? "true" : "false";
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64:
      return fmt::format("{}", *AsFloat());
    case GgufValueType::kUint64:
      return fmt::format("{}", *AsUint());
    case GgufValueType::kArray: {
      std::string out = fmt::format("[{} x {}]", count_, GgufValueTypeName(element_type_));
      if (count_ == 0) return out;
      out += " [";
      const uint64_t n = count_ < max_items ? count_ : max_items;
      for (uint64_t i = 0; i < n; ++i) {
        if (i) out += ", ";
        if (element_type_ == GgufValueType::kString) {
          out += fmt::format("\"{}\"", strings()[i].substr(0, 24));
        } else if (element_type_ == GgufValueType::kArray) {
          out += arrays_[i].DebugString(2);
        } else if (element_type_ == GgufValueType::kFloat32 ||
                   element_type_ == GgufValueType::kFloat64) {
          out += fmt::format("{}", *FloatAt(i));
        } else {
          auto v = IntAt(i);
          out += v ? fmt::format("{}", *v) : std::string("?");
        }
      }
      if (n < count_) out += ", ...";
      out += "]";
      return out;
    }
    default: {
      auto v = AsInt();
      return v ? fmt::format("{}", *v) : std::string("?");
    }
  }
}

// ---------------------------------------------------------------------------
// GgufTensorInfo

int64_t GgufTensorInfo::n_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // overflow excluded by the parser
  return n;
}

bool GgufTensorInfo::rows_block_aligned() const {
  return shape.empty() || shape[0] % kernels::GetTypeInfo(type).block_size == 0;
}

// ---------------------------------------------------------------------------
// Parser

class GgufParser {
 public:
  GgufParser(std::span<const uint8_t> bytes, const std::string& name)
      : bytes_(bytes), name_(name) {}

  Status Run(GgufFile& out);

 private:
  Status Err(uint64_t offset, std::string_view what) const {
    return InvalidArgumentError(fmt::format("gguf '{}': offset {}: {}", name_, offset, what));
  }
  uint64_t left() const { return bytes_.size() - pos_; }

  StatusOr<uint64_t> ReadScalarBytes(size_t n, std::string_view what, uint8_t* dst) {
    if (left() < n) {
      return Err(pos_, fmt::format("{}: needs {} bytes, file ends after {}", what, n, left()));
    }
    std::memcpy(dst, bytes_.data() + pos_, n);
    pos_ += n;
    return n;
  }
  StatusOr<uint32_t> ReadU32(std::string_view what) {
    uint32_t v = 0;
    STRATA_RETURN_IF_ERROR(ReadScalarBytes(4, what, reinterpret_cast<uint8_t*>(&v)));
    return v;
  }
  StatusOr<uint64_t> ReadU64(std::string_view what) {
    uint64_t v = 0;
    STRATA_RETURN_IF_ERROR(ReadScalarBytes(8, what, reinterpret_cast<uint8_t*>(&v)));
    return v;
  }
  StatusOr<std::string_view> ReadString(std::string_view what) {
    const uint64_t at = pos_;
    STRATA_ASSIGN_OR_RETURN(uint64_t len, ReadU64(what));
    if (len > left()) {
      return Err(at, fmt::format("{}: string length {} exceeds the {} bytes left in the file", what,
                                 len, left()));
    }
    std::string_view s(reinterpret_cast<const char*>(bytes_.data() + pos_), len);
    pos_ += len;
    return s;
  }
  StatusOr<GgufValue> ReadValue(GgufValueType type, std::string_view what, int depth);

  std::span<const uint8_t> bytes_;
  const std::string& name_;
  uint64_t pos_ = 0;
};

StatusOr<GgufValue> GgufParser::ReadValue(GgufValueType type, std::string_view what, int depth) {
  GgufValue v;
  v.type_ = type;
  if (type == GgufValueType::kString) {
    STRATA_ASSIGN_OR_RETURN(v.str_, ReadString(what));
    return v;
  }
  if (type != GgufValueType::kArray) {
    const size_t sz = ScalarSize(type);
    const uint64_t at = pos_;
    STRATA_RETURN_IF_ERROR(ReadScalarBytes(sz, what, v.scalar_));
    if (type == GgufValueType::kBool && v.scalar_[0] > 1) {
      return Err(at, fmt::format("{}: bool value {} is neither 0 nor 1", what, v.scalar_[0]));
    }
    return v;
  }
  if (depth >= kMaxArrayNesting) {
    return Err(pos_, fmt::format("{}: arrays nested deeper than {}", what, kMaxArrayNesting));
  }
  const uint64_t type_at = pos_;
  STRATA_ASSIGN_OR_RETURN(uint32_t elem, ReadU32(what));
  if (!IsKnownValueType(elem)) {
    return Err(type_at, fmt::format("{}: unknown array element type {}", what, elem));
  }
  v.element_type_ = static_cast<GgufValueType>(elem);
  const uint64_t count_at = pos_;
  STRATA_ASSIGN_OR_RETURN(v.count_, ReadU64(what));
  // Every element takes at least one byte (strings and arrays at least 8 and
  // 12): bound the count by what is left before allocating anything.
  const size_t min_elem = v.element_type_ == GgufValueType::kString  ? 8
                          : v.element_type_ == GgufValueType::kArray ? 12
                                                                     : ScalarSize(v.element_type_);
  if (v.count_ > left() / min_elem) {
    return Err(count_at, fmt::format("{}: array of {} {} elements cannot fit in the {} bytes left",
                                     what, v.count_, GgufValueTypeName(v.element_type_), left()));
  }
  if (v.element_type_ == GgufValueType::kString) {
    v.raw_ = bytes_.data() + pos_;
    const uint64_t first = pos_;
    v.string_offsets_.reserve(v.count_);
    for (uint64_t i = 0; i < v.count_; ++i) {
      if (pos_ - first > UINT32_MAX) {
        return Err(pos_, fmt::format("{}: array of strings larger than 4 GiB", what));
      }
      v.string_offsets_.push_back(static_cast<uint32_t>(pos_ - first));
      STRATA_RETURN_IF_ERROR(ReadString(what).status());
    }
  } else if (v.element_type_ == GgufValueType::kArray) {
    v.arrays_.reserve(v.count_);
    for (uint64_t i = 0; i < v.count_; ++i) {
      STRATA_ASSIGN_OR_RETURN(GgufValue inner, ReadValue(GgufValueType::kArray, what, depth + 1));
      v.arrays_.push_back(std::move(inner));
    }
  } else {
    const uint64_t n = v.count_ * min_elem;  // no overflow: count <= left / min_elem
    v.raw_ = bytes_.data() + pos_;
    if (v.element_type_ == GgufValueType::kBool) {
      for (uint64_t i = 0; i < v.count_; ++i) {
        if (v.raw_[i] > 1) {
          return Err(pos_ + i, fmt::format("{}: bool element {} is {}", what, i, v.raw_[i]));
        }
      }
    }
    pos_ += n;
  }
  return v;
}

Status GgufParser::Run(GgufFile& out) {
  // Header: magic, version, tensor count, metadata count.
  if (bytes_.size() < 4) {
    return Err(0,
               fmt::format("not a GGUF file: {} bytes is too short for the magic", bytes_.size()));
  }
  STRATA_ASSIGN_OR_RETURN(uint32_t magic, ReadU32("magic"));
  if (magic != kGgufMagic) {
    return Err(0, fmt::format("not a GGUF file: magic is {:02x} {:02x} {:02x} {:02x}, expected "
                              "47 47 55 46 (\"GGUF\")",
                              bytes_[0], bytes_[1], bytes_[2], bytes_[3]));
  }
  STRATA_ASSIGN_OR_RETURN(uint32_t version, ReadU32("version"));
  if (version == 1) {
    return Err(4,
               "GGUF version 1 is not supported (only 2 and 3): convert the model again with "
               "a current converter");
  }
  if (version != 2 && version != 3) {
    // A big-endian file shows its version byte-swapped.
    const uint32_t swapped = __builtin_bswap32(version);
    if (swapped == 2 || swapped == 3) {
      return Err(4, fmt::format("big-endian GGUF (version {}) is not supported", swapped));
    }
    return Err(4, fmt::format("unsupported GGUF version {} (supported: 2, 3)", version));
  }
  out.version_ = version;
  STRATA_ASSIGN_OR_RETURN(uint64_t n_tensors, ReadU64("tensor count"));
  const uint64_t kv_at = pos_;
  STRATA_ASSIGN_OR_RETURN(uint64_t n_kv, ReadU64("metadata count"));
  // Each metadata pair takes >= 8 (key) + 4 (type) + 1 bytes.
  if (n_kv > left() / 13) {
    return Err(kv_at,
               fmt::format("metadata count {} cannot fit in the {} bytes left", n_kv, left()));
  }

  out.metadata_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    const uint64_t key_at = pos_;
    const std::string what = fmt::format("metadata #{}", i);
    STRATA_ASSIGN_OR_RETURN(std::string_view key, ReadString(what + " key"));
    if (key.empty() || key.size() > kMaxKeyLength) {
      return Err(key_at, fmt::format("{}: key length {} is outside [1, {}]", what, key.size(),
                                     kMaxKeyLength));
    }
    const std::string key_str(key);
    const std::string what_key = fmt::format("metadata '{}'", key_str);
    const uint64_t type_at = pos_;
    STRATA_ASSIGN_OR_RETURN(uint32_t type, ReadU32(what_key + " type"));
    if (!IsKnownValueType(type)) {
      return Err(type_at, fmt::format("{}: unknown value type {}", what_key, type));
    }
    STRATA_ASSIGN_OR_RETURN(GgufValue value,
                            ReadValue(static_cast<GgufValueType>(type), what_key, 0));
    if (out.metadata_index_.count(key_str) != 0) {
      return Err(key_at, fmt::format("duplicate metadata key '{}'", key_str));
    }
    out.metadata_index_.emplace(key_str, out.metadata_.size());
    out.metadata_.emplace_back(key_str, std::move(value));
  }

  if (const GgufValue* a = out.Find("general.alignment")) {
    auto align = a->AsUint();
    if (a->type() != GgufValueType::kUint32 || !align || *align == 0 ||
        (*align & (*align - 1)) != 0) {
      return InvalidArgumentError(
          fmt::format("gguf '{}': general.alignment must be a uint32 power of two, got {} {}",
                      name_, GgufValueTypeName(a->type()), a->DebugString()));
    }
    out.alignment_ = *align;
  }

  // Tensor infos: name, n_dims, dims, type, offset. Each takes >= 8+4+8+4+8 bytes.
  const uint64_t tensors_at = pos_;
  if (n_tensors > left() / 32) {
    return Err(tensors_at,
               fmt::format("tensor count {} cannot fit in the {} bytes left", n_tensors, left()));
  }
  out.tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const uint64_t info_at = pos_;
    GgufTensorInfo t;
    STRATA_ASSIGN_OR_RETURN(std::string_view name, ReadString(fmt::format("tensor #{} name", i)));
    t.name = std::string(name);
    const std::string what = fmt::format("tensor '{}'", t.name);
    const uint64_t dims_at = pos_;
    STRATA_ASSIGN_OR_RETURN(uint32_t n_dims, ReadU32(what + " n_dims"));
    if (n_dims < 1 || n_dims > kGgufMaxDims) {
      return Err(dims_at,
                 fmt::format("{}: n_dims {} is outside [1, {}]", what, n_dims, kGgufMaxDims));
    }
    int64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = pos_;
      STRATA_ASSIGN_OR_RETURN(uint64_t dim, ReadU64(what + " shape"));
      if (dim == 0 || dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          static_cast<int64_t>(dim) > std::numeric_limits<int64_t>::max() / n_elements) {
        return Err(dim_at, fmt::format("{}: dimension {} has invalid size {}", what, d, dim));
      }
      n_elements *= static_cast<int64_t>(dim);
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const uint64_t type_at = pos_;
    STRATA_ASSIGN_OR_RETURN(uint32_t type_id, ReadU32(what + " type"));
    auto info = kernels::GetTypeInfo(type_id);
    if (!info) return Err(type_at, fmt::format("{}: unknown tensor type id {}", what, type_id));
    t.type = static_cast<kernels::TensorType>(type_id);
    if (n_elements % info->block_size != 0) {
      return Err(type_at, fmt::format("{}: {} elements is not a whole number of {} blocks of {}",
                                      what, n_elements, info->name, info->block_size));
    }
    t.n_bytes = static_cast<uint64_t>(n_elements / info->block_size) *
                static_cast<uint64_t>(info->block_bytes);
    const uint64_t off_at = pos_;
    STRATA_ASSIGN_OR_RETURN(t.offset, ReadU64(what + " offset"));
    if (t.offset % out.alignment_ != 0) {
      return Err(off_at, fmt::format("{}: data offset {} is not a multiple of the alignment {}",
                                     what, t.offset, out.alignment_));
    }
    if (out.tensor_index_.count(t.name) != 0) {
      return Err(info_at, fmt::format("duplicate tensor name '{}'", t.name));
    }
    out.tensor_index_.emplace(t.name, out.tensors_.size());
    out.tensors_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t data_offset = (pos_ + out.alignment_ - 1) / out.alignment_ * out.alignment_;
  if (data_offset > bytes_.size() && !out.tensors_.empty()) {
    return Err(pos_, fmt::format("data section would start at {}, past the end of the file ({} "
                                 "bytes)",
                                 data_offset, bytes_.size()));
  }
  out.data_offset_ = data_offset;
  const uint64_t data_size = data_offset <= bytes_.size() ? bytes_.size() - data_offset : 0;
  for (auto& t : out.tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      return InvalidArgumentError(fmt::format(
          "gguf '{}': tensor '{}': data [{}, {}) ends past the end of the file ({} bytes)", name_,
          t.name, data_offset + t.offset, data_offset + t.offset + t.n_bytes, bytes_.size()));
    }
    t.data = bytes_.subspan(data_offset + t.offset, t.n_bytes);
  }
  return util::OkStatus();
}

// ---------------------------------------------------------------------------
// GgufFile

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(util::FileSystem& fs, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(auto mapped, fs.MapReadOnly(path));
  return Parse(std::move(mapped));
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::Parse(std::unique_ptr<util::MappedFile> file) {
  const std::string name = file->path();
  STRATA_ASSIGN_OR_RETURN(auto parsed, ParseBytes(file->bytes(), name));
  parsed->file_ = std::move(file);
  return parsed;
}

StatusOr<std::unique_ptr<GgufFile>> GgufFile::ParseBytes(std::span<const uint8_t> bytes,
                                                         std::string name) {
  std::unique_ptr<GgufFile> out(new GgufFile());
  out->name_ = std::move(name);
  out->bytes_ = bytes;
  GgufParser parser(bytes, out->name_);
  STRATA_RETURN_IF_ERROR(parser.Run(*out));
  return out;
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_index_.find(std::string(key));
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void GgufFile::Prefetch() const {
  if (file_) file_->Prefetch();
}

namespace {
Status WrongType(const std::string& file, std::string_view key, const GgufValue& v,
                 std::string_view wanted) {
  return InvalidArgumentError(fmt::format("gguf '{}': metadata '{}' is {} {}, expected {}", file,
                                          key, GgufValueTypeName(v.type()), v.DebugString(3),
                                          wanted));
}
Status Missing(const std::string& file, std::string_view key) {
  return util::NotFoundError(fmt::format("gguf '{}': metadata '{}' is missing", file, key));
}
}  // namespace

StatusOr<std::string_view> GgufFile::GetString(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  auto s = v->AsString();
  if (!s) return WrongType(name_, key, *v, "a string");
  return *s;
}

StatusOr<uint64_t> GgufFile::GetUint(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  auto u = v->AsUint();
  if (!u) return WrongType(name_, key, *v, "a non-negative integer");
  return *u;
}

StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  auto i = v->AsInt();
  if (!i) return WrongType(name_, key, *v, "an integer");
  return *i;
}

StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  auto f = v->AsFloat();
  if (!f) return WrongType(name_, key, *v, "a number");
  return *f;
}

StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  auto b = v->AsBool();
  if (!b) return WrongType(name_, key, *v, "a bool");
  return *b;
}

StatusOr<const GgufValue*> GgufFile::GetArray(std::string_view key) const {
  const GgufValue* v = Find(key);
  if (!v) return Missing(name_, key);
  if (!v->is_array()) return WrongType(name_, key, *v, "an array");
  return v;
}

StatusOr<uint64_t> GgufFile::GetUintOr(std::string_view key, uint64_t fallback) const {
  if (!Find(key)) return fallback;
  return GetUint(key);
}

StatusOr<double> GgufFile::GetFloatOr(std::string_view key, double fallback) const {
  if (!Find(key)) return fallback;
  return GetFloat(key);
}

StatusOr<bool> GgufFile::GetBoolOr(std::string_view key, bool fallback) const {
  if (!Find(key)) return fallback;
  return GetBool(key);
}

StatusOr<std::string_view> GgufFile::GetStringOr(std::string_view key,
                                                 std::string_view fallback) const {
  if (!Find(key)) return fallback;
  return GetString(key);
}

}  // namespace strata::format
