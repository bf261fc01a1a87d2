// cli/serve_cache.h — the `strata serve` flags of the L3 near-duplicate tier,
// cache-aware admission and the shared tier (Redis), and how they fill the
// gateway's options.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "gateway/gateway.h"
#include "util/status.h"

namespace strata::cli {

struct CacheFlags {
  std::string l3 = "opt-in";        // off | opt-in | on
  std::string l3_tenants;           // comma-separated: L3 by default for these tenants
  uint64_t l3_bytes = 64ull << 20;  // bytes of entries and answers
  double l3_ttl_s = 600;            // seconds (before jitter)
  double l3_similarity = cache::kDefaultNearDupSimilarity;
  std::string admission = "on";   // on | off, both tiers
  std::string redis;              // HOST:PORT or redis://HOST:PORT; empty = no shared tier
  int32_t redis_timeout_ms = 50;  // [1, 10000] connect and each command
};

void RegisterCacheFlags(CLI::App& cmd, CacheFlags& flags);

// Fills the L3, admission and shared-tier parts of `go` (TTL jitter as L1's,
// `seed` for the L3's draws). InvalidArgument naming the flag that is out of
// range.
util::Status ApplyCacheFlags(const CacheFlags& flags, double ttl_jitter, uint64_t seed,
                             gateway::GatewayOptions& go);

// One line for the start-up log.
std::string DescribeCacheFlags(const CacheFlags& flags, const gateway::GatewayOptions& go);

}  // namespace strata::cli
