// `strata bench cache`: hit ratios of the eviction policies (LRU, dual-factor,
// W-TinyLFU) at several cache sizes, on Zipf workloads and on the key streams
// of real traces (Mooncake prefix blocks, BurstGPT conversation sessions);
// with --admission, always-admit against cache-aware admission.
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/admission.h"
#include "cache/eviction_policy.h"
#include "cache/policy_sim.h"
#include "cli/bench_cache.h"
#include "util/hash.h"

namespace strata::cli {
namespace {

using cache::KeyAccess;

struct Workload {
  std::string name;
  std::vector<KeyAccess> stream;
};

cache::TimePoint At(double seconds) {
  return cache::TimePoint(std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6)));
}

// Every prefix block of a Mooncake request is one access.
util::StatusOr<std::vector<KeyAccess>> LoadMooncake(util::FileSystem& fs, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::vector<MooncakeRequest> requests, LoadMooncakeTrace(fs, path));
  std::vector<KeyAccess> out;
  for (const MooncakeRequest& r : requests) {
    for (uint64_t block : r.blocks) out.push_back({block, At(r.arrival_s)});
  }
  return out;
}

// BurstGPT (release 3 layout): Timestamp, Session ID, ...: each request of a
// conversation is an access to its session's key; rows without a session are skipped.
util::StatusOr<std::vector<KeyAccess>> LoadBurstSessions(util::FileSystem& fs,
                                                         const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, fs.ReadFile(path));
  std::vector<KeyAccess> out;
  std::istringstream in(text);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> cols;
    std::stringstream ss(line);
    std::string c;
    while (std::getline(ss, c, ',')) cols.push_back(c);
    if (cols.size() < 2 || cols[1].empty()) continue;
    double t = 0;
    try {
      t = std::stod(cols[0]);
    } catch (const std::exception&) {
      continue;
    }
    out.push_back({util::Hash64(cols[1]) | 1, At(t)});
  }
  return out;
}

