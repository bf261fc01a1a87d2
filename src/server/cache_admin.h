// server/cache_admin.h — the body of DELETE /v1/cache, parsed into what
// gateway::Gateway::Invalidate removes.
//
// Promise: {"tenant", "model", "model_version" (16 hex digits: a model's
// fingerprint), "prompt_prefix", "request" (a chat completion body with
// "messages" or a completion body with "prompt", keyed for "tenant", or the
// default tenant), "reason" (at most 256 bytes)}. Unknown fields and
// fields of the wrong type are InvalidArgument naming the field, so a
// misspelt selector never widens an invalidation; whether anything is
// selected at all is the gateway's check.
//
// Threading: a pure function.
#pragma once

#include <string_view>

#include "gateway/gateway.h"
#include "util/status.h"

namespace strata::server {

util::StatusOr<gateway::Invalidation> ParseInvalidationBody(std::string_view body);

}  // namespace strata::server
