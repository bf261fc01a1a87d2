// `strata bench cache --l2`: the prefix cache (L2) on the Mooncake traces.
//
// Each trace row is a request: arrival time, output length, and the hash ids
// of its prompt's 512-token blocks (a prefix chain: equal ids mean equal
// prefixes). The replay drives the real engine::KvBlockPool index and the
// chosen BlockEvictionPolicy exactly as Engine::AttachCachedPrefix and
// PublishFullBlocks do: look up the prompt's blocks in order until the first
// miss and reference the hits, allocate (evicting if needed) and publish the
// rest, hold every block while the request runs, then release them leaf
// first. A request runs from its arrival for output_length x --l2-tpot-ms
// (decode at a steady pace; prefill time ignored; 0 = it releases its blocks
// before the next request arrives). A pool of one-position blocks stands in
// for the KV memory: only the index and the eviction logic matter here.
//
// The ideal at the same capacity is Belady's MIN on the same events: when a
// block is needed and the pool is full, evict the unreferenced cached block
// whose next use is farthest in the future (blocks in use cannot be evicted).
// Unlimited is the same replay with room for every distinct block. Hit rate
// = prompt blocks served from the cache / prompt blocks, for all three.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "cache/eviction_policy.h"
#include "cli/bench_cache.h"
#include "engine/kv_pool.h"
#include "gateway/block_eviction_adapter.h"
#include "util/clock.h"

namespace strata::cli {
namespace {

struct Trace {
  std::string name;
  std::vector<MooncakeRequest> requests;  // by arrival
  size_t distinct = 0;
  size_t accesses = 0;
};

util::StatusOr<Trace> LoadTrace(util::FileSystem& fs, const std::string& path, std::string name) {
  Trace t;
  t.name = std::move(name);
  STRATA_ASSIGN_OR_RETURN(t.requests, LoadMooncakeTrace(fs, path));
  std::unordered_set<uint64_t> seen;
  for (const MooncakeRequest& r : t.requests) {
    t.accesses += r.blocks.size();
    seen.insert(r.blocks.begin(), r.blocks.end());
  }
  std::stable_sort(
      t.requests.begin(), t.requests.end(),
      [](const MooncakeRequest& a, const MooncakeRequest& b) { return a.arrival_s < b.arrival_s; });
  t.distinct = seen.size();
  return t;
}

// Trace time as the policies' clock.
class ReplayClock final : public util::Clock {
 public:
  std::chrono::steady_clock::time_point Now() const override {
    return std::chrono::steady_clock::time_point(std::chrono::microseconds(us_.load()));
  }
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::time_point(std::chrono::microseconds(us_.load()));
  }
  void Set(double seconds) { us_.store(static_cast<int64_t>(seconds * 1e6)); }

