// cli/tune_calibrate.h — `strata tune calibrate`: the engine's costs on this
// machine, measured for the simulator (tune/simulator.h's CostModel).
//
// Promise: loads the model (`model_flag`, resolved as for generate), times
// a prefill chunk per token and its attention per earlier token, a decode
// step's fixed and per-sequence time (least squares over batches 1, 4, 8
// and 16) and attention per context token, each the median of three runs,
// and writes the cost model as JSON to `out`. Returns the exit code.
//
// Threading: runs on the caller's thread.
#pragma once

#include <cstdint>
#include <string>

#include "cli/commands.h"

namespace strata::cli {

int RunTuneCalibrate(const Env& env, const std::string& model_flag, int32_t threads,
                     const std::string& out);

}  // namespace strata::cli
