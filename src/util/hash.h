// util/hash.h — fast non-cryptographic hashing (XXH3), the only place xxhash is used.
//
// Promise: stable 64-bit hashes of byte strings: the same input and seed give
// the same value on every run and machine, so hashes may be stored (cache keys,
// block-chain hashes). Not for security: use obs/ (SHA-256/HMAC) for that.
//
// Threading: pure functions; Hasher is thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

namespace strata::util {

uint64_t Hash64(std::span<const uint8_t> data, uint64_t seed = 0);
inline uint64_t Hash64(std::string_view s, uint64_t seed = 0) {
  return Hash64(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()),
                seed);
}

// Incremental hashing of several pieces; equal to Hash64 of the concatenation.
class Hasher {
 public:
  explicit Hasher(uint64_t seed = 0);
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  Hasher& Update(std::span<const uint8_t> data);
  Hasher& Update(std::string_view s) {
    return Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  }
  template <typename T>
  Hasher& UpdatePod(const T& v) {
    return Update(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&v), sizeof(T)));
  }
  uint64_t Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace strata::util
