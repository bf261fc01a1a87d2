// tests/testing/kernel_tables.h — the kernel tables a test runs: the scalar
// reference first, then every SIMD table this build and this CPU have.
#pragma once

#include <vector>

#include "model/kernels.h"

namespace strata::testing {

inline std::vector<const model::KernelTable*> AvailableKernelTables() {
  std::vector<const model::KernelTable*> out;
  for (model::Isa isa : {model::Isa::kScalar, model::Isa::kAvx2, model::Isa::kAvx512}) {
    if (const model::KernelTable* k = model::GetKernels(isa)) out.push_back(k);
  }
  return out;
}

}  // namespace strata::testing
