#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace strata::sampling {
namespace {

bool Before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

}  // namespace

util::Status Validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f && p.temperature <= 100.0f)) {
    return util::InvalidArgumentError(
        fmt::format("temperature {} is outside [0, 100]", p.temperature));
  }
  if (p.top_k < 0) return util::InvalidArgumentError(fmt::format("top_k {} is negative", p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return util::InvalidArgumentError(fmt::format("top_p {} is outside (0, 1]", p.top_p));
  }
  if (!(p.min_p >= 0.0f && p.min_p < 1.0f)) {
    return util::InvalidArgumentError(fmt::format("min_p {} is outside [0, 1)", p.min_p));
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return util::InvalidArgumentError(
        fmt::format("presence_penalty {} is outside [-2, 2]", p.presence_penalty));
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return util::InvalidArgumentError(
        fmt::format("frequency_penalty {} is outside [-2, 2]", p.frequency_penalty));
  }
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 10.0f)) {
    return util::InvalidArgumentError(
        fmt::format("repetition_penalty {} is outside (0, 10]", p.repetition_penalty));
  }
  return util::OkStatus();
}

void SortDescending(std::vector<Candidate>& c) { std::sort(c.begin(), c.end(), Before); }

void TopK(std::vector<Candidate>& c, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= c.size()) {
    SortDescending(c);
    return;
  }
  std::partial_sort(c.begin(), c.begin() + k, c.end(), Before);
  c.resize(static_cast<size_t>(k));
}

void TopP(std::vector<Candidate>& c, float p) {
  if (p >= 1.0f || c.empty()) return;
  const float mx = c.front().logit;
  double total = 0.0;
  for (const auto& x : c) total += std::exp(static_cast<double>(x.logit - mx));
  double cum = 0.0;
  for (size_t i = 0; i < c.size(); ++i) {
    cum += std::exp(static_cast<double>(c[i].logit - mx)) / total;
    if (cum >= p) {
      c.resize(i + 1);
      return;
    }
  }
}

void MinP(std::vector<Candidate>& c, float min_p) {
  if (min_p <= 0.0f || c.empty()) return;
  const float mx = c.front().logit;
  const float cutoff = mx + std::log(min_p);
  size_t keep = 1;
  while (keep < c.size() && c[keep].logit >= cutoff) ++keep;
  c.resize(keep);
}

int32_t Draw(const std::vector<Candidate>& c, float temperature, double uniform) {
  const float mx = c.front().logit;
  double total = 0.0;
  for (const auto& x : c) total += std::exp(static_cast<double>(x.logit - mx) / temperature);
  const double target = uniform * total;
  double cum = 0.0;
  for (const auto& x : c) {
    cum += std::exp(static_cast<double>(x.logit - mx) / temperature);
    if (target < cum) return x.id;
  }
  return c.back().id;
}

void ApplyPenalties(std::span<float> logits, const std::vector<std::pair<int32_t, int32_t>>& counts,
                    const SamplingParams& p) {
  for (const auto& [id, n] : counts) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size() || n <= 0) continue;
    float& l = logits[static_cast<size_t>(id)];
    if (p.repetition_penalty != 1.0f) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
    l -= p.presence_penalty + p.frequency_penalty * static_cast<float>(n);
  }
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

util::StatusOr<int32_t> Sampler::Sample(std::span<const float> logits) {
  if (logits.empty()) return util::InvalidArgumentError("sampling: empty logits");
  for (size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i]) || logits[i] == std::numeric_limits<float>::infinity()) {
      return util::InvalidArgumentError(
          fmt::format("sampling: logit of token {} is {}", i, logits[i]));
    }
  }
  if (std::all_of(logits.begin(), logits.end(),
                  [](float l) { return l == -std::numeric_limits<float>::infinity(); })) {
    return util::InvalidArgumentError("sampling: every logit is -inf");
  }
  if (!counts_.empty() && (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f ||
                           params_.repetition_penalty != 1.0f)) {
    penalized_.assign(logits.begin(), logits.end());
    ApplyPenalties(penalized_, counts_, params_);
    logits = penalized_;
  }
  // Always consume one draw per token, even when greedy, so a request's stream
  // of draws does not depend on its parameters.
  const double u = rng_.Uniform();
  const int32_t token = Choose(logits, u);
  auto it = std::find_if(counts_.begin(), counts_.end(), [&](const auto& c) { return c.first == token; });
  if (it == counts_.end()) {
    counts_.emplace_back(token, 1);
  } else {
    ++it->second;
  }
  return token;
}

int32_t Sampler::Choose(std::span<const float> logits, double u) {
  if (params_.temperature == 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i) {
      if (logits[i] > logits[best]) best = i;
    }
    return static_cast<int32_t>(best);
  }
  candidates_.clear();
  candidates_.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == -std::numeric_limits<float>::infinity()) continue;  // masked
    candidates_.push_back({static_cast<int32_t>(i), logits[i]});
  }
  TopK(candidates_, params_.top_k);
  TopP(candidates_, params_.top_p);
  MinP(candidates_, params_.min_p);
  return Draw(candidates_, params_.temperature, u);
}

}  // namespace strata::sampling
