// `strata serve`: the OpenAI- and Anthropic-compatible HTTP server.
//
// Start-up order: block SIGINT/SIGTERM (every thread inherits the mask), start
// listening (so /health answers 503 while the model loads), open the local
// models and load those that load at start, each with its engine and
// scheduler (cli/serve_models.h), start the gateway, open for requests.
// Shutdown on a signal: refuse new requests, let running ones finish within
// the grace period, cancel the rest, flush answers queued for the shared
// tier, stop the HTTP server, then the schedulers, exit 0. RunServe is that list of steps, each a
// function below with its contract. The audit log (cli/serve_audit.h) opens
// before listening and closes after the scheduler stops. The flags are
// checked, and turned into the options of what starts, in serve_flags.cpp.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "backend/local.h"
#include "cache/eviction_policy.h"
#include "cli/commands.h"
#include "cli/serve_audit.h"
#include "cli/serve_backends.h"
#include "cli/serve_cache.h"
#include "cli/serve_config.h"
#include "cli/serve_flags.h"
#include "cli/serve_http.h"
#include "cli/serve_models.h"
#include "cli/serve_reload.h"
#include "cli/serve_snapshots.h"
#include "cli/serve_tracing.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "gateway/block_eviction_adapter.h"
#include "gateway/gateway.h"
#include "gateway/prefix_metrics.h"
#include "gateway/rt_control.h"
#include "gateway/rt_switcher.h"
#include "model/transformer.h"
#include "net/event_loops.h"
#include "obs/metrics.h"
#include "server/auth.h"
#include "server/server.h"
#include "util/clock.h"
#include "util/file_watch.h"

