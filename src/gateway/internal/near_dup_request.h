// gateway/internal/near_dup_request.h — what the L3 tier compares of a
// request, and the namespace it may look in (private to gateway/).
//
// Everything that changes the answer except the wording of the request must
// match exactly, so it goes into the namespace: the tenant, the model
// fingerprint, the endpoint kind (chat or completion), every earlier message
// of a chat verbatim (system prompt and history) and the role of the last,
// max_tokens as the request gave it, n, the logprobs request, ignore_eos, the
// stop strings and every sampling parameter. Only the text is compared
// approximately: a chat's last message, or a completion's prompt, prepared
// by cache::PrepareNearDupText (normalized words, weighted SimHash).
//
// Threading: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cache/cache_key.h"
#include "cache/near_dup.h"
#include "gateway/gateway.h"

namespace strata::gateway {

struct NearDupRequest {
  std::string tenant;
  std::string scope;  // 32 hex digits: 128-bit hash of everything that must match exactly
  std::string ns;     // cache::NearDupNamespace(tenant, scope)
  cache::NearDupText text;
  std::string raw;  // the compared text as the request gave it (for an encoder)
};

// Writes every SamplingParams field into `b` (shared by the L1 key and the L3
// namespace; a static_assert there catches a new field).
void AppendSamplingParams(cache::CacheKeyBuilder& b, const sampling::SamplingParams& p);

// The L3 view of `r` with its effective stop strings (the request's, then the
// template's turn ends); nullopt when its text has nothing L3 can compare
// (no words, invalid UTF-8, too long). `fingerprint` is the backend's; a
// `remote` backend's scope also holds which sampling fields the client set
// and its cache breakpoints (both change what the upstream is sent).
std::optional<NearDupRequest> MakeNearDupRequest(const CompletionRequest& r, uint64_t fingerprint,
                                                 const std::vector<std::string>& stops,
                                                 const cache::PrepareOptions& prepare, bool remote);

}  // namespace strata::gateway
