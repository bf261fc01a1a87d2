#include "sampling/tiers.h"

namespace strata::sampling {

SamplingParams ApplyTier(SamplingParams p, SamplingTier tier) {
  if (tier == SamplingTier::kTopK) {
    p.target_entropy = -1.0f;
    p.mirostat = false;
    p.typical_p = 1.0f;
    if (p.top_k == 0 || p.top_k > 40) p.top_k = 40;
  }
  return p;
}

std::string_view SamplingTierName(SamplingTier tier) {
  return tier == SamplingTier::kTopK ? "topk" : "entropy";
}

}  // namespace strata::sampling
