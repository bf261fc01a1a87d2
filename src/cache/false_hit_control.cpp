#include "cache/false_hit_control.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "util/stats.h"

namespace strata::cache {

util::Status FalseHitControl::Validate(const FalseHitOptions& o) {
  if (!(o.max_false_hit > 0 && o.max_false_hit < 1)) {
    return util::InvalidArgumentError(
        fmt::format("max false-hit rate {} is outside (0, 1)", o.max_false_hit));
  }
  if (!(o.floor > 0 && o.floor <= 1)) {
    return util::InvalidArgumentError(fmt::format("threshold floor {} is outside (0, 1]", o.floor));
  }
  if (!(o.verify_share >= 0 && o.verify_share <= 1)) {
    return util::InvalidArgumentError(
        fmt::format("verify share {} is outside [0, 1]", o.verify_share));
  }
  if (o.min_samples < 1 || o.window < o.min_samples || o.window > (1u << 20)) {
    return util::InvalidArgumentError(fmt::format(
        "verification window {} must be in [min_samples {}, 2^20]", o.window, o.min_samples));
  }
  return util::OkStatus();
}

FalseHitControl::FalseHitControl(const FalseHitOptions& options) : options_(options) {
  std::lock_guard lock(mu_);
  Update();
}

void FalseHitControl::Record(double similarity, bool agreed) {
  std::lock_guard lock(mu_);
  samples_.push_back({similarity, agreed});
  while (samples_.size() > options_.window) samples_.pop_front();
  Update();
}

void FalseHitControl::Relearn() {
  std::lock_guard lock(mu_);
  const size_t keep = options_.window / 4;
  while (samples_.size() > keep) samples_.pop_front();
  Update();
}

double FalseHitControl::threshold() const {
  std::lock_guard lock(mu_);
  return estimate_.threshold;
}

double FalseHitControl::VerifyShare() const {
  std::lock_guard lock(mu_);
  return estimate_.warming_up ? 1.0 : options_.verify_share;
}

FalseHitEstimate FalseHitControl::Estimate() const {
  std::lock_guard lock(mu_);
  return estimate_;
}

void FalseHitControl::Update() {
  // The records at or above the floor, most similar first: walking down, the
  // suffix above each candidate threshold is a prefix of this order.
  std::vector<Sample> s;
  for (const Sample& x : samples_) {
    if (x.similarity >= options_.floor) s.push_back(x);
  }
  std::sort(s.begin(), s.end(),
            [](const Sample& a, const Sample& b) { return a.similarity > b.similarity; });
  FalseHitEstimate e;
  e.threshold = options_.floor;
  e.warming_up = options_.verify_share > 0 && s.size() < options_.min_samples;
  if (!e.warming_up && options_.verify_share > 0) {
    // The lowest qualifying threshold; above 1 when none qualifies.
    e.threshold = std::nextafter(1.0, 2.0);
    size_t bad = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      bad += !s[i].agreed;
      const size_t n = i + 1;
      // Only at the last record of a run of equal similarities is t = its value.
      if (i + 1 < s.size() && s[i + 1].similarity == s[i].similarity) continue;
      if (n >= options_.min_samples &&
          static_cast<double>(bad) <= options_.max_false_hit * static_cast<double>(n)) {
        e.threshold = s[i].similarity;
      }
    }
  }
  for (const Sample& x : s) {
    if (x.similarity >= e.threshold) {
      ++e.samples;
      e.false_hits += !x.agreed;
    }
  }
  e.rate = e.samples ? static_cast<double>(e.false_hits) / static_cast<double>(e.samples) : 0.0;
  std::tie(e.lower, e.upper) = util::WilsonInterval(e.false_hits, e.samples);
  estimate_ = e;
}

}  // namespace strata::cache
