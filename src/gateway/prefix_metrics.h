// gateway/prefix_metrics.h — the prefix cache (L2) as Prometheus series.
//
// Promise: ExportPrefixCacheMetrics adds the L2 tier to the per-tier cache
// families (strata_cache_{hits,misses,evictions}_total, strata_cache_{bytes,
// entries}, tier="l2", counting KV blocks) and registers the token-level
// counters strata_l2_prompt_tokens_total / strata_l2_cached_tokens_total and
// the gauge strata_kv_blocks_shared (docs/metrics.md). Every value is read at
// render time from Scheduler::Stats(), the copy the scheduler thread publishes
// under its lock after each step, so /metrics never touches the KV pool the
// scheduler thread owns.
//
// Call it after Gateway::Create (which registers the per-tier families) on the
// same registry; the scheduler must outlive every render of `metrics`.
//
// Threading: call once, from the thread that sets the server up.
#pragma once

#include <functional>

#include "engine/scheduler.h"
#include "obs/metrics.h"

namespace strata::gateway {

void ExportPrefixCacheMetrics(obs::MetricsRegistry& metrics, const engine::Scheduler& scheduler);
// The same, read from `stats` (several schedulers summed: backend/residency.h),
// which must stay callable for every render.
void ExportPrefixCacheMetrics(obs::MetricsRegistry& metrics,
                              std::function<engine::SchedulerStats()> stats);

}  // namespace strata::gateway
