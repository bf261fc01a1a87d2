#include "sampling/processors.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "sampling/internal/fast_exp.h"
#include "sampling/internal/select.h"
#include "sampling/internal/vector_math.h"

namespace strata::sampling {

using internal::FastExp;
using internal::MaxLogit;
using internal::SumExp;

Candidates FromLogits(std::span<const float> logits, Candidates reuse) {
  std::vector<Candidate>& v = reuse.items;
  // A reused buffer only zero-fills what it grows by.
  v.resize(logits.size());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // Every token first (a plain, vectorisable copy), then drop the masked ones
  // only if there are any.
  int masked = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    v[i] = {static_cast<int32_t>(i), logits[i]};
    masked |= logits[i] == kNegInf;
  }
  if (masked) std::erase_if(v, [](const Candidate& x) { return x.logit == kNegInf; });
  reuse.order = Order::kById;
  return reuse;
}

int32_t Argmax(std::span<const float> logits) {
  if (logits.empty()) return -1;
  // A vectorised max, then the first index holding it.
  const float mx = internal::ScanLogits(logits).max;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == mx) return static_cast<int32_t>(i);
  }
  return 0;  // every logit is NaN
}

Candidates SortByLogit(Candidates c) {
  if (c.order != Order::kByLogit) std::sort(c.items.begin(), c.items.end(), Before);
  c.order = Order::kByLogit;
  return c;
}

void PartialSelect(std::span<Candidate> c, size_t m) { internal::PartialSelectBest(c, m); }

float PenalizedLogit(float logit, int32_t count, const Penalties& p) {
  if (count <= 0) return logit;
  if (p.repetition != 1.0f) logit = logit > 0 ? logit / p.repetition : logit * p.repetition;
  return logit - (p.presence + p.frequency * static_cast<float>(count));
}

Candidates ApplyPenalties(Candidates c, std::span<const TokenCount> counts, const Penalties& p) {
  if (counts.empty()) return c;
  if (p.repetition == 1.0f && p.presence == 0.0f && p.frequency == 0.0f) return c;
  auto by_id = [](const TokenCount& t, int32_t id) { return t.id < id; };
  if (c.order == Order::kById) {
    // Few generated tokens, many candidates: look each count up.
    for (const TokenCount& t : counts) {
      auto it = std::lower_bound(c.items.begin(), c.items.end(), t.id,
                                 [](const Candidate& x, int32_t id) { return x.id < id; });
      if (it != c.items.end() && it->id == t.id) it->logit = PenalizedLogit(it->logit, t.count, p);
    }
    return c;
  }
  for (Candidate& x : c.items) {
    auto it = std::lower_bound(counts.begin(), counts.end(), x.id, by_id);
    if (it != counts.end() && it->id == x.id) x.logit = PenalizedLogit(x.logit, it->count, p);
  }
  // Penalties change logits, so an order by logit no longer holds.
  if (c.order == Order::kByLogit) c.order = Order::kNone;
  return c;
}

Candidates TopK(Candidates c, int32_t k) {
  const size_t kk = static_cast<size_t>(k);
  if (k <= 0 || kk >= c.items.size()) return c;  // nothing to cut: no need to rank
  if (c.order != Order::kByLogit) PartialSelect(c.items, kk);
  c.items.resize(kk);
  c.order = Order::kByLogit;
  return c;
}

Candidates TopP(Candidates c, float p) {
  if (p >= 1.0f || c.items.size() <= 1) return c;
  const float mx = MaxLogit(c);
  const double target = p * SumExp(c.items, mx).z;
  if (c.order == Order::kByLogit) {
    double cum = 0;
    for (size_t i = 0; i < c.items.size(); ++i) {
      cum += FastExp(internal::Gap(c.items[i].logit, mx));
      if (cum >= target) {
        c.items.resize(i + 1);
        break;
      }
    }
    return c;
  }
  // Language models put most of the mass on a few tokens: try the best 64
  // first (partial selection), which is exact when they already reach p.
  // Each weighs at most 1 (the most likely token's weight), so when 64 cannot
  // reach the target the attempt is skipped: a flat distribution's nucleus
  // goes straight to the histogram.
  constexpr size_t kHead = 64;
  if (c.items.size() > 4 * kHead && target <= static_cast<double>(kHead)) {
    PartialSelect(c.items, kHead);
    double cum = 0;
    for (size_t i = 0; i < kHead; ++i) {
      cum += FastExp(internal::Gap(c.items[i].logit, mx));
      if (cum >= target) {
        c.items.resize(i + 1);
        c.order = Order::kByLogit;
        return c;
      }
    }
  }
  // Rank by the gap to the most likely token, without sorting. Gaps past 88
  // nats weigh exactly 0 and share the overflow bin.
  const size_t keep = internal::KeepByKeyUntilMass(
      c.items, [mx](const Candidate& x) { return mx - x.logit; }, mx, target, 88.0f);
  c.items.resize(keep);
  c.order = Order::kNone;
  return c;
}

