#include "cache/response_cache.h"

#include <cmath>

#include <fmt/format.h>

namespace strata::cache {

bool ShouldRefreshEarly(std::chrono::nanoseconds remaining, std::chrono::nanoseconds delta,
                        double beta, double u) {
  if (remaining <= std::chrono::nanoseconds::zero()) return true;
  if (beta <= 0 || delta <= std::chrono::nanoseconds::zero()) return false;
  // XFetch: refresh when now − beta·delta·ln(v) >= expiry, v uniform in (0, 1]
  // (1 − u keeps the logarithm finite); −ln(v) is Exp(1), hence
  // P = exp(−remaining / (beta·delta)).
  const double scale = beta * std::chrono::duration<double>(delta).count();
  return -std::log1p(-u) * scale >= std::chrono::duration<double>(remaining).count();
}

namespace {

util::Status ValidateOptions(const ResponseCacheOptions& o) {
  using util::InvalidArgumentError;
  if (o.max_bytes > (1ull << 40)) {
    return InvalidArgumentError(fmt::format("L1 max_bytes {} is above 2^40", o.max_bytes));
  }
  if (o.ttl <= std::chrono::milliseconds::zero() || o.ttl > std::chrono::hours(24 * 30)) {
    return InvalidArgumentError(fmt::format("L1 ttl {} ms is outside (0, 30 days]", o.ttl.count()));
  }
  if (!(o.ttl_jitter >= 0 && o.ttl_jitter <= 0.9)) {
    return InvalidArgumentError(fmt::format("L1 ttl_jitter {} is outside [0, 0.9]", o.ttl_jitter));
  }
  if (!(o.early_refresh_beta >= 0 && o.early_refresh_beta <= 100)) {
    return InvalidArgumentError(
        fmt::format("L1 early_refresh_beta {} is outside [0, 100]", o.early_refresh_beta));
  }
  if (o.admission.enabled) STRATA_RETURN_IF_ERROR(ValidateAdmission(o.admission));
  return util::OkStatus();
}

}  // namespace

util::StatusOr<std::unique_ptr<ResponseCache>> ResponseCache::Create(const ResponseCacheOptions& o,
                                                                     const util::Clock& clock,
                                                                     util::Rng rng,
                                                                     TierObserver* observer) {
  STRATA_RETURN_IF_ERROR(ValidateOptions(o));
  return std::unique_ptr<ResponseCache>(new ResponseCache(o, clock, std::move(rng), observer));
}

ResponseCache::ResponseCache(const ResponseCacheOptions& o, const util::Clock& clock, util::Rng rng,
                             TierObserver* observer)
    : options_(o),
      max_entry_bytes_(o.max_entry_bytes > 0 ? std::min(o.max_entry_bytes, o.max_bytes)
                                             : o.max_bytes / 8),
      clock_(clock),
      observer_(observer),
      ttl_(o.ttl),
      ttl_jitter_(o.ttl_jitter),
      admission_enabled_(o.admission.enabled),
      rng_(std::move(rng)),
      policy_(NewEvictionPolicy(o.policy, o.policy_options)),
      admission_(o.admission) {}

Lookup ResponseCache::Find(const CacheKey& key) {
  const TimePoint now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it != map_.end() && it->second.expires <= now) {
    RemoveLocked(it, RemoveReason::kExpired);
    it = map_.end();
  }
  if (it == map_.end()) {
    ++stats_.misses;
    admission_.RecordLookup(key.hash, false);
    if (observer_) observer_->OnMiss();
    return {};
  }
  admission_.RecordLookup(key.hash, true);
  Entry& e = it->second;
  policy_->Access(e.id, now);
  Lookup out;
  out.value = e.value;
  if (options_.early_refresh_beta > 0 &&
      ShouldRefreshEarly(e.expires - now, e.compute_time, options_.early_refresh_beta,
                         rng_.Uniform())) {
    out.kind = Lookup::Kind::kRefresh;  // answered by a new computation: a miss
    ++stats_.early_refreshes;
    ++stats_.misses;
    if (observer_) {
      observer_->OnMiss();
      observer_->OnEarlyRefresh();
    }
  } else {
    out.kind = Lookup::Kind::kHit;
    ++stats_.hits;
    if (observer_) observer_->OnHit();
  }
  return out;
}

std::shared_ptr<const CachedValue> ResponseCache::Peek(const CacheKey& key) const {
  const TimePoint now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end() || it->second.expires <= now) return nullptr;
  return it->second.value;
}

