// kernels/type_traits.h — one traits row per tensor type, in one table
// (kernels/type_traits.cpp): everything the code knows about a type.
//
// Promise: every type id that may appear in a GGUF file has exactly one row,
// with its name and block layout. A type the kernels compute (`compute`) also
// has the activation format its dot products take, a codec (whole-block rows
// in and out of float) and a matmul entry per ISA: the scalar reference always,
// an ISA's own kernel where that ISA's file implements the type, else the
// scalar entry again. GetTypeInfo, ParseTensorType, IsComputeSupported,
// ActFormatFor, HasCodec, DequantizeRow, QuantizeRow and every KernelTable's
// matmul read this table; nothing else knows these facts.
//
// An ISA's entries may run only where GetKernels(isa) is non-null (the build
// and the CPU have the ISA). docs/kernels.md says how to add a type.
//
// Threading: constant data.
//
//   for (const TypeTraits& t : AllTypeTraits())
//     if (t.compute) t.quantize(x, n, row);  // n a multiple of t.block_size
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "kernels/kernels.h"
#include "kernels/tensor_type.h"

namespace strata::kernels {

using DequantizeRowFn = void (*)(const void* src, int64_t n, float* dst);
using QuantizeRowFn = void (*)(const float* src, int64_t n, void* dst);
using MatMulFn = void (*)(const MatMulArgs& args);

struct TypeTraits {
  TensorType type = TensorType::kF32;
  std::string_view name;    // as GGUF tools write it: "Q8_0"
  int32_t block_size = 1;   // elements per block
  int32_t block_bytes = 0;  // bytes per block
  bool compute = false;     // the kernels can use it as weights; then every field below is set
  ActFormat act = ActFormat::kF32;  // the activation format of its dot products
  // n elements from a block boundary, n a multiple of block_size (DequantizeRow's contract).
  DequantizeRowFn dequantize = nullptr;
  QuantizeRowFn quantize = nullptr;
  // Indexed by Isa: args.w_type must be `type`.
  std::array<MatMulFn, kIsaCount> matmul{};
  // The row-interleaved layout (kernels.h, PackRows), for a packable type:
  // its packer, and per Isa the kernel for packed weights and whether it was
  // measured faster than `matmul` there.
  using PackFn = void (*)(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n,
                          uint8_t* dst);
  PackFn pack = nullptr, unpack = nullptr;
  int32_t packed_block_bytes = 0;  // bytes of one block of kPackRows rows, packed
  std::array<MatMulFn, kIsaCount> matmul_packed{};
  std::array<bool, kIsaCount> packed_faster{};
};

// Every row, in id order.
std::span<const TypeTraits> AllTypeTraits();
// The row of `type_id`, nullptr for an id no GGUF type has.
const TypeTraits* FindTypeTraits(uint32_t type_id);
inline const TypeTraits* FindTypeTraits(TensorType t) {
  return FindTypeTraits(static_cast<uint32_t>(t));
}

}  // namespace strata::kernels
