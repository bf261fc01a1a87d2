#include "tune/search.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "util/random.h"

namespace strata::tune {
namespace {

constexpr double kMiB = 1 << 20;

struct Field {
  const char* key;
  std::vector<double> domain;
  bool toggle;
};

const std::vector<Field>& Fields() {
  static const std::vector<Field>* fields = new std::vector<Field>{
      {"engine.parallel", {1, 2, 4, 8, 16, 32, 64}, false},
      {"engine.batch_tokens", {64, 128, 256, 512, 1024, 2048}, false},
      {"engine.queue", {8, 16, 32, 64, 128, 256}, false},
      {"engine.kv_tokens", {}, false},  // multiples of the context (KnobsFor)
      {"l1.bytes", {0, 4 * kMiB, 16 * kMiB, 64 * kMiB, 256 * kMiB}, false},
      {"l1.ttl", {30, 120, 600, 3600}, false},
      {"cache.coalesce", {0, 1}, true},
      {"l3.mode", {0, 1}, true},
      {"l3.similarity", {0.8, 0.85, 0.9, 0.93, 0.97}, false},
      {"semantic.mode", {0, 1}, true},
      {"semantic.similarity", {0.75, 0.8, 0.85, 0.9, 0.95}, false},
      {"limits.max_tokens_cap", {128, 256, 512, 1024, 4096}, false},
  };
  return *fields;
}

double Eps(const std::string& metric) { return metric == "throughput" ? 1e-6 : 1e-3; }

// "key=value,..." of a configuration: the journal's and the search's identity of it.
std::string Identity(const Settings& s) {
  std::string out;
  for (const auto& [k, v] : s) out += fmt::format("{}{}={}", out.empty() ? "" : ",", k, v);
  return out;
}

Settings SettingsOf(const std::vector<TuneKnob>& knobs, const std::vector<size_t>& genes) {
  Settings s;
  for (size_t i = 0; i < knobs.size(); ++i) s[knobs[i].key] = knobs[i].values[genes[i]];
  return s;
}

// a dominates b (constrained domination; objectives: throughput ↑, TTFT ↓, quality ↑).
bool Dominates(const ParetoPoint& a, const ParetoPoint& b) {
  if (a.violation > 0 || b.violation > 0) {
    if (a.violation == 0) return true;
    if (b.violation == 0) return false;
    return a.violation < b.violation;
  }
  const bool no_worse = a.throughput_ratio >= b.throughput_ratio &&
                        a.ttft_p95_ratio <= b.ttft_p95_ratio && a.quality >= b.quality;
  const bool better = a.throughput_ratio > b.throughput_ratio ||
                      a.ttft_p95_ratio < b.ttft_p95_ratio || a.quality > b.quality;
  return no_worse && better;
}

// Fast non-dominated sorting: each point's rank (0 = the front); the fronts.
std::vector<std::vector<size_t>> Sort(std::vector<ParetoPoint>& pts) {
  const size_t n = pts.size();
  std::vector<std::vector<size_t>> dominated(n);
  std::vector<int> count(n, 0);
  std::vector<std::vector<size_t>> fronts(1);
  for (size_t p = 0; p < n; ++p) {
    for (size_t q = 0; q < n; ++q) {
      if (p == q) continue;
      if (Dominates(pts[p], pts[q])) {
        dominated[p].push_back(q);
      } else if (Dominates(pts[q], pts[p])) {
        ++count[p];
      }
    }
    if (count[p] == 0) {
      pts[p].rank = 0;
      fronts[0].push_back(p);
    }
  }
  for (size_t f = 0; f < fronts.size() && !fronts[f].empty(); ++f) {
    std::vector<size_t> next;
    for (size_t p : fronts[f]) {
      for (size_t q : dominated[p]) {
        if (--count[q] == 0) {
          pts[q].rank = static_cast<int32_t>(f + 1);
          next.push_back(q);
        }
      }
    }
    if (!next.empty()) fronts.push_back(std::move(next));
  }
  return fronts;
}

// Crowding distance of each member of one front.
std::vector<double> Crowding(const std::vector<ParetoPoint>& pts,
                             const std::vector<size_t>& front) {
  std::vector<double> d(front.size(), 0);
  if (front.size() <= 2) {
    std::fill(d.begin(), d.end(), std::numeric_limits<double>::infinity());
    return d;
  }
  auto objective = [&](size_t i, int m) {
    const ParetoPoint& p = pts[front[i]];
    return m == 0 ? p.throughput_ratio : m == 1 ? p.ttft_p95_ratio : p.quality;
  };
  for (int m = 0; m < 3; ++m) {
    std::vector<size_t> order(front.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return objective(a, m) < objective(b, m); });
    const double span = objective(order.back(), m) - objective(order.front(), m);
    d[order.front()] = d[order.back()] = std::numeric_limits<double>::infinity();
    if (span <= 0) continue;
    for (size_t i = 1; i + 1 < order.size(); ++i) {
      d[order[i]] += (objective(order[i + 1], m) - objective(order[i - 1], m)) / span;
    }
  }
  return d;
}

}  // namespace

