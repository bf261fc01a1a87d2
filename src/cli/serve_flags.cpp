// cli/serve_flags.cpp — `strata serve`'s settings checked and turned into
// the options of what it starts (cli/serve_flags.h).
#include "cli/serve_flags.h"

#include <algorithm>
#include <chrono>
#include <tuple>

#include <fmt/format.h>

#include "cli/serve_models.h"

namespace strata::cli {

// The RT-Switcher's options from the flags; InvalidArgument naming the flag
// the user typed (each range is the switcher's own, checked here so that no
// message names an internal option).
util::StatusOr<gateway::RtControlOptions> RtOptions(const ServeFlags& f) {
  gateway::RtControlOptions o;
  auto levels = gateway::ParseLevels(f.rt_levels);
  if (!levels.ok()) return util::InvalidArgumentError("--rt-levels: " + levels.status().message());
  o.switcher.levels = std::move(levels).value();
  if (!(f.rt_interval_s >= 0.01 && f.rt_interval_s <= 3600)) {
    return util::InvalidArgumentError(
        fmt::format("--rt-interval {} is outside [0.01, 3600] seconds", f.rt_interval_s));
  }
  if (f.rt_window < 2 || f.rt_window > 100'000) {
    return util::InvalidArgumentError(
        fmt::format("--rt-window {} is outside [2, 100000] intervals", f.rt_window));
  }
  for (const auto& [flag, v] : {std::pair{"--rt-ttft-floor", f.rt_ttft_floor_s},
                                std::pair{"--rt-ttft-slo", f.rt_ttft_slo_s},
                                std::pair{"--rt-tpot-floor", f.rt_tpot_floor_s},
                                std::pair{"--rt-tpot-slo", f.rt_tpot_slo_s}}) {
    if (!(v >= 0 && v <= 86400)) {
      return util::InvalidArgumentError(
          fmt::format("{} {} is outside [0, 86400] seconds", flag, v));
    }
  }
  if (f.rt_ttft_slo_s > 0 && f.rt_ttft_slo_s < f.rt_ttft_floor_s) {
    return util::InvalidArgumentError(fmt::format("--rt-ttft-slo {} is below --rt-ttft-floor {}",
                                                  f.rt_ttft_slo_s, f.rt_ttft_floor_s));
  }
  if (f.rt_tpot_slo_s > 0 && f.rt_tpot_slo_s < f.rt_tpot_floor_s) {
    return util::InvalidArgumentError(fmt::format("--rt-tpot-slo {} is below --rt-tpot-floor {}",
                                                  f.rt_tpot_slo_s, f.rt_tpot_floor_s));
  }
  for (const auto& [flag, v] :
       {std::pair{"--rt-breach", f.rt_breach}, std::pair{"--rt-calm", f.rt_calm}}) {
    if (v < 1 || v > 1'000'000) {
      return util::InvalidArgumentError(
          fmt::format("{} {} is outside [1, 1000000] intervals", flag, v));
    }
  }
  if (!(f.rt_dwell_s >= 0 && f.rt_dwell_s <= 86400)) {
    return util::InvalidArgumentError(
        fmt::format("--rt-dwell {} is outside [0, 86400] seconds", f.rt_dwell_s));
  }
  if (!(f.kv_pressure >= 0 && f.kv_pressure < 1)) {
    return util::InvalidArgumentError(
        fmt::format("--kv-pressure {} is outside [0, 1)", f.kv_pressure));
  }
  if (!(f.rt_kv_pressure >= 0 && f.rt_kv_pressure < 1)) {
    return util::InvalidArgumentError(
        fmt::format("--rt-kv-pressure {} is outside [0, 1)", f.rt_kv_pressure));
  }
  auto ns = [](double s) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
  };
  o.switcher.interval = ns(f.rt_interval_s);
  o.switcher.window_intervals = f.rt_window;
  o.switcher.min_window_intervals = std::min(10, f.rt_window);
  o.switcher.ttft = {.floor_s = f.rt_ttft_floor_s, .ceiling_s = f.rt_ttft_slo_s};
  o.switcher.tpot = {.floor_s = f.rt_tpot_floor_s, .ceiling_s = f.rt_tpot_slo_s};
  o.switcher.breach_intervals = f.rt_breach;
  o.switcher.calm_intervals = f.rt_calm;
  o.switcher.min_dwell = ns(f.rt_dwell_s);
  o.kv_pressure_free_fraction = f.rt_kv_pressure;
  // Every flag is checked above; this only guards against the two drifting apart.
  const util::Status st =
      gateway::RtSwitcher::Create(o.switcher, std::chrono::steady_clock::time_point{}).status();
  if (!st.ok()) return util::InvalidArgumentError("--rt-* flags: " + st.message());
  return o;
}

