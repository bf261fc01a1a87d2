// `strata bench semantic`: synthetic unit vectors in one namespace of a
// cache::SemanticIndex of each size and nearest-neighbour kind. Queries: half
// are a stored vector moved to cosine ~0.92 from it (they should find it:
// recall), half are fresh random vectors (they should find nothing). Reports
// build time, lookup latency P50/P99, recall, and the L4 screen's candidates
// against the namespace's size (the reduction a flat scan does not make).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/semantic.h"
#include "cli/bench_semantic.h"
#include "util/clock.h"
#include "util/random.h"

namespace strata::cli {
namespace {

std::vector<float> Unit(util::Rng& rng, int dim) {
  std::vector<float> v(static_cast<size_t>(dim));
  double n = 0;
  for (float& x : v) {
    x = static_cast<float>(rng.Normal());
    n += static_cast<double>(x) * x;
  }
  for (float& x : v) x = static_cast<float>(x / std::sqrt(n));
  return v;
}

// `v` rotated towards a random direction to cosine `cos`.
std::vector<float> Near(const std::vector<float>& v, double cos, util::Rng& rng) {
  std::vector<float> r = Unit(rng, static_cast<int>(v.size()));
  double d = 0;
  for (size_t i = 0; i < v.size(); ++i) d += static_cast<double>(v[i]) * r[i];
  double n = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    r[i] = static_cast<float>(r[i] - d * v[i]);
    n += static_cast<double>(r[i]) * r[i];
  }
  const double sin = std::sqrt(1 - cos * cos);
  for (size_t i = 0; i < v.size(); ++i) {
    r[i] = static_cast<float>(cos * v[i] + sin * r[i] / std::sqrt(n));
  }
  return r;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(std::min<double>(v.size() - 1, p * static_cast<double>(v.size())))];
}

}  // namespace

int RunBenchSemantic(const Env&, const BenchSemanticFlags& f) {
  std::vector<size_t> sizes;
  std::vector<cache::AnnKind> kinds;
  {
    std::stringstream ss(f.sizes);
    for (std::string s; std::getline(ss, s, ',');) {
      char* end = nullptr;
      const unsigned long long n = std::strtoull(s.c_str(), &end, 10);
      if (s.empty() || *end != '\0' || n < 1 || n > (1ull << 26)) {
        return UsageError(fmt::format("--sizes: '{}' is not a size in [1, 2^26]", s));
      }
      sizes.push_back(static_cast<size_t>(n));
    }
    std::stringstream ks(f.kinds);
    for (std::string k; std::getline(ks, k, ',');) {
      const auto kind = cache::ParseAnnKind(k);
      if (!kind) return UsageError(fmt::format("--kinds: '{}' is not hnsw, ivf, lsh or flat", k));
      kinds.push_back(*kind);
    }
  }
  if (f.dim < 8 || f.dim > 4096) return UsageError("--dim must be in [8, 4096]");
  if (f.queries < 2) return UsageError("--queries must be >= 2");
  const util::Clock& clock = util::RealClock();
  nlohmann::json out = nlohmann::json::array();
  std::printf("| %-5s | %9s | %8s | %8s | %8s | %7s | %10s | %10s |\n", "index", "entries",
              "build s", "P50 ms", "P99 ms", "recall", "false hits", "candidates");
  std::printf(
      "|-------|-----------|----------|----------|----------|---------|------------|------"
      "------|\n");
  for (size_t n : sizes) {
    util::Rng data(f.seed);
    std::vector<std::vector<float>> stored;
    stored.reserve(n);
    for (size_t i = 0; i < n; ++i) stored.push_back(Unit(data, f.dim));
    util::Rng qr(f.seed + 1);
    std::vector<std::pair<std::vector<float>, int64_t>>
        queries;  // (vector, expected payload or -1)
    for (int32_t q = 0; q < f.queries; ++q) {
      if (q % 2 == 0) {
        const size_t i = static_cast<size_t>(qr.Next() % n);
        queries.emplace_back(Near(stored[i], 0.92, qr), static_cast<int64_t>(i));
      } else {
        queries.emplace_back(Unit(qr, f.dim), -1);
      }
    }
    for (cache::AnnKind kind : kinds) {
      cache::SemanticOptions o;
      o.dim = f.dim;
      o.max_entries = n;
      o.ann = kind;
      o.min_similarity = f.similarity;
      auto index = cache::SemanticIndex::Create(o, clock);
      if (!index.ok()) return ReportError(index.status());
      const std::string ns = cache::SemanticNamespace("bench", "s");
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < n; ++i) {
        auto st = (*index)->Insert(ns, stored[i], nullptr, i);
        if (!st.ok()) return ReportError(st.status());
      }
      const double build =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::vector<double> ms;
      size_t found = 0, near = 0, false_hits = 0;
      double candidates = 0;
      for (const auto& [v, want] : queries) {
        const auto a = std::chrono::steady_clock::now();
        auto r = (*index)->Lookup(ns, v, nullptr);
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a)
                         .count());
        if (!r.ok()) return ReportError(r.status());
        candidates += static_cast<double>(r->screened);
        if (want >= 0) {
          ++near;
          found += r->match && static_cast<int64_t>(r->match->payload) == want;
        } else {
          false_hits += r->match.has_value();
        }
      }
      const double recall = near ? static_cast<double>(found) / static_cast<double>(near) : 0;
      const double mean_candidates = candidates / static_cast<double>(queries.size());
      std::printf("| %-5s | %9zu | %8.1f | %8.3f | %8.3f | %7.4f | %10zu | %10.1f |\n",
                  std::string(cache::AnnKindName(kind)).c_str(), n, build, Percentile(ms, 0.5),
                  Percentile(ms, 0.99), recall, false_hits, mean_candidates);
      std::fflush(stdout);
      out.push_back({{"index", cache::AnnKindName(kind)},
                     {"entries", n},
                     {"dim", f.dim},
                     {"build_s", build},
                     {"p50_ms", Percentile(ms, 0.5)},
                     {"p99_ms", Percentile(ms, 0.99)},
                     {"recall", recall},
                     {"false_hits", false_hits},
                     {"mean_candidates", mean_candidates}});
    }
  }
  if (!f.json.empty()) {
    std::ofstream j(f.json);
    j << out.dump(2) << "\n";
    if (!j) return ReportError(util::InternalError("cannot write " + f.json));
  }
  return kExitOk;
}

}  // namespace strata::cli