double SensitivityRow::largest() const {
  return std::max({std::abs(throughput), std::abs(ttft_p95), std::abs(quality)});
}

std::vector<TuneKnob> KnobsFor(const SimConfig& base) {
  std::vector<TuneKnob> out;
  for (const Field& f : Fields()) {
    TuneKnob k;
    k.key = f.key;
    k.toggle = f.toggle;
    k.values = f.domain;
    if (k.key == "engine.kv_tokens") {
      for (double m : {2, 4, 8, 16}) k.values.push_back(m * base.ctx);
    }
    const double v = KnobValue(base, k.key);
    if (std::find(k.values.begin(), k.values.end(), v) == k.values.end()) k.values.push_back(v);
    std::sort(k.values.begin(), k.values.end());
    k.base = static_cast<size_t>(std::find(k.values.begin(), k.values.end(), v) - k.values.begin());
    out.push_back(std::move(k));
  }
  return out;
}

double KnobValue(const SimConfig& c, const std::string& key) {
  if (key == "engine.parallel") return c.parallel;
  if (key == "engine.batch_tokens") return c.batch_tokens;
  if (key == "engine.queue") return c.queue;
  if (key == "engine.kv_tokens") {
    return static_cast<double>(c.kv_tokens > 0 ? c.kv_tokens : int64_t{8} * c.ctx);
  }
  if (key == "l1.bytes") return static_cast<double>(c.l1_bytes);
  if (key == "l1.ttl") return c.l1_ttl_s;
  if (key == "cache.coalesce") return c.coalesce ? 1 : 0;
  if (key == "l3.mode") return c.l3 ? 1 : 0;
  if (key == "l3.similarity") return c.l3_similarity;
  if (key == "semantic.mode") return c.semantic ? 1 : 0;
  if (key == "semantic.similarity") return c.semantic_similarity;
  if (key == "limits.max_tokens_cap") return c.max_tokens_cap;
  return 0;
}

SimConfig Apply(const SimConfig& base, const Settings& settings) {
  SimConfig c = base;
  for (const auto& [key, v] : settings) {
    if (key == "engine.parallel") c.parallel = static_cast<int32_t>(v);
    if (key == "engine.batch_tokens") c.batch_tokens = static_cast<int32_t>(v);
    if (key == "engine.queue") c.queue = static_cast<int32_t>(v);
    if (key == "engine.kv_tokens") c.kv_tokens = static_cast<int64_t>(v);
    if (key == "l1.bytes") c.l1_bytes = static_cast<int64_t>(v);
    if (key == "l1.ttl") c.l1_ttl_s = v;
    if (key == "cache.coalesce") c.coalesce = v != 0;
    if (key == "l3.mode") c.l3 = v != 0;
    if (key == "l3.similarity") c.l3_similarity = v;
    if (key == "semantic.mode") c.semantic = v != 0;
    if (key == "semantic.similarity") c.semantic_similarity = v;
    if (key == "limits.max_tokens_cap") c.max_tokens_cap = static_cast<int32_t>(v);
  }
  return c;
}

