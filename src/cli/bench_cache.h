// cli/bench_cache.h — `strata bench cache`, a subcommand of `strata bench`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/admission.h"
#include "cache/eviction_policy.h"
#include "cli/commands.h"
#include "util/file_system.h"
#include "util/status.h"

namespace strata::cli {

struct BenchCacheFlags {
  uint64_t keys = 100000;                               // distinct keys of the Zipf workloads
  size_t accesses = 1000000;                            // accesses per Zipf workload
  double lambda = cache::PolicyOptions{}.lambda_per_s;  // dual-factor age decay (1/s)
  double k = cache::PolicyOptions{}.k;                  // dual-factor frequency saturation
  double half_life_s = cache::PolicyOptions{}.count_half_life_s;  // access-count half-life (s)
  bool admission = false;  // compare always-admit with cache-aware admission instead
  double admission_gain = cache::AdmissionOptions{}.gain;
  double admission_min = cache::AdmissionOptions{}.min_probability;
  double admission_watch = cache::AdmissionOptions{}.watch_factor;
  bool l2 = false;         // replay the Mooncake traces through the L2 prefix cache instead
  double l2_tpot_ms = 20;  // L2 replay: a request holds its blocks for output_length x this
  double l2_window = cache::PolicyOptions{}.window_fraction;  // L2 replay: W-TinyLFU window share
  std::string data_dir = "../shared/data";
  std::string json;
};

// One request of a Mooncake trace: JSONL records {"timestamp": ms,
// "output_length": tokens (optional), "hash_ids": [prefix block ids]}.
struct MooncakeRequest {
  double arrival_s = 0;
  double output_tokens = 0;
  std::vector<uint64_t> blocks;  // hash id + 1 (never 0), in prefix order
};
// The records in file order; a malformed record (or a hash id that is not a
// natural number) is InvalidArgument naming path:line.
util::StatusOr<std::vector<MooncakeRequest>> LoadMooncakeTrace(util::FileSystem& fs,
                                                               const std::string& path);

int RunBenchCache(const Env& env, const BenchCacheFlags& flags);
// `strata bench cache --l2` (cli/bench_l2.cpp).
int RunBenchL2(const Env& env, const BenchCacheFlags& flags);

}  // namespace strata::cli
