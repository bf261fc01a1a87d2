// kernels/internal/kernels_impl.h — the per-ISA kernel tables and the matmul
// entries the traits table names (private to kernels/). Each ISA lives in its
// own .cpp compiled with that ISA's flags; only kernels.cpp chooses between the
// tables at run time.
#pragma once

#include "kernels/kernels.h"

namespace strata::kernels::internal {

const KernelTable& ScalarKernels();
// nullptr when the build lacks the ISA or the CPU does not support it.
const KernelTable* Avx2Kernels();
const KernelTable* Avx512Kernels();

// Every kernel table's matmul: the entry for ISA kIsa in args.w_type's traits
// row (type_traits.cpp). A type the kernels do not compute is a precondition
// failure.
template <Isa kIsa>
void MatMulByType(const MatMulArgs& args);
// Every kernel table's prefers_packed: the traits row's packed_faster[kIsa].
template <Isa kIsa>
bool PrefersPackedByType(TensorType t);

// The SIMD matmul entries: one function template per micro-kernel family,
// instantiated in its ISA file for the block types (internal/blocks.h) the
// family serves; the traits table names each instantiation. Built only on
// x86-64 with GCC (kernels/CMakeLists.txt defines STRATA_KERNELS_X86_SIMD there).
// avx2.cpp:
template <typename Block>
void MatMulFloatAvx2(const MatMulArgs& args);  // F32, F16, BF16
template <typename Block>
void MatMulSigned8Avx2(const MatMulArgs& args);  // Q8_0
template <typename Block>
void MatMulQuant32Avx2(const MatMulArgs& args);  // Q4_0, Q4_1, Q5_0, Q5_1
template <typename Block>
void MatMulKQuantAvx2(const MatMulArgs& args);  // Q4_K, Q5_K, Q6_K
// avx512.cpp:
template <typename Block>
void MatMulFloatAvx512(const MatMulArgs& args);  // F32, F16, BF16
template <typename Block>
void MatMulQuant32Avx512(const MatMulArgs& args);  // Q8_0, Q4_0, Q4_1, Q5_0, Q5_1
// kquants_avx512.cpp:
template <typename Block>
void MatMulKQuantAvx512(const MatMulArgs& args);  // Q4_K, Q5_K, Q6_K

// The row-interleaved layout (packed.cpp; kernels.h, PackRows): the packers
// and unpackers, the scalar entry for packed weights of any packable type
// (unpacks each group, then the plain scalar kernel: bitwise the plain
// scalar result), and the SIMD entries.
void PackQ8_0(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst);
void UnpackQ8_0(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst);
void PackQ4_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst);
void UnpackQ4_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst);
void PackQ6_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst);
void UnpackQ6_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst);
void PackQ5_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst);
void UnpackQ5_K(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst);
template <typename Block>  // Q4_0, Q4_1, Q5_0, Q5_1
void PackLegacy32(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst);
template <typename Block>
void UnpackLegacy32(const uint8_t* src, size_t row_bytes, int64_t n_rows, int64_t n, uint8_t* dst);
void MatMulPackedScalar(const MatMulArgs& args);
void MatMulPackedQ8Avx2(const MatMulArgs& args);  // avx2.cpp
void MatMulPackedQ4KAvx2(const MatMulArgs& args);
void MatMulPackedQ5KAvx2(const MatMulArgs& args);
void MatMulPackedQ6KAvx2(const MatMulArgs& args);
template <typename Block>
void MatMulPackedLegacy32Avx2(const MatMulArgs& args);  // Q4_0, Q4_1, Q5_0, Q5_1
void MatMulPackedQ8Avx512(const MatMulArgs& args);      // avx512.cpp
void MatMulPackedQ4KAvx512(const MatMulArgs& args);
void MatMulPackedQ5KAvx512(const MatMulArgs& args);
void MatMulPackedQ6KAvx512(const MatMulArgs& args);
template <typename Block>
void MatMulPackedLegacy32Avx512(const MatMulArgs& args);

// Attention kernels (attention.cpp, attention_avx2.cpp, attention_avx512.cpp).
void AttendScalar(const AttendArgs& args);
void AttendAvx2(const AttendArgs& args);
void AttendAvx512(const AttendArgs& args);
// KernelTable::swiglu.
void SwiGluScalar(float* gate, const float* up, int64_t n);
void SwiGluAvx2(float* gate, const float* up, int64_t n);
void SwiGluAvx512(float* gate, const float* up, int64_t n);

}  // namespace strata::kernels::internal
