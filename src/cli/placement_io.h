// cli/placement_io.h — what `strata plan` and `strata serve` read to place
// models on NUMA nodes (engine/placement.h): a model's stages from its GGUF,
// a topology file, and CPU lists as text.
//
// A model's stages are its GGUF tensors grouped as the forward pass reads
// them: the token embedding, each layer (blk.N.*, with its KV cache at `ctx`
// tokens, F32 as the engine keeps it), then the rest (output norm and
// head). What crosses a boundary per token is the residual stream:
// embedding_length × 4 bytes.
//
// Threading: plain functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/placement.h"
#include "format/gguf.h"

namespace strata::cli {

struct ModelLayout {
  engine::PlacementModel placement;
  // Per stage (in placement.stages' order), the bytes of its tensors in
  // the GGUF's mapping: what a run's node touches first.
  std::vector<std::vector<std::span<const uint8_t>>> stage_bytes;
};

// The stages of `g` (named `name`) at a KV cache of `ctx` tokens;
// InvalidArgument when it has no architecture, attention heads or tensors.
util::StatusOr<ModelLayout> ModelLayoutOf(const format::GgufFile& g, const std::string& name,
                                          int32_t ctx);

// A topology file: {"nodes": [{"id": 0, "memory_gib": 64, "cpus": "0-15"}, ...],
// "distances": [[10, 21], [21, 10]]} ("memory_bytes" instead of
// "memory_gib" also works; "distances" defaults to 10 and 20).
// InvalidArgument naming the file and what is wrong.
util::StatusOr<engine::Topology> TopologyFile(const Env& env, const std::string& path);

// {0, 1, 2, 3, 8} as "0-3,8"; "-" for none.
std::string CpuRanges(const std::vector<int32_t>& cpus);

}  // namespace strata::cli
