// Builds for fuzzing (clang, see the fuzz preset) leave out the SIMD kernel
// files, whose per-function target pragmas are GCC's: the parsers are what is
// fuzzed, and the scalar kernels compute the same results.
#include "kernels/internal/kernels_impl.h"

namespace strata::kernels::internal {

const KernelTable* Avx2Kernels() { return nullptr; }
const KernelTable* Avx512Kernels() { return nullptr; }

}  // namespace strata::kernels::internal
