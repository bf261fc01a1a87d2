// tests/testing/kernel_tables.h — the kernel tables a test runs: the scalar
// reference first, then every SIMD table this build and this CPU have.
#pragma once

#include <vector>

#include "kernels/kernels.h"

namespace strata::testing {

inline std::vector<const kernels::KernelTable*> AvailableKernelTables() {
  std::vector<const kernels::KernelTable*> out;
  for (kernels::Isa isa : {kernels::Isa::kScalar, kernels::Isa::kAvx2, kernels::Isa::kAvx512}) {
    if (const kernels::KernelTable* k = kernels::GetKernels(isa)) out.push_back(k);
  }
  return out;
}

}  // namespace strata::testing
