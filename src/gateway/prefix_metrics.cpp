#include "gateway/prefix_metrics.h"

namespace strata::gateway {

void ExportPrefixCacheMetrics(obs::MetricsRegistry& metrics, const engine::Scheduler& scheduler) {
  const engine::Scheduler* s = &scheduler;
  ExportPrefixCacheMetrics(metrics, [s] { return s->Stats(); });
}

void ExportPrefixCacheMetrics(obs::MetricsRegistry& metrics,
                              std::function<engine::SchedulerStats()> stats) {
  auto read = [&stats](auto field) {
    return [stats, field]() -> double { return static_cast<double>(field(stats())); };
  };
  using Stats = engine::SchedulerStats;
  metrics.ChildCallback("strata_cache_hits_total", {"l2"},
                        read([](const Stats& st) { return st.prefix_hits; }));
  metrics.ChildCallback("strata_cache_misses_total", {"l2"},
                        read([](const Stats& st) { return st.prefix_lookups - st.prefix_hits; }));
  metrics.ChildCallback("strata_cache_evictions_total", {"l2"},
                        read([](const Stats& st) { return st.prefix_evictions; }));
  metrics.ChildCallback("strata_cache_bytes", {"l2"},
                        read([](const Stats& st) { return st.prefix_bytes; }));
  metrics.ChildCallback("strata_cache_entries", {"l2"},
                        read([](const Stats& st) { return st.prefix_blocks; }));
  metrics.CounterCallback("strata_l2_prompt_tokens_total",
                          "Prompt tokens of requests that looked up the prefix cache (L2).",
                          read([](const Stats& st) { return st.prefix_prompt_tokens; }));
  metrics.CounterCallback("strata_l2_cached_tokens_total",
                          "Prompt tokens whose KV blocks came from the prefix cache (L2).",
                          read([](const Stats& st) { return st.prefix_cached_tokens; }));
  metrics.CounterCallback(
      "strata_l2_partial_blocks_total",
      "Prefix cache (L2) misses where a cached block after the same prefix shared the first "
      "positions, which were copied rather than recomputed.",
      read([](const Stats& st) { return st.prefix_partial_hits; }));
  metrics.GaugeCallback("strata_kv_blocks_shared",
                        "KV cache blocks referenced by more than one sequence.",
                        read([](const Stats& st) { return st.kv_blocks_shared; }));
}

}  // namespace strata::gateway
