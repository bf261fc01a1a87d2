#include "util/hash.h"

#include <xxhash.h>

#include "util/status.h"

namespace strata::util {

uint64_t Hash64(std::span<const uint8_t> data, uint64_t seed) {
  return XXH3_64bits_withSeed(data.data(), data.size(), seed);
}

struct Hasher::State {
  XXH3_state_t* st = nullptr;
};

Hasher::Hasher(uint64_t seed) : state_(std::make_unique<State>()) {
  state_->st = XXH3_createState();
  STRATA_CHECK(state_->st != nullptr);
  XXH3_64bits_reset_withSeed(state_->st, seed);
}

Hasher::~Hasher() { XXH3_freeState(state_->st); }

Hasher& Hasher::Update(std::span<const uint8_t> data) {
  XXH3_64bits_update(state_->st, data.data(), data.size());
  return *this;
}

uint64_t Hasher::Digest() const { return XXH3_64bits_digest(state_->st); }

}  // namespace strata::util
