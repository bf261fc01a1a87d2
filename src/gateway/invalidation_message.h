// gateway/invalidation_message.h — an invalidation (Gateway::Invalidate) as
// other instances read it from the shared tier's invalidation feed
// (cache/shared_feed.h).
//
// Format (version 01): one "name=value" line per field set, the value
// hex-encoded (any bytes): v (the version, not hex), tenant, model,
// version (the fingerprint as 16 hex digits), prefix, key and key_hash (an
// exact request's L1 key), tokens (its prompt tokens, comma-separated, for
// L2), reason. Decode treats its input as untrusted (it comes from Redis):
// DataLoss naming the problem for a missing version line, a bad hex value
// or number, a key without its hash, or a message that selects nothing;
// unknown fields (a later release's) are skipped.
//
// Threading: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cache_key.h"
#include "util/status.h"

namespace strata::gateway {

// What goes: every field set must hold (at least one is set).
struct InvalidationMessage {
  std::optional<std::string> tenant;
  std::optional<std::string> model;                   // a backend's name
  std::optional<uint64_t> fingerprint;                // a backend's fingerprint (the model version)
  std::optional<std::string> prefix;                  // the prompt text starts with it
  std::optional<cache::CacheKey> key;                 // an exact request's L1 key
  std::optional<std::vector<int32_t>> prompt_tokens;  // ... and its prompt, for L2
  std::string reason;
};

std::string EncodeInvalidationMessage(const InvalidationMessage& m);
util::StatusOr<InvalidationMessage> DecodeInvalidationMessage(std::string_view text);

}  // namespace strata::gateway
