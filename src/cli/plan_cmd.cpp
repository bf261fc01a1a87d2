// `strata plan`: where each model's weights, and the threads that read
// them, go on this machine's NUMA nodes (or on a topology file's), and the
// bytes that cross between nodes per token (engine/placement.h).
//
// A model's stages and the topology file are cli/placement_io.h's.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/placement_io.h"
#include "engine/placement.h"
#include "format/gguf.h"

namespace strata::cli {
namespace {

using Json = nlohmann::json;

struct PlanFlags {
  std::vector<std::string> models;
  std::string topology;  // a JSON file; "" = this machine
  int32_t ctx = 4096;    // tokens of KV cache per model
  double headroom = 1.2;
  bool json = false;
};

double GiB(uint64_t bytes) { return static_cast<double>(bytes) / (1ull << 30); }

int RunPlan(const Env& env, const PlanFlags& f) {
  if (f.models.empty()) return ReportError(util::InvalidArgumentError("plan: give -m MODEL"));
  if (f.ctx < 1 || f.ctx > (1 << 24)) {
    return ReportError(util::InvalidArgumentError("--ctx must be within [1, 16777216]"));
  }
  if (!(f.headroom >= 1.0 && f.headroom <= 10.0)) {
    return ReportError(util::InvalidArgumentError("--headroom must be within [1, 10]"));
  }
  auto topology = f.topology.empty()
                      ? engine::ReadMachineTopology(
                            *env.fs, static_cast<int32_t>(std::thread::hardware_concurrency()))
                      : TopologyFile(env, f.topology);
  if (!topology.ok()) return ReportError(topology.status());
  std::vector<engine::PlacementModel> models;
  for (const std::string& path : f.models) {
    auto gguf = format::GgufFile::Open(*env.fs, path);
    if (!gguf.ok()) return ReportError(gguf.status());
    auto m = ModelLayoutOf(**gguf, std::filesystem::path(path).stem().string(), f.ctx);
    if (!m.ok()) return ReportError(m.status());
    models.push_back(std::move(m->placement));
  }
  auto plan = engine::PlanPlacement(*topology, models, {.headroom = f.headroom});
  if (!plan.ok()) return ReportError(plan.status());
  const engine::Topology& t = *topology;
  if (f.json) {
    Json out = {{"headroom", f.headroom},
                {"ctx", f.ctx},
                {"nodes", Json::array()},
                {"models", Json::array()}};
    for (size_t i = 0; i < t.nodes.size(); ++i) {
      out["nodes"].push_back({{"id", t.nodes[i].id},
                              {"memory_bytes", t.nodes[i].memory_bytes},
                              {"placed_bytes", plan->node_bytes[i]},
                              {"cpus", CpuRanges(t.nodes[i].cpus)}});
    }
    for (size_t k = 0; k < models.size(); ++k) {
      const engine::ModelPlacement& p = plan->models[k];
      Json runs = Json::array();
      for (const engine::PlacedRun& r : p.runs) {
        runs.push_back({{"node", t.nodes[r.node].id},
                        {"first", models[k].stages[r.first].name},
                        {"last", models[k].stages[r.end - 1].name},
                        {"bytes", r.bytes}});
      }
      out["models"].push_back({{"model", p.model},
                               {"runs", std::move(runs)},
                               {"cross_node_bytes_per_token", p.cross_node_bytes_per_token},
                               {"distance", p.distance},
                               {"exact", p.exact}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return kExitOk;
  }
  fmt::print("{} NUMA node(s), headroom {}x, KV cache for {} tokens a model\n", t.nodes.size(),
             f.headroom, f.ctx);
  for (size_t i = 0; i < t.nodes.size(); ++i) {
    fmt::print(
        "  node {}: {:.2f} GiB, {:.2f} GiB placed ({:.0f}% of what the headroom allows), "
        "CPUs {}\n",
        t.nodes[i].id, GiB(t.nodes[i].memory_bytes), GiB(plan->node_bytes[i]),
        100.0 * static_cast<double>(plan->node_bytes[i]) * f.headroom /
            static_cast<double>(t.nodes[i].memory_bytes),
        CpuRanges(t.nodes[i].cpus));
  }
  for (size_t k = 0; k < models.size(); ++k) {
    const engine::ModelPlacement& p = plan->models[k];
    fmt::print("{}: {} stage(s) in {} run(s); {} B cross nodes per token{}\n", p.model,
               models[k].stages.size(), p.runs.size(), p.cross_node_bytes_per_token,
               p.exact ? "" : " (the search stopped early: the fewest it found)");
    for (const engine::PlacedRun& r : p.runs) {
      fmt::print("  node {}: {} .. {} ({:.2f} GiB), threads on CPUs {}\n", t.nodes[r.node].id,
                 models[k].stages[r.first].name, models[k].stages[r.end - 1].name, GiB(r.bytes),
                 CpuRanges(t.nodes[r.node].cpus));
    }
  }
  return kExitOk;
}

}  // namespace

Command RegisterPlan(CLI::App& app) {
  auto f = std::make_shared<PlanFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Plan where models' weights and threads go on this machine's NUMA nodes (or a topology "
      "file's) so the fewest bytes cross nodes per token, each node keeping the headroom");
  cmd->add_option("-m,--model", f->models, "GGUF model file; repeat for several")->required();
  cmd->add_option("--topology", f->topology,
                  "JSON file of nodes: {\"nodes\": [{\"id\": 0, \"memory_gib\": 64, \"cpus\": "
                  "\"0-15\"}], \"distances\": [[10, 21], [21, 10]]}; default: this machine "
                  "(/sys/devices/system/node, else one node)");
  cmd->add_option("--ctx", f->ctx, "Tokens of KV cache to plan for each model")
      ->capture_default_str();
  cmd->add_option("--headroom", f->headroom,
                  "Each node's placed bytes times this stay within its memory, 1 to 10")
      ->capture_default_str();
  cmd->add_flag("--json", f->json, "Print the plan as JSON");
  return {cmd, [f](const Env& env) { return RunPlan(env, *f); }};
}

}  // namespace strata::cli
