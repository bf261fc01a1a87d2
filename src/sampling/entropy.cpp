#include "sampling/entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "sampling/internal/fast_exp.h"
#include "sampling/internal/vector_math.h"

namespace strata::sampling {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Eval {
  double entropy = 0;  // H at beta
  double log_z = 0;    // ln sum exp(beta * x), x = z - max
  double dh_ds = 0;    // dH / d ln(beta) = -beta^2 Var[x]
};

Eval EvalAt(std::span<const Candidate> c, float mx, double beta) {
  const internal::ExpMoments s = internal::SumMoments(c, mx, static_cast<float>(beta));
  const double mean = s.zx / s.z;
  const double var = std::max(0.0, s.zxx / s.z - mean * mean);
  Eval e;
  e.log_z = std::log(s.z);
  // H = ln Z - beta E[x]; both terms are >= 0 (x <= 0), so no cancellation.
  e.entropy = std::max(0.0, e.log_z - beta * mean);
  e.dh_ds = -beta * beta * var;
  return e;
}

struct Shape {
  float mx = 0;
  double gap2 = 0;   // max - the largest logit below it (0 when all tie)
  double range = 0;  // max - min
  size_t ties = 0;   // tokens at the max
  double sigma = 0;  // unweighted standard deviation of the logits
};

Shape ShapeOf(std::span<const Candidate> c) {
  Shape s;
  float mx = c[0].logit, mn = c[0].logit;
  double sum = 0;
  for (const Candidate& x : c) {
    mx = std::max(mx, x.logit);
    mn = std::min(mn, x.logit);
    sum += x.logit;
  }
  const double mean = sum / static_cast<double>(c.size());
  float second = -std::numeric_limits<float>::infinity();
  double ss = 0;
  for (const Candidate& x : c) {
    if (x.logit == mx) {
      ++s.ties;
    } else {
      second = std::max(second, x.logit);
    }
    const double d = x.logit - mean;
    ss += d * d;
  }
  s.mx = mx;
  s.range = static_cast<double>(mx) - mn;
  s.gap2 = s.ties == c.size() ? 0.0 : static_cast<double>(mx) - second;
  s.sigma = std::sqrt(ss / static_cast<double>(c.size()));
  return s;
}

struct Solved {
  TemperatureSolution sol;
  double log_z = 0;  // ln Z at the solution (x = z - max)
  float mx = 0;
};

Solved Solve(std::span<const Candidate> c, double target, const SolverOptions& o) {
  Solved out;
  TemperatureSolution& r = out.sol;
  const Shape sh = ShapeOf(c);
  out.mx = sh.mx;
  const double n = static_cast<double>(c.size());
  const double k = static_cast<double>(sh.ties);
  const double ln_n = std::log(n), ln_k = std::log(k);
  const double tol = o.tolerance_nats;
  r.converged = true;
  if (sh.ties == c.size()) {  // every temperature gives the uniform distribution
    r.temperature = 1.0;
    r.entropy_nats = ln_n;
    out.log_z = ln_n;
    if (target > ln_n + tol) r.clamp = EntropyClamp::kAboveMax;
    if (target < ln_n - tol) r.clamp = EntropyClamp::kBelowGreedy;
    return out;
  }
  if (target >= ln_n) {
    r.temperature = kInf;
    r.entropy_nats = ln_n;
    out.log_z = ln_n;
    if (target - ln_n >= tol) r.clamp = EntropyClamp::kAboveMax;
    return out;
  }
  if (target <= ln_k) {
    r.temperature = 0.0;
    r.entropy_nats = ln_k;
    out.log_z = ln_k;
    if (ln_k - target >= tol) r.clamp = EntropyClamp::kBelowGreedy;
    return out;
  }
  // Analytic bracket (see the header): H(beta_lo) >= ln n - tol/2 and
  // H(beta_hi) <= ln k + tol/2, where q bounds the mass off the top tokens.
  const double beta_lo = (tol / 2) / sh.range;
  const double q = tol / (2 * (41 + ln_n));
  const double beta_hi = std::log((n - k) / (k * q)) / sh.gap2;
  auto finish = [&](double beta, const Eval& e, int32_t it) {
    r.temperature = 1.0 / beta;
    r.entropy_nats = e.entropy;
    r.iterations = it;
    out.log_z = e.log_z;
  };
  if (target >= ln_n - tol / 2) {
    finish(beta_lo, EvalAt(c, sh.mx, beta_lo), 1);
    return out;
  }
  if (target <= ln_k + tol / 2) {
    finish(beta_hi, EvalAt(c, sh.mx, beta_hi), 1);
    return out;
  }
  double s_lo = std::log(beta_lo), s_hi = std::log(beta_hi);
  double s;
  if (o.initial_temperature > 0) {
    s = -std::log(o.initial_temperature);
  } else {
    // For roughly Gaussian logits H(beta) ~ ln n - beta^2 sigma^2 / 2.
    s = std::log(std::sqrt(2 * (ln_n - target)) / sh.sigma);
  }
  if (!(s > s_lo && s < s_hi)) s = 0.5 * (s_lo + s_hi);
  // Safeguarded Newton (as in Numerical Recipes' rtsafe): bisect when the
  // Newton step leaves the bracket or is not at least halving the step before
  // last, which catches the ping-pong across a steep, S-shaped H(s).
  double step_old = s_hi - s_lo, step = step_old;
  double best_err = kInf;
  for (int32_t it = 1; it <= o.max_iterations; ++it) {
    const double beta = std::exp(s);
    const Eval e = EvalAt(c, sh.mx, beta);
    const double f = e.entropy - target;
    if (std::abs(f) < best_err) {
      best_err = std::abs(f);
      finish(beta, e, it);
    }
    r.iterations = it;
    if (std::abs(f) < tol) {
      r.converged = true;
      return out;
    }
    if (f > 0) {
      s_lo = s;  // too much entropy: the root is at a larger beta
    } else {
      s_hi = s;
    }
    const double newton = e.dh_ds < 0 ? s - f / e.dh_ds : kInf;
    if (!(newton > s_lo && newton < s_hi) || std::abs(2 * f) > std::abs(step_old * e.dh_ds)) {
      step_old = step;
      step = 0.5 * (s_hi - s_lo);
      s = s_lo + step;
    } else {
      step_old = step;
      step = newton - s;
      s = newton;
    }
  }
  r.converged = false;
  return out;
}

}  // namespace

