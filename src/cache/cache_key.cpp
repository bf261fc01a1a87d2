#include "cache/cache_key.h"

#include <cstring>

#include "util/hash.h"

namespace strata::cache {

// Integers are written little-endian in their machine layout: keys live in
// this process only (a shared tier will add an explicit byte order and a
// version before any key leaves it).
CacheKeyBuilder::CacheKeyBuilder(std::string_view tenant) {
  bytes_.reserve(64 + tenant.size());
  Str(tenant);
}

CacheKeyBuilder& CacheKeyBuilder::U64(uint64_t v) {
  Tag('Q');
  Raw(&v, sizeof v);
  return *this;
}

CacheKeyBuilder& CacheKeyBuilder::I64(int64_t v) {
  Tag('q');
  Raw(&v, sizeof v);
  return *this;
}

CacheKeyBuilder& CacheKeyBuilder::I32(int32_t v) {
  Tag('i');
  Raw(&v, sizeof v);
  return *this;
}

CacheKeyBuilder& CacheKeyBuilder::Bool(bool v) {
  Tag(v ? 'T' : 'F');
  return *this;
}

CacheKeyBuilder& CacheKeyBuilder::F32(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  Tag('f');
  Raw(&bits, sizeof bits);
  return *this;
}

CacheKeyBuilder& CacheKeyBuilder::Str(std::string_view s) {
  const uint64_t n = s.size();
  Tag('s');
  Raw(&n, sizeof n);
  Raw(s.data(), s.size());
  return *this;
}

CacheKeyBuilder& CacheKeyBuilder::I32s(std::span<const int32_t> v) {
  const uint64_t n = v.size();
  Tag('a');
  Raw(&n, sizeof n);
  Raw(v.data(), v.size_bytes());
  return *this;
}

uint64_t KeyHashOf(std::string_view bytes) {
  return util::Hash64(bytes, 0x4c31'6b65'7973'0001ULL);  // "L1keys", v1
}

CacheKey CacheKeyBuilder::Build() {
  CacheKey k;
  k.hash = KeyHashOf(bytes_);
  k.bytes = std::move(bytes_);
  bytes_.clear();
  return k;
}

}  // namespace strata::cache
