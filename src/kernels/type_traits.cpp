// The traits table: one row per GGUF tensor type, and every lookup that reads it.
//
// A computable type's row is built from its block struct (kernels/internal/blocks.h):
// its codec and scalar matmul are the struct's reference functions (Dequantize,
// Quantize, Dot), and the row's block size, bytes and activation format must agree
// with the struct, or the table does not compile. The SIMD entries name the
// function-template instantiations of the ISA files (kernels/internal/kernels_impl.h);
// builds without those files (see kernels/CMakeLists.txt) get the scalar entry.
#include "kernels/type_traits.h"

#include <cctype>
#include <optional>
#include <string>

#include "kernels/internal/blocks.h"
#include "kernels/internal/kernels_impl.h"
#include "kernels/internal/packed_layout.h"
#include "util/status.h"

// An entry of the x86 SIMD files, or none in builds without them. "None" is
// an empty optional, not a null pointer: comparing the address of a function
// defined in another file with null is not a constant expression under the
// sanitizers (GCC 12), so the table would not compile there.
#if STRATA_KERNELS_X86_SIMD
#define STRATA_X86_ENTRY(...) &internal::__VA_ARGS__
#else
#define STRATA_X86_ENTRY(...) std::nullopt
#endif

namespace strata::kernels {
namespace {

using internal::BlockBF16;
using internal::BlockF16;
using internal::BlockF32;
using internal::BlockQ4_0;
using internal::BlockQ4_1;
using internal::BlockQ4_K;
using internal::BlockQ5_0;
using internal::BlockQ5_1;
using internal::BlockQ5_K;
using internal::BlockQ6_K;
using internal::BlockQ8_0;

// ---------------------------------------------------------------------------
// A block struct's entries.

template <typename Act>
constexpr ActFormat kActFormatOf = ActFormat::kF32;  // float activations
template <>
constexpr ActFormat kActFormatOf<internal::ActBlockQ8> = ActFormat::kQ8;
template <>
constexpr ActFormat kActFormatOf<internal::ActBlockQ8K> = ActFormat::kQ8K;

template <typename Block>
void DequantizeRows(const void* src, int64_t n, float* dst) {
  internal::Dequantize(static_cast<const Block*>(src), n / Block::kSize, dst);
}
template <typename Block>
void QuantizeRows(const float* src, int64_t n, void* dst) {
  internal::Quantize(src, n / Block::kSize, static_cast<Block*>(dst));
}
// The scalar reference: one Dot per (row, token), in that order.
template <typename Block>
void MatMulScalar(const MatMulArgs& a) {
  using Act = typename Block::Act;
  for (int64_t r = a.row_begin; r < a.row_end; ++r) {
    const auto* w = reinterpret_cast<const Block*>(a.w + static_cast<size_t>(r) * a.w_row_bytes);
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const auto* x =
          reinterpret_cast<const Act*>(a.act + static_cast<size_t>(t) * a.act_row_bytes);
      a.out[t * a.out_stride + r] = internal::Dot(w, x, a.n / Block::kSize);
    }
  }
}

// ---------------------------------------------------------------------------
// Row builders.

// Reached only while a row is built at compile time: a row that disagrees with
// its block struct is not a constant, so the table fails to compile.
void RowDisagreesWithItsBlockStruct() {}

// SIMD entries of a computable type; none: the ISA runs the scalar entry.
struct SimdEntries {
  std::optional<MatMulFn> avx2;  // none: the scalar entry
  std::optional<MatMulFn> avx512;
};

template <typename Block>
consteval TypeTraits Computable(TensorType type, std::string_view name, int32_t block_size,
                                int32_t block_bytes, ActFormat act, SimdEntries simd) {
  if (block_size != Block::kSize || block_bytes != static_cast<int32_t>(sizeof(Block)) ||
      act != kActFormatOf<typename Block::Act>) {
    RowDisagreesWithItsBlockStruct();
  }
  const MatMulFn scalar = &MatMulScalar<Block>;
  TypeTraits t{.type = type,
               .name = name,
               .block_size = block_size,
               .block_bytes = block_bytes,
               .compute = true,
               .act = act,
               .dequantize = &DequantizeRows<Block>,
               .quantize = &QuantizeRows<Block>};
  t.matmul[static_cast<size_t>(Isa::kScalar)] = scalar;
  t.matmul[static_cast<size_t>(Isa::kAvx2)] = simd.avx2.value_or(scalar);
  t.matmul[static_cast<size_t>(Isa::kAvx512)] = simd.avx512.value_or(scalar);
  return t;
}

// Where an ISA's packed kernel was measured faster than its plain one.
struct PackedFaster {
  bool avx2 = false;
  bool avx512 = false;
};

// `t` with the row-interleaved layout (kernels.h, PackRows): its packers and
// packed kernels; an ISA without its own packed kernel runs the scalar one
// (unpacking), never preferred.
consteval TypeTraits Packable(TypeTraits t, size_t packed_block_bytes, TypeTraits::PackFn pack,
                              TypeTraits::PackFn unpack, SimdEntries simd, PackedFaster faster) {
  const MatMulFn scalar = &internal::MatMulPackedScalar;
  t.pack = pack;
  t.unpack = unpack;
  t.packed_block_bytes = static_cast<int32_t>(packed_block_bytes);
  t.matmul_packed[static_cast<size_t>(Isa::kScalar)] = scalar;
  t.matmul_packed[static_cast<size_t>(Isa::kAvx2)] = simd.avx2.value_or(scalar);
  t.matmul_packed[static_cast<size_t>(Isa::kAvx512)] = simd.avx512.value_or(scalar);
  t.packed_faster[static_cast<size_t>(Isa::kAvx2)] = faster.avx2 && simd.avx2.has_value();
  t.packed_faster[static_cast<size_t>(Isa::kAvx512)] = faster.avx512 && simd.avx512.has_value();
  return t;
}

// A type GGUF files may hold that the kernels do not compute: sizes only.
consteval TypeTraits StorageOnly(TensorType type, std::string_view name, int32_t block_size,
                                 int32_t block_bytes) {
  return {.type = type, .name = name, .block_size = block_size, .block_bytes = block_bytes};
}

// ---------------------------------------------------------------------------
// The table, in id order (ggml's numbering; sizes as docs/formats/gguf.md gives them).
constexpr TypeTraits kTable[] = {
    Computable<BlockF32>(TensorType::kF32, "F32", 1, 4, ActFormat::kF32,
                         {.avx2 = STRATA_X86_ENTRY(MatMulFloatAvx2<BlockF32>),
                          .avx512 = STRATA_X86_ENTRY(MatMulFloatAvx512<BlockF32>)}),
    Computable<BlockF16>(TensorType::kF16, "F16", 1, 2, ActFormat::kF32,
                         {.avx2 = STRATA_X86_ENTRY(MatMulFloatAvx2<BlockF16>),
                          .avx512 = STRATA_X86_ENTRY(MatMulFloatAvx512<BlockF16>)}),
    Packable(Computable<BlockQ4_0>(TensorType::kQ4_0, "Q4_0", 32, 18, ActFormat::kQ8,
                                   {.avx2 = STRATA_X86_ENTRY(MatMulQuant32Avx2<BlockQ4_0>),
                                    .avx512 = STRATA_X86_ENTRY(MatMulQuant32Avx512<BlockQ4_0>)}),
             internal::packed_layout::kLegacyBlock<BlockQ4_0>, &internal::PackLegacy32<BlockQ4_0>,
             &internal::UnpackLegacy32<BlockQ4_0>,
             {.avx2 = STRATA_X86_ENTRY(MatMulPackedLegacy32Avx2<BlockQ4_0>),
              .avx512 = STRATA_X86_ENTRY(MatMulPackedLegacy32Avx512<BlockQ4_0>)},
             {.avx2 = true}),
    Packable(Computable<BlockQ4_1>(TensorType::kQ4_1, "Q4_1", 32, 20, ActFormat::kQ8,
                                   {.avx2 = STRATA_X86_ENTRY(MatMulQuant32Avx2<BlockQ4_1>),
                                    .avx512 = STRATA_X86_ENTRY(MatMulQuant32Avx512<BlockQ4_1>)}),
             internal::packed_layout::kLegacyBlock<BlockQ4_1>, &internal::PackLegacy32<BlockQ4_1>,
             &internal::UnpackLegacy32<BlockQ4_1>,
             {.avx2 = STRATA_X86_ENTRY(MatMulPackedLegacy32Avx2<BlockQ4_1>),
              .avx512 = STRATA_X86_ENTRY(MatMulPackedLegacy32Avx512<BlockQ4_1>)},
             {.avx2 = true}),
    Packable(Computable<BlockQ5_0>(TensorType::kQ5_0, "Q5_0", 32, 22, ActFormat::kQ8,
                                   {.avx2 = STRATA_X86_ENTRY(MatMulQuant32Avx2<BlockQ5_0>),
                                    .avx512 = STRATA_X86_ENTRY(MatMulQuant32Avx512<BlockQ5_0>)}),
             internal::packed_layout::kLegacyBlock<BlockQ5_0>, &internal::PackLegacy32<BlockQ5_0>,
             &internal::UnpackLegacy32<BlockQ5_0>,
             {.avx2 = STRATA_X86_ENTRY(MatMulPackedLegacy32Avx2<BlockQ5_0>),
              .avx512 = STRATA_X86_ENTRY(MatMulPackedLegacy32Avx512<BlockQ5_0>)},
             {.avx2 = true}),
    Packable(Computable<BlockQ5_1>(TensorType::kQ5_1, "Q5_1", 32, 24, ActFormat::kQ8,
                                   {.avx2 = STRATA_X86_ENTRY(MatMulQuant32Avx2<BlockQ5_1>),
                                    .avx512 = STRATA_X86_ENTRY(MatMulQuant32Avx512<BlockQ5_1>)}),
             internal::packed_layout::kLegacyBlock<BlockQ5_1>, &internal::PackLegacy32<BlockQ5_1>,
             &internal::UnpackLegacy32<BlockQ5_1>,
             {.avx2 = STRATA_X86_ENTRY(MatMulPackedLegacy32Avx2<BlockQ5_1>),
              .avx512 = STRATA_X86_ENTRY(MatMulPackedLegacy32Avx512<BlockQ5_1>)},
             {.avx2 = true}),
    // Packed: measured faster on AVX2 (docs/benchmarks.md, "Row-interleaved
    // weights"); the AVX-512 table computes the layout with the same 256-bit
    // kernel but keeps its own plain kernel as the preferred one.
    Packable(Computable<BlockQ8_0>(TensorType::kQ8_0, "Q8_0", 32, 34, ActFormat::kQ8,
                                   {.avx2 = STRATA_X86_ENTRY(MatMulSigned8Avx2<BlockQ8_0>),
                                    .avx512 = STRATA_X86_ENTRY(MatMulQuant32Avx512<BlockQ8_0>)}),
             internal::packed_layout::kQ8Block, &internal::PackQ8_0, &internal::UnpackQ8_0,
             {.avx2 = STRATA_X86_ENTRY(MatMulPackedQ8Avx2),
              .avx512 = STRATA_X86_ENTRY(MatMulPackedQ8Avx512)},
             {.avx2 = true}),
    StorageOnly(TensorType::kQ8_1, "Q8_1", 32, 36),
    StorageOnly(TensorType::kQ2_K, "Q2_K", 256, 84),
    StorageOnly(TensorType::kQ3_K, "Q3_K", 256, 110),
    Packable(Computable<BlockQ4_K>(TensorType::kQ4_K, "Q4_K", 256, 144, ActFormat::kQ8K,
                                   {.avx2 = STRATA_X86_ENTRY(MatMulKQuantAvx2<BlockQ4_K>),
                                    .avx512 = STRATA_X86_ENTRY(MatMulKQuantAvx512<BlockQ4_K>)}),
             internal::packed_layout::kK4Block<4>, &internal::PackQ4_K, &internal::UnpackQ4_K,
             {.avx2 = STRATA_X86_ENTRY(MatMulPackedQ4KAvx2),
              .avx512 = STRATA_X86_ENTRY(MatMulPackedQ4KAvx512)},
             {.avx2 = true}),
    Packable(Computable<BlockQ5_K>(TensorType::kQ5_K, "Q5_K", 256, 176, ActFormat::kQ8K,
                                   {.avx2 = STRATA_X86_ENTRY(MatMulKQuantAvx2<BlockQ5_K>),
                                    .avx512 = STRATA_X86_ENTRY(MatMulKQuantAvx512<BlockQ5_K>)}),
             internal::packed_layout::kK4Block<5>, &internal::PackQ5_K, &internal::UnpackQ5_K,
             {.avx2 = STRATA_X86_ENTRY(MatMulPackedQ5KAvx2),
              .avx512 = STRATA_X86_ENTRY(MatMulPackedQ5KAvx512)},
             {.avx2 = true}),
    Packable(Computable<BlockQ6_K>(TensorType::kQ6_K, "Q6_K", 256, 210, ActFormat::kQ8K,
                                   {.avx2 = STRATA_X86_ENTRY(MatMulKQuantAvx2<BlockQ6_K>),
                                    .avx512 = STRATA_X86_ENTRY(MatMulKQuantAvx512<BlockQ6_K>)}),
             internal::packed_layout::kQ6KBlock, &internal::PackQ6_K, &internal::UnpackQ6_K,
             {.avx2 = STRATA_X86_ENTRY(MatMulPackedQ6KAvx2),
              .avx512 = STRATA_X86_ENTRY(MatMulPackedQ6KAvx512)},
             {.avx2 = true}),
    StorageOnly(TensorType::kQ8_K, "Q8_K", 256, 292),
    StorageOnly(TensorType::kIQ2_XXS, "IQ2_XXS", 256, 66),
    StorageOnly(TensorType::kIQ2_XS, "IQ2_XS", 256, 74),
    StorageOnly(TensorType::kIQ3_XXS, "IQ3_XXS", 256, 98),
    StorageOnly(TensorType::kIQ1_S, "IQ1_S", 256, 50),
    StorageOnly(TensorType::kIQ4_NL, "IQ4_NL", 32, 18),
    StorageOnly(TensorType::kIQ3_S, "IQ3_S", 256, 110),
    StorageOnly(TensorType::kIQ2_S, "IQ2_S", 256, 82),
    StorageOnly(TensorType::kIQ4_XS, "IQ4_XS", 256, 136),
    StorageOnly(TensorType::kI8, "I8", 1, 1),
    StorageOnly(TensorType::kI16, "I16", 1, 2),
    StorageOnly(TensorType::kI32, "I32", 1, 4),
    StorageOnly(TensorType::kI64, "I64", 1, 8),
    StorageOnly(TensorType::kF64, "F64", 1, 8),
    StorageOnly(TensorType::kIQ1_M, "IQ1_M", 256, 56),
    Computable<BlockBF16>(TensorType::kBF16, "BF16", 1, 2, ActFormat::kF32,
                          {.avx2 = STRATA_X86_ENTRY(MatMulFloatAvx2<BlockBF16>),
                           .avx512 = STRATA_X86_ENTRY(MatMulFloatAvx512<BlockBF16>)}),
    StorageOnly(TensorType::kTQ1_0, "TQ1_0", 256, 54),
    StorageOnly(TensorType::kTQ2_0, "TQ2_0", 256, 66),
    StorageOnly(TensorType::kMXFP4, "MXFP4", 32, 17),
};

// Ids strictly increasing (so unique, and rows are found by id below) and
// blocks non-empty. That a row is computable exactly when it has a codec and
// every ISA entry is checked by tests/kernels/type_traits_test.cpp instead: a
// function address compared with null is not a constant expression under
// the sanitizers.
consteval bool TableIsWellFormed() {
  for (size_t i = 0; i < std::size(kTable); ++i) {
    const TypeTraits& t = kTable[i];
    if (i > 0 && static_cast<uint32_t>(kTable[i - 1].type) >= static_cast<uint32_t>(t.type)) {
      return false;
    }
    if (t.block_size < 1 || t.block_bytes < 1 || t.name.empty()) return false;
  }
  return true;
}
static_assert(TableIsWellFormed());
static_assert(static_cast<int>(Isa::kScalar) == 0 && static_cast<int>(Isa::kAvx2) == 1 &&
              static_cast<int>(Isa::kAvx512) == 2 && kIsaCount == 3);

// Row index of each id, −1 for an id no GGUF type has.
constexpr uint32_t kIdLimit = static_cast<uint32_t>(std::end(kTable)[-1].type) + 1;
constexpr std::array<int8_t, kIdLimit> kRowOfId = [] {
  std::array<int8_t, kIdLimit> rows{};
  rows.fill(-1);
  for (size_t i = 0; i < std::size(kTable); ++i) {
    rows[static_cast<uint32_t>(kTable[i].type)] = static_cast<int8_t>(i);
  }
  return rows;
}();

}  // namespace