 private:
  std::atomic<int64_t> us_{0};
};

struct ReplayResult {
  uint64_t hits = 0;
  uint64_t blocks = 0;
  uint64_t uncached = 0;  // blocks not stored: every block of the pool was in use
  uint64_t evictions = 0;
  double hit_rate() const {
    return blocks == 0 ? 0 : static_cast<double>(hits) / static_cast<double>(blocks);
  }
};

// Requests whose blocks are still held, by end time.
using EndQueue = std::priority_queue<std::pair<double, size_t>,
                                     std::vector<std::pair<double, size_t>>, std::greater<>>;

// The real pool with `eviction`.
ReplayResult ReplayPool(const Trace& t, int32_t capacity, double tpot_s,
                        std::unique_ptr<engine::BlockEvictionPolicy> eviction, ReplayClock& clock) {
  model::ModelConfig config;
  config.n_layers = 1;
  config.n_kv_heads = 1;
  config.head_dim = 1;
  engine::KvBlockPool pool(config, capacity, 1, std::move(eviction));
  std::vector<std::vector<int32_t>> held(t.requests.size());
  EndQueue ends;
  ReplayResult res;
  auto release = [&](size_t r) {
    for (auto it = held[r].rbegin(); it != held[r].rend(); ++it) pool.Unref(*it);  // leaf first
    held[r].clear();
  };
  for (size_t r = 0; r < t.requests.size(); ++r) {
    const MooncakeRequest& req = t.requests[r];
    while (!ends.empty() && ends.top().first <= req.arrival_s) {
      clock.Set(ends.top().first);
      release(ends.top().second);
      ends.pop();
    }
    clock.Set(req.arrival_s);
    res.blocks += req.blocks.size();
    size_t i = 0;
    for (; i < req.blocks.size(); ++i) {
      const std::optional<int32_t> b = pool.Lookup(req.blocks[i]);
      if (!b) break;
      pool.Ref(*b);
      held[r].push_back(*b);
      ++res.hits;
    }
    for (; i < req.blocks.size(); ++i) {
      const std::optional<int32_t> b = pool.Allocate();
      if (!b) {
        res.uncached += req.blocks.size() - i;
        break;
      }
      const int32_t kept = pool.Publish(*b, req.blocks[i]);
      if (kept != *b) pool.Unref(*b);
      held[r].push_back(kept);
    }
    const double end = req.arrival_s + req.output_tokens * tpot_s;
    if (tpot_s > 0) {
      ends.push({end, r});
    } else {
      release(r);
    }
  }
  res.evictions = static_cast<uint64_t>(pool.prefix_stats().evictions);
  return res;
}

// Belady's MIN on the same events: same lookups, same holds, same capacity.
ReplayResult ReplayIdeal(const Trace& t, size_t capacity, double tpot_s) {
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  // next_use[k]: the index of the next access of the block accessed at k.
  std::vector<uint64_t> next_use(t.accesses);
  {
    std::unordered_map<uint64_t, uint64_t> later;
    uint64_t k = t.accesses;
    for (size_t r = t.requests.size(); r-- > 0;) {
      const auto& blocks = t.requests[r].blocks;
      for (size_t i = blocks.size(); i-- > 0;) {
        --k;
        auto it = later.find(blocks[i]);
        next_use[k] = it == later.end() ? kNever : it->second;
        later[blocks[i]] = k;
      }
    }
  }
  struct Entry {
    int32_t refs = 0;
    uint64_t next = kNever;
  };
  std::unordered_map<uint64_t, Entry> cached;
  cached.reserve(std::min(capacity, t.distinct) * 2);
  // Unreferenced cached blocks, farthest next use last; ties (never used
  // again) go by hash: any order is optimal among them.
  std::set<std::pair<uint64_t, uint64_t>> evictable;
  std::vector<std::vector<uint64_t>> held(t.requests.size());
  EndQueue ends;
  ReplayResult res;
  auto pin = [&](uint64_t h, Entry& e, uint64_t next) {
    if (e.refs++ == 0) evictable.erase({e.next, h});
    e.next = next;
  };
  auto release = [&](size_t r) {
    for (auto it = held[r].rbegin(); it != held[r].rend(); ++it) {
      Entry& e = cached.at(*it);
      if (--e.refs == 0) evictable.insert({e.next, *it});
    }
    held[r].clear();
  };
  uint64_t k = 0;
  for (size_t r = 0; r < t.requests.size(); ++r) {
    const MooncakeRequest& req = t.requests[r];
    while (!ends.empty() && ends.top().first <= req.arrival_s) {
      release(ends.top().second);
      ends.pop();
    }
    res.blocks += req.blocks.size();
    const uint64_t first = k;
    size_t i = 0;
    for (; i < req.blocks.size(); ++i, ++k) {
      auto it = cached.find(req.blocks[i]);
      if (it == cached.end()) break;
      pin(req.blocks[i], it->second, next_use[k]);
      held[r].push_back(req.blocks[i]);
      ++res.hits;
    }
    for (; i < req.blocks.size(); ++i, ++k) {
      const uint64_t h = req.blocks[i];
      auto it = cached.find(h);
      if (it != cached.end()) {  // cached, but after a missing parent: recomputed, then shared
        pin(h, it->second, next_use[k]);
        held[r].push_back(h);
        continue;
      }
      if (cached.size() >= capacity) {
        if (evictable.empty()) {
          res.uncached += req.blocks.size() - i;
          k = first + req.blocks.size();
          break;
        }
        const auto victim = *std::prev(evictable.end());
        evictable.erase(std::prev(evictable.end()));
        cached.erase(victim.second);
        ++res.evictions;
      }
      cached.emplace(h, Entry{1, next_use[k]});
      held[r].push_back(h);
    }
    if (tpot_s > 0) {
      ends.push({req.arrival_s + req.output_tokens * tpot_s, r});
    } else {
      release(r);
    }
  }
  return res;
}

}  // namespace

