#include "engine/placement.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

namespace strata::engine {
namespace {

// What a plan is judged by, best first: fewest crossings, then the
// shortest, then the most headroom left on the fullest node.
struct Cost {
  int64_t crossings = 0;
  int64_t distance = 0;
  double min_slack = 0;  // the smallest share of a node's room left free

  bool BetterThan(const Cost& o) const {
    if (crossings != o.crossings) return crossings < o.crossings;
    if (distance != o.distance) return distance < o.distance;
    return min_slack > o.min_slack + 1e-12;
  }
};

util::Status CheckTopology(const Topology& t, double headroom) {
  const size_t n = t.nodes.size();
  if (n == 0 || n > 64) return util::InvalidArgumentError("placement: 1 to 64 NUMA nodes");
  if (!(headroom >= 1.0 && headroom <= 10.0)) {
    return util::InvalidArgumentError("placement: the headroom must be within [1, 10]");
  }
  if (t.distance.size() != n) {
    return util::InvalidArgumentError(fmt::format(
        "placement: the distance table has {} rows for {} nodes", t.distance.size(), n));
  }
  for (size_t i = 0; i < n; ++i) {
    if (t.distance[i].size() != n) {
      return util::InvalidArgumentError(fmt::format(
          "placement: distance row {} has {} entries for {} nodes", i, t.distance[i].size(), n));
    }
    for (size_t j = 0; j < n; ++j) {
      if (t.distance[i][j] < 0 || t.distance[i][j] != t.distance[j][i]) {
        return util::InvalidArgumentError(
            fmt::format("placement: distance[{}][{}] is negative or not symmetric", i, j));
      }
    }
  }
  return util::OkStatus();
}

// What each node may still take: its memory over the headroom, less what is
// placed on it already.
std::vector<uint64_t> Room(const Topology& t, const std::vector<uint64_t>& placed,
                           double headroom) {
  std::vector<uint64_t> room(t.nodes.size());
  for (size_t i = 0; i < room.size(); ++i) {
    const auto cap =
        static_cast<uint64_t>(std::floor(static_cast<double>(t.nodes[i].memory_bytes) / headroom));
    room[i] = cap > placed[i] ? cap - placed[i] : 0;
  }
  return room;
}

double MinSlack(const std::vector<uint64_t>& room, const std::vector<uint64_t>& used) {
  double slack = 1.0;
  for (size_t i = 0; i < room.size(); ++i) {
    if (used[i] == 0) continue;
    slack = std::min(slack, 1.0 - static_cast<double>(used[i]) / static_cast<double>(room[i]));
  }
  return slack;
}

util::Status Unplaceable(const PlacementModel& m, const std::vector<uint64_t>& room,
                         double headroom) {
  const uint64_t need =
      std::accumulate(m.stages.begin(), m.stages.end(), uint64_t{0},
                      [](uint64_t s, const PlacementStage& st) { return s + st.bytes; });
  const uint64_t have = std::accumulate(room.begin(), room.end(), uint64_t{0});
  return util::ResourceExhaustedError(fmt::format(
      "placement: model '{}' needs {:.2f} GiB and the nodes have {:.2f} GiB left with {}x "
      "headroom{}",
      m.name, static_cast<double>(need) / (1ull << 30), static_cast<double>(have) / (1ull << 30),
      headroom, need <= have ? ", but no stage order fits them" : ""));
}

// The depth-first branch and bound over runs of one model.
class Search {
 public:
  Search(const Topology& t, const PlacementModel& m, std::vector<uint64_t> room,
         uint64_t max_expansions)
      : t_(t), m_(m), room_(std::move(room)), used_(room_.size(), 0), max_(max_expansions) {
    for (size_t i = 0; i < t.distance.size(); ++i) {
      for (size_t j = 0; j < t.distance.size(); ++j) {
        if (i != j) min_remote_ = std::min(min_remote_, static_cast<int64_t>(t.distance[i][j]));
      }
    }
    if (min_remote_ == std::numeric_limits<int64_t>::max()) min_remote_ = 0;
    prefix_.push_back(0);
    for (const PlacementStage& s : m.stages) prefix_.push_back(prefix_.back() + s.bytes);
  }

