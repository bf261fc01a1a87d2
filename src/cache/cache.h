// cache — the response cache tiers (L1 exact, L3 near-duplicate; later L4/L5
// semantic), their single-flight coalescing, the one eviction framework every
// tier uses (eviction_policy.h), cache-aware admission (admission.h), and the
// shared tier that keeps L1 and L3 entries in Redis for several instances
// (shared_store.h). Knows nothing of HTTP or the engine.
//
// Promise: every key starts with the tenant, so nothing cached for one tenant
// is served to another; exact tiers return exactly what was stored for an
// identical deterministic request; approximate tiers answer only when allowed
// and mark their answers; the shared tier never fails or stalls a request
// beyond its timeout.
#pragma once

#include "cache/admission.h"
#include "cache/cache_key.h"
#include "cache/eviction_policy.h"
#include "cache/near_dup.h"
#include "cache/policy_sim.h"
#include "cache/response_cache.h"
#include "cache/shared_store.h"
#include "cache/single_flight.h"
