// `strata plan`: where each model's weights, and the threads that read
// them, go on this machine's NUMA nodes (or on a topology file's), and the
// bytes that cross between nodes per token (engine/placement.h).
//
// A model's stages are its GGUF tensors grouped as the forward pass reads
// them: the token embedding, each layer (blk.N.*, with its KV cache at
// --ctx tokens, F32 as the engine keeps it), then the rest (output norm
// and head). What crosses a boundary per token is the residual stream:
// embedding_length × 4 bytes.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
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

// The stages and boundary bytes of the GGUF at `path`.
util::StatusOr<engine::PlacementModel> ModelStages(const Env& env, const std::string& path,
                                                   int32_t ctx) {
  STRATA_ASSIGN_OR_RETURN(auto gguf, format::GgufFile::Open(*env.fs, path));
  const format::GgufFile& g = *gguf;
  STRATA_ASSIGN_OR_RETURN(const std::string_view arch, g.GetStringOr("general.architecture", ""));
  if (arch.empty()) return util::InvalidArgumentError(path + ": no general.architecture");
  const std::string a(arch);
  STRATA_ASSIGN_OR_RETURN(const uint64_t n_embd, g.GetUint(a + ".embedding_length"));
  STRATA_ASSIGN_OR_RETURN(const uint64_t n_head, g.GetUint(a + ".attention.head_count"));
  STRATA_ASSIGN_OR_RETURN(const uint64_t n_head_kv,
                          g.GetUintOr(a + ".attention.head_count_kv", n_head));
  if (n_head == 0 || n_embd == 0) return util::InvalidArgumentError(path + ": no attention heads");
  STRATA_ASSIGN_OR_RETURN(const uint64_t head_dim,
                          g.GetUintOr(a + ".attention.key_length", n_embd / n_head));
  const uint64_t kv_bytes = static_cast<uint64_t>(ctx) * n_head_kv * head_dim * 2 * sizeof(float);

  engine::PlacementModel m;
  m.name = std::filesystem::path(path).stem().string();
  m.boundary_bytes = n_embd * sizeof(float);
  uint64_t embd = 0, rest = 0;
  std::map<uint64_t, uint64_t> layers;  // block number -> bytes
  for (const format::GgufTensorInfo& t : g.tensors()) {
    if (t.name.rfind("token_embd.", 0) == 0) {
      embd += t.n_bytes;
    } else if (t.name.rfind("blk.", 0) == 0) {
      layers[std::strtoull(t.name.c_str() + 4, nullptr, 10)] += t.n_bytes;
    } else {
      rest += t.n_bytes;
    }
  }
  if (embd > 0) m.stages.push_back({.name = "token_embd", .bytes = embd});
  for (const auto& [n, bytes] : layers) {
    m.stages.push_back({.name = fmt::format("blk.{}", n), .bytes = bytes + kv_bytes});
  }
  if (rest > 0) m.stages.push_back({.name = "output", .bytes = rest});
  if (m.stages.empty()) return util::InvalidArgumentError(path + ": no tensors");
  return m;
}

// A topology file: {"nodes": [{"id": 0, "memory_gib": 64, "cpus": "0-15"}, ...],
// "distances": [[10, 21], [21, 10]]} ("memory_bytes" instead of
// "memory_gib" also works; "distances" defaults to 10 and 20).
util::StatusOr<engine::Topology> TopologyFile(const Env& env, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(const std::string text, env.fs->ReadFile(path));
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto bad = [&](const std::string& why) {
    return util::InvalidArgumentError(fmt::format("topology {}: {}", path, why));
  };
  if (!j.is_object() || !j.contains("nodes") || !j["nodes"].is_array() || j["nodes"].empty()) {
    return bad("wants an object with a non-empty \"nodes\" array");
  }
  engine::Topology t;
  for (const Json& n : j["nodes"]) {
    engine::NumaNode node;
    node.id = static_cast<int32_t>(t.nodes.size());
    if (!n.is_object()) return bad("each node is an object");
    if (n.contains("id")) {
      if (!n["id"].is_number_integer() || n["id"].get<int64_t>() < 0) return bad("bad node id");
      node.id = n["id"].get<int32_t>();
    }
    if (n.contains("memory_gib") && n["memory_gib"].is_number() &&
        n["memory_gib"].get<double>() > 0 && n["memory_gib"].get<double>() < 1e6) {
      node.memory_bytes = static_cast<uint64_t>(n["memory_gib"].get<double>() * (1ull << 30));
    } else if (n.contains("memory_bytes") && n["memory_bytes"].is_number_unsigned()) {
      node.memory_bytes = n["memory_bytes"].get<uint64_t>();
    } else {
      return bad(fmt::format("node {} needs \"memory_gib\" (a positive number) or \"memory_bytes\"",
                             node.id));
    }
    if (n.contains("cpus")) {
      if (!n["cpus"].is_string()) return bad("\"cpus\" is a CPU list such as \"0-7,16-23\"");
      auto cpus = engine::ParseCpuList(n["cpus"].get<std::string>());
      if (!cpus.ok()) return bad(std::string(cpus.status().message()));
      node.cpus = std::move(*cpus);
    }
    t.nodes.push_back(std::move(node));
  }
  const size_t n = t.nodes.size();
  t.distance.assign(n, std::vector<int32_t>(n, 20));
  for (size_t i = 0; i < n; ++i) t.distance[i][i] = 10;
  if (j.contains("distances")) {
    const Json& d = j["distances"];
    if (!d.is_array() || d.size() != n) return bad("\"distances\" is one row per node");
    for (size_t i = 0; i < n; ++i) {
      if (!d[i].is_array() || d[i].size() != n)
        return bad("each distance row has one entry a node");
      for (size_t k = 0; k < n; ++k) {
        if (!d[i][k].is_number_integer() || d[i][k].get<int64_t>() < 0 ||
            d[i][k].get<int64_t>() > 1000) {
          return bad("distances are integers 0-1000");
        }
        t.distance[i][k] = d[i][k].get<int32_t>();
      }
    }
  }
  return t;
}

std::string CpuRanges(const std::vector<int32_t>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? std::to_string(cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out.empty() ? "-" : out;
}

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
    auto m = ModelStages(env, path, f.ctx);
    if (!m.ok()) return ReportError(m.status());
    models.push_back(std::move(*m));
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
