// cache/false_hit_control.h — keeps an approximate tier's false-hit rate
// under a bound by learning its similarity threshold from verified answers.
//
// Promise: the caller sends a sampled share of its would-be hits to the
// backend anyway and Records each one: the candidate's similarity and
// whether the fresh answer agreed with the stored one. Over the last
// `window` records, threshold() is the lowest t in [floor, 1] such that the
// records with similarity >= t number at least `min_samples` and at most
// `max_false_hit` of them disagreed; with fewer records than that at every t
// (warm-up) it is `floor` (the operator's threshold) and VerifyShare() is 1,
// so every would-be hit is verified until the estimate exists. When no t
// qualifies, threshold() is above 1: nothing is served, everything sampled
// keeps being verified, and the threshold comes back down as agreeing
// records replace the disagreeing ones. Estimate() gives the false-hit rate
// of the records at the threshold with its Wilson score interval (95 %).
// The guarantee is statistical and empirical: over the window, answers
// served at the learned threshold disagreed with a fresh answer at most
// max_false_hit of the time among those verified, and the interval says how
// sure that is; docs/api.md, "Answers of similar meaning", states it.
//
// Threading: thread-safe (one mutex; every call is short).
#pragma once

#include <cstddef>
#include <deque>
#include <mutex>

#include "util/status.h"

namespace strata::cache {

struct FalseHitOptions {
  double max_false_hit = 0.01;  // (0, 1)
  double floor = 0.9;           // the least threshold, (0, 1]
  // Share of would-be hits verified after warm-up, [0, 1]; 0 turns
  // verification off (no warm-up: the floor is served as it is).
  double verify_share = 0.05;
  size_t min_samples = 50;  // records at a threshold before it is trusted, >= 1
  size_t window = 1000;     // records kept, >= min_samples
};

struct FalseHitEstimate {
  double threshold = 0;  // as threshold()
  size_t samples = 0;    // records at or above it
  size_t false_hits = 0;
  double rate = 0;              // false_hits / samples (0 without samples)
  double lower = 0, upper = 1;  // Wilson score interval, 95 %
  bool warming_up = true;
};

class FalseHitControl {
 public:
  // InvalidArgument naming the option out of range.
  static util::Status Validate(const FalseHitOptions& options);
  explicit FalseHitControl(const FalseHitOptions& options);

  void Record(double similarity, bool agreed);
  // Re-learning (the tier's hit rate fell below its floor, hit_rate_trigger.h):
  // forgets every record but the newest quarter of the window, so the
  // threshold is learned again from recent traffic; with fewer than
  // min_samples left at the floor, warm-up resumes (every would-be hit
  // verified) until enough fresh checks came in.
  void Relearn();
  double threshold() const;
  // The share of would-be hits to verify now: 1 while warming up.
  double VerifyShare() const;
  FalseHitEstimate Estimate() const;
  const FalseHitOptions& options() const { return options_; }

 private:
  struct Sample {
    double similarity;
    bool agreed;
  };
  // Requires mu_. Recomputes threshold_ and estimate_ from samples_.
  void Update();

  const FalseHitOptions options_;
  mutable std::mutex mu_;
  std::deque<Sample> samples_;  // the last `window`, oldest first
  FalseHitEstimate estimate_;
};

}  // namespace strata::cache
