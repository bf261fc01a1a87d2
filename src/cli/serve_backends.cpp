#include "cli/serve_backends.h"

#include <fmt/format.h>

namespace strata::cli {
namespace {

std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// "KIND:URL[,URL...]" as its API and replica URLs.
util::StatusOr<std::pair<backend::upstream::Api, std::vector<std::string>>> ParseSpec(
    const std::string& spec) {
  const size_t colon = spec.find(':');
  const auto api = colon == std::string::npos ? std::nullopt
                                              : backend::upstream::ParseApi(spec.substr(0, colon));
  if (!api) {
    return util::InvalidArgumentError(fmt::format(
        "--backend '{}' must be KIND:URL[,URL...] with KIND openai or anthropic", spec));
  }
  std::vector<std::string> urls;
  std::string rest = spec.substr(colon + 1);
  size_t start = 0;
  while (start <= rest.size()) {
    const size_t comma = rest.find(',', start);
    const std::string url =
        rest.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (url.empty()) {
      return util::InvalidArgumentError(fmt::format("--backend '{}' has an empty URL", spec));
    }
    urls.push_back(url);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return std::pair{*api, std::move(urls)};
}

// The credential of backend `i`: its key file's first line, else
// $STRATA_BACKEND_KEY, else none.
util::StatusOr<std::string> Credential(const BackendFlags& f, size_t i, const Env& env) {
  if (i < f.key_files.size() && !f.key_files[i].empty()) {
    return ReadKeyFile(env, "--backend-key-file", f.key_files[i]);
  }
  return env.env_var ? env.env_var("STRATA_BACKEND_KEY") : std::string();
}

}  // namespace

void RegisterBackendFlags(CLI::App& cmd, BackendFlags& f) {
  cmd.add_option("--backend", f.specs,
                 "A model server to serve, KIND:URL[,URL...] (KIND openai or anthropic; several "
                 "URLs are replicas); repeatable. Without -m only these are served");
  cmd.add_option("--backend-name", f.names,
                 "The model id clients use for the i-th --backend (default: its --backend-model)");
  cmd.add_option("--backend-model", f.models,
                 "The model id sent to the i-th --backend's upstream (default: its name)");
  cmd.add_option("--backend-key-file", f.key_files,
                 "File whose first line is the i-th --backend's API key (default: "
                 "$STRATA_BACKEND_KEY)");
  cmd.add_option("--backend-routing", f.routing,
                 "Replica choice: affinity (prompt prefix / session, bounded load), round-robin "
                 "or least-loaded")
      ->capture_default_str();
  cmd.add_option("--backend-max-concurrency", f.max_concurrency,
                 "Requests in flight per replica at most (0 = no limit)")
      ->capture_default_str();
  cmd.add_option("--backend-retries", f.retries,
                 "Resends of a request that could not connect or got 429/503/529 before any "
                 "byte reached the client [0, 9]")
      ->capture_default_str();
  cmd.add_option("--backend-connect-timeout", f.connect_timeout_s,
                 "Seconds to open a connection to a replica")
      ->capture_default_str();
  cmd.add_option("--backend-first-byte-timeout", f.first_byte_timeout_s,
                 "Seconds from sending a request to the upstream's first response byte")
      ->capture_default_str();
  cmd.add_option("--backend-idle-timeout", f.idle_timeout_s,
                 "Seconds an upstream stream may stay silent between chunks")
      ->capture_default_str();
  cmd.add_option("--backend-total-timeout", f.total_timeout_s,
                 "Seconds one upstream request may take in all")
      ->capture_default_str();
  cmd.add_option("--backend-eject-after", f.eject_after,
                 "Consecutive failures that eject a replica (its breaker opens)")
      ->capture_default_str();
  cmd.add_option("--backend-eject-time", f.eject_s,
                 "Seconds a replica is first ejected for (doubling per ejection, at most 30x)")
      ->capture_default_str();
  cmd.add_option("--backend-health-path", f.health_path,
                 "Path probed on each replica (GET; 2xx, 401 or 403 = healthy); empty = no "
                 "active checks")
      ->capture_default_str();
  cmd.add_option("--backend-health-interval", f.health_interval_s,
                 "Seconds between two probes of a replica (0 = no active checks)")
      ->capture_default_str();
  cmd.add_option("--backend-affinity-bytes", f.affinity_bytes,
                 "Leading bytes of the prompt that pick its replica under affinity routing")
      ->capture_default_str();
  cmd.add_option("--backend-load-bound", f.load_bound,
                 "Affinity: a replica takes a prompt's requests while it carries less than this "
                 "times the average load, else the next replica on the ring does [1, 100]")
      ->capture_default_str();
  cmd.add_option("--backend-affinity-floor", f.affinity_floor,
                 "Affinity: requests in flight a replica may carry before its prompts spill "
                 "elsewhere, whatever the average")
      ->capture_default_str();
  cmd.add_option("--backend-max-answer-bytes", f.max_answer_bytes,
                 "Bytes one upstream answer may send at most (its stream or JSON body); a "
                 "longer one ends with a 502 upstream_protocol_error")
      ->capture_default_str();
  cmd.add_flag("--backend-cache-system", f.cache_system,
               "Anthropic backends: mark the system prompt as a prompt-cache breakpoint when the "
               "client set none");
  cmd.add_option("--backend-io-threads", f.io_threads, "I/O threads of the upstream HTTP client")
      ->capture_default_str();
  cmd.add_option("--backend-ca-file", f.ca_file,
                 "PEM file of CA certificates trusted for https replicas besides the system's "
                 "(a private CA)");
  cmd.add_flag("--backend-insecure-skip-verify", f.insecure_skip_verify,
               "https replicas: accept any certificate for any name (testing only: the traffic "
               "and the API keys are then open to anyone on the path)");
}

util::StatusOr<std::vector<backend::RemoteOptions>> RemoteBackendOptions(const BackendFlags& f,
                                                                         const Env& env,
                                                                         int32_t max_tokens_cap) {
  // The shared flags are checked even without a --backend: a value out of
  // range is an error wherever it is given.
  const auto policy = backend::ParseRoutePolicy(f.routing);
  if (!policy) {
    return util::InvalidArgumentError(fmt::format(
        "--backend-routing '{}' is not affinity, round-robin or least-loaded", f.routing));
  }
  if (f.retries < 0 || f.retries > 9) {
    return util::InvalidArgumentError(
        fmt::format("--backend-retries {} is outside [0, 9]", f.retries));
  }
  for (const auto& [flag, v] : {std::pair{"--backend-connect-timeout", f.connect_timeout_s},
                                std::pair{"--backend-first-byte-timeout", f.first_byte_timeout_s},
                                std::pair{"--backend-idle-timeout", f.idle_timeout_s},
                                std::pair{"--backend-total-timeout", f.total_timeout_s}}) {
    if (!(v >= 0.001 && v <= 86400)) {
      return util::InvalidArgumentError(
          fmt::format("{} {} is outside [0.001, 86400] seconds", flag, v));
    }
  }
  // The breaker's longest ejection is 30 times the first, at most an hour.
  if (!(f.eject_s >= 0.001 && f.eject_s <= 120)) {
    return util::InvalidArgumentError(
        fmt::format("--backend-eject-time {} is outside [0.001, 120] seconds", f.eject_s));
  }
  if (!(f.health_interval_s >= 0 && f.health_interval_s <= 3600)) {
    return util::InvalidArgumentError(fmt::format(
        "--backend-health-interval {} is outside [0, 3600] seconds", f.health_interval_s));
  }
  if (f.io_threads < 1 || f.io_threads > 64) {
    return util::InvalidArgumentError(
        fmt::format("--backend-io-threads {} is outside [1, 64]", f.io_threads));
  }
  if (f.max_concurrency < 0 || f.max_concurrency > (1 << 20)) {
    return util::InvalidArgumentError(
        fmt::format("--backend-max-concurrency {} is outside [0, 1048576]", f.max_concurrency));
  }
  if (!f.health_path.empty() && f.health_path.front() != '/') {
    return util::InvalidArgumentError(
        fmt::format("--backend-health-path '{}' must start with '/'", f.health_path));
  }
  if (f.eject_after < 1 || f.eject_after > 1000) {
    return util::InvalidArgumentError(
        fmt::format("--backend-eject-after {} is outside [1, 1000]", f.eject_after));
  }
  if (f.affinity_bytes < 16 || f.affinity_bytes > (1 << 20)) {
    return util::InvalidArgumentError(
        fmt::format("--backend-affinity-bytes {} is outside [16, 1048576]", f.affinity_bytes));
  }
  if (!(f.load_bound >= 1 && f.load_bound <= 100)) {
    return util::InvalidArgumentError(
        fmt::format("--backend-load-bound {} is outside [1, 100]", f.load_bound));
  }
  if (f.affinity_floor < 1 || f.affinity_floor > (1 << 20)) {
    return util::InvalidArgumentError(
        fmt::format("--backend-affinity-floor {} is outside [1, 1048576]", f.affinity_floor));
  }
  if (f.max_answer_bytes < (64 << 10) || f.max_answer_bytes > (1 << 30)) {
    return util::InvalidArgumentError(fmt::format(
        "--backend-max-answer-bytes {} is outside [65536, 1073741824]", f.max_answer_bytes));
  }
  std::vector<backend::RemoteOptions> out;
  if (f.specs.empty()) {
    if (!f.names.empty() || !f.models.empty() || !f.key_files.empty()) {
      return util::InvalidArgumentError(
          "--backend-name, --backend-model and --backend-key-file need a --backend");
    }
    return out;
  }
  for (const auto& [flag, n] :
       {std::pair{"--backend-name", f.names.size()}, std::pair{"--backend-model", f.models.size()},
        std::pair{"--backend-key-file", f.key_files.size()}}) {
    if (n > f.specs.size()) {
      return util::InvalidArgumentError(
          fmt::format("{} is given {} times for {} --backend", flag, n, f.specs.size()));
    }
  }
  for (size_t i = 0; i < f.specs.size(); ++i) {
    STRATA_ASSIGN_OR_RETURN(auto spec, ParseSpec(f.specs[i]));
    backend::RemoteOptions o;
    o.api = spec.first;
    o.upstream_model = i < f.models.size() ? f.models[i] : "";
    o.name = i < f.names.size() && !f.names[i].empty() ? f.names[i] : o.upstream_model;
    if (o.name.empty()) {
      return util::InvalidArgumentError(
          fmt::format("--backend '{}' needs a --backend-name (the model id clients use) or a "
                      "--backend-model",
                      f.specs[i]));
    }
    for (const auto& earlier : out) {
      if (earlier.name == o.name) {
        return util::InvalidArgumentError(
            fmt::format("two backends are named '{}'; give each its own --backend-name", o.name));
      }
    }
    STRATA_ASSIGN_OR_RETURN(o.credential, Credential(f, i, env));
    o.routing.replicas = std::move(spec.second);
    o.routing.policy = *policy;
    o.routing.max_concurrency_per_replica = f.max_concurrency;
    o.routing.load_bound = f.load_bound;
    o.routing.affinity_floor = f.affinity_floor;
    o.routing.eject_after_failures = f.eject_after;
    o.routing.eject_base = Ms(f.eject_s);
    o.routing.eject_max = std::max(Ms(f.eject_s), Ms(f.eject_s * 30));
    o.routing.probe_interval = Ms(f.health_interval_s);
    o.max_attempts = f.retries + 1;
    o.first_byte_timeout = Ms(f.first_byte_timeout_s);
    o.total_timeout = Ms(f.total_timeout_s);
    o.health_path = f.health_path;
    o.probe_timeout = std::min(Ms(f.connect_timeout_s + 2), std::chrono::milliseconds(10'000));
    o.affinity_prefix_bytes = static_cast<size_t>(f.affinity_bytes);
    o.max_answer_bytes = static_cast<size_t>(f.max_answer_bytes);
    o.cache_system_prompt = f.cache_system;
    o.default_max_tokens = max_tokens_cap;
    o.seed = 0x5eed0000ULL + i;
    STRATA_RETURN_IF_ERROR(backend::ValidateRouterOptions(o.routing).WithContext(
        fmt::format("--backend '{}'", f.specs[i])));
    out.push_back(std::move(o));
  }
  return out;
}

util::StatusOr<RemoteBackends> StartRemoteBackends(const BackendFlags& f,
                                                   std::vector<backend::RemoteOptions> options,
                                                   net::EventLoops& loops,
                                                   obs::MetricsRegistry& metrics,
                                                   const util::Clock& clock, util::Logger& log) {
  RemoteBackends out;
  if (options.empty()) return out;
  net::HttpClientOptions co;
  co.io_threads = f.io_threads;
  co.connect_timeout = Ms(f.connect_timeout_s);
  co.first_byte_timeout = Ms(f.first_byte_timeout_s);
  co.idle_timeout = Ms(f.idle_timeout_s);
  co.total_timeout = Ms(f.total_timeout_s);
  co.ca_file = f.ca_file;
  co.tls_verify = !f.insecure_skip_verify;
  if (f.insecure_skip_verify) {
    log.Warn(
        "--backend-insecure-skip-verify: the certificates of https backends are NOT verified; "
        "anyone on the path can impersonate them and read the API keys sent to them");
  }
  auto client = net::HttpClient::Create(co, log, &loops);
  if (!client.ok()) {
    return client.status().WithContext(f.ca_file.empty() ? "the upstream HTTP client"
                                                         : "--backend-ca-file");
  }
  out.client = std::move(client).value();
  out.metrics = backend::RemoteMetrics::Register(metrics);
  for (auto& o : options) {
    STRATA_ASSIGN_OR_RETURN(
        auto b, backend::RemoteBackend::Create(o, *out.client, *out.metrics, clock, log));
    out.backends.push_back(std::move(b));
  }
  return out;
}

}  // namespace strata::cli
