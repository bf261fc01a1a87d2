// sampling — turns logits into tokens: the logits processors and seeded draws
// (sampler.h). Works on spans of logits only; knows nothing of the engine.
//
// Promise: deterministic for a given seed, parameters and logits; invalid
// parameters and non-finite logits are errors, never silent samples.
#pragma once

#include "sampling/sampler.h"
