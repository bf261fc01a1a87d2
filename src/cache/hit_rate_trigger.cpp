#include "cache/hit_rate_trigger.h"

#include <fmt/format.h>

namespace strata::cache {

util::Status HitRateTrigger::Validate(const HitRateTriggerOptions& o) {
  if (!(o.floor >= 0 && o.floor < 1)) {
    return util::InvalidArgumentError(
        fmt::format("hit-rate floor {} is outside [0, 1) (0 turns the trigger off)", o.floor));
  }
  if (o.window < 10 || o.window > 10'000'000) {
    return util::InvalidArgumentError(
        fmt::format("hit-rate window {} is outside [10, 10^7] lookups", o.window));
  }
  if (o.cooldown > 1'000'000) {
    return util::InvalidArgumentError(
        fmt::format("hit-rate cooldown {} is above 10^6 windows", o.cooldown));
  }
  return util::OkStatus();
}

HitRateTrigger::HitRateTrigger(const HitRateTriggerOptions& options) : options_(options) {}

std::optional<HitRateEvent> HitRateTrigger::Record(bool hit, bool learning) {
  if (options_.floor <= 0) return std::nullopt;
  std::lock_guard lock(mu_);
  if (learning) {  // this window does not measure the tier as it will serve
    lookups_ = 0;
    hits_ = 0;
    return std::nullopt;
  }
  ++lookups_;
  hits_ += hit ? 1 : 0;
  if (lookups_ < options_.window) return std::nullopt;
  const double r = static_cast<double>(hits_) / static_cast<double>(lookups_);
  lookups_ = 0;
  hits_ = 0;
  rate_ = r;
  if (relearning_) {
    relearning_ = false;
    cooldown_left_ = options_.cooldown;
    return HitRateEvent{HitRateEvent::Kind::kSettled, before_, r};
  }
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    return std::nullopt;
  }
  if (r >= options_.floor) return std::nullopt;
  relearning_ = true;
  before_ = r;
  ++triggers_;
  return HitRateEvent{HitRateEvent::Kind::kTriggered, r, 0};
}

std::optional<double> HitRateTrigger::rate() const {
  std::lock_guard lock(mu_);
  return rate_;
}

uint64_t HitRateTrigger::triggers() const {
  std::lock_guard lock(mu_);
  return triggers_;
}

}  // namespace strata::cache