bool ResponseCache::Insert(const CacheKey& key, std::shared_ptr<const CachedValue> value,
                           std::chrono::nanoseconds compute_time,
                           std::optional<std::chrono::nanoseconds> ttl_override) {
  STRATA_CHECK_MSG(value != nullptr, "L1: null value inserted");
  const uint64_t bytes = key.bytes.size() + value->ByteSize() + kEntryOverheadBytes;
  const TimePoint now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes > max_entry_bytes_) {
    ++stats_.rejected;
    return false;
  }
  auto old = map_.find(key);
  const bool replacing = old != map_.end() && old->second.expires > now;
  // Expired entries go first; then, if it still needs room, a new entry must
  // pass the admission gate before the policy's victims make that room.
  if (stats_.bytes + bytes > options_.max_bytes) DropExpiredLocked(now);
  old = map_.find(key);
  const uint64_t freed = old != map_.end() ? old->second.bytes : 0;
  if (!replacing && admission_enabled_ && stats_.bytes - freed + bytes > options_.max_bytes &&
      !admission_.Admit(key.hash, stats_.entries, rng_.Uniform())) {
    ++stats_.not_admitted;
    return false;
  }
  if (old != map_.end()) RemoveLocked(old, RemoveReason::kReplaced);
  while (stats_.bytes + bytes > options_.max_bytes) {
    const std::optional<uint64_t> victim = policy_->Victim(now);
    STRATA_CHECK_MSG(victim.has_value(), "L1: over budget with nothing to evict");
    RemoveLocked(map_.find(*by_id_.at(*victim)), RemoveReason::kEvicted);
  }
  const double jitter = ttl_jitter_ * (2.0 * rng_.Uniform() - 1.0);
  const auto ttl = ttl_override ? *ttl_override
                                : std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::duration<double>(ttl_) * (1.0 + jitter));
  Entry e;
  e.id = next_id_++;
  e.value = std::move(value);
  e.bytes = bytes;
  e.expires = now + ttl;
  e.compute_time = compute_time;
  auto [it, inserted] = map_.emplace(key, std::move(e));
  STRATA_CHECK(inserted);
  by_id_.emplace(it->second.id, &it->first);
  by_expiry_.emplace(it->second.expires, it->second.id);
  policy_->Insert(it->second.id, bytes, now);
  stats_.bytes += bytes;
  ++stats_.entries;
  ++stats_.stores;
  if (observer_) observer_->OnStore(bytes);
  return true;
}

bool ResponseCache::Erase(const CacheKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  RemoveLocked(it, RemoveReason::kErased);
  return true;
}

void ResponseCache::ForEach(const std::function<void(const CacheKey&, const CachedValue&,
                                                     std::chrono::nanoseconds)>& fn) const {
  std::lock_guard<std::mutex> lock(mu_);
  const TimePoint now = clock_.Now();
  for (const auto& [key, e] : map_) {
    if (e.expires > now) fn(key, *e.value, e.expires - now);
  }
}

size_t ResponseCache::EraseIf(
    const std::function<bool(const CacheKey&, const CachedValue&)>& match) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto it = map_.begin(); it != map_.end();) {
    auto next = std::next(it);
    if (match(it->first, *it->second.value)) {
      RemoveLocked(it, RemoveReason::kErased);
      ++n;
    }
    it = next;
  }
  return n;
}

util::Status ResponseCache::Reconfigure(std::chrono::milliseconds ttl, double ttl_jitter,
                                        bool admission) {
  ResponseCacheOptions check = options_;
  check.ttl = ttl;
  check.ttl_jitter = ttl_jitter;
  check.admission.enabled = admission;
  STRATA_RETURN_IF_ERROR(ValidateOptions(check));
  std::lock_guard<std::mutex> lock(mu_);
  ttl_ = ttl;
  ttl_jitter_ = ttl_jitter;
  admission_enabled_ = admission;
  return util::OkStatus();
}

ResponseCacheStats ResponseCache::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void ResponseCache::RemoveLocked(Map::iterator it, RemoveReason reason) {
  const Entry& e = it->second;
  policy_->Erase(e.id);
  by_expiry_.erase({e.expires, e.id});
  by_id_.erase(e.id);
  stats_.bytes -= e.bytes;
  --stats_.entries;
  if (reason == RemoveReason::kEvicted) ++stats_.evictions;
  if (reason == RemoveReason::kExpired) ++stats_.expirations;
  const uint64_t bytes = e.bytes;
  map_.erase(it);
  if (observer_) observer_->OnRemove(bytes, reason);
}

void ResponseCache::DropExpiredLocked(TimePoint now) {
  while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
    const uint64_t id = by_expiry_.begin()->second;
    RemoveLocked(map_.find(*by_id_.at(id)), RemoveReason::kExpired);
  }
}

}  // namespace strata::cache
