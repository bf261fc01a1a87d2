// The semantic tier's side jobs in the response tiers: verification of
// would-be hits, the hit-rate trigger's re-learning, and the entries other
// instances share through Redis (internal/response_tiers.h).
#include <fmt/format.h>

#include "gateway/internal/response_tiers.h"

namespace strata::gateway {

bool ResponseTiers::AdoptSemantic(std::string_view key) {
  auto e = shared_->GetSemantic(key, options_.semantic_encoder->fingerprint());
  if (!e) return false;  // gone, another encoder's, or damaged (counted by the store)
  auto st = semantic_->Insert(e->ns, e->vector, e->text.get(), e->payload, e->value, e->ttl_left);
  if (!st.ok()) return false;
  semantic_adopted_->Inc();
  return true;
}

void ResponseTiers::AdoptStoredSemantic(const std::vector<uint64_t>& models) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  size_t adopted = 0;
  for (uint64_t model : models) {
    for (const std::string& key :
         shared_->SemanticKeys(model, options_.semantic_encoder->fingerprint(),
                               options_.semantic.max_entries, deadline)) {
      adopted += AdoptSemantic(key) ? 1 : 0;
    }
  }
  if (adopted > 0) log_.Info("semantic tier: {} entries adopted from the shared tier", adopted);
}

void ResponseTiers::RecordSemanticLookup(bool served) {
  const bool learning = false_hits_->Estimate().warming_up;
  const std::optional<cache::HitRateEvent> event = hit_trigger_->Record(served, learning);
  if (!event) return;
  const double threshold = false_hits_->threshold();
  if (event->kind == cache::HitRateEvent::Kind::kTriggered) {
    // Stale thresholds and lists: learn them again from what comes now.
    // (This request's thread pays for the retraining; it happens at most
    // once per trigger window.)
    false_hits_->Relearn();
    {
      std::lock_guard lock(relearn_mu_);
      relearned_ = {event->before, 0, threshold, 0};
    }
    relearns_->Inc();
    log_.Warn(
        "semantic tier: hit rate {:.3f} over the last {} lookups is below the floor {:.3f}: "
        "re-learning its threshold ({:.3f}) from recent checks and retraining its "
        "nearest-neighbour lists",
        event->before, hit_trigger_->options().window, hit_trigger_->options().floor, threshold);
    // The lists are retrained on another thread (training is most of an
    // IVF build's time); the previous retraining, if any, ended long ago (a
    // trigger needs a full window and a cooldown after it).
    std::lock_guard lock(retrain_mu_);
    if (retrainer_.joinable()) retrainer_.join();
    retrainer_ = std::thread([this] {
      const size_t n = semantic_->Retrain();
      log_.Info("semantic tier: nearest-neighbour lists of {} namespaces retrained", n);
    });
    return;
  }
  double before = 0;
  {
    std::lock_guard lock(relearn_mu_);
    relearned_.rate_after = event->after;
    relearned_.threshold_after = threshold;
    before = relearned_.threshold_before;
  }
  log_.Info("semantic tier re-learned: hit rate {:.3f} -> {:.3f}, threshold {:.3f} -> {:.3f}",
            event->before, event->after, before, threshold);
}

namespace {

// Each choice's text, in choice order.
std::vector<std::string> ChoiceTexts(const std::vector<Event>& events) {
  std::vector<std::string> out;
  for (const Event& e : events) {
    if (e.kind != Event::Kind::kDelta || e.index < 0 || e.index > 1024) continue;
    if (out.size() <= static_cast<size_t>(e.index)) out.resize(static_cast<size_t>(e.index) + 1);
    out[static_cast<size_t>(e.index)] += e.text;
  }
  return out;
}

}  // namespace

void ResponseTiers::Verify(double similarity, const StoredResponse& stored,
                           const std::vector<Event>& fresh) {
  const std::vector<std::string> a = ChoiceTexts(stored.events()), b = ChoiceTexts(fresh);
  bool agreed = a.size() == b.size();
  for (size_t i = 0; agreed && i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    // The similarity judge: L3's measure of the two answers (guards included).
    auto pa = cache::PrepareNearDupText(a[i]);
    auto pb = cache::PrepareNearDupText(b[i]);
    agreed = pa.ok() && pb.ok() &&
             cache::ScorePair(*pa, *pb).similarity >= options_.semantic_judge_similarity;
  }
  false_hits_->Record(similarity, agreed);
  verified_[agreed ? 0 : 1]->Inc();
}

}  // namespace strata::gateway