std::string_view EntropyClampName(EntropyClamp c) {
  switch (c) {
    case EntropyClamp::kNone:
      return "none";
    case EntropyClamp::kAboveMax:
      return "above_max";
    case EntropyClamp::kBelowGreedy:
      return "below_greedy";
  }
  return "?";
}

TemperatureSolution SolveTemperature(std::span<const Candidate> c, double target_nats,
                                     const SolverOptions& options) {
  if (c.empty()) return {};
  return Solve(c, target_nats, options).sol;
}

double EntropyAtTemperature(std::span<const Candidate> c, double temperature) {
  if (c.empty()) return 0;
  const Shape sh = ShapeOf(c);
  if (temperature == kInf || sh.ties == c.size()) return std::log(static_cast<double>(c.size()));
  if (temperature <= 0) return std::log(static_cast<double>(sh.ties));
  return EvalAt(c, sh.mx, 1.0 / temperature).entropy;
}

EntropyTargetResult EntropyTarget(Candidates c, double target_nats, double tail_nats,
                                  const SolverOptions& options) {
  EntropyTargetResult out;
  std::vector<Candidate>& v = c.items;
  const size_t n = v.size();
  if (n == 0) return out;
  auto prefix_len = [n](double e) {
    return e >= static_cast<double>(n) ? n : static_cast<size_t>(e);
  };
  // The shortest prefix that can exceed H*, and the count bound e^(H*+m).
  const size_t j_min = prefix_len(std::exp(target_nats)) + 1;
  const size_t j_max =
      std::max(j_min, std::max<size_t>(1, prefix_len(std::exp(target_nats + tail_nats))));
  // Keeps the first `len` candidates, divides their logits by T (shifted so
  // the best is 0) and hands them out with the solution.
  auto emit = [&](size_t len, const Solved& s) {
    v.resize(len);
    const double t = s.sol.temperature;
    // T = 0 is the greedy limit: only the tokens tied at the top remain.
    if (t == 0.0) std::erase_if(v, [&](const Candidate& x) { return x.logit != s.mx; });
    for (Candidate& x : v) {
      const double scaled = t == kInf || t == 0.0 ? 0.0 : (x.logit - s.mx) / t;
      x.logit = static_cast<float>(std::max(scaled, -3.0e38));
    }
    out.kept = std::move(c);
    out.solution = s.sol;
  };
  SolverOptions o = options;
  // C(j): the least likely token of the prefix of length j, at the T that
  // gives the prefix entropy H*, has surprise <= H* + m. `least` is the
  // prefix's lowest logit.
  auto passes = [&](size_t j, float least, Solved& s) {
    s = Solve(std::span<const Candidate>(v.data(), j), target_nats, o);
    ++out.solves;
    const double t = s.sol.temperature;
    if (t > 0 && t < kInf) o.initial_temperature = t;
    const double beta = t == kInf ? 0.0 : 1.0 / t;
    const double x = static_cast<double>(least) - s.mx;
    const double surprise = x == 0 ? s.log_z : s.log_z - beta * x;
    return surprise <= target_nats + tail_nats;
  };
  Solved trial;
  if (j_min > n) {
    // Even every candidate cannot exceed H*: all of them (the solve clamps to
    // uniform unless H* = ln n within tolerance). No ranking needed.
    float least = v[0].logit;
    for (const Candidate& x : v) least = std::min(least, x.logit);
    passes(n, least, trial);
    emit(n, trial);
    return out;
  }
  if (j_max == n && c.order != Order::kByLogit) {
    // The count bound admits every candidate: try them all before ranking.
    float least = v[0].logit;
    for (const Candidate& x : v) least = std::min(least, x.logit);
    if (passes(n, least, trial)) {
      emit(n, trial);
      return out;
    }
  }
  if (c.order != Order::kByLogit) {
    PartialSelect(v, j_max);
    c.order = Order::kByLogit;  // the kept prefix is ranked
  }
  // Tokens tied at the top (they may extend past the ranked prefix).
  size_t ties = 1;
  while (ties < j_max && v[ties].logit == v[0].logit) ++ties;
  if (ties == j_max && j_max < n) {
    ties = static_cast<size_t>(std::count_if(
        v.begin(), v.end(), [&](const Candidate& x) { return x.logit == v[0].logit; }));
    PartialSelect(v, ties);
  }
  if (target_nats < std::log(static_cast<double>(ties))) {
    // Below the greedy limit: the tied tokens, uniformly.
    Solved s;
    s.mx = v[0].logit;
    s.sol.temperature = 0.0;
    s.sol.entropy_nats = std::log(static_cast<double>(ties));
    s.sol.clamp = s.sol.entropy_nats - target_nats >= options.tolerance_nats
                      ? EntropyClamp::kBelowGreedy
                      : EntropyClamp::kNone;
    s.sol.converged = true;
    emit(ties, s);
    return out;
  }
  if (passes(j_max, v[j_max - 1].logit, trial)) {
    emit(j_max, trial);
    return out;
  }
  Solved at_lo;  // the solution of the longest prefix known to pass
  if (!passes(j_min, v[j_min - 1].logit, at_lo)) {
    emit(j_min, at_lo);
    return out;
  }
  size_t lo = j_min, hi = j_max;  // C(lo) holds, C(hi) fails
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    if (passes(mid, v[mid - 1].logit, trial)) {
      lo = mid;
      at_lo = trial;
    } else {
      hi = mid;
    }
  }
  emit(lo, at_lo);
  return out;
}

}  // namespace strata::sampling
