// cli/tune_report.h — what `strata tune` writes: the sensitivity matrix as
// CSV and an SVG heat map, the Pareto front as CSV and an HTML page with
// its plot, and a configuration (a chosen point, a trial's) as a
// configuration file.
//
// Pure functions over the results (text in, text out); the caller writes
// the files.
#pragma once

#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/serve_flags.h"
#include "tune/search.h"
#include "tune/simulator.h"

namespace strata::cli {

// scenario,knob,throughput,ttft_p95,quality,largest,frozen
std::string SensitivityCsv(const tune::SensitivityResult& r);
// A heat map: a row per scenario, a column per knob, each cell coloured by
// the largest sensitivity and labelled with it; frozen knobs marked.
std::string SensitivitySvg(const tune::SensitivityResult& r,
                           const std::vector<std::string>& scenarios,
                           const std::vector<tune::TuneKnob>& knobs, double freeze_below);

// rank,throughput_ratio,ttft_p95_ratio,quality,violation,<knob>... for
// every front point, then the base configuration (rank "base").
std::string FrontCsv(const tune::ParetoResult& r, const std::vector<tune::TuneKnob>& knobs);
// One self-contained page: the scatter of every measured configuration
// (throughput ratio against P95 TTFT ratio, colour = quality; the front
// joined, the base and the chosen point marked, each point's settings in
// its tooltip) and a table of the front with per-scenario numbers.
std::string FrontHtml(const tune::ParetoResult& r, const std::vector<tune::TuneKnob>& knobs,
                      const std::vector<std::string>& scenarios, const tune::ParetoPoint* chosen,
                      const std::string& source);

// The base configuration: serve's defaults, or a configuration file's
// values (`path` "" = the defaults).
util::StatusOr<ServeFlags> BaseFlags(const Env& env, const std::string& path);
// What the simulator models of `f`. A tier in opt-in mode serves only the
// requests that ask for it, and a scenario's never do: it counts as off.
tune::SimConfig SimConfigOf(const ServeFlags& f);
// `f` with the tuner's settings: the fields the simulator's knobs name. A
// tier switched off keeps the base's opt-in (it serves no scenario request
// either).
ServeFlags WithSettings(ServeFlags f, const tune::Settings& settings);
// A configuration file of every knob of `f` that differs from serve's
// defaults, after `comment` (each line a TOML comment); [[backend]] tables
// are not repeated (the comment says so).
std::string RenderConfig(const ServeFlags& f, const std::string& comment);

}  // namespace strata::cli
