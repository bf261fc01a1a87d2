// sampling/tiers.h — sampling tiers: how much of a request's sampling policy
// runs when the server is under pressure.
//
// Promise: ApplyTier is a pure function of the request's parameters and the
// tier; kEntropyTargeted leaves them as asked. The RT-Switcher
// (gateway/rt_switcher.h) picks the tier per request; this module only says
// what each tier means for the sampler.
//
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "sampling/sampler.h"

namespace strata::sampling {

enum class SamplingTier : uint8_t {
  kEntropyTargeted,  // the request's parameters as given
  kTopK,             // plain top-k/temperature: no entropy solve, mirostat or typical-p
};

// "entropy" or "topk".
std::string_view SamplingTierName(SamplingTier tier);

// The parameters a request runs with under `tier`: kTopK turns off
// target_entropy, mirostat and typical-p and uses top_k = 40 when the request
// had none or more (a request's smaller k is kept).
SamplingParams ApplyTier(SamplingParams requested, SamplingTier tier);

}  // namespace strata::sampling
