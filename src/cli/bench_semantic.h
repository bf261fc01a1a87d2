// cli/bench_semantic.h — `strata bench semantic`, a subcommand of `strata
// bench`: the semantic index's lookup latency, recall and candidate
// reduction at several sizes, for each nearest-neighbour kind.
#pragma once

#include <cstdint>
#include <string>

#include "cli/commands.h"

namespace strata::cli {

struct BenchSemanticFlags {
  std::string sizes = "10000,100000,1000000";  // entries in one namespace
  std::string kinds = "hnsw,ivf,lsh,flat";
  int32_t dim = 128;
  int32_t queries = 1000;  // half near a stored entry (cosine ~0.92), half unrelated
  double similarity = 0.85;
  uint64_t seed = 1;
  std::string json;
};

int RunBenchSemantic(const Env& env, const BenchSemanticFlags& flags);

}  // namespace strata::cli