// The Zipf workloads, then every trace of `data_dir` that is present.
util::StatusOr<std::vector<Workload>> LoadWorkloads(const Env& env, const BenchCacheFlags& f) {
  std::vector<Workload> workloads;
  for (double skew : {0.6, 0.8, 1.0, 1.2}) {
    workloads.push_back(
        {fmt::format("zipf-{:.1f}", skew),
         cache::ZipfWorkload(f.keys, f.accesses, skew, 7, At(0), std::chrono::microseconds(1000))});
  }
  const std::string traces = f.data_dir + "/traces/";
  for (const char* file : {"mooncake_conversation_trace.jsonl", "mooncake_synthetic_trace.jsonl"}) {
    const std::string path = traces + file;
    if (!env.fs->Exists(path)) {
      std::fprintf(stderr, "skip: %s is not present\n", path.c_str());
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(auto s, LoadMooncake(*env.fs, path));
    workloads.push_back(
        {std::string("mooncake-") + (file[9] == 'c' ? "conversation" : "synthetic"), std::move(s)});
  }
  const std::string path = traces + "burstgpt_3_first400.csv";
  if (env.fs->Exists(path)) {
    STRATA_ASSIGN_OR_RETURN(auto s, LoadBurstSessions(*env.fs, path));
    workloads.push_back({"burstgpt-sessions", std::move(s)});
  } else {
    std::fprintf(stderr, "skip: %s is not present\n", path.c_str());
  }
  return workloads;
}

// Always-admit against hit-ratio-weighted admission (cache/admission.h), for
// the two policies the response tiers use, at sizes from churning to roomy.
int RunAdmission(const Env& env, const BenchCacheFlags& f, const std::vector<Workload>& workloads) {
  cache::AdmissionOptions adm;
  adm.enabled = true;
  adm.gain = f.admission_gain;
  adm.min_probability = f.admission_min;
  adm.watch_factor = f.admission_watch;
  if (util::Status st = cache::ValidateAdmission(adm); !st.ok()) return UsageError(st.message());
  const cache::PolicyKind kinds[] = {cache::PolicyKind::kLru, cache::PolicyKind::kDualFactor};
  nlohmann::json out = nlohmann::json::array();
  fmt::print(
      "admission (asked only when the cache is full): keys that came back are admitted; a new "
      "key with p = clamp({} x hit ratio of new keys over {} outcomes, {}, 1); watch list "
      "{} x entries\n\n",
      adm.gain, adm.window, adm.min_probability, adm.watch_factor);
  fmt::print(
      "| {:<22} | {:>10} | {:<11} | {:>8} | {:>8} | {:>7} | {:>10} | {:>10} | {:>7} | {:>4} |\n",
      "workload", "size", "policy", "hit all", "hit adm", "delta", "repl all", "repl adm", "repl",
      "p end");
  fmt::print("|{:-<24}|{:->12}|{:-<13}|{:->10}|{:->10}|{:->9}|{:->12}|{:->12}|{:->9}|{:->6}|\n", "",
             "", "", "", "", "", "", "", "", "");
  for (const Workload& w : workloads) {
    const size_t distinct = cache::DistinctKeys(w.stream);
    for (double frac : {0.01, 0.05, 0.10, 0.25}) {
      const size_t cap =
          std::max<size_t>(4, static_cast<size_t>(static_cast<double>(distinct) * frac));
      for (cache::PolicyKind kind : kinds) {
        cache::PolicyOptions o;
        o.capacity = cap;
        o.lambda_per_s = f.lambda;
        o.k = f.k;
        o.count_half_life_s = f.half_life_s;
        auto p_all = cache::NewEvictionPolicy(kind, o);
        const cache::SimResult all = cache::SimulatePolicy(*p_all, w.stream, cap);
        auto p_adm = cache::NewEvictionPolicy(kind, o);
        const cache::SimResult gated = cache::SimulatePolicy(*p_adm, w.stream, cap, adm, 11);
        const double repl_change =
            all.evictions == 0
                ? 0.0
                : (static_cast<double>(gated.evictions) / static_cast<double>(all.evictions) - 1) *
                      100;
        fmt::print(
            "| {:<22} | {:>5}({:>2.0f}%) | {:<11} | {:>7.2f}% | {:>7.2f}% | {:>+7.2f} | {:>10} | "
            "{:>10} | {:>+6.0f}% | {:>4.2f} |\n",
            w.name, cap, frac * 100, cache::PolicyKindName(kind), all.hit_ratio() * 100,
            gated.hit_ratio() * 100, (gated.hit_ratio() - all.hit_ratio()) * 100, all.evictions,
            gated.evictions, repl_change, gated.final_admission_probability);
        out.push_back(
            {{"workload", w.name},
             {"accesses", w.stream.size()},
             {"distinct_keys", distinct},
             {"capacity", cap},
             {"policy", cache::PolicyKindName(kind)},
             {"always", {{"hit_ratio", all.hit_ratio()}, {"replacements", all.evictions}}},
             {"admission",
              {{"hit_ratio", gated.hit_ratio()},
               {"replacements", gated.evictions},
               {"rejected", gated.rejected},
               {"final_probability", gated.final_admission_probability}}}});
      }
    }
  }
  if (!f.json.empty()) {
    if (util::Status st = env.fs->WriteFileAtomic(f.json, out.dump(2) + "\n"); !st.ok()) {
      return ReportError(st);
    }
  }
  return kExitOk;
}

}  // namespace

util::StatusOr<std::vector<MooncakeRequest>> LoadMooncakeTrace(util::FileSystem& fs,
                                                               const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, fs.ReadFile(path));
  std::vector<MooncakeRequest> out;
  std::istringstream in(text);
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("timestamp") || !j["timestamp"].is_number() ||
        !j.contains("hash_ids") || !j["hash_ids"].is_array()) {
      return util::InvalidArgumentError(
          fmt::format("{}:{}: not a Mooncake trace record", path, line_no));
    }
    MooncakeRequest r;
    r.arrival_s = j["timestamp"].get<double>() / 1000.0;
    r.output_tokens = j.value("output_length", 0.0);
    for (const auto& h : j["hash_ids"]) {
      if (!h.is_number_integer() || h.get<int64_t>() < 0) {
        return util::InvalidArgumentError(
            fmt::format("{}:{}: hash id {} is not a natural number", path, line_no, h.dump()));
      }
      r.blocks.push_back(static_cast<uint64_t>(h.get<int64_t>()) + 1);
    }
    out.push_back(std::move(r));
  }
  return out;
}

