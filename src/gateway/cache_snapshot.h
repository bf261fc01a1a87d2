// gateway/cache_snapshot.h — a running instance's cache tiers as bytes, so
// that a new instance starts warm (`strata cache export`, `strata serve
// --warm-from`; docs/api.md, "Cache warm-up").
//
// Promise: the snapshot holds the live entries of L1, L3 and the semantic
// tier with the time each has left, and the local engines' shared cached
// prompt prefixes (L2) with their cache namespaces. Format
// (docs/formats/cache-snapshot.md): "SCS1", u32 version 1, then records
// until the end: u8 kind, u32 length, body. Reading treats the bytes as
// untrusted: a record that does not decode is DataLoss naming it, and
// nothing of the snapshot is applied then; unknown kinds (a later
// release's) are skipped.
//
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace strata::gateway {

struct CacheSnapshotRecord {
  enum class Kind : uint8_t { kL1 = 1, kL2 = 2, kL3 = 3, kSemantic = 5 };
  Kind kind = Kind::kL1;
  // kL1: the key's bytes and hash; kL3: the namespace and prepared text
  // (EncodeNearDupText), its payload; kSemantic: the semantic tier's own
  // encoding (SemanticIndex::Encode) in `value`; kL2: the backend's name and
  // fingerprint, the cache namespace and the tokens.
  std::string key;
  uint64_t hash = 0;
  std::string text;
  std::string value;              // the answer as the stored codec encodes it (kL1, kL3)
  std::optional<int64_t> ttl_ms;  // kL1, kL3: what was left (nullopt: no TTL)
  std::string model;
  uint64_t fingerprint = 0;
  uint64_t cache_namespace = 0;
  std::vector<int32_t> tokens;
};

std::string EncodeCacheSnapshot(const std::vector<CacheSnapshotRecord>& records);
util::StatusOr<std::vector<CacheSnapshotRecord>> DecodeCacheSnapshot(std::string_view bytes);

}  // namespace strata::gateway
