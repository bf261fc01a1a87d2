// The response tiers' part of the gateway: which tier may answer a request
// (L1, the shared tier, L3), the L1 key, and what a finished flight stores.
// Gateway::Start (gateway.cpp) decides whether a request is cacheable and
// runs the single-flight table; this file holds the lookups and the stores.
#include <algorithm>

#include "gateway/gateway.h"
#include "gateway/internal/flight.h"
#include "gateway/internal/near_dup_request.h"

namespace strata::gateway {

std::optional<cache::ResponseCacheStats> Gateway::l1_stats() const {
  if (!tier_->l1) return std::nullopt;
  return tier_->l1->Stats();
}

std::optional<cache::NearDupStats> Gateway::l3_stats() const {
  if (!tier_->l3) return std::nullopt;
  return tier_->l3->stats();
}

std::optional<cache::SharedStoreStats> Gateway::shared_stats() const {
  if (!tier_->shared) return std::nullopt;
  return tier_->shared->stats();
}

bool Gateway::StartIsCpuBound() const { return tier_->shared == nullptr; }

bool Gateway::FlushShared(std::chrono::milliseconds timeout) {
  return !tier_->shared || tier_->shared->Flush(timeout);
}

bool Gateway::L3Allowed(const CompletionRequest& r) const {
  if (!tier_->l3) return false;
  if (r.l3) return *r.l3;  // the request's own word, in opt-in and on alike
  if (options_.l3_mode == L3Mode::kOn) return true;
  return std::find(options_.l3_tenants.begin(), options_.l3_tenants.end(), r.tenant) !=
         options_.l3_tenants.end();
}

cache::CacheKey Gateway::ResponseKey(const CompletionRequest& r, const std::vector<int32_t>& tokens,
                                     int32_t max_tokens,
                                     const std::vector<std::string>& stops) const {
  constexpr uint64_t kKeyVersion = 1;  // bump when the meaning of any field changes
  cache::CacheKeyBuilder b(r.tenant);
  b.U64(kKeyVersion).U64(model_.fingerprint()).I32s(tokens);
  b.I32(max_tokens).I32(r.n).I32(r.top_logprobs).Bool(r.ignore_eos);
  // The stop strings: the request's own, then the template's turn ends.
  b.I64(static_cast<int64_t>(stops.size())).I64(static_cast<int64_t>(r.stop.size()));
  for (const std::string& s : stops) b.Str(s);
  AppendSamplingParams(b, r.sampling);  // every field (a static_assert guards the list)
  return b.Build();
}

std::unique_ptr<Generation> Gateway::FindCached(const CompletionRequest& r,
                                                const cache::CacheKey& key,
                                                const NearDupRequest* near, bool use_l1,
                                                int32_t n_prompt, bool* refresh) {
  const cache::SharedScope scope{r.tenant, model_.fingerprint()};
  cache::SharedStore* shared = tier_->shared.get();
  if (use_l1) {
    const cache::Lookup found = tier_->l1->Find(key);
    if (found.kind == cache::Lookup::Kind::kHit) {
      log_.Debug("[{}] tenant={} L1 hit", r.request_id, r.tenant);
      return std::make_unique<ReplayGeneration>(
          std::static_pointer_cast<const StoredResponse>(found.value));
    }
    *refresh = found.kind == cache::Lookup::Kind::kRefresh;
    // Another instance may have it. (Redis I/O on this request's thread,
    // bounded by the shared tier's timeout.) The copy keeps Redis's TTL.
    if (!*refresh && shared) {
      if (auto hit = shared->GetExact(scope, key)) {
        tier_->remote_hits[0]->Inc();
        tier_->l1->Insert(key, hit->value, std::chrono::nanoseconds::zero(), hit->ttl_left);
        log_.Debug("[{}] tenant={} L1 hit in the shared tier", r.request_id, r.tenant);
        return std::make_unique<ReplayGeneration>(
            std::static_pointer_cast<const StoredResponse>(hit->value));
      }
      tier_->remote_misses[0]->Inc();
    }
  }
  if (near && !*refresh) {
    if (auto match = tier_->l3->Lookup(near->ns, near->text); match && match->value) {
      log_.Debug("[{}] tenant={} L3 hit, similarity {:.3f}", r.request_id, r.tenant,
                 match->similarity);
      return std::make_unique<ReplayGeneration>(
          std::static_pointer_cast<const StoredResponse>(match->value), match->similarity,
          n_prompt);
    }
    if (shared) {
      if (auto hit = shared->FindNear(scope, near->scope, near->text)) {
        tier_->remote_hits[1]->Inc();
        (void)tier_->l3->Insert(near->ns, near->text, key.hash, hit->value);
        log_.Debug("[{}] tenant={} L3 hit in the shared tier, similarity {:.3f}", r.request_id,
                   r.tenant, hit->similarity);
        return std::make_unique<ReplayGeneration>(
            std::static_pointer_cast<const StoredResponse>(hit->value), hit->similarity, n_prompt);
      }
      tier_->remote_misses[1]->Inc();
    }
  }
  return nullptr;
}

Flight::Hook Gateway::StoreHook(const CompletionRequest& r, int32_t n_prompt, bool use_l1,
                                std::shared_ptr<const NearDupRequest> near) const {
  // Runs on the scheduler thread. In this order: a request that finds no
  // flight under the single-flight table's lock then finds the answer in L1.
  // With a shared tier, the answer is also queued for Redis (never blocking:
  // the shared store's writer thread writes it).
  const std::chrono::nanoseconds l1_ttl = options_.l1.ttl;
  const std::chrono::nanoseconds l3_ttl =
      options_.l3.ttl.count() > 0 ? std::chrono::nanoseconds(options_.l3.ttl) : l1_ttl;
  return [tier = tier_, n_choices = r.n, n_prompt, clock = &clock_, use_l1, near = std::move(near),
          scope = cache::SharedScope{r.tenant, model_.fingerprint()}, l1_ttl,
          l3_ttl](const Flight& f, bool succeeded, const std::vector<Event>& log) {
    if (succeeded && (use_l1 || near)) {
      auto stored = std::make_shared<StoredResponse>(log, n_choices, n_prompt);
      if (use_l1) {
        tier->l1->Insert(f.key(), stored, clock->Now() - f.started());
        if (tier->shared) tier->shared->PutExact(scope, f.key(), stored, l1_ttl);
      }
      if (near) {
        // Too large for the L3 budget: not stored (ResourceExhausted), nothing else changes.
        (void)tier->l3->Insert(near->ns, near->text, f.key().hash, stored);
        if (tier->shared) {
          tier->shared->PutNear(scope, near->scope,
                                std::shared_ptr<const cache::NearDupText>(near, &near->text),
                                stored, l3_ttl);
        }
      }
    }
    tier->flights.Finish(f.key(), &f);
  };
}

}  // namespace strata::gateway
