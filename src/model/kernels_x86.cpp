// SIMD kernel tables. Until the AVX2/AVX-512 kernels land, this build offers
// none and BestKernels() falls back to the scalar reference.
#include "model/internal/kernels_impl.h"

namespace strata::model::internal {

const KernelTable* Avx2Kernels() { return nullptr; }
const KernelTable* Avx512Kernels() { return nullptr; }

}  // namespace strata::model::internal