std::span<const TypeTraits> AllTypeTraits() { return kTable; }

const TypeTraits* FindTypeTraits(uint32_t type_id) {
  if (type_id >= kIdLimit || kRowOfId[type_id] < 0) return nullptr;
  return &kTable[kRowOfId[type_id]];
}

// ---------------------------------------------------------------------------
// The public lookups (kernels/tensor_type.h, kernels/kernels.h).

std::optional<TypeInfo> GetTypeInfo(uint32_t type_id) {
  const TypeTraits* t = FindTypeTraits(type_id);
  if (t == nullptr) return std::nullopt;
  return TypeInfo{t->name, t->block_size, t->block_bytes};
}

std::optional<TensorType> ParseTensorType(std::string_view name) {
  for (const TypeTraits& t : kTable) {
    if (t.name.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      same = std::toupper(static_cast<unsigned char>(name[i])) == t.name[i];
    }
    if (same) return t.type;
  }
  return std::nullopt;
}

bool IsComputeSupported(TensorType t) {
  const TypeTraits* row = FindTypeTraits(t);
  return row != nullptr && row->compute;
}

std::string ComputeSupportedTypeNames() {
  std::string names;
  for (const TypeTraits& t : kTable) {
    if (!t.compute) continue;
    if (!names.empty()) names += ", ";
    names += t.name;
  }
  return names;
}

