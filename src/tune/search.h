// tune/search.h — which knobs matter (a sensitivity matrix) and the best
// trade-offs among the ones that do (a multi-objective search).
//
// Promise:
//  - A TuneKnob is one `strata serve` knob the tuner moves, by its config
//    key, over a discrete domain; KnobsFor gives the default set around a
//    base configuration (its values in their domains).
//  - Sensitivity perturbs each knob alone, to each of its other domain
//    values nearest the base (up to `steps` on each side), on every
//    scenario, and reports per scenario × knob the normalised sensitivity
//    of throughput, P95 TTFT and quality: the mean over steps of |relative
//    change of the metric| / |relative change of the knob| (a switch
//    counts as a relative change of 1). A knob whose largest sensitivity
//    over all scenarios and metrics is below the threshold is frozen; a run
//    the budget cut short freezes none.
//  - Pareto runs NSGA-II (Deb et al. 2002: fast non-dominated sorting,
//    crowding distance, binary tournaments, uniform crossover, mutation of
//    one gene in n on average) over the unfrozen knobs, with constrained
//    domination (a feasible point beats an infeasible one; of two
//    infeasible, the smaller violation). The objectives of a configuration
//    are its throughput ↑ and P95 TTFT ↓ as geometric means over the
//    scenarios of the ratio to the base configuration, and its quality ↑
//    as the lowest over the scenarios; the constraints are each scenario's
//    P99 TTFT ≤ the SLO and error rate ≤ the bound.
//  - Every evaluation goes through the caller's Evaluate, which may answer
//    from a journal (a resumed run repeats the same sequence of
//    configurations for the same seed) and may say the budget is spent
//    (then the search stops and returns what it has).
//
// Threading: pure logic over the callbacks; thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tune/simulator.h"

namespace strata::tune {

struct TuneKnob {
  std::string key;             // the config key: "engine.parallel"
  std::vector<double> values;  // the domain, ascending (a switch: 0, 1)
  bool toggle = false;         // a switch (off/on): its relative change counts as 1
  size_t base = 0;             // the base configuration's index into values
};

// A configuration as the tuner moves it: a value per knob key.
using Settings = std::map<std::string, double>;

// The default knobs around `base` (each base value added to its domain).
std::vector<TuneKnob> KnobsFor(const SimConfig& base);
// `base` with `settings` applied (unknown keys are ignored).
SimConfig Apply(const SimConfig& base, const Settings& settings);
// The value of `key` in `config`.
double KnobValue(const SimConfig& config, const std::string& key);

// What a configuration measured on one scenario.
struct Measured {
  double throughput = 0;  // answered requests per second
  double ttft_p95_s = 0;
  double ttft_p99_s = 0;
  double error_rate = 0;
  double quality = 1;
};

// Evaluates `settings` on scenario `scenario` (an index); nullopt once the
// budget is spent.
using Evaluate = std::function<std::optional<Measured>(size_t scenario, const Settings& settings)>;

struct SensitivityRow {
  std::string scenario;
  std::string knob;
  double throughput = 0;  // normalised sensitivities (see above)
  double ttft_p95 = 0;
  double quality = 0;
  double largest() const;
};

struct SensitivityResult {
  std::vector<SensitivityRow> rows;  // scenario-major
  std::vector<std::string> frozen;   // knobs below the threshold everywhere
  bool complete = true;              // false: the budget ran out first
};

SensitivityResult Sensitivity(const std::vector<std::string>& scenarios,
                              const std::vector<TuneKnob>& knobs, int32_t steps,
                              double freeze_below, const Evaluate& evaluate);

struct Constraints {
  double ttft_p99_slo_s = 0.8;
  std::vector<double> per_scenario_slo_s;  // > 0 replaces ttft_p99_slo_s for that scenario
  double max_error_rate = 0.0002;
  double SloFor(size_t scenario) const {
    return scenario < per_scenario_slo_s.size() && per_scenario_slo_s[scenario] > 0
               ? per_scenario_slo_s[scenario]
               : ttft_p99_slo_s;
  }
};

struct ParetoPoint {
  Settings settings;
  double throughput_ratio = 0;  // geometric mean over scenarios vs the base
  double ttft_p95_ratio = 0;
  double quality = 0;    // the lowest over scenarios
  double violation = 0;  // 0 = feasible
  int32_t rank = 0;      // 0 = the front
  std::vector<Measured> per_scenario;
};

struct ParetoOptions {
  int32_t population = 24;  // [4, 1024]
  int32_t generations = 20;
  uint64_t seed = 1;
  Constraints constraints;
};

struct ParetoResult {
  std::vector<ParetoPoint> evaluated;  // every configuration measured, in order
  std::vector<ParetoPoint> front;      // the non-dominated ones, by throughput
  ParetoPoint base;                    // the base configuration
  bool complete = true;                // false: the budget ran out first
};

// `progress` is called after each generation with (generation, of).
ParetoResult Pareto(size_t scenarios, const std::vector<TuneKnob>& knobs,
                    const ParetoOptions& options, const Evaluate& evaluate,
                    const std::function<void(int32_t, int32_t, const ParetoResult&)>& progress);

// The point to deploy: among the feasible front points whose quality is
// within 0.005 of the base's, the one with the best throughput ratio over
// TTFT ratio; nullopt when none is feasible.
std::optional<ParetoPoint> ChoosePoint(const ParetoResult& result);

}  // namespace strata::tune