int RunBenchL2(const Env& env, const BenchCacheFlags& f) {
  if (!(f.l2_tpot_ms >= 0 && f.l2_tpot_ms <= 10000)) {
    return UsageError(fmt::format("--l2-tpot-ms {} is outside [0, 10000]", f.l2_tpot_ms));
  }
  if (!(f.l2_window > 0 && f.l2_window < 1)) {
    return UsageError(fmt::format("--l2-window {} is outside (0, 1)", f.l2_window));
  }
  const double tpot_s = f.l2_tpot_ms / 1000.0;
  std::vector<Trace> traces;
  for (const char* file : {"mooncake_conversation_trace.jsonl", "mooncake_synthetic_trace.jsonl"}) {
    const std::string path = f.data_dir + "/traces/" + file;
    if (!env.fs->Exists(path)) {
      std::fprintf(stderr, "skip: %s is not present\n", path.c_str());
      continue;
    }
    auto t = LoadTrace(*env.fs, path,
                       std::string("mooncake-") + (file[9] == 'c' ? "conversation" : "synthetic"));
    if (!t.ok()) return ReportError(t.status());
    traces.push_back(std::move(t).value());
  }
  const cache::PolicyKind kinds[] = {cache::PolicyKind::kLru, cache::PolicyKind::kDualFactor,
                                     cache::PolicyKind::kWTinyLfu};
  nlohmann::json out = nlohmann::json::array();
  fmt::print(
      "L2 prefix hit rate (prompt blocks served from the cache / prompt blocks); requests hold "
      "their blocks for output_length x {} ms\n\n",
      f.l2_tpot_ms);
  fmt::print("| {:<22} | {:>14} | {:>7} | {:>11} | {:>9} | {:>11} | {:>11} | {:>9} |\n", "workload",
             "capacity", "LRU", "dual-factor", "W-TinyLFU", "ideal (MIN)", "best/ideal",
             "unlimited");
  fmt::print("|{:-<24}|{:->16}|{:->9}|{:->13}|{:->11}|{:->13}|{:->13}|{:->11}|\n", "", "", "", "",
             "", "", "", "");
  int misses = 0;
  for (const Trace& t : traces) {
    const double unlimited = ReplayIdeal(t, t.distinct + 1, tpot_s).hit_rate();
    for (double frac : {0.01, 0.05, 0.10, 0.25, 0.50}) {
      const int32_t cap =
          std::max<int32_t>(16, static_cast<int32_t>(static_cast<double>(t.distinct) * frac));
      const ReplayResult ideal = ReplayIdeal(t, static_cast<size_t>(cap), tpot_s);
      double rate[3];
      nlohmann::json row = {{"workload", t.name},   {"requests", t.requests.size()},
                            {"blocks", t.accesses}, {"distinct_blocks", t.distinct},
                            {"capacity", cap},      {"tpot_ms", f.l2_tpot_ms}};
      for (int p = 0; p < 3; ++p) {
        ReplayClock clock;
        cache::PolicyOptions o;
        o.lambda_per_s = f.lambda;
        o.k = f.k;
        o.count_half_life_s = f.half_life_s;
        o.window_fraction = f.l2_window;
        const ReplayResult r = ReplayPool(
            t, cap, tpot_s, gateway::BlockEvictionFactory(kinds[p], clock, o)(cap), clock);
        rate[p] = r.hit_rate();
        row["hit_rate"][cache::PolicyKindName(kinds[p])] = rate[p];
        row["uncached_blocks"][cache::PolicyKindName(kinds[p])] = r.uncached;
      }
      row["hit_rate"]["ideal"] = ideal.hit_rate();
      row["hit_rate"]["unlimited"] = unlimited;
      const double best = *std::max_element(rate, rate + 3);
      const double ratio = ideal.hit_rate() > 0 ? best / ideal.hit_rate() : 1.0;
      const bool ok = ratio >= 0.95;
      misses += ok ? 0 : 1;
      fmt::print(
          "| {:<22} | {:>7} ({:>2.0f}%) | {:>6.2f}% | {:>10.2f}% | {:>8.2f}% | {:>10.2f}% | "
          "{:>10.1f}%{} | {:>8.2f}% |\n",
          t.name, cap, frac * 100, rate[0] * 100, rate[1] * 100, rate[2] * 100,
          ideal.hit_rate() * 100, ratio * 100, ok ? " " : "!", unlimited * 100);
      out.push_back(std::move(row));
    }
  }
  fmt::print("\n{} of {} rows have no policy within 5 % (relative) of the ideal (marked !)\n",
             misses, out.size());
  if (!f.json.empty()) {
    if (util::Status st = env.fs->WriteFileAtomic(f.json, out.dump(2) + "\n"); !st.ok()) {
      return ReportError(st);
    }
  }
  return kExitOk;
}

}  // namespace strata::cli