  bool Run() {
    Visit(0, room_.size(), 0, 0);
    return found_;
  }
  bool exact() const { return expansions_ <= max_; }
  const std::vector<PlacedRun>& best() const { return best_runs_; }
  const Cost& best_cost() const { return best_; }

 private:
  uint64_t Bytes(size_t first, size_t end) const { return prefix_[end] - prefix_[first]; }

  // Runs from stage `i` on, the run before on node `prev` (none: size()).
  void Visit(size_t i, size_t prev, int64_t crossings, int64_t distance) {
    if (++expansions_ > max_) return;
    const size_t n_stages = m_.stages.size();
    if (i == n_stages) {
      const Cost c{crossings, distance, MinSlack(room_, used_)};
      if (!found_ || c.BetterThan(best_)) {
        best_ = c;
        best_runs_ = runs_;
        found_ = true;
      }
      return;
    }
    // The nodes by the room they have left, the roomiest first: tried in
    // that order, and the fewest of them that could hold the rest bound the
    // runs still to come (each run is on one node).
    std::vector<size_t> order(room_.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return Left(a) > Left(b); });
    const uint64_t rest = Bytes(i, n_stages);
    uint64_t sum = 0;
    int64_t runs_needed = 0;
    for (size_t w : order) {
      if (sum >= rest) break;
      sum += Left(w);
      ++runs_needed;
    }
    if (sum < rest) return;  // the rest fits nowhere
    const int64_t more = i > 0 ? runs_needed : runs_needed - 1;
    if (!CouldBeat(crossings + more, distance + more * min_remote_)) return;
    for (size_t w : order) {
      if (w == prev) continue;
      const int64_t c = i > 0 ? crossings + 1 : 0;
      const int64_t d = i > 0 ? distance + t_.distance[prev][w] : 0;
      if (!CouldBeat(c, d)) continue;
      // The longest run that fits on w, then shorter ones.
      size_t end = i;
      while (end < n_stages && Bytes(i, end + 1) <= Left(w)) ++end;
      for (size_t e = end; e > i; --e) {
        const uint64_t bytes = Bytes(i, e);
        used_[w] += bytes;
        runs_.push_back({.first = i, .end = e, .node = w, .bytes = bytes});
        Visit(e, w, c, d);
        runs_.pop_back();
        used_[w] -= bytes;
        if (expansions_ > max_) return;
      }
    }
  }

  uint64_t Left(size_t w) const { return room_[w] - used_[w]; }

  // Whether a plan whose crossings and distance are at least these could
  // still beat the best found: plans equal on both are not looked for
  // (ties go to the first found, which the roomiest-first order makes the
  // most even).
  bool CouldBeat(int64_t crossings, int64_t distance) const {
    return !found_ || crossings < best_.crossings ||
           (crossings == best_.crossings && distance < best_.distance);
  }

  const Topology& t_;
  const PlacementModel& m_;
  const std::vector<uint64_t> room_;
  std::vector<uint64_t> used_;
  std::vector<uint64_t> prefix_;
  std::vector<PlacedRun> runs_;
  std::vector<PlacedRun> best_runs_;
  Cost best_;
  bool found_ = false;
  uint64_t expansions_ = 0;
  const uint64_t max_;
  int64_t min_remote_ = std::numeric_limits<int64_t>::max();  // the shortest distance between nodes
};

ModelPlacement Describe(const PlacementModel& m, std::vector<PlacedRun> runs, const Cost& c,
                        bool exact) {
  return {.model = m.name,
          .runs = std::move(runs),
          .cross_node_bytes_per_token = static_cast<uint64_t>(c.crossings) * m.boundary_bytes,
          .distance = c.distance,
          .exact = exact};
}

util::Status CheckModel(const PlacementModel& m) {
  if (m.stages.empty()) {
    return util::InvalidArgumentError(fmt::format("placement: model '{}' has no stages", m.name));
  }
  return util::OkStatus();
}

}  // namespace