Candidates MinP(Candidates c, float min_p) {
  if (min_p <= 0.0f || c.items.empty()) return c;
  const float cutoff = MaxLogit(c) + std::log(min_p);
  std::erase_if(c.items, [&](const Candidate& x) { return x.logit < cutoff; });
  return c;
}

Candidates TypicalP(Candidates c, float p) {
  if (p >= 1.0f || c.items.size() <= 1) return c;
  const float mx = MaxLogit(c);
  const internal::ExpSums s = SumExp(c.items, mx);
  // surprise_i - H = (ln Z - x_i) - (ln Z - E[x]) = E[x] - x_i, x = logit - mx.
  const double center = static_cast<double>(mx) + s.zx / s.z;
  // Keys past the larger of |center - max| and the weight horizon (88 nats
  // below the max) belong to zero-weight tokens: the overflow bin.
  const float fc = static_cast<float>(center);
  const float key_hi = std::max(mx - fc, fc - (mx - 88.0f)) * 1.0001f + 1e-6f;
  const size_t keep = internal::KeepByKeyUntilMass(
      c.items, [fc](const Candidate& x) { return std::abs(x.logit - fc); }, mx, p * s.z, key_hi);
  c.items.resize(keep);
  c.order = Order::kNone;
  return c;
}

Candidates Temperature(Candidates c, float t) {
  if (t == 1.0f) return c;
  for (Candidate& x : c.items) x.logit /= t;
  return c;
}

Candidates MirostatV2(Candidates c, float mu_bits) {
  if (c.items.size() <= 1) return c;
  const float mx = MaxLogit(c);
  const double log_z = std::log(SumExp(c.items, mx).z);
  // -log2 p <= mu  <=>  x - ln Z >= -mu ln 2, x = logit - mx.
  const double cutoff =
      static_cast<double>(mx) + log_z - static_cast<double>(mu_bits) * std::numbers::ln2;
  if (cutoff > mx) {
    // Even the most likely token is more surprising than mu: keep it alone.
    const Candidate best = c.order == Order::kByLogit
                               ? c.items.front()
                               : *std::min_element(c.items.begin(), c.items.end(), Before);
    c.items.assign(1, best);
    c.order = Order::kByLogit;
    return c;
  }
  std::erase_if(c.items, [&](const Candidate& x) { return static_cast<double>(x.logit) < cutoff; });
  return c;
}

float MirostatV2Update(float mu_bits, float tau_bits, float eta, double p_chosen) {
  const double surprise = -std::log2(p_chosen);
  return static_cast<float>(mu_bits - eta * (surprise - tau_bits));
}

DrawResult Draw(const Candidates& c, double uniform) {
  const std::vector<Candidate>& v = c.items;
  DrawResult r;
  r.n_candidates = v.size();
  if (v.size() == 1) {
    r.id = v[0].id;
    r.probability = 1.0;
    return r;
  }
  const float mx = MaxLogit(c);
  const size_t kb = internal::kExpBlock;
  const size_t n_blocks = (v.size() + kb - 1) / kb;
  std::vector<double> block_z(n_blocks);
  double z = 0, zx = 0;
  for (size_t b = 0; b < n_blocks; ++b) {
    const auto block =
        std::span<const Candidate>(v).subspan(b * kb, std::min(kb, v.size() - b * kb));
    const internal::ExpSums s = SumExp(block, mx);
    block_z[b] = s.z;
    z += s.z;
    zx += s.zx;
  }
  r.entropy_nats = std::max(0.0, std::log(z) - zx / z);
  const double target = uniform * z;
  // Find the block, then walk it: only one block's exps are recomputed.
  double cum = 0;
  size_t b = 0;
  while (b + 1 < n_blocks && cum + block_z[b] <= target) cum += block_z[b++];
  const size_t end = std::min(v.size(), (b + 1) * kb);
  size_t chosen = b * kb;
  float chosen_w = 0;
  for (size_t i = b * kb; i < end; ++i) {
    const float w = FastExp(internal::Gap(v[i].logit, mx));
    if (w > 0) {
      chosen = i;
      chosen_w = w;
    }
    cum += w;
    if (target < cum && w > 0) break;
  }
  r.id = v[chosen].id;
  r.probability = chosen_w / z;
  return r;
}

std::vector<double> Probabilities(const Candidates& c) {
  std::vector<double> p(c.items.size());
  if (p.empty()) return p;
  const double mx = MaxLogit(c);
  double z = 0;
  for (size_t i = 0; i < p.size(); ++i) z += p[i] = std::exp(c.items[i].logit - mx);
  for (double& x : p) x /= z;
  return p;
}

double Entropy(const Candidates& c) {
  double h = 0;
  for (double p : Probabilities(c)) {
    if (p > 0) h -= p * std::log(p);
  }
  return h;
}

}  // namespace strata::sampling
