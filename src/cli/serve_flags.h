// cli/serve_flags.h — every setting of `strata serve` in one struct: the
// command line fills it, and so does a configuration file (cli/serve_config.h
// maps each field to its key). Defaults are the field initialisers, here
// and in the flag groups' own structs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cache/eviction_policy.h"

#include "cli/commands.h"
#include "cli/serve_audit.h"
#include "cli/serve_backends.h"
#include "cli/serve_cache.h"
#include "cli/serve_canary.h"
#include "cli/serve_http.h"
#include "cli/serve_semantic.h"
#include "cli/serve_sessions.h"
#include "cli/serve_snapshots.h"
#include "cli/serve_tracing.h"
#include "gateway/gateway.h"
#include "gateway/rt_control.h"
#include "gateway/rt_switcher.h"
#include "text/chat_template.h"
#include "util/clock.h"
#include "util/status.h"

namespace strata::cli {

struct ServeFlags {
  std::string config;  // --config: the TOML file (cli/serve_config.h); "" = flags only
  // -m, repeatable: FILE or NAME=FILE; the first is the default model.
  std::vector<std::string> model;
  std::string models_dir;     // --models DIR: every .gguf in it, named by its stem
  std::string models_memory;  // --models-memory SIZE; "" = the machine's memory / 1.2
  bool preload = false;       // --preload: load every local model before serving
  std::string numa =
      "auto";            // --numa: auto (place models on NUMA nodes when there are several) | off
  std::string topology;  // --topology FILE: the nodes to place on ("" = this machine's)
  std::string host = "127.0.0.1";
  int port = 8080;
  int32_t threads = 2;
  std::string api_keys;
  std::string admin_key_file;  // --admin-key-file: the admin API's key (first line)
  std::string warm_from;       // --warm-from: a cache snapshot loaded before serving
  int32_t ctx = 4096;
  int32_t kv_tokens = 0;
  std::string kv_type = "f16";  // --kv-type f32 | f16 | q8_0
  double kv_pressure = 0.25;    // --kv-pressure: memory-aware admission below this free share
  int32_t kv_min_grant = 64;    // --kv-min-grant: the fewest tokens it grants a new request
  std::string repack = "auto";  // --repack auto | on | off: row-interleaved weights
  int32_t parallel = 16;
  int32_t queue = 64;
  int32_t batch_tokens = 512;
  int32_t max_tokens_cap = 4096;
  int32_t timeout_s = 600;
  int32_t grace_s = 30;
  // --policy-ramp-s: a reload's new caching and sampling policy takes a
  // share of new requests rising to all of them over this time (0 = at once).
  double policy_ramp_s = 0;
  int32_t max_embedding_inputs = 256;
  bool prompt_special_tokens = false;
  HttpFlags http;         // listening, threads and the request reader's limits (cli/serve_http.h)
  BackendFlags backends;  // remote model servers (cli/serve_backends.h)
  TraceFlags trace;       // OpenTelemetry traces (cli/serve_tracing.h)
  std::vector<std::string> aliases;  // --alias, repeatable: the first names the local model
  bool accept_any_model = false;
  std::string chat_format;
  std::string log_level = "info";
  uint64_t l1_bytes = 64ull << 20;
  double l1_ttl_s = 600;
  double l1_ttl_jitter = 0.1;
  bool coalesce = true;
  CacheFlags cache;                       // L3 and admission (cli/serve_cache.h)
  SemanticFlags semantic;                 // L4/L5 and the encoder (cli/serve_semantic.h)
  SnapshotFlags snapshots;                // request snapshots (cli/serve_snapshots.h)
  SessionFlags sessions;                  // durable sessions (cli/serve_sessions.h)
  std::string l2_policy = "dual-factor";  // eviction of cached KV prefix blocks
  std::string rt_switcher = "off";
  std::string rt_levels = gateway::FormatLevels(gateway::DefaultLevels());
  double rt_interval_s = 1;
  int32_t rt_window = 60;
  double rt_ttft_floor_s = 0;
  double rt_ttft_slo_s = 0;
  double rt_tpot_floor_s = 0;
  double rt_tpot_slo_s = 0;
  int32_t rt_breach = 5;
  int32_t rt_calm = 10;
  double rt_dwell_s = 10;
  double rt_kv_pressure = 0.1;
  std::string rt_fallback;  // the model id of levels marked FALLBACK
  AuditFlags audit;         // audit log and response watermark (cli/serve_audit.h)
  CanaryFlags canary;       // a canary rollout (cli/serve_canary.h)
};

// What the flags decide before anything starts (ValidateFlags).
struct ServePlan {
  gateway::RtControlOptions rt;  // used with --rt-switcher on
  cache::PolicyKind l2_policy = cache::PolicyKind::kDualFactor;
  std::optional<text::ChatFormat> chat_format;  // nullopt = the model's own template
};

// Checks every flag, in the order the user reads them; InvalidArgument with
// the message `strata serve` prints as a usage error.
util::StatusOr<ServePlan> ValidateFlags(const ServeFlags& flags);

// --accept-any-model with `n_models` served: InvalidArgument unless one.
util::Status CheckAcceptAnyModel(const ServeFlags& flags, size_t n_models);

// The RT-Switcher's options from the flags; InvalidArgument naming the flag
// at fault.
util::StatusOr<gateway::RtControlOptions> RtOptions(const ServeFlags& flags);

// The gateway's options: the caps, the response tiers (L1, single flight,
// L3, admission) and the shared tier (Redis); InvalidArgument naming the
// flag. `n_ctx` is the local engine's context (0 without one); `rt` the
// RT-Switcher (nullptr when off).
util::StatusOr<gateway::GatewayOptions> GatewayOptionsFor(const ServeFlags& flags, int32_t n_ctx,
                                                          gateway::RtControl* rt,
                                                          const util::Clock& clock);

// Checks every setting as `strata serve` would before starting: each value's
// range, the combinations, the backends (their key files read through
// `env`), the API key and admin key files. InvalidArgument naming the flag
// at fault (InConfigTerms turns the names into a file's keys).
util::Status CheckServeFlags(const Env& env, const ServeFlags& flags);

}  // namespace strata::cli
