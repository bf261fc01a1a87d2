#include "cli/placement_io.h"

#include <cstdlib>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace strata::cli {

namespace {
using Json = nlohmann::json;
}  // namespace

util::StatusOr<ModelLayout> ModelLayoutOf(const format::GgufFile& g, const std::string& name,
                                          int32_t ctx) {
  STRATA_ASSIGN_OR_RETURN(const std::string_view arch, g.GetStringOr("general.architecture", ""));
  if (arch.empty()) return util::InvalidArgumentError(name + ": no general.architecture");
  const std::string a(arch);
  STRATA_ASSIGN_OR_RETURN(const uint64_t n_embd, g.GetUint(a + ".embedding_length"));
  STRATA_ASSIGN_OR_RETURN(const uint64_t n_head, g.GetUint(a + ".attention.head_count"));
  STRATA_ASSIGN_OR_RETURN(const uint64_t n_head_kv,
                          g.GetUintOr(a + ".attention.head_count_kv", n_head));
  if (n_head == 0 || n_embd == 0) return util::InvalidArgumentError(name + ": no attention heads");
  STRATA_ASSIGN_OR_RETURN(const uint64_t head_dim,
                          g.GetUintOr(a + ".attention.key_length", n_embd / n_head));
  const uint64_t kv_bytes = static_cast<uint64_t>(ctx) * n_head_kv * head_dim * 2 * sizeof(float);

  ModelLayout out;
  engine::PlacementModel& m = out.placement;
  m.name = name;
  m.boundary_bytes = n_embd * sizeof(float);
  struct Group {
    uint64_t bytes = 0;
    std::vector<std::span<const uint8_t>> data;
  };
  Group embd, rest;
  std::map<uint64_t, Group> layers;  // block number -> its tensors
  for (const format::GgufTensorInfo& t : g.tensors()) {
    Group& group = t.name.rfind("token_embd.", 0) == 0 ? embd
                   : t.name.rfind("blk.", 0) == 0
                       ? layers[std::strtoull(t.name.c_str() + 4, nullptr, 10)]
                       : rest;
    group.bytes += t.n_bytes;
    group.data.push_back(t.data);
  }
  auto add = [&out](std::string stage, uint64_t bytes, std::vector<std::span<const uint8_t>> data) {
    out.placement.stages.push_back({.name = std::move(stage), .bytes = bytes});
    out.stage_bytes.push_back(std::move(data));
  };
  if (embd.bytes > 0) add("token_embd", embd.bytes, std::move(embd.data));
  for (auto& [n, group] : layers) {
    add(fmt::format("blk.{}", n), group.bytes + kv_bytes, std::move(group.data));
  }
  if (rest.bytes > 0) add("output", rest.bytes, std::move(rest.data));
  if (m.stages.empty()) return util::InvalidArgumentError(name + ": no tensors");
  return out;
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

}  // namespace strata::cli
