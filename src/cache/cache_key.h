// cache/cache_key.h — the exact key of a cached response.
//
// Promise: a CacheKey is the full, canonical byte encoding of everything that
// determines an answer, and it always starts with the tenant (the builder
// takes the tenant first and nothing else can come before it). Each field is
// written with its type and length, so no two different field sequences give
// the same bytes. The 64-bit hash only places a key in a table: every lookup
// compares the full bytes, so a hash collision can cost a comparison but
// never serve one request's answer to another.
//
// Threading: value types; thread-compatible.
//
// Usage:
//   CacheKeyBuilder b(tenant);
//   b.U64(model_fingerprint).I32s(prompt_tokens).F32(temperature).Str(stop);
//   CacheKey key = b.Build();
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace strata::cache {

struct CacheKey {
  std::string bytes;  // canonical encoding; starts with the tenant
  uint64_t hash = 0;  // util::Hash64(bytes); tests may force collisions by setting it

  bool operator==(const CacheKey& o) const { return hash == o.hash && bytes == o.bytes; }
};

// The hash Build gives a key of these bytes.
uint64_t KeyHashOf(std::string_view bytes);

struct CacheKeyHash {
  size_t operator()(const CacheKey& k) const { return static_cast<size_t>(k.hash); }
};

class CacheKeyBuilder {
 public:
  explicit CacheKeyBuilder(std::string_view tenant);

  CacheKeyBuilder& U64(uint64_t v);
  CacheKeyBuilder& I64(int64_t v);
  CacheKeyBuilder& I32(int32_t v);
  CacheKeyBuilder& Bool(bool v);
  // The exact bit pattern (so -0.0 and 0.0 differ, and NaNs never match a number).
  CacheKeyBuilder& F32(float v);
  CacheKeyBuilder& Str(std::string_view s);
  CacheKeyBuilder& I32s(std::span<const int32_t> v);

  // Moves the bytes out: the builder is empty afterwards.
  CacheKey Build();

 private:
  void Tag(char t) { bytes_.push_back(t); }
  void Raw(const void* p, size_t n) { bytes_.append(static_cast<const char*>(p), n); }
  std::string bytes_;
};

}  // namespace strata::cache