util::StatusOr<PlacementPlan> PlanPlacement(const Topology& topology,
                                            std::span<const PlacementModel> models,
                                            const PlacementOptions& options) {
  STRATA_RETURN_IF_ERROR(CheckTopology(topology, options.headroom));
  std::vector<size_t> order(models.size());
  std::iota(order.begin(), order.end(), 0);
  const auto total = [&](size_t k) {
    uint64_t s = 0;
    for (const PlacementStage& st : models[k].stages) s += st.bytes;
    return s;
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return total(a) > total(b); });
  PlacementPlan plan;
  plan.models.resize(models.size());
  plan.node_bytes.assign(topology.nodes.size(), 0);
  for (size_t k : order) {
    const PlacementModel& m = models[k];
    STRATA_RETURN_IF_ERROR(CheckModel(m));
    std::vector<uint64_t> room = Room(topology, plan.node_bytes, options.headroom);
    Search search(topology, m, room, options.max_expansions);
    if (!search.Run()) return Unplaceable(m, room, options.headroom);
    for (const PlacedRun& r : search.best()) plan.node_bytes[r.node] += r.bytes;
    plan.models[k] = Describe(m, search.best(), search.best_cost(), search.exact());
  }
  return plan;
}

util::StatusOr<ModelPlacement> PlanPlacementExhaustively(const Topology& topology,
                                                         const PlacementModel& model,
                                                         double headroom) {
  STRATA_RETURN_IF_ERROR(CheckTopology(topology, headroom));
  STRATA_RETURN_IF_ERROR(CheckModel(model));
  const size_t n = topology.nodes.size(), s = model.stages.size();
  if (std::pow(static_cast<double>(n), static_cast<double>(s)) > 1e7) {
    return util::InvalidArgumentError("placement: too many assignments to try them all");
  }
  const std::vector<uint64_t> room = Room(topology, std::vector<uint64_t>(n, 0), headroom);
  std::vector<size_t> a(s, 0);
  bool found = false;
  Cost best;
  std::vector<size_t> best_a;
  while (true) {
    std::vector<uint64_t> used(n, 0);
    bool fits = true;
    Cost c;
    for (size_t i = 0; i < s && fits; ++i) {
      used[a[i]] += model.stages[i].bytes;
      fits = used[a[i]] <= room[a[i]];
      if (i > 0 && a[i] != a[i - 1]) {
        ++c.crossings;
        c.distance += topology.distance[a[i - 1]][a[i]];
      }
    }
    if (fits) {
      c.min_slack = MinSlack(room, used);
      if (!found || c.BetterThan(best)) {
        best = c;
        best_a = a;
        found = true;
      }
    }
    size_t k = 0;  // the next assignment, as a base-n counter
    while (k < s && ++a[k] == n) a[k++] = 0;
    if (k == s) break;
  }
  if (!found) return Unplaceable(model, room, headroom);
  std::vector<PlacedRun> runs;
  for (size_t i = 0; i < s; ++i) {
    if (runs.empty() || runs.back().node != best_a[i]) {
      runs.push_back({.first = i, .end = i, .node = best_a[i], .bytes = 0});
    }
    runs.back().end = i + 1;
    runs.back().bytes += model.stages[i].bytes;
  }
  return Describe(model, std::move(runs), best, true);
}

util::StatusOr<std::vector<int32_t>> ParseCpuList(std::string_view text) {
  std::vector<int32_t> out;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty()) return out;
  const auto bad = [&] {
    return util::InvalidArgumentError(fmt::format("'{}' is not a CPU list like 0-3,8", text));
  };
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view part = text.substr(at, comma - at);
    const size_t dash = part.find('-');
    int32_t lo = 0, hi = 0;
    const auto num = [](std::string_view t, int32_t& v) {
      const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
      return r.ec == std::errc() && r.ptr == t.data() + t.size() && v >= 0 && v < (1 << 20);
    };
    if (dash == std::string_view::npos) {
      if (!num(part, lo)) return bad();
      hi = lo;
    } else if (!num(part.substr(0, dash), lo) || !num(part.substr(dash + 1), hi) || hi < lo) {
      return bad();
    }
    for (int32_t c = lo; c <= hi; ++c) out.push_back(c);
    at = comma + 1;
  }
  return out;
}