// --accept-any-model with `n_models` served: InvalidArgument unless one.
util::Status CheckAcceptAnyModel(const ServeFlags& f, size_t n_models) {
  if (!f.accept_any_model || n_models <= 1) return util::OkStatus();
  return util::InvalidArgumentError(fmt::format(
      "--accept-any-model needs exactly one served model, and {} are served: with several, "
      "a request must name one (drop the flag, or use --alias for the names clients send)",
      n_models));
}

// Checks every flag, in the order the user reads them; InvalidArgument with
// the message `strata serve` prints as a usage error.
util::StatusOr<ServePlan> ValidateFlags(const ServeFlags& f) {
  if (f.threads < 1 || f.threads > 256)
    return util::InvalidArgumentError(fmt::format("-t {} is outside [1, 256]", f.threads));
  if (f.port < 0 || f.port > 65535)
    return util::InvalidArgumentError(fmt::format("--port {} is outside [0, 65535]", f.port));
  // Each limit as [flag, value, least, most].
  const std::tuple<const char*, int64_t, int64_t, int64_t> limits[] = {
      {"--ctx", f.ctx, 16, 1 << 24},
      {"--kv-tokens", f.kv_tokens, 0, 1 << 30},
      {"--kv-min-grant", f.kv_min_grant, 1, 1 << 20},
      {"--parallel", f.parallel, 1, 4096},
      {"--queue", f.queue, 0, 1'000'000},
      {"--batch-tokens", f.batch_tokens, 1, 65536},
      {"--max-tokens-cap", f.max_tokens_cap, 1, 1 << 24},
      {"--timeout", f.timeout_s, 1, 30 * 86400},
      {"--grace", f.grace_s, 0, 86400},
  };
  for (const auto& [flag, v, lo, hi] : limits) {
    if (v < lo || v > hi) {
      return util::InvalidArgumentError(fmt::format("{} {} is outside [{}, {}]", flag, v, lo, hi));
    }
  }
  if (!(f.policy_ramp_s >= 0 && f.policy_ramp_s <= 86400)) {
    return util::InvalidArgumentError(
        fmt::format("--policy-ramp-s {} is outside [0, 86400] seconds", f.policy_ramp_s));
  }
  if (f.max_embedding_inputs < 1 || f.max_embedding_inputs > 65536) {
    return util::InvalidArgumentError(
        fmt::format("--max-embedding-inputs {} is outside [1, 65536]", f.max_embedding_inputs));
  }
  server::ServerOptions http_check;
  STRATA_RETURN_IF_ERROR(ApplyHttpFlags(f.http, http_check));
  STRATA_RETURN_IF_ERROR(ValidateTraceFlags(f.trace));
  if (!(f.l1_ttl_s >= 0.001 && f.l1_ttl_s <= 30 * 86400)) {
    return util::InvalidArgumentError(
        fmt::format("--l1-ttl {} is outside [0.001, 2592000] seconds", f.l1_ttl_s));
  }
  if (!(f.l1_ttl_jitter >= 0 && f.l1_ttl_jitter <= 0.9)) {
    return util::InvalidArgumentError(
        fmt::format("--l1-ttl-jitter {} is outside [0, 0.9]", f.l1_ttl_jitter));
  }
  if (f.l1_bytes > (1ull << 40)) {
    return util::InvalidArgumentError(fmt::format("--l1-bytes {} is above 2^40", f.l1_bytes));
  }
  // The local models a directory holds are counted once they are listed (RunServe).
  const size_t n_local = f.model.size() + (f.models_dir.empty() ? 0 : 1);
  STRATA_RETURN_IF_ERROR(CheckAcceptAnyModel(
      f, (n_local > 0 || f.backends.specs.empty() ? std::max<size_t>(n_local, 1) : 0) +
             f.backends.specs.size()));
  if (f.numa != "auto" && f.numa != "off") {
    return util::InvalidArgumentError(fmt::format("--numa '{}' is not auto or off", f.numa));
  }
  if (!f.models_memory.empty()) {
    auto budget = ParseByteSize(f.models_memory);
    if (!budget.ok())
      return util::InvalidArgumentError("--models-memory: " + budget.status().message());
  }
  if (!util::ParseLogLevel(f.log_level)) {
    return util::InvalidArgumentError(
        fmt::format("--log-level '{}' is not debug, info, warn, error or off", f.log_level));
  }
  if (f.rt_switcher != "on" && f.rt_switcher != "off") {
    return util::InvalidArgumentError(
        fmt::format("--rt-switcher '{}' is not on or off", f.rt_switcher));
  }
  ServePlan plan;
  STRATA_ASSIGN_OR_RETURN(plan.rt, RtOptions(f));
  const bool marks_fallback =
      std::any_of(plan.rt.switcher.levels.begin(), plan.rt.switcher.levels.end(),
                  [](const gateway::Policy& p) { return p.use_fallback; });
  if (marks_fallback && f.rt_fallback.empty()) {
    return util::InvalidArgumentError(
        "--rt-levels marks a level FALLBACK: name the model it sends requests to with "
        "--rt-fallback");
  }
  if (!f.rt_fallback.empty() && f.rt_switcher != "on") {
    return util::InvalidArgumentError("--rt-fallback needs --rt-switcher on");
  }
  if (const auto kv_type = engine::ParseKvType(f.kv_type); !kv_type.ok()) {
    return util::InvalidArgumentError(fmt::format("--kv-type: {}", kv_type.status().message()));
  }
  if (const auto repack = model::ParsePackMode(f.repack); !repack.ok()) {
    return util::InvalidArgumentError(fmt::format("--repack: {}", repack.status().message()));
  }
  const std::optional<cache::PolicyKind> l2_policy = cache::ParsePolicyKind(f.l2_policy);
  if (!l2_policy) {
    return util::InvalidArgumentError(
        fmt::format("--l2-policy '{}' is not lru, dual-factor or w-tinylfu", f.l2_policy));
  }
  plan.l2_policy = *l2_policy;
  gateway::GatewayOptions check;
  STRATA_RETURN_IF_ERROR(ApplyCacheFlags(f.cache, f.l1_ttl_jitter, 0, check));
  STRATA_RETURN_IF_ERROR(ApplySemanticFlags(f.semantic, f.l1_ttl_jitter, 0, check));
  STRATA_RETURN_IF_ERROR(ValidateAuditFlags(f.audit));
  STRATA_RETURN_IF_ERROR(ValidateSnapshotFlags(f.snapshots));
  STRATA_RETURN_IF_ERROR(ValidateSessionFlags(f.sessions));
  if (!f.chat_format.empty()) {
    plan.chat_format = text::ParseChatFormat(f.chat_format);
    if (!plan.chat_format) {
      return util::InvalidArgumentError(
          fmt::format("--chat-format '{}' is not one of plain, chatml, llama2, llama3, "
                      "zephyr, mistral, phi3, gemma, deepseek-r1",
                      f.chat_format));
    }
  }
  return plan;
}