SensitivityResult Sensitivity(const std::vector<std::string>& scenarios,
                              const std::vector<TuneKnob>& knobs, int32_t steps,
                              double freeze_below, const Evaluate& evaluate) {
  SensitivityResult out;
  Settings base;
  for (const TuneKnob& k : knobs) base[k.key] = k.values[k.base];
  std::map<std::string, double> largest;
  for (const TuneKnob& k : knobs) largest[k.key] = 0;
  for (size_t s = 0; s < scenarios.size(); ++s) {
    const std::optional<Measured> m0 = evaluate(s, base);
    if (!m0) {
      out.complete = false;
      break;
    }
    for (const TuneKnob& k : knobs) {
      SensitivityRow row{.scenario = scenarios[s], .knob = k.key};
      int32_t taken = 0;
      const double vb = k.values[k.base];
      for (int32_t d = -steps; d <= steps; ++d) {
        const auto j = static_cast<int64_t>(k.base) + d;
        if (d == 0 || j < 0 || j >= static_cast<int64_t>(k.values.size())) continue;
        Settings moved = base;
        const double v = k.values[static_cast<size_t>(j)];
        moved[k.key] = v;
        const std::optional<Measured> m = evaluate(s, moved);
        if (!m) {
          out.complete = false;
          break;
        }
        // Relative to the base value (a base of 0, such as L1 off, counts as a switch).
        const double dk = k.toggle || vb == 0 ? 1.0 : std::abs(v - vb) / std::abs(vb);
        auto rel = [&](double now, double before, const char* metric) {
          return std::abs(now - before) / std::max(std::abs(before), Eps(metric)) / dk;
        };
        row.throughput += rel(m->throughput, m0->throughput, "throughput");
        row.ttft_p95 += rel(m->ttft_p95_s, m0->ttft_p95_s, "ttft");
        row.quality += rel(m->quality, m0->quality, "quality");
        ++taken;
      }
      if (taken > 0) {
        row.throughput /= taken;
        row.ttft_p95 /= taken;
        row.quality /= taken;
      }
      largest[k.key] = std::max(largest[k.key], row.largest());
      out.rows.push_back(row);
      if (!out.complete) break;
    }
    if (!out.complete) break;
  }
  // A knob is frozen only once every scenario has measured it: a run the
  // budget cut short freezes none (a resumed run finishes it).
  if (!out.complete) return out;
  for (const TuneKnob& k : knobs) {
    if (largest[k.key] < freeze_below) out.frozen.push_back(k.key);
  }
  return out;
}

