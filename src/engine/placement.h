// engine/placement.h — where a model's weights, and the threads that read
// them, go on a machine of several NUMA nodes (L7 placement).
//
// Promise: PlanPlacement splits each model's stages (in forward order: the
// token embedding, each layer with its KV cache, the output head) into runs
// of consecutive stages, each on one node, so that the bytes crossing
// between nodes per token are fewest: a token's activations cross once at
// every boundary between two runs on different nodes. Among plans with the
// fewest crossings it takes one whose crossings are shortest (the sum of the
// nodes' distances, as the machine's SLIT table gives them); among those,
// the first found, which puts runs on the nodes with the most room left
// first. Every node
// keeps `headroom`: the bytes placed on it times `headroom` stay within its
// memory. A node may hold several runs of one model when memory forces it.
// The search is exact in crossings and distance (a depth-first branch and
// bound over the runs, each run as long as fits first, bounded below by the
// fewest nodes that could hold the stages left) unless it exceeds
// `max_expansions`; then the best plan found is returned with `exact`
// false. Several models are placed
// one after the other, the largest first, each on what the others left.
// kResourceExhausted (naming the model, and how much memory is missing)
// when a model cannot be placed; kInvalidArgument for a malformed topology.
//
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "util/file_system.h"
#include "util/status.h"

namespace strata::engine {

struct NumaNode {
  int32_t id = 0;               // the kernel's node number
  uint64_t memory_bytes = 0;    // what the node has for weights and KV
  std::vector<int32_t> cpus{};  // its CPUs: the threads that read its runs
};

struct Topology {
  std::vector<NumaNode> nodes{};
  // distance[i][j]: the SLIT distance between nodes[i] and nodes[j] (10 for
  // a node to itself, more for remote ones); square, symmetric.
  std::vector<std::vector<int32_t>> distance{};
};

struct PlacementStage {
  std::string name{};  // "token_embd", "blk.0", ..., "output"
  uint64_t bytes = 0;  // its weights, and its KV cache at the served context
};

struct PlacementModel {
  std::string name{};
  std::vector<PlacementStage> stages{};  // forward order
  uint64_t boundary_bytes = 0;           // what crosses a run boundary per token (activations)
};

struct PlacedRun {
  size_t first = 0;  // index of its first stage
  size_t end = 0;    // one past its last
  size_t node = 0;   // index into Topology::nodes
  uint64_t bytes = 0;
};

struct ModelPlacement {
  std::string model{};
  std::vector<PlacedRun> runs{};
  uint64_t cross_node_bytes_per_token = 0;  // boundaries between nodes × boundary_bytes
  int64_t distance = 0;                     // the sum of those boundaries' SLIT distances
  bool exact = true;                        // the search proved it the fewest and shortest
};

struct PlacementPlan {
  std::vector<ModelPlacement> models{};  // in the order given
  std::vector<uint64_t> node_bytes{};    // what is placed on each node
};

struct PlacementOptions {
  double headroom = 1.2;                 // [1, 10]
  uint64_t max_expansions = 20'000'000;  // search steps per model before it settles
};

util::StatusOr<PlacementPlan> PlanPlacement(const Topology& topology,
                                            std::span<const PlacementModel> models,
                                            const PlacementOptions& options = {});

// The same optimum by trying every assignment of stages to nodes (nodes^
// stages of them): for checking PlanPlacement on small cases. One model.
util::StatusOr<ModelPlacement> PlanPlacementExhaustively(const Topology& topology,
                                                         const PlacementModel& model,
                                                         double headroom = 1.2);

// The machine's NUMA nodes as Linux describes them under `root`
// (/sys/devices/system/node): `online` names the nodes, and each nodeN has
// `meminfo` ("Node N MemTotal: K kB"), `distance` (its SLIT row) and
// `cpulist`. NotFound when `root` has no `online` file (no NUMA support: the
// caller takes the machine as one node); DataLoss naming the file when one
// does not parse.
util::StatusOr<Topology> ReadNumaTopology(util::FileSystem& fs,
                                          const std::string& root = "/sys/devices/system/node");

// This machine: ReadNumaTopology's nodes, or, where Linux describes none,
// one node of /proc/meminfo's MemTotal and `n_cpus` CPUs.
util::StatusOr<Topology> ReadMachineTopology(util::FileSystem& fs, int32_t n_cpus,
                                             const std::string& root = "/sys/devices/system/node");

// "0-3,8,10-11" as {0, 1, 2, 3, 8, 10, 11}; InvalidArgument otherwise.
util::StatusOr<std::vector<int32_t>> ParseCpuList(std::string_view text);

}  // namespace strata::engine