// The gateway's options: the caps, the response tiers (L1, single flight,
// L3, admission) and the shared tier (Redis); InvalidArgument as
// ApplyCacheFlags (ValidateFlags has checked the same flags). `n_ctx` is the
// local engine's context (0 without one).
util::StatusOr<gateway::GatewayOptions> GatewayOptionsFor(const ServeFlags& f, int32_t n_ctx,
                                                          gateway::RtControl* rt,
                                                          const util::Clock& clock) {
  gateway::GatewayOptions go;
  go.max_tokens_cap = n_ctx > 0 ? std::min(f.max_tokens_cap, n_ctx) : f.max_tokens_cap;
  go.max_embedding_inputs = f.max_embedding_inputs;
  go.l1.max_bytes = f.l1_bytes;
  go.l1.ttl = std::chrono::milliseconds(static_cast<int64_t>(f.l1_ttl_s * 1000));
  go.l1.ttl_jitter = f.l1_ttl_jitter;
  go.l1_seed = static_cast<uint64_t>(clock.WallNow().time_since_epoch().count());
  go.coalesce = f.coalesce;
  STRATA_RETURN_IF_ERROR(ApplyCacheFlags(f.cache, f.l1_ttl_jitter, go.l1_seed, go));
  STRATA_RETURN_IF_ERROR(ApplySemanticFlags(f.semantic, f.l1_ttl_jitter, go.l1_seed, go));
  go.rt_control = rt;
  go.rt_fallback_model = f.rt_fallback;
  return go;
}

}  // namespace strata::cli
