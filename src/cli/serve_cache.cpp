#include "cli/serve_cache.h"

#include <fmt/format.h>

#include <sstream>

#include "net/redis.h"

namespace strata::cli {

void RegisterCacheFlags(CLI::App& cmd, CacheFlags& f) {
  cmd.add_option("--l3", f.l3,
                 "Near-duplicate answers (L3): off; opt-in = only requests with "
                 "\"cache\": {\"l3\": true} and tenants in --l3-tenants; on = every request "
                 "that does not refuse")
      ->capture_default_str();
  cmd.add_option("--l3-tenants", f.l3_tenants,
                 "Comma-separated tenants that get L3 answers without asking (with --l3 opt-in)");
  cmd.add_option("--l3-bytes", f.l3_bytes, "L3 budget in bytes (entries and their answers)")
      ->capture_default_str();
  cmd.add_option("--l3-ttl", f.l3_ttl_s, "Seconds an L3 entry lives (jittered as --l1-ttl-jitter)")
      ->capture_default_str();
  cmd.add_option("--l3-similarity", f.l3_similarity,
                 "Least similarity of a near-duplicate (weighted LCS of the normalized words)")
      ->capture_default_str();
  cmd.add_option("--redis", f.redis,
                 "Share L1 and L3 with other instances through Redis at HOST:PORT (or "
                 "redis://HOST:PORT); losing it never fails a request");
  cmd.add_option("--redis-timeout-ms", f.redis_timeout_ms,
                 "Milliseconds a Redis connect or command may take before the request goes on "
                 "without it")
      ->capture_default_str();
  cmd.add_option("--admission", f.admission,
                 "Cache-aware admission for full L1/L3 tiers: on | off (off stores every "
                 "answer that fits)")
      ->capture_default_str();
}

util::Status ApplyCacheFlags(const CacheFlags& f, double ttl_jitter, uint64_t seed,
                             gateway::GatewayOptions& go) {
  const auto mode = gateway::ParseL3Mode(f.l3);
  if (!mode)
    return util::InvalidArgumentError(fmt::format("--l3 '{}' is not off, opt-in or on", f.l3));
  if (f.admission != "on" && f.admission != "off") {
    return util::InvalidArgumentError(
        fmt::format("--admission '{}' is not on or off", f.admission));
  }
  if (f.l3_bytes < 4096 || f.l3_bytes > (1ull << 40)) {
    return util::InvalidArgumentError(
        fmt::format("--l3-bytes {} is outside [4096, 2^40]", f.l3_bytes));
  }
  if (!(f.l3_ttl_s >= 1 && f.l3_ttl_s <= 30 * 86400)) {
    return util::InvalidArgumentError(
        fmt::format("--l3-ttl {} is outside [1, 2592000] seconds", f.l3_ttl_s));
  }
  if (!(f.l3_similarity > 0 && f.l3_similarity <= 1)) {
    return util::InvalidArgumentError(
        fmt::format("--l3-similarity {} is outside (0, 1]", f.l3_similarity));
  }
  go.l3_mode = *mode;
  go.l3_tenants.clear();
  std::stringstream ss(f.l3_tenants);
  std::string t;
  while (std::getline(ss, t, ',')) {
    if (!t.empty()) go.l3_tenants.push_back(t);
  }
  go.l3.max_bytes = static_cast<size_t>(f.l3_bytes);
  go.l3.ttl = std::chrono::seconds(static_cast<int64_t>(f.l3_ttl_s));
  go.l3.ttl_jitter = ttl_jitter;
  go.l3.min_similarity = f.l3_similarity;
  go.l3_seed = seed ^ 0x4c33'7365'6564ULL;
  const bool admit = f.admission == "on";
  go.l1.admission.enabled = admit;
  go.l3.admission.enabled = admit;
  if (f.redis_timeout_ms < 1 || f.redis_timeout_ms > 10000) {
    return util::InvalidArgumentError(
        fmt::format("--redis-timeout-ms {} is outside [1, 10000]", f.redis_timeout_ms));
  }
  go.shared.reset();
  if (!f.redis.empty()) {
    auto address = net::ParseRedisAddress(f.redis);
    if (!address.ok()) return util::InvalidArgumentError("--redis: " + address.status().message());
    cache::SharedStoreOptions so;
    so.host = address->first;
    so.port = address->second;
    so.timeout = std::chrono::milliseconds(f.redis_timeout_ms);
    so.ttl_jitter = ttl_jitter;
    go.shared = so;
  }
  return util::OkStatus();
}

std::string DescribeCacheFlags(const CacheFlags& f, const gateway::GatewayOptions& go) {
  std::string tenants;
  for (const auto& t : go.l3_tenants) tenants += (tenants.empty() ? "" : ",") + t;
  const std::string shared =
      go.shared ? fmt::format("; shared tier: redis {}:{} (timeout {} ms)", go.shared->host,
                              go.shared->port, go.shared->timeout.count())
                : "; shared tier: off";
  if (go.l3_mode == gateway::L3Mode::kOff) {
    return fmt::format("near-duplicate cache (L3): off; admission {}{}", f.admission, shared);
  }
  return fmt::format(
      "near-duplicate cache (L3): {}{}, {:.1f} MiB, TTL {} s, similarity >= {}; admission {}{}",
      gateway::L3ModeName(go.l3_mode), tenants.empty() ? "" : " (by default for " + tenants + ")",
      static_cast<double>(f.l3_bytes) / (1 << 20), f.l3_ttl_s, f.l3_similarity, f.admission,
      shared);
}

}  // namespace strata::cli
