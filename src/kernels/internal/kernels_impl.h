// kernels/internal/kernels_impl.h — the per-ISA kernel tables (private to kernels/).
// Each ISA lives in its own .cpp compiled with that ISA's flags; only
// kernels.cpp chooses between them at run time.
#pragma once

#include "kernels/kernels.h"

namespace strata::kernels::internal {

const KernelTable& ScalarKernels();
// nullptr when the build lacks the ISA or the CPU does not support it.
const KernelTable* Avx2Kernels();
const KernelTable* Avx512Kernels();

// The AVX-512 table's Q4_K, Q5_K and Q6_K matmuls (kquants_avx512.cpp);
// other weight types are a precondition failure.
void MatMulKQuantAvx512(const MatMulArgs& args);

// Attention kernels (attention.cpp, attention_avx512.cpp); the AVX2 table
// uses the scalar one.
void AttendScalar(const AttendArgs& args);
void AttendAvx512(const AttendArgs& args);

}  // namespace strata::kernels::internal
