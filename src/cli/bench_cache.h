// cli/bench_cache.h — `strata bench cache`, a subcommand of `strata bench`.
#pragma once

#include <string>

#include "cache/admission.h"
#include "cli/commands.h"

namespace strata::cli {

struct BenchCacheFlags {
  uint64_t keys = 100000;      // distinct keys of the Zipf workloads
  size_t accesses = 1000000;   // accesses per Zipf workload
  double lambda = 0.01;        // dual-factor age decay (1/s)
  double k = 0.5;              // dual-factor frequency saturation
  double half_life_s = 600;    // dual-factor access-count half-life (s)
  bool admission = false;      // compare always-admit with cache-aware admission instead
  double admission_gain = cache::AdmissionOptions{}.gain;
  double admission_min = cache::AdmissionOptions{}.min_probability;
  double admission_watch = cache::AdmissionOptions{}.watch_factor;
  std::string data_dir = "../shared/data";
  std::string json;
};

int RunBenchCache(const Env& env, const BenchCacheFlags& flags);

}  // namespace strata::cli