int RunBenchCache(const Env& env, const BenchCacheFlags& f) {
  if (f.l2) return RunBenchL2(env, f);
  if (f.accesses < 1000 || f.keys < 100) return UsageError("--accesses >= 1000 and --keys >= 100");
  auto loaded = LoadWorkloads(env, f);
  if (!loaded.ok()) return ReportError(loaded.status());
  const std::vector<Workload>& workloads = *loaded;
  if (f.admission) return RunAdmission(env, f, workloads);

  const cache::PolicyKind kinds[] = {cache::PolicyKind::kLru, cache::PolicyKind::kDualFactor,
                                     cache::PolicyKind::kWTinyLfu};
  nlohmann::json out = nlohmann::json::array();
  int goal_misses = 0;
  fmt::print("| {:<22} | {:>9} | {:>8} | {:>8} | {:>11} | {:>9} | {:>9} | {:>10} |\n", "workload",
             "accesses", "size", "LRU", "dual-factor", "W-TinyLFU", "DF - LRU", "DF - TLFU");
  fmt::print("|{:-<24}|{:->11}|{:->10}|{:->10}|{:->13}|{:->11}|{:->11}|{:->12}|\n", "", "", "", "",
             "", "", "", "");
  for (const Workload& w : workloads) {
    const size_t distinct = cache::DistinctKeys(w.stream);
    for (double frac : {0.01, 0.05, 0.10, 0.25}) {
      const size_t cap =
          std::max<size_t>(4, static_cast<size_t>(static_cast<double>(distinct) * frac));
      double ratio[3];
      for (int i = 0; i < 3; ++i) {
        cache::PolicyOptions o;
        o.capacity = cap;
        o.lambda_per_s = f.lambda;
        o.k = f.k;
        o.count_half_life_s = f.half_life_s;
        auto p = cache::NewEvictionPolicy(kinds[i], o);
        ratio[i] = cache::SimulatePolicy(*p, w.stream, cap).hit_ratio();
      }
      const double vs_lru = (ratio[1] - ratio[0]) * 100, vs_tlfu = (ratio[1] - ratio[2]) * 100;
      const bool ok = vs_lru >= -1e-9 && vs_tlfu >= -2.0;
      goal_misses += ok ? 0 : 1;
      fmt::print(
          "| {:<22} | {:>9} | {:>4}({:>2.0f}%) | {:>7.2f}% | {:>10.2f}% | {:>8.2f}% | {:>+8.2f} | "
          "{:>+9.2f}{} |\n",
          w.name, w.stream.size(), cap, frac * 100, ratio[0] * 100, ratio[1] * 100, ratio[2] * 100,
          vs_lru, vs_tlfu, ok ? " " : "!");
      out.push_back(
          {{"workload", w.name},
           {"accesses", w.stream.size()},
           {"distinct_keys", distinct},
           {"capacity", cap},
           {"hit_ratio", {{"lru", ratio[0]}, {"dual-factor", ratio[1]}, {"w-tinylfu", ratio[2]}}}});
    }
  }
  fmt::print(
      "\ndual-factor (lambda {} /s, k {}, count half-life {} s): {} of {} rows miss the goal "
      "(>= LRU and within 2 points of W-TinyLFU; marked !)\n",
      f.lambda, f.k, f.half_life_s, goal_misses, out.size());
  if (!f.json.empty()) {
    if (util::Status st = env.fs->WriteFileAtomic(f.json, out.dump(2) + "\n"); !st.ok()) {
      return ReportError(st);
    }
  }
  return kExitOk;
}

}  // namespace strata::cli