// The "MemTotal: K kB" of a meminfo file (/proc/meminfo, or a node's with
// its "Node N " prefix), in bytes; DataLoss naming the file without one.
util::StatusOr<uint64_t> MemTotalBytes(util::FileSystem& fs, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(const std::string meminfo, fs.ReadFile(path));
  const size_t at = meminfo.find("MemTotal:");
  uint64_t kb = 0;
  if (at != std::string::npos) {
    size_t p = at + 9;
    while (p < meminfo.size() && meminfo[p] == ' ') ++p;
    std::from_chars(meminfo.data() + p, meminfo.data() + meminfo.size(), kb);
  }
  if (kb == 0) return util::DataLossError(path + ": no MemTotal");
  return kb * 1024;
}

util::StatusOr<Topology> ReadNumaTopology(util::FileSystem& fs, const std::string& root) {
  if (!fs.Exists(root + "/online")) {
    return util::NotFoundError(root + "/online is missing: no NUMA nodes described");
  }
  STRATA_ASSIGN_OR_RETURN(const std::string online, fs.ReadFile(root + "/online"));
  auto ids = ParseCpuList(online);  // the same list syntax
  if (!ids.ok() || ids->empty()) {
    return util::DataLossError(root + "/online: not a list of node numbers");
  }
  Topology t;
  for (int32_t id : *ids) {
    const std::string dir = fmt::format("{}/node{}", root, id);
    STRATA_ASSIGN_OR_RETURN(const uint64_t memory, MemTotalBytes(fs, dir + "/meminfo"));
    STRATA_ASSIGN_OR_RETURN(const std::string cpulist, fs.ReadFile(dir + "/cpulist"));
    auto cpus = ParseCpuList(cpulist);
    if (!cpus.ok())
      return util::DataLossError(dir + "/cpulist: " + std::string(cpus.status().message()));
    t.nodes.push_back({.id = id, .memory_bytes = memory, .cpus = std::move(*cpus)});
  }
  // Each node's distance row lists every online node's, in node order.
  for (const NumaNode& n : t.nodes) {
    const std::string path = fmt::format("{}/node{}/distance", root, n.id);
    STRATA_ASSIGN_OR_RETURN(const std::string text, fs.ReadFile(path));
    std::vector<int32_t> row;
    const char* p = text.data();
    const char* end = text.data() + text.size();
    while (p < end) {
      while (p < end && (*p == ' ' || *p == '\n')) ++p;
      if (p == end) break;
      int32_t v = 0;
      const auto r = std::from_chars(p, end, v);
      if (r.ec != std::errc()) return util::DataLossError(path + ": not a row of numbers");
      row.push_back(v);
      p = r.ptr;
    }
    if (row.size() != t.nodes.size()) {
      return util::DataLossError(
          fmt::format("{}: {} distances for {} nodes", path, row.size(), t.nodes.size()));
    }
    t.distance.push_back(std::move(row));
  }
  return t;
}

util::StatusOr<Topology> ReadMachineTopology(util::FileSystem& fs, int32_t n_cpus,
                                             const std::string& root) {
  auto numa = ReadNumaTopology(fs, root);
  if (numa.ok() || numa.status().code() != util::StatusCode::kNotFound) return numa;
  STRATA_ASSIGN_OR_RETURN(const uint64_t memory, MemTotalBytes(fs, "/proc/meminfo"));
  NumaNode node{.id = 0, .memory_bytes = memory, .cpus = {}};
  for (int32_t c = 0; c < std::max(1, n_cpus); ++c) node.cpus.push_back(c);
  return Topology{.nodes = {std::move(node)}, .distance = {{10}}};
}

}  // namespace strata::engine