namespace strata::cli {

namespace {

// The keys of --api-keys (none without it: no key is needed); the file's
// errors as ApiKeys::Load reports them.
util::StatusOr<server::ApiKeys> LoadApiKeys(const Env& env, const std::string& file,
                                            util::Logger& log) {
  if (file.empty()) return server::ApiKeys();
  STRATA_ASSIGN_OR_RETURN(server::ApiKeys keys, server::ApiKeys::Load(*env.fs, file));
  log.Info("API keys: {} configured; requests without a valid key get 401", keys.size());
  return keys;
}

// The admin API's key from --admin-key-file (nullopt without it): at least
// 16 printable characters without blanks, since it guards the reload of the
// whole configuration and the dashboard.
util::StatusOr<std::optional<std::string>> LoadAdminKey(const Env& env, const std::string& file) {
  if (file.empty()) return std::optional<std::string>();
  STRATA_ASSIGN_OR_RETURN(std::string key, ReadKeyFile(env, "--admin-key-file", file));
  const bool printable =
      std::all_of(key.begin(), key.end(), [](char c) { return c > ' ' && c < 0x7f; });
  if (key.size() < 16 || !printable) {
    return util::InvalidArgumentError(fmt::format(
        "--admin-key-file '{}': the key must be at least 16 printable characters without blanks",
        file));
  }
  return std::optional<std::string>(std::move(key));
}

// Blocks SIGINT and SIGTERM in the calling thread, so that every thread
// started after it inherits the mask and the signals go to WaitForStopSignal,
// not to whichever thread they hit; returns that set.
sigset_t BlockStopSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  // A reload; pending until the server is ready (never the default action,
  // which would end the process).
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

struct Listening {
  std::unique_ptr<server::HttpServer> server;
  int port = 0;  // the bound port (--port 0 picks one)
};

// Starts the HTTP server without a gateway (/health answers 503 until
// OpenForRequests) on `loops`, tracing requests with `tracer` (null: off),
// auditing them as `compliance` says, recording them into `snapshots`
// (null: off) and keeping their sessions in `sessions` (null: off); bind and
// option errors as HttpServer reports them.
util::StatusOr<Listening> StartListening(
    const ServeFlags& f, server::ApiKeys keys, net::EventLoops& loops,
    std::shared_ptr<obs::Tracer> tracer, const server::ComplianceOptions& compliance,
    SnapshotServing* snapshots, session::SessionStore* sessions, obs::MetricsRegistry& metrics,
    const util::Clock& clock, util::Logger& log) {
  server::ServerOptions so;
  so.host = f.host;
  so.port = f.port;
  STRATA_RETURN_IF_ERROR(ApplyHttpFlags(f.http, so));  // checked by ValidateFlags
  so.loops = &loops;
  RaiseFileLimit(f.http, log);
  so.request_timeout = std::chrono::seconds(f.timeout_s);
  so.request_id_seed = static_cast<uint64_t>(clock.WallNow().time_since_epoch().count());
  so.model_aliases = f.aliases;
  so.accept_any_model = f.accept_any_model;
  so.tracer = std::move(tracer);
  so.compliance = compliance;
  so.snapshots = snapshots != nullptr ? snapshots->recorder.get() : nullptr;
  so.sessions = sessions;
  Listening l;
  STRATA_ASSIGN_OR_RETURN(l.server,
                          server::HttpServer::Create(so, std::move(keys), metrics, clock, log));
  STRATA_ASSIGN_OR_RETURN(l.port, l.server->Start());
  log.Info("listening on http://{}:{} (loading the model; /health answers 503 until ready)", f.host,
           l.port);
  return l;
}

// The RT-Switcher with --rt-switcher on, nullptr with off. It must outlive the
// scheduler (whose thread evaluates it), its ticker and the gateway.
util::StatusOr<std::unique_ptr<gateway::RtControl>> StartRtSwitcher(const ServeFlags& f,
                                                                    const ServePlan& plan,
                                                                    obs::MetricsRegistry& metrics,
                                                                    const util::Clock& clock,
                                                                    util::Logger& log) {
  if (f.rt_switcher != "on") return std::unique_ptr<gateway::RtControl>();
  gateway::RtControlOptions o = plan.rt;
  o.trace_seed = static_cast<uint64_t>(clock.WallNow().time_since_epoch().count());
  STRATA_ASSIGN_OR_RETURN(auto rt, gateway::RtControl::Create(o, metrics, clock, log));
  log.Info("RT-Switcher: on; levels {}; interval {} s, window {}, TTFT SLO {} s, TPOT SLO {} s",
           f.rt_levels, f.rt_interval_s, f.rt_window, f.rt_ttft_slo_s, f.rt_tpot_slo_s);
  return rt;
}

// Evaluates the RT-Switcher once per interval when no scheduler does (remote
// backends only): their runs report latencies into it and take its terms,
// and its levels must move while traffic flows. Joins on destruction.
class RtTicker {
 public:
  explicit RtTicker(gateway::RtControl& rt)
      : rt_(rt), thread_([this] {
          std::unique_lock<std::mutex> lock(mu_);
          while (!cv_.wait_for(lock, rt_.idle_tick(), [this] { return stop_; })) {
            lock.unlock();
            (void)rt_.BeforeAdmission(engine::SchedulerStats{});
            lock.lock();
          }
        }) {}
  ~RtTicker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  gateway::RtControl& rt_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;   // guarded by mu_
  std::thread thread_;  // last: starts once the members above exist
};

// The gateway over the local backend (first, the default) and the remote
// ones; it opens the cache tiers and, with --redis, the shared tier's
// connection and writer. The prefix-cache metrics follow its per-tier
// families. Errors as Gateway::Create reports them.
// The served backends: the local models (the default first), then the remote ones.
std::vector<backend::Backend*> ServedBackends(LocalModels* local, const RemoteBackends& remotes) {
  std::vector<backend::Backend*> backends;
  if (local != nullptr) backends = local->backends();
  for (const auto& b : remotes.backends) backends.push_back(b.get());
  return backends;
}

util::StatusOr<std::unique_ptr<gateway::Gateway>> BuildGateway(
    LocalModels* local, const std::vector<backend::Backend*>& backends,
    obs::MetricsRegistry& metrics, const gateway::GatewayOptions& go, const util::Clock& clock,
    util::Logger& log) {
  STRATA_ASSIGN_OR_RETURN(auto gw, gateway::Gateway::Create(backends, metrics, go, clock, log));
  if (local != nullptr) {
    gateway::ExportPrefixCacheMetrics(metrics, [local] { return local->scheduler_stats(); });
  }
  return gw;
}

// Logs one line per cache tier: L1 and single flight, L3 and Redis, L2.
void LogCacheTiers(const ServeFlags& f, const ServePlan& plan, const gateway::GatewayOptions& go,
                   const LocalModels* local, util::Logger& log) {
  if (f.l1_bytes > 0) {
    log.Info("response cache (L1): {:.1f} MiB, TTL {} s +/- {:.0f}%; single flight {}",
             static_cast<double>(f.l1_bytes) / (1 << 20), f.l1_ttl_s, f.l1_ttl_jitter * 100,
             f.coalesce ? "on" : "off");
  } else {
    log.Info("response cache (L1): off; single flight {}", f.coalesce ? "on" : "off");
  }
  log.Info("{}", DescribeCacheFlags(f.cache, go));
  if (local == nullptr) return;
  log.Info("prefix cache (L2): {} KV tokens of {} per model, eviction {}",
           f.kv_tokens > 0 ? fmt::format("{}", f.kv_tokens) : "8 contexts' worth of", f.kv_type,
           cache::PolicyKindName(plan.l2_policy));
  for (const std::string& line : local->Describe()) log.Info("{}", line);
}

// The reloads of SIGHUP and POST /admin/reload over `targets` (the remote
// backends taken from `remotes`), hooked into the server before it opens,
// so that a reload never finds the server without one. The Reloader must
// outlive the server's workers (HttpServer::Stop joins them).
std::unique_ptr<Reloader> StartReloads(const Env& env, const CLI::App& cmd,
                                       const std::set<std::string>& given,
                                       const ServeFlags& command_line, const ServeFlags& f,
                                       ReloadTargets targets, const RemoteBackends& remotes,
                                       const util::Clock& clock, util::Logger& log) {
  for (const auto& b : remotes.backends) targets.remotes.push_back(b.get());
  server::HttpServer* srv = targets.server;
  auto reloader = std::make_unique<Reloader>(env, ServeSchema(cmd), given, command_line, f,
                                             std::move(targets), clock, log);
  srv->SetReloadHook([r = reloader.get()] { return r->Reload("POST /admin/reload"); });
  return reloader;
}

// Records the load time, hands the gateway to the server (/health: 200) and
// logs that it is ready. `gw` must outlive the server's use of it (until Stop).
void OpenForRequests(const ServeFlags& f, const Listening& l, gateway::Gateway& gw,
                     const LocalModels* local, double load_s, obs::MetricsRegistry& metrics,
                     util::Logger& log) {
  metrics.Gauge("strata_model_load_seconds", "Seconds from start to ready.").With({}).Set(load_s);
  l.server->SetGateway(&gw);
  std::string models;
  for (const std::string& name : gw.model_names())
    models += (models.empty() ? "'" : ", '") + name + "'";
  if (local != nullptr) {
    log.Info("ready in {:.0f} ms: {} at http://{}:{}/v1 ({} threads, context {}, {} parallel)",
             load_s * 1e3, models, f.host, l.port, f.threads, local->n_ctx(), f.parallel);
    return;
  }
  log.Info("ready in {:.0f} ms: {} at http://{}:{}/v1", load_s * 1e3, models, f.host, l.port);
}

// Waits in this thread for SIGINT or SIGTERM (blocked by BlockStopSignals),
// reloading on every SIGHUP meanwhile; then refuses new requests and lets
// running ones finish within --grace (the local models' schedulers'; without
// them, ShutDown's flush waits for remote answers); true when none had to
// be cancelled at its end.
bool WaitAndDrain(const sigset_t& signals, const ServeFlags& f, server::HttpServer& srv,
                  LocalModels* local, Reloader& reloader, util::Logger& log) {
  int sig = 0;
  while (sigwait(&signals, &sig) == 0 && sig == SIGHUP) (void)reloader.Reload("SIGHUP");
  log.Info("received {}: draining (grace {} s)", sig == SIGTERM ? "SIGTERM" : "SIGINT", f.grace_s);
  srv.StartDraining();
  return local == nullptr || local->Drain(std::chrono::seconds(f.grace_s));
}

// Shuts down in order: answers still queued for Redis (briefly), the HTTP
// server (after the last frames of streams cut at the end of the grace
// period went out: the process exits within grace + 1 s); the gateway and
// what is below it (the local models and their schedulers) are destroyed by
// the caller afterwards. Returns the exit code.
int ShutDown(bool clean, const ServeFlags& f, server::HttpServer& srv, const LocalModels* local,
             gateway::Gateway& gw, util::Logger& log) {
  gw.FlushShared(std::chrono::milliseconds(300));
  // Remote answers have no scheduler to drain them: the grace is spent here.
  srv.Stop(local != nullptr ? std::chrono::milliseconds(500)
                            : std::chrono::milliseconds(f.grace_s * 1000 + 500));
  log.Info("stopped{}",
           clean ? "" : " (some requests were cancelled at the end of the grace period)");
  return kExitOk;
}

// The candidate of a canary that is not served yet: a local file is added
// to the local models (as "<baseline>-canary"), an upstream to the remote
// backends (named after the baseline: StartCanary takes it out again).
void AddCanaryCandidate(const ServeFlags& f, std::vector<LocalModelFile>& files,
                        const CanaryPlan& plan, std::vector<backend::RemoteOptions>& remotes) {
  if (plan.kind != CanaryPlan::Kind::kLocalFile && plan.kind != CanaryPlan::Kind::kRemote) return;
  if (files.empty() && remotes.empty()) return;  // StartCanary: no model is served
  std::string baseline = f.canary.of;
  if (baseline.empty()) baseline = !files.empty() ? files.front().name : remotes.front().name;
  if (plan.kind == CanaryPlan::Kind::kLocalFile) {
    files.push_back({.name = CanaryFileModelName(baseline), .path = plan.file});
    return;
  }
  backend::RemoteOptions o = plan.remote;
  if (o.upstream_model.empty()) {
    // The baseline's model id upstream when it is an upstream itself.
    o.upstream_model = baseline;
    for (const auto& r : remotes) {
      if (r.name == baseline && !r.upstream_model.empty()) o.upstream_model = r.upstream_model;
    }
  }
  o.name = baseline;
  remotes.push_back(std::move(o));
}

// Start-up and shutdown in the order of the file comment. Locals are
// destroyed in reverse: gateway, remote backends (the upstream client
// cancels its calls on the I/O loops, which the stopped server no longer
// uses), the RT-Switcher's ticker, the local engine's parts, the
// RT-Switcher, server, the audit log, the I/O loops (joined), the tracing
// (its last spans sent, its client stopped), metrics, each after everything
// that borrows it.
int RunServe(const Env& env, const ServeFlags& command_line, const CLI::App& cmd) {
  // The settings: the command line over the configuration file over the defaults.
  ServeFlags f = command_line;
  const std::set<std::string> given = GivenFlags(cmd);
  if (!f.config.empty()) {
    auto doc = ReadConfigFile(env, f.config, ServeSchema(cmd));
    if (!doc.ok()) return UsageError(doc.status().message());
    ApplyConfig(*doc, given, f);
  }
  // With a file, a message names a value by its key unless the flag gave it.
  auto usage = [&](const util::Status& st) {
    return UsageError(f.config.empty() ? st.message() : InConfigTerms(st.message(), given));
  };
  auto log = MakeLogger(f.log_level);
  auto plan = ValidateFlags(f);
  if (!plan.ok()) return usage(plan.status());
  auto remote_options = RemoteBackendOptions(f.backends, env, f.max_tokens_cap);
  if (!remote_options.ok()) return usage(remote_options.status());
  auto canary_plan = PlanCanary(env, f);
  if (!canary_plan.ok()) return usage(canary_plan.status());
  auto keys = LoadApiKeys(env, f.api_keys, *log);
  if (!keys.ok()) return ReportError(keys.status());
  auto admin_key = LoadAdminKey(env, f.admin_key_file);
  if (!admin_key.ok()) return ReportError(admin_key.status());
  const sigset_t signals = BlockStopSignals();
  const util::Clock& clock = util::RealClock();
  const auto t0 = clock.Now();
  obs::MetricsRegistry metrics;
  // Traces, with the exporter's own thread (none without --otlp-endpoint);
  // destroyed after everything that records spans.
  auto tracing = StartTracing(f.trace, env, metrics, clock, *log);
  if (!tracing.ok()) return ReportError(tracing.status());
  // The I/O threads: the server's connections and the upstream calls they
  // start share them (a forwarded request stays on its connection's thread).
  auto loops = net::EventLoops::Create(f.http.io_threads);
  if (!loops.ok()) return UsageError(loops.status().message());  // ValidateFlags: does not happen
  auto compliance = StartCompliance(env, f.audit, metrics, clock, *log);
  if (!compliance.ok()) return ReportError(compliance.status());
  // Before the server: it records into them until it stops.
  auto snapshots = OpenSnapshots(f.snapshots, env, metrics, clock, *log);
  if (!snapshots.ok()) {  // a bad key file is a usage error; a directory it cannot make is not
    return snapshots.status().code() == util::StatusCode::kInvalidArgument
               ? UsageError(snapshots.status().message())
               : ReportError(snapshots.status());
  }
  // Before the server, which reads and writes it until it stops.
  auto sessions = OpenSessions(f.sessions, *log);
  if (!sessions.ok()) return ReportError(sessions.status());
  auto srv = StartListening(f, std::move(keys).value(), **loops, (*tracing)->tracer,
                            (*compliance)->options, snapshots->get(), sessions->get(), metrics,
                            clock, *log);
  if (!srv.ok()) return ReportError(srv.status());
  srv->server->SetAdminKey(std::move(admin_key).value());
  auto rt = StartRtSwitcher(f, *plan, metrics, clock, *log);
  if (!rt.ok()) return ReportError(rt.status());
  auto files = LocalModelFiles(env, f, *log);
  if (!files.ok()) return usage(files.status());
  AddCanaryCandidate(f, *files, *canary_plan, *remote_options);
  if (auto st = CheckAcceptAnyModel(f, files->size() + f.backends.specs.size()); !st.ok()) {
    return usage(st);
  }
  auto local =
      files->empty()
          ? util::StatusOr<std::unique_ptr<LocalModels>>(nullptr)
          : LocalModels::Start(env, f, std::move(files).value(),
                               {.l2_policy = plan->l2_policy, .chat_format = plan->chat_format},
                               rt->get(), snapshots->get(), *srv->server, metrics, clock, *log);
  if (!local.ok()) return ReportError(local.status());
  LocalModels* l = local->get();
  // The RT-Switcher is evaluated by a scheduler's thread before each
  // admission; a ticker keeps its levels moving where no scheduler runs for
  // good (remote backends only, or local models that load on demand).
  const auto ticker = *rt && (l == nullptr || l->residency().size() > 1)
                          ? std::make_unique<RtTicker>(**rt)
                          : nullptr;
  auto remotes = StartRemoteBackends(f.backends, std::move(remote_options).value(), **loops,
                                     metrics, clock, *log);
  if (!remotes.ok()) return ReportError(remotes.status());
  // An upstream candidate shares the remote backends' client, but is served
  // only through the canary.
  std::unique_ptr<backend::RemoteBackend> canary_remote;
  if (canary_plan->kind == CanaryPlan::Kind::kRemote) {
    canary_remote = std::move(remotes->backends.back());
    remotes->backends.pop_back();
  }
  std::vector<backend::Backend*> served = ServedBackends(l, *remotes);
  // Declared before the gateway, which serves its backend.
  auto canary =
      StartCanary(*canary_plan, f, served, canary_remote.get(), env, metrics, clock, *log);
  if (!canary.ok()) return usage(canary.status());
  if (canary->controller) {
    srv->server->SetCanaryStateHook([c = canary->controller.get()] { return c->StateJson(); });
  }
  auto go = GatewayOptionsFor(f, l ? l->n_ctx() : 0, rt->get(), clock);
  if (!go.ok()) return UsageError(go.status().message());  // ValidateFlags: does not happen
  // Declared before the gateway, which borrows it.
  auto semantic = StartEncoder(env, f.semantic, f.threads, served, *go, *log);
  if (!semantic.ok()) return ReportError(semantic.status());
  if (go->semantic_mode != gateway::L3Mode::kOff) {
    log->Info("semantic cache (L4/L5): {}, encoder {}, similarity >= {}, {} entries, {} index",
              gateway::L3ModeName(go->semantic_mode), (*semantic)->description,
              f.semantic.similarity, f.semantic.entries, f.semantic.ann);
  }
  auto gw = BuildGateway(l, served, metrics, *go, clock, *log);
  if (!gw.ok()) return ReportError(gw.status());
  LoadSemanticFile(env, f.semantic, **gw, *log);
  LogCacheTiers(f, *plan, *go, l, *log);
  const auto reloader = StartReloads(env, cmd, given, command_line, f,
                                     {.server = srv->server.get(),
                                      .gateway = gw->get(),
                                      .rt = rt->get(),
                                      .local = l,
                                      .local_n_ctx = l ? l->n_ctx() : 0,
                                      .remotes = {},
                                      .l3_at_start = go->l3_mode != gateway::L3Mode::kOff,
                                      .log = log.get(),
                                      .tracer = (*tracing)->tracer.get()},
                                     *remotes, clock, *log);
  if (!f.warm_from.empty()) {
    // Before /health says ready: the first requests already find the cache warm.
    auto snapshot = env.fs->ReadFile(f.warm_from);
    if (!snapshot.ok()) {
      return ReportError(
          util::Status(snapshot.status().code(), "--warm-from: " + snapshot.status().message()));
    }
    auto warmed = (*gw)->ImportCache(*snapshot);
    if (!warmed.ok()) {
      return ReportError(util::Status(
          warmed.status().code(), "--warm-from " + f.warm_from + ": " + warmed.status().message()));
    }
  }
  OpenForRequests(f, *srv, **gw, l, util::SecondsBetween(t0, clock.Now()), metrics, *log);
  const bool clean = WaitAndDrain(signals, f, *srv->server, l, *reloader, *log);
  const int rc = ShutDown(clean, f, *srv->server, l, **gw, *log);
  SaveSemanticFile(env, f.semantic, **gw, *log);  // after the last request stored its answer
  CloseCompliance(**compliance, *log);            // every request has its record by now
  return rc;
}

}  // namespace

util::Status CheckServeFlags(const Env& env, const ServeFlags& f) {
  STRATA_RETURN_IF_ERROR(ValidateFlags(f).status());
  STRATA_RETURN_IF_ERROR(RemoteBackendOptions(f.backends, env, f.max_tokens_cap).status());
  STRATA_RETURN_IF_ERROR(PlanCanary(env, f).status());
  if (!f.api_keys.empty()) {
    STRATA_RETURN_IF_ERROR(server::ApiKeys::Load(*env.fs, f.api_keys).status());
  }
  return LoadAdminKey(env, f.admin_key_file).status();
}

Command RegisterServe(CLI::App& app) {
  auto f = std::make_shared<ServeFlags>();
  CLI::App* cmd =
      app.add_subcommand("serve", "Serve a model over the OpenAI and Anthropic HTTP APIs");
  cmd->add_option("--config", f->config,
                  "TOML file of settings (strata config defaults prints every one); flags given "
                  "here override it; SIGHUP or POST /admin/reload re-reads it");
  cmd->add_option("-m,--model", f->model,
                  "GGUF model file, or NAME=FILE; repeat to serve several (the first is the "
                  "default; default: as for generate)");
  cmd->add_option("--models", f->models_dir,
                  "Serve every .gguf file in DIR as well, each named by its file name without "
                  ".gguf");
  cmd->add_option("--models-memory", f->models_memory,
                  "Bytes the loaded local models may hold together, weights and KV (e.g. 12GiB); "
                  "a model loads on first use and the least valuable idle one is unloaded to "
                  "make room (default: the machine's memory / 1.2)");
  cmd->add_option("--numa", f->numa,
                  "auto: on a machine of several NUMA nodes, place each local model's weights and "
                  "threads as `strata plan` says (first touch, CPU binding); off: leave it to the "
                  "OS")
      ->capture_default_str();
  cmd->add_option("--topology", f->topology,
                  "JSON file of the NUMA nodes to place local models on (as for strata plan; "
                  "default: this machine's)");
  cmd->add_flag("--preload", f->preload,
                "Load every local model before serving (as many as --models-memory holds); "
                "without it one model loads at start and several load on first use");
  cmd->add_option("--host", f->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", f->port, "Port (0 = any free port)")->capture_default_str();
  cmd->add_option("-t,--threads", f->threads, "Threads of the forward pass")->capture_default_str();
  cmd->add_option("--api-keys", f->api_keys,
                  "File of 'KEY TENANT' lines; without it no key is needed (re-read on reload)");
  cmd->add_option("--warm-from", f->warm_from,
                  "Load this cache snapshot (strata cache export) before taking traffic: its L1, "
                  "L3 and semantic entries, and its cached prompt prefixes computed again");
  cmd->add_option("--admin-key-file", f->admin_key_file,
                  "File whose first line is the admin key (16+ characters): POST /admin/reload "
                  "and the dashboard need it (Bearer or Basic auth); re-read on reload");
  cmd->add_option("-c,--ctx", f->ctx, "Context per request in tokens (capped by the model's)")
      ->capture_default_str();
  cmd->add_option("--kv-tokens", f->kv_tokens, "KV cache capacity in tokens; 0 = 8 contexts");
  cmd->add_option("--kv-pressure", f->kv_pressure,
                  "Below this share of free KV blocks, admit only what fits beside the running "
                  "requests' growth and lower new requests' max_tokens to fit (0 = off)")
      ->capture_default_str();
  cmd->add_option("--kv-min-grant", f->kv_min_grant,
                  "The fewest tokens a new request is granted under KV pressure (it waits "
                  "otherwise)")
      ->capture_default_str();
  cmd->add_option("--kv-type", f->kv_type,
                  "KV cache element type: f32, f16 (half the memory) or q8_0 (about a quarter; "
                  "head dimension a multiple of 32)")
      ->capture_default_str();
  cmd->add_option("--repack", f->repack,
                  "Store weight matrices row-interleaved at load for faster products: auto "
                  "(the types this CPU's kernels run faster packed, when they fit in memory), "
                  "on or off")
      ->capture_default_str();
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
  cmd->add_option("--policy-ramp-s", f->policy_ramp_s,
                  "On a reload, move new requests to the new caching and sampling policy over "
                  "this many seconds (a rising share; running requests keep theirs); 0 = at once")
      ->capture_default_str();
  RegisterHttpFlags(*cmd, f->http);
  RegisterBackendFlags(*cmd, f->backends);
  RegisterTraceFlags(*cmd, f->trace);
  RegisterCanaryFlags(*cmd, f->canary);
  cmd->add_option("--max-embedding-inputs", f->max_embedding_inputs,
                  "Most inputs in one /v1/embeddings request [1, 65536]")
      ->capture_default_str();
  cmd->add_flag("--prompt-special-tokens", f->prompt_special_tokens,
                "A /v1/completions prompt's control-token text (<s>, <|im_start|>) becomes "
                "those tokens (default: it stays text)");
  cmd->add_option("--alias", f->aliases,
                  "Model id clients use (default: the file name without .gguf); repeatable: "
                  "each is a name of the local model, the first is the one responses report");
  cmd->add_flag("--accept-any-model", f->accept_any_model,
                "When one model is served, a request naming any unknown model gets it (for "
                "tools that hard-code a model id); refused with several models");
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
  RegisterSemanticFlags(*cmd, f->semantic);
  RegisterAuditFlags(*cmd, f->audit);
  RegisterSnapshotFlags(*cmd, f->snapshots);
  RegisterSessionFlags(*cmd, f->sessions);
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
                  "TRACE_RATE:entropy|topk:MAX_BATCH:MAX_TOKENS_CAP[:MAX_QUEUE_WAIT_S[:FALLBACK]],"
                  "... (0 = no cap; the queue wait limits how long waiting requests may take to "
                  "start, by refusing new ones; FALLBACK 1 sends requests to --rt-fallback)")
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
  cmd->add_option("--rt-fallback", f->rt_fallback,
                  "Model id (a --backend-name, or the local model) that requests for other models "
                  "go to at the levels marked FALLBACK (e.g. a smaller model)");
  cmd->add_option("--rt-kv-pressure", f->rt_kv_pressure,
                  "Free KV fraction below which a degraded level tightens its caps (0 = never)")
      ->capture_default_str();
  return {cmd, [f, cmd](const Env& env) { return RunServe(env, *f, *cmd); }};
}

}  // namespace strata::cli
