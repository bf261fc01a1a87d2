// `strata serve`: the OpenAI- and Anthropic-compatible HTTP server.
//
// Start-up order: block SIGINT/SIGTERM (every thread inherits the mask), start
// listening (so /health answers 503 while the model loads), load the model,
// start the scheduler and gateway, open for requests. Shutdown on a signal:
// refuse new requests, let running ones finish within the grace period,
// cancel the rest, stop, exit 0.
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>

#include <fmt/format.h>

#include "cache/eviction_policy.h"
#include "cli/commands.h"
#include "cli/serve_cache.h"
#include "cli/serve_http.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "gateway/block_eviction_adapter.h"
#include "gateway/gateway.h"
#include "gateway/prefix_metrics.h"
#include "gateway/rt_control.h"
#include "gateway/rt_switcher.h"
#include "model/transformer.h"
#include "obs/metrics.h"
#include "server/auth.h"
#include "server/server.h"
#include "util/clock.h"
#include "util/file_watch.h"

namespace strata::cli {
namespace {

struct ServeFlags {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  int32_t threads = 2;
  std::string api_keys;
  int32_t ctx = 4096;
  int32_t kv_tokens = 0;
  int32_t parallel = 16;
  int32_t queue = 64;
  int32_t batch_tokens = 512;
  int32_t max_tokens_cap = 4096;
  int32_t timeout_s = 600;
  int32_t grace_s = 30;
  int32_t max_embedding_inputs = 256;
  bool prompt_special_tokens = false;
  HttpFlags http;  // listening, threads and the request reader's limits (cli/serve_http.h)
  std::string alias;
  std::string chat_format;
  std::string log_level = "info";
  uint64_t l1_bytes = 64ull << 20;
  double l1_ttl_s = 600;
  double l1_ttl_jitter = 0.1;
  bool coalesce = true;
  CacheFlags cache;                       // L3 and admission (cli/serve_cache.h)
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
};

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

int RunServe(const Env& env, const ServeFlags& f) {
  auto log = MakeLogger(f.log_level);
  if (f.threads < 1 || f.threads > 256)
    return UsageError(fmt::format("-t {} is outside [1, 256]", f.threads));
  if (f.ctx < 16) return UsageError(fmt::format("--ctx {} must be at least 16", f.ctx));
  if (f.parallel < 1 || f.queue < 0 || f.batch_tokens < 1 || f.max_tokens_cap < 1 ||
      f.timeout_s < 1 || f.grace_s < 0 || f.kv_tokens < 0) {
    return UsageError(
        "--parallel, --batch-tokens, --max-tokens-cap and --timeout must be >= 1; "
        "--queue, --grace and --kv-tokens >= 0");
  }
  if (!(f.l1_ttl_s >= 0.001 && f.l1_ttl_s <= 30 * 86400)) {
    return UsageError(fmt::format("--l1-ttl {} is outside [0.001, 2592000] seconds", f.l1_ttl_s));
  }
  if (!(f.l1_ttl_jitter >= 0 && f.l1_ttl_jitter <= 0.9)) {
    return UsageError(fmt::format("--l1-ttl-jitter {} is outside [0, 0.9]", f.l1_ttl_jitter));
  }
  if (f.l1_bytes > (1ull << 40)) {
    return UsageError(fmt::format("--l1-bytes {} is above 2^40", f.l1_bytes));
  }
  if (f.rt_switcher != "on" && f.rt_switcher != "off") {
    return UsageError(fmt::format("--rt-switcher '{}' is not on or off", f.rt_switcher));
  }
  auto rt_options = RtOptions(f);
  if (!rt_options.ok()) return UsageError(rt_options.status().message());
  const std::optional<cache::PolicyKind> l2_policy = cache::ParsePolicyKind(f.l2_policy);
  if (!l2_policy) {
    return UsageError(
        fmt::format("--l2-policy '{}' is not lru, dual-factor or w-tinylfu", f.l2_policy));
  }
  if (gateway::GatewayOptions check; !ApplyCacheFlags(f.cache, f.l1_ttl_jitter, 0, check).ok()) {
    return UsageError(ApplyCacheFlags(f.cache, f.l1_ttl_jitter, 0, check).message());
  }
  std::optional<text::ChatFormat> chat_format;
  if (!f.chat_format.empty()) {
    chat_format = text::ParseChatFormat(f.chat_format);
    if (!chat_format) {
      return UsageError(
          fmt::format("--chat-format '{}' is not one of plain, chatml, llama2, llama3, "
                      "zephyr, mistral, phi3, gemma, deepseek-r1",
                      f.chat_format));
    }
  }
  server::ApiKeys keys;
  if (!f.api_keys.empty()) {
    auto k = server::ApiKeys::Load(*env.fs, f.api_keys);
    if (!k.ok()) return ReportError(k.status());
    keys = std::move(k).value();
    log->Info("API keys: {} configured; requests without a valid key get 401", keys.size());
  }

  // Signals go to sigwait below, not to whichever thread they hit.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const util::Clock& clock = util::RealClock();
  const auto t0 = clock.Now();
  obs::MetricsRegistry metrics;
  server::ServerOptions so;
  so.host = f.host;
  so.port = f.port;
  if (util::Status st = ApplyHttpFlags(f.http, so); !st.ok()) return UsageError(st.message());
  RaiseFileLimit(f.http, *log);
  so.request_timeout = std::chrono::seconds(f.timeout_s);
  so.request_id_seed = static_cast<uint64_t>(clock.WallNow().time_since_epoch().count());
  if (!f.alias.empty()) so.model_aliases.push_back(f.alias);
  auto srv = server::HttpServer::Create(so, std::move(keys), metrics, clock, *log);
  if (!srv.ok()) return ReportError(srv.status());
  auto port = (*srv)->Start();
  if (!port.ok()) return ReportError(port.status());
  log->Info("listening on http://{}:{} (loading the model; /health answers 503 until ready)",
            f.host, *port);

  auto path = ResolveModelPath(env, f.model, *log);
  if (!path.ok()) return ReportError(path.status());
  auto loaded = model::Model::Load(*env.fs, *path, {}, *log);
  if (!loaded.ok()) return ReportError(loaded.status());
  const model::Model& m = **loaded;
  // The weights are read from the mapped file for as long as the server
  // runs: once the file changes on disk (or a read finds it shorter), every
  // step fails and nothing new is admitted (docs/api.md, model_changed).
  std::atomic<bool> model_changed{false};  // outlives the scheduler, which reads it
  const util::MappedFile* mapped = m.gguf().file();
  auto model_health = [&model_changed, mapped]() -> util::Status {
    if (!model_changed.load(std::memory_order_relaxed) && !(mapped && mapped->faulted())) {
      return util::OkStatus();
    }
    return util::FailedPreconditionError(
               "the model file changed on disk under the running server; restart strata to "
               "serve it as it is now")
        .WithReason(util::ErrorReason::kModelChanged);
  };
  const int32_t n_ctx = std::min(f.ctx, m.config().n_ctx_train);
  engine::EngineOptions eo;
  eo.n_threads = f.threads;
  eo.n_ctx = n_ctx;
  const int32_t kv_tokens = std::max(n_ctx, f.kv_tokens > 0 ? f.kv_tokens : 8 * n_ctx);
  eo.n_kv_blocks = (kv_tokens + eo.block_size - 1) / eo.block_size;
  eo.block_eviction = gateway::BlockEvictionFactory(*l2_policy, clock);
  auto eng = engine::Engine::Create(m, eo, *log);
  if (!eng.ok()) return ReportError(eng.status());
  // The RT-Switcher outlives the scheduler (whose thread owns it) and the gateway.
  std::unique_ptr<gateway::RtControl> rt;
  if (f.rt_switcher == "on") {
    rt_options->trace_seed = static_cast<uint64_t>(clock.WallNow().time_since_epoch().count());
    auto created = gateway::RtControl::Create(*rt_options, metrics, clock, *log);
    if (!created.ok()) return ReportError(created.status());
    rt = std::move(created).value();
    log->Info("RT-Switcher: on; levels {}; interval {} s, window {}, TTFT SLO {} s, TPOT SLO {} s",
              f.rt_levels, f.rt_interval_s, f.rt_window, f.rt_ttft_slo_s, f.rt_tpot_slo_s);
  }
  auto sched = engine::Scheduler::Start(**eng,
                                        {.max_running = f.parallel,
                                         .max_batch_tokens = f.batch_tokens,
                                         .max_queue = f.queue,
                                         .control = rt.get(),
                                         .health = model_health},
                                        *log);
  if (!sched.ok()) return ReportError(sched.status());
  gateway::GatewayOptions go;
  go.model_name = f.alias.empty() ? std::filesystem::path(*path).stem().string() : f.alias;
  go.max_tokens_cap = std::min(f.max_tokens_cap, n_ctx);
  go.chat_format = chat_format;
  go.max_embedding_inputs = f.max_embedding_inputs;
  go.prompt_special_tokens = f.prompt_special_tokens;
  go.l1.max_bytes = f.l1_bytes;
  go.l1.ttl = std::chrono::milliseconds(static_cast<int64_t>(f.l1_ttl_s * 1000));
  go.l1.ttl_jitter = f.l1_ttl_jitter;
  go.l1_seed = static_cast<uint64_t>(clock.WallNow().time_since_epoch().count());
  go.coalesce = f.coalesce;
  if (util::Status st = ApplyCacheFlags(f.cache, f.l1_ttl_jitter, go.l1_seed, go); !st.ok()) {
    return UsageError(st.message());  // checked above: does not happen
  }
  go.rt_control = rt.get();
  // Unseeded requests sample differently each time, as the APIs define.
  go.unseeded_seed_base =
      (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  auto gw = gateway::Gateway::Create(m, **sched, metrics, go, clock, *log);
  if (!gw.ok()) return ReportError(gw.status());
  gateway::ExportPrefixCacheMetrics(metrics, **sched);  // after the gateway's per-tier families
  if (f.l1_bytes > 0) {
    log->Info("response cache (L1): {:.1f} MiB, TTL {} s +/- {:.0f}%; single flight {}",
              static_cast<double>(f.l1_bytes) / (1 << 20), f.l1_ttl_s, f.l1_ttl_jitter * 100,
              f.coalesce ? "on" : "off");
  } else {
    log->Info("response cache (L1): off; single flight {}", f.coalesce ? "on" : "off");
  }
  log->Info("{}", DescribeCacheFlags(f.cache, go));
  log->Info("prefix cache (L2): {} KV blocks of {} tokens, eviction {}", eo.n_kv_blocks,
            eo.block_size, cache::PolicyKindName(*l2_policy));
  const double load_s = util::SecondsBetween(t0, clock.Now());
  metrics.Gauge("strata_model_load_seconds", "Seconds from start to ready.").With({}).Set(load_s);
  (*srv)->SetGateway(gw->get());
  std::unique_ptr<util::FileWatch> watch;  // stopped before the server it reports to
  if (mapped != nullptr) {
    auto started = util::FileWatch::Start(
        *env.fs, *path, *mapped, std::chrono::seconds(1),
        [&model_changed, &srv, &log](const util::Status& why) {
          model_changed.store(true);
          log->Error("{}; /health now answers 503 and requests get model_changed", why.message());
          (*srv)->SetBroken(why);
        });
    if (started.ok()) {
      watch = std::move(started).value();
    } else {
      log->Warn("not watching the model file: {}", started.status().message());
    }
  }
  log->Info(
      "ready in {:.0f} ms: model '{}' at http://{}:{}/v1 ({} threads, context {}, {} parallel)",
      load_s * 1e3, go.model_name, f.host, *port, f.threads, n_ctx, f.parallel);

  int sig = 0;
  sigwait(&signals, &sig);
  log->Info("received {}: draining (grace {} s)", sig == SIGTERM ? "SIGTERM" : "SIGINT", f.grace_s);
  (*srv)->StartDraining();
  const bool clean = (*sched)->Drain(std::chrono::seconds(f.grace_s));
  (*gw)->FlushShared(std::chrono::milliseconds(300));  // answers still queued for Redis
  // The error frames of streams cut at the end of the grace period go out
  // before the connections close; the process exits within grace + 1 s.
  (*srv)->Stop(std::chrono::milliseconds(500));
  watch.reset();
  sched->reset();
  log->Info("stopped{}",
            clean ? "" : " (some requests were cancelled at the end of the grace period)");
  return kExitOk;
}

}  // namespace

Command RegisterServe(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd =
      app.add_subcommand("serve", "Serve a model over the OpenAI and Anthropic HTTP APIs");
  cmd->add_option("-m,--model", f->model, "GGUF model file (default as for generate)");
  cmd->add_option("--host", f->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", f->port, "Port (0 = any free port)")->capture_default_str();
  cmd->add_option("-t,--threads", f->threads, "Threads of the forward pass")->capture_default_str();
  cmd->add_option("--api-keys", f->api_keys,
                  "File of 'KEY TENANT' lines; without it no key is needed");
  cmd->add_option("-c,--ctx", f->ctx, "Context per request in tokens (capped by the model's)")
      ->capture_default_str();
  cmd->add_option("--kv-tokens", f->kv_tokens, "KV cache capacity in tokens; 0 = 8 contexts");
  cmd->add_option("--parallel", f->parallel, "Requests decoding at once")->capture_default_str();
  cmd->add_option("--queue", f->queue, "Requests waiting beyond --parallel before 429")
      ->capture_default_str();
  cmd->add_option("--batch-tokens", f->batch_tokens, "Tokens per forward pass (prefill chunk)")
      ->capture_default_str();
  cmd->add_option("--max-tokens-cap", f->max_tokens_cap, "Largest max_tokens a request may ask")
      ->capture_default_str();
  cmd->add_option("--timeout", f->timeout_s, "Seconds a request may run")->capture_default_str();
  cmd->add_option("--grace", f->grace_s, "Seconds to finish running requests on SIGTERM")
      ->capture_default_str();
  RegisterHttpFlags(*cmd, f->http);
  cmd->add_option("--max-embedding-inputs", f->max_embedding_inputs,
                  "Most inputs in one /v1/embeddings request [1, 65536]")
      ->capture_default_str();
  cmd->add_flag("--prompt-special-tokens", f->prompt_special_tokens,
                "A /v1/completions prompt's control-token text (<s>, <|im_start|>) becomes "
                "those tokens (default: it stays text)");
  cmd->add_option("--alias", f->alias,
                  "Model id clients use (default: the file name without .gguf)");
  cmd->add_option("--chat-format", f->chat_format, "Override the chat template family");
  cmd->add_option("--log-level", f->log_level, "debug, info, warn, error or off")
      ->capture_default_str();
  cmd->add_option("--l1-bytes", f->l1_bytes,
                  "Response cache (L1) budget in bytes for answers of deterministic requests "
                  "(temperature 0 or a fixed seed); 0 = off")
      ->capture_default_str();
  cmd->add_option("--l1-ttl", f->l1_ttl_s, "Seconds an L1 entry lives (before jitter)")
      ->capture_default_str();
  cmd->add_option("--l1-ttl-jitter", f->l1_ttl_jitter,
                  "Each L1 TTL is drawn from ttl x [1 - j, 1 + j] so entries expire apart")
      ->capture_default_str();
  cmd->add_flag("--coalesce,!--no-coalesce", f->coalesce,
                "Identical concurrent deterministic requests share one generation (single "
                "flight; default: on)");
  RegisterCacheFlags(*cmd, f->cache);
  cmd->add_option("--l2-policy", f->l2_policy,
                  "Eviction policy of cached KV prefix blocks (L2): lru, dual-factor or w-tinylfu "
                  "(dual-factor: the best prefix hit rate on the Mooncake replay, LRU a close "
                  "second; docs/benchmarks.md)")
      ->capture_default_str();
  cmd->add_option("--rt-switcher", f->rt_switcher,
                  "RT-Switcher: trade sampling quality, tracing and batch/max_tokens caps for "
                  "latency when TTFT or time per token breaches (on|off)")
      ->capture_default_str();
  cmd->add_option("--rt-levels", f->rt_levels,
                  "RT-Switcher levels, best first: "
                  "TRACE_RATE:entropy|topk:MAX_BATCH:MAX_TOKENS_CAP[:MAX_QUEUE_WAIT_S],... (0 = no "
                  "cap; the queue wait limits how long waiting requests may take to start, by "
                  "refusing new ones)")
      ->capture_default_str();
  cmd->add_option("--rt-interval", f->rt_interval_s, "RT-Switcher evaluation interval, seconds")
      ->capture_default_str();
  cmd->add_option("--rt-window", f->rt_window, "Intervals in the threshold's sliding window")
      ->capture_default_str();
  cmd->add_option("--rt-ttft-floor", f->rt_ttft_floor_s,
                  "The TTFT threshold is never below this, seconds")
      ->capture_default_str();
  cmd->add_option("--rt-ttft-slo", f->rt_ttft_slo_s,
                  "The TTFT threshold is never above this, seconds (0 = no ceiling)")
      ->capture_default_str();
  cmd->add_option("--rt-tpot-floor", f->rt_tpot_floor_s,
                  "The time-per-token threshold is never below this, seconds")
      ->capture_default_str();
  cmd->add_option("--rt-tpot-slo", f->rt_tpot_slo_s,
                  "The time-per-token threshold is never above this, seconds (0 = no ceiling)")
      ->capture_default_str();
  cmd->add_option("--rt-breach", f->rt_breach, "Breaching intervals in a row to step down")
      ->capture_default_str();
  cmd->add_option("--rt-calm", f->rt_calm, "Calm intervals in a row to step up")
      ->capture_default_str();
  cmd->add_option("--rt-dwell", f->rt_dwell_s, "Seconds between two switches at least")
      ->capture_default_str();
  cmd->add_option("--rt-kv-pressure", f->rt_kv_pressure,
                  "Free KV fraction below which a degraded level tightens its caps (0 = never)")
      ->capture_default_str();
  return {cmd, [f](const Env& env) { return RunServe(env, *f); }};
}

}  // namespace strata::cli
