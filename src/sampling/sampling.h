// sampling — turns logits into tokens. Works on spans of logits only; knows
// nothing of the engine.
//
//   processors.h   the logits processors: pure functions over a candidate set,
//                  in one documented order (penalties ... mirostat, draw)
//   entropy.h      entropy-targeted temperature and the entropy tail rule
//   sampler.h      SamplingParams and the per-request Sampler (seeded, stateful)
//   tiers.h        what each sampling tier keeps of a request's policy (the
//                  RT-Switcher, gateway/rt_switcher.h, picks the tier)
//
// Promise: deterministic for a given seed, parameters and logits; invalid
// parameters and non-finite logits are errors, never silent samples.
#pragma once

#include "sampling/entropy.h"
#include "sampling/processors.h"
#include "sampling/sampler.h"
#include "sampling/tiers.h"
