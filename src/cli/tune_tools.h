// cli/tune_tools.h — the `strata tune` subcommands that run no search:
// calibrate (the engine's costs on this machine, for the simulator),
// simulate (one configuration in the simulator) and scenarios (the list).
//
// Promise: RunTuneCalibrate loads the model (`model_flag`, resolved as for generate), times
// a prefill chunk per token and its attention per earlier token, a decode
// step's fixed and per-sequence time (least squares over batches 1, 4, 8
// and 16) and attention per context token, each the median of three runs,
// and writes the cost model as JSON to `out`. Returns the exit code.
//
// Threading: runs on the caller's thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace strata::cli {

int RunTuneCalibrate(const Env& env, const std::string& model_flag, int32_t threads,
                     const std::string& out);

struct TuneSimulateArgs {
  std::string config;                  // the configuration ("" = serve's defaults)
  std::string cost;                    // the cost model ("" = the built-in one)
  std::vector<std::string> scenarios;  // by name; empty = all
  std::string scenarios_dir;
  double duration_s = 0;  // > 0: each scenario's arrivals last this long
  uint64_t seed = 1;
  std::string json_out;  // "" = none
};
// RunTuneSimulate prints, per scenario, the simulated throughput, TTFT,
// errors, quality and cache hits of one configuration, and writes them as
// JSON to `json_out`: what bench/tune_check.sh compares with a real run.
// A scenario whose trace cannot be read is skipped, saying so. Returns the
// exit code.
int RunTuneSimulate(const Env& env, const TuneSimulateArgs& args);
// RunTuneScenarios prints each scenario of `scenarios_dir` and the metrics
// it is judged on. Returns the exit code.
int RunTuneScenarios(const Env& env, const std::string& scenarios_dir);

}  // namespace strata::cli
