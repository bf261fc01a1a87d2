// model/default_encoder.h — strata's own sentence encoder, built into the
// binary, so the semantic tier works without a download.
//
// Promise: the bytes are the GGUF `strata train-encoder` writes with its
// default options from the Quora Question Pairs training split in
// ../shared/data/prompts (hashed word unigrams, bigrams and character
// trigrams into 2^13 buckets of 64 dimensions, Q8_0; about 550 KB), byte for
// byte: training is deterministic, and a golden test retrains it and
// compares. docs/benchmarks.md ("Semantic tier") has its precision and
// recall beside L3's on held-out pairs. LoadDefaultEncoder parses them (no
// file is read).
//
// Threading: the bytes are immutable; the encoder is HashEncoder's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "model/hash_encoder.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::model {

std::span<const uint8_t> DefaultEncoderGguf();
util::StatusOr<std::unique_ptr<HashEncoder>> LoadDefaultEncoder(util::Logger& log);

}  // namespace strata::model