ActFormat ActFormatFor(TensorType weight_type) {
  const TypeTraits* row = FindTypeTraits(weight_type);
  return row != nullptr ? row->act : ActFormat::kF32;
}

bool HasCodec(TensorType type) {
  const TypeTraits* row = FindTypeTraits(type);
  return row != nullptr && row->dequantize != nullptr;
}

void DequantizeRow(TensorType type, const void* src, int64_t n, float* dst) {
  const TypeTraits* row = FindTypeTraits(type);
  STRATA_CHECK_MSG(row != nullptr && row->dequantize != nullptr,
                   "DequantizeRow: no codec for this type (check HasCodec)");
  row->dequantize(src, n, dst);
}

void QuantizeRow(TensorType type, const float* src, int64_t n, void* dst) {
  const TypeTraits* row = FindTypeTraits(type);
  STRATA_CHECK_MSG(row != nullptr && row->quantize != nullptr,
                   "QuantizeRow: no codec for this type (check HasCodec)");
  row->quantize(src, n, dst);
}

namespace internal {

template <Isa kIsa>
void MatMulByType(const MatMulArgs& a) {
  const TypeTraits* row = FindTypeTraits(a.w_type);
  STRATA_CHECK_MSG(row != nullptr && row->compute, "matmul: weight type without a kernel");
  if (a.packed) {
    STRATA_CHECK_MSG(row->pack != nullptr,
                     "matmul: packed weights of a type without a packed layout");
    row->matmul_packed[static_cast<size_t>(kIsa)](a);
    return;
  }
  row->matmul[static_cast<size_t>(kIsa)](a);
}

template <Isa kIsa>
bool PrefersPackedByType(TensorType t) {
  const TypeTraits* row = FindTypeTraits(t);
  return row != nullptr && row->packed_faster[static_cast<size_t>(kIsa)];
}
template bool PrefersPackedByType<Isa::kScalar>(TensorType);
template bool PrefersPackedByType<Isa::kAvx2>(TensorType);
template bool PrefersPackedByType<Isa::kAvx512>(TensorType);
template void MatMulByType<Isa::kScalar>(const MatMulArgs& a);
template void MatMulByType<Isa::kAvx2>(const MatMulArgs& a);
template void MatMulByType<Isa::kAvx512>(const MatMulArgs& a);

}  // namespace internal
}  // namespace strata::kernels
