#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "sampling/internal/fast_exp.h"
#include "sampling/internal/vector_math.h"

namespace strata::sampling {
namespace {

util::Status OutOfRange(const char* name, float value, const char* range) {
  return util::InvalidArgumentError(fmt::format("{} {} is outside {}", name, value, range));
}

}  // namespace

util::Status Validate(const SamplingParams& p) {
  if (!(p.temperature >= 0.0f && p.temperature <= 100.0f)) {
    return OutOfRange("temperature", p.temperature, "[0, 100]");
  }
  if (p.top_k < 0) return util::InvalidArgumentError(fmt::format("top_k {} is negative", p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return OutOfRange("top_p", p.top_p, "(0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p < 1.0f)) return OutOfRange("min_p", p.min_p, "[0, 1)");
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return OutOfRange("presence_penalty", p.presence_penalty, "[-2, 2]");
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return OutOfRange("frequency_penalty", p.frequency_penalty, "[-2, 2]");
  }
  if (!(p.repetition_penalty > 0.0f && p.repetition_penalty <= 10.0f)) {
    return OutOfRange("repetition_penalty", p.repetition_penalty, "(0, 10]");
  }
  if (!(p.typical_p > 0.0f && p.typical_p <= 1.0f))
    return OutOfRange("typical_p", p.typical_p, "(0, 1]");
  if (std::isnan(p.target_entropy) || p.target_entropy > 100.0f) {
    return OutOfRange("target_entropy", p.target_entropy, "[0, 100] (or < 0 for off)");
  }
  if (!(p.entropy_tail_nats >= 0.05f && p.entropy_tail_nats <= 20.0f)) {
    return OutOfRange("entropy_tail_nats", p.entropy_tail_nats, "[0.05, 20]");
  }
  if (!(p.mirostat_tau_bits > 0.0f && p.mirostat_tau_bits <= 40.0f)) {
    return OutOfRange("mirostat_tau_bits", p.mirostat_tau_bits, "(0, 40]");
  }
  if (!(p.mirostat_eta > 0.0f && p.mirostat_eta <= 1.0f)) {
    return OutOfRange("mirostat_eta", p.mirostat_eta, "(0, 1]");
  }
  if (p.mirostat && p.target_entropy >= 0.0f) {
    return util::InvalidArgumentError(
        fmt::format("mirostat and target_entropy {} are exclusive: both set the temperature",
                    p.target_entropy));
  }
  if (p.logit_bias.size() > kMaxLogitBias) {
    return util::InvalidArgumentError(
        fmt::format("logit_bias has {} entries, at most {}", p.logit_bias.size(), kMaxLogitBias));
  }
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const auto& [id, bias] = p.logit_bias[i];
    if (id < 0)
      return util::InvalidArgumentError(fmt::format("logit_bias token {} is negative", id));
    if (i > 0 && id <= p.logit_bias[i - 1].first) {
      return util::InvalidArgumentError("logit_bias must be sorted by token id, each id once");
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return util::InvalidArgumentError(
          fmt::format("logit_bias of token {}: {} is outside [-100, 100]", id, bias));
    }
  }
  return util::OkStatus();
}

Sampler::Sampler(const SamplingParams& params)
    : params_(params), rng_(params.seed), mu_bits_(2.0f * params.mirostat_tau_bits) {}

util::StatusOr<int32_t> Sampler::Sample(std::span<const float> logits) {
  STRATA_ASSIGN_OR_RETURN(StepReport r, SampleWithReport(logits));
  return r.token;
}

util::StatusOr<StepReport> Sampler::SampleWithReport(std::span<const float> logits) {
  if (logits.empty()) return util::InvalidArgumentError("sampling: empty logits");
  if (!params_.logit_bias.empty()) {
    if (params_.logit_bias.back().first >= static_cast<int32_t>(logits.size())) {
      return util::InvalidArgumentError(
          fmt::format("sampling: logit_bias names token {}, the logits have {}",
                      params_.logit_bias.back().first, logits.size()));
    }
    biased_.assign(logits.begin(), logits.end());
    for (const auto& [id, bias] : params_.logit_bias) {
      float& l = biased_[static_cast<size_t>(id)];
      l = bias <= -100.0f ? -std::numeric_limits<float>::infinity() : l + bias;
    }
    logits = biased_;
  }
  const internal::LogitScan scan = internal::ScanLogits(logits);
  if (scan.invalid) {
    for (size_t i = 0; i < logits.size(); ++i) {
      if (std::isnan(logits[i]) || (std::isinf(logits[i]) && logits[i] > 0)) {
        return util::InvalidArgumentError(
            fmt::format("sampling: logit of token {} is {}", i, logits[i]));
      }
    }
  }
  if (!scan.any_finite) return util::InvalidArgumentError("sampling: every logit is -inf");

  // Always consume one draw per token, even when greedy, so a request's stream
  // of draws does not depend on its parameters.
  const double u = rng_.Uniform();
  const SamplingParams& p = params_;
  const Penalties pen{.repetition = p.repetition_penalty,
                      .presence = p.presence_penalty,
                      .frequency = p.frequency_penalty};
  const bool penalise =
      !counts_.empty() && (pen.repetition != 1.0f || pen.presence != 0.0f || pen.frequency != 0.0f);
  StepReport r;
  if (p.temperature == 0.0f) {
    r.temperature = 0;
    if (!penalise) {
      for (size_t i = 0; i < logits.size(); ++i) {  // the first index holding the max
        if (logits[i] == scan.max) {
          r.token = static_cast<int32_t>(i);
          break;
        }
      }
    } else {
      Candidates c = ApplyPenalties(FromLogits(logits, std::move(scratch_)), counts_, pen);
      r.token = std::min_element(c.items.begin(), c.items.end(), Before)->id;
      scratch_ = std::move(c);
    }
  } else {
    Candidates c = FromLogits(logits, std::move(scratch_));
    if (penalise) c = ApplyPenalties(std::move(c), counts_, pen);
    c = TopK(std::move(c), p.top_k);
    c = TopP(std::move(c), p.top_p);
    c = MinP(std::move(c), p.min_p);
    c = TypicalP(std::move(c), p.typical_p);
    if (p.target_entropy >= 0.0f) {
      EntropyTargetResult e = EntropyTarget(std::move(c), p.target_entropy, p.entropy_tail_nats);
      c = std::move(e.kept);
      r.temperature = e.solution.temperature;
      r.entropy_clamp = e.solution.clamp;
      r.solver_iterations = e.solution.iterations;
    } else {
      c = Temperature(std::move(c), p.temperature);
      r.temperature = p.temperature;
    }
    if (p.mirostat) c = MirostatV2(std::move(c), mu_bits_);
    const DrawResult d = Draw(c, u);
    if (p.mirostat) {
      mu_bits_ = MirostatV2Update(mu_bits_, p.mirostat_tau_bits, p.mirostat_eta, d.probability);
      r.mirostat_mu_bits = mu_bits_;
    }
    r.token = d.id;
    r.entropy_nats = d.entropy_nats;
    r.probability = d.probability;
    r.n_candidates = d.n_candidates;
    scratch_ = std::move(c);
  }
  auto it = std::lower_bound(counts_.begin(), counts_.end(), r.token,
                             [](const TokenCount& t, int32_t id) { return t.id < id; });
  if (it != counts_.end() && it->id == r.token) {
    ++it->count;
  } else {
    counts_.insert(it, {r.token, 1});
  }
  return r;
}

}  // namespace strata::sampling