ParetoResult Pareto(size_t scenarios, const std::vector<TuneKnob>& knobs, const ParetoOptions& o,
                    const Evaluate& evaluate,
                    const std::function<void(int32_t, int32_t, const ParetoResult&)>& progress) {
  ParetoResult out;
  util::Rng rng(o.seed);
  std::map<std::string, ParetoPoint> seen;
  std::vector<Measured> base_measured;
  // Measures `genes` on every scenario; nullopt when the budget ran out.
  auto measure = [&](const std::vector<size_t>& genes) -> std::optional<ParetoPoint> {
    const Settings settings = SettingsOf(knobs, genes);
    const std::string id = Identity(settings);
    if (auto it = seen.find(id); it != seen.end()) return it->second;
    ParetoPoint p;
    p.settings = settings;
    double log_thr = 0, log_ttft = 0;
    p.quality = 1;
    for (size_t s = 0; s < scenarios; ++s) {
      const std::optional<Measured> m = evaluate(s, settings);
      if (!m) return std::nullopt;
      p.per_scenario.push_back(*m);
      const Measured& b = base_measured.empty() ? *m : base_measured[s];
      log_thr += std::log(std::max(m->throughput, 1e-9) / std::max(b.throughput, 1e-9));
      log_ttft += std::log((m->ttft_p95_s + 1e-3) / (b.ttft_p95_s + 1e-3));
      p.quality = std::min(p.quality, m->quality);
      p.violation += std::max(0.0, m->ttft_p99_s / o.constraints.SloFor(s) - 1);
      p.violation += std::max(0.0, m->error_rate - o.constraints.max_error_rate) /
                     std::max(o.constraints.max_error_rate, 1e-6);
    }
    p.throughput_ratio = std::exp(log_thr / static_cast<double>(scenarios));
    p.ttft_p95_ratio = std::exp(log_ttft / static_cast<double>(scenarios));
    seen.emplace(id, p);
    out.evaluated.push_back(p);
    return p;
  };
  std::vector<size_t> base_genes;
  for (const TuneKnob& k : knobs) base_genes.push_back(k.base);
  {
    const std::optional<ParetoPoint> b = measure(base_genes);
    if (!b) {
      out.complete = false;
      return out;
    }
    base_measured = b->per_scenario;
    out.base = *b;
  }
  auto random_genes = [&] {
    std::vector<size_t> g;
    for (const TuneKnob& k : knobs) {
      g.push_back(static_cast<size_t>(rng.Uniform() * static_cast<double>(k.values.size())) %
                  k.values.size());
    }
    return g;
  };
  struct Member {
    std::vector<size_t> genes;
    ParetoPoint point;
    double crowding = 0;
  };
  std::vector<Member> population{{base_genes, out.base, 0}};
  while (static_cast<int32_t>(population.size()) < o.population) {
    std::vector<size_t> g = random_genes();
    std::optional<ParetoPoint> p = measure(g);
    if (!p) {
      out.complete = false;
      break;
    }
    population.push_back({std::move(g), *p, 0});
  }
  // Ranks and crowding of a set of members; returns the fronts.
  auto rank = [&](std::vector<Member>& members) {
    std::vector<ParetoPoint> pts;
    for (const Member& m : members) pts.push_back(m.point);
    auto fronts = Sort(pts);
    for (size_t i = 0; i < members.size(); ++i) members[i].point.rank = pts[i].rank;
    for (const auto& f : fronts) {
      const std::vector<double> d = Crowding(pts, f);
      for (size_t i = 0; i < f.size(); ++i) members[f[i]].crowding = d[i];
    }
    return fronts;
  };
  rank(population);
  auto better = [](const Member& a, const Member& b) {
    return a.point.rank < b.point.rank || (a.point.rank == b.point.rank && a.crowding > b.crowding);
  };
  for (int32_t gen = 1; gen <= o.generations && out.complete; ++gen) {
    std::vector<Member> offspring;
    while (offspring.size() < population.size() && out.complete) {
      auto pick = [&]() -> const Member& {
        const Member& a =
            population[static_cast<size_t>(rng.Uniform() * population.size()) % population.size()];
        const Member& b =
            population[static_cast<size_t>(rng.Uniform() * population.size()) % population.size()];
        return better(a, b) ? a : b;
      };
      const Member& x = pick();
      const Member& y = pick();
      std::vector<size_t> child(knobs.size());
      for (size_t i = 0; i < knobs.size(); ++i) {
        child[i] = rng.Uniform() < 0.5 ? x.genes[i] : y.genes[i];
        if (rng.Uniform() < 1.0 / static_cast<double>(knobs.size())) {
          // A step to a neighbouring value, or anywhere one time in four.
          const size_t n = knobs[i].values.size();
          if (rng.Uniform() < 0.25) {
            child[i] = static_cast<size_t>(rng.Uniform() * static_cast<double>(n)) % n;
          } else if (rng.Uniform() < 0.5) {
            child[i] = child[i] > 0 ? child[i] - 1 : std::min<size_t>(1, n - 1);
          } else {
            child[i] = child[i] + 1 < n ? child[i] + 1 : child[i] - (n > 1 ? 1 : 0);
          }
        }
      }
      std::optional<ParetoPoint> p = measure(child);
      if (!p) {
        out.complete = false;
        break;
      }
      offspring.push_back({std::move(child), *p, 0});
    }
    std::vector<Member> all = population;
    all.insert(all.end(), offspring.begin(), offspring.end());
    auto fronts = rank(all);
    std::vector<Member> next;
    for (const auto& f : fronts) {
      std::vector<Member> members;
      for (size_t i : f) members.push_back(all[i]);
      if (next.size() + members.size() <= static_cast<size_t>(o.population)) {
        next.insert(next.end(), members.begin(), members.end());
        continue;
      }
      std::sort(members.begin(), members.end(),
                [](const Member& a, const Member& b) { return a.crowding > b.crowding; });
      for (const Member& m : members) {
        if (next.size() >= static_cast<size_t>(o.population)) break;
        next.push_back(m);
      }
      break;
    }
    population = std::move(next);
    rank(population);
    if (progress) {
      ParetoResult snapshot;
      for (const Member& m : population) {
        if (m.point.rank == 0) snapshot.front.push_back(m.point);
      }
      snapshot.base = out.base;
      progress(gen, o.generations, snapshot);
    }
  }
  // The front over everything measured.
  std::vector<ParetoPoint> pts = out.evaluated;
  auto fronts = Sort(pts);
  for (size_t i = 0; i < pts.size(); ++i) out.evaluated[i].rank = pts[i].rank;
  for (size_t i : fronts.front()) out.front.push_back(pts[i]);
  std::sort(out.front.begin(), out.front.end(), [](const ParetoPoint& a, const ParetoPoint& b) {
    return a.throughput_ratio > b.throughput_ratio;
  });
  return out;
}

std::optional<ParetoPoint> ChoosePoint(const ParetoResult& r) {
  std::optional<ParetoPoint> best;
  double best_score = 0;
  for (const ParetoPoint& p : r.front) {
    if (p.violation > 0 || p.quality < r.base.quality - 0.005) continue;
    const double score = p.throughput_ratio / std::max(p.ttft_p95_ratio, 1e-9);
    if (!best || score > best_score) {
      best = p;
      best_score = score;
    }
  }
  return best;
}

}  // namespace strata::tune
