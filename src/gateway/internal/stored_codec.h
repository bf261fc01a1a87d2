// gateway/internal/stored_codec.h — a stored generation (StoredResponse) as
// bytes, for the shared tier (cache/shared_store.h); private to gateway/.
//
// Format (version 4, every integer little-endian, strings as u32 length +
// bytes): "SR1\x04", i32 n_choices, i32 prompt_tokens, the origin (str
// tenant, str model, u32 fingerprint low, u32 high, str prompt text), u32 events, then per
// event: u8 kind, i32 index, str text, u32 logprobs × (str text, str bytes,
// f32 logprob, i32 token id, u32 top × (str text, f32 logprob)), u32 tool calls × (i32
// index, str id, str name, str arguments), u8 finish, str stop sequence,
// i32 prompt, cached and completion tokens. Another version is refused (a
// miss), so instances of two releases can share one Redis.
//
// Decode treats its input as untrusted (it comes from Redis): every length
// is checked against what is left, enums against their ranges, every event's
// choice index against n_choices, and each choice must end with exactly one
// finish and nothing after it, so a replay can never index out of bounds or
// stall. Only successful generations are stored, so every status is OK.
//
// Threading: StoredResponseCodec is stateless; thread-safe.
#pragma once

#include "cache/shared_store.h"

namespace strata::gateway {

class StoredResponseCodec final : public cache::ValueCodec {
 public:
  std::string Encode(const cache::CachedValue& value) const override;
  util::StatusOr<std::shared_ptr<const cache::CachedValue>> Decode(
      std::string_view bytes) const override;
};

}  // namespace strata::gateway
