#include "backend/remote.h"

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backend/internal/remote_state.h"
#include "util/hash.h"

namespace strata::backend {

using internal::OutcomeOf;
using internal::OutcomeOfHttp;
using internal::RemotePrepared;

using Clock = std::chrono::steady_clock;

std::unique_ptr<RemoteMetrics> RemoteMetrics::Register(obs::MetricsRegistry& reg) {
  auto m = std::unique_ptr<RemoteMetrics>(new RemoteMetrics{
      .registry = reg,
      .retries = reg.Counter("strata_backend_retries_total",
                             "Requests resent to an upstream (connect failures, 429/503/529 "
                             "before any byte reached the client).",
                             {"backend"}),
      .failures = reg.Counter("strata_backend_failures_total",
                              "Upstream requests that failed, by reason.", {"backend", "reason"}),
      .prompt_tokens = reg.Counter("strata_backend_prompt_tokens_total",
                                   "Prompt tokens an upstream reported.", {"backend"}),
      .cached_tokens =
          reg.Counter("strata_backend_cached_tokens_total",
                      "Prompt tokens an upstream read from its prompt cache.", {"backend"}),
      .cache_write_tokens =
          reg.Counter("strata_backend_cache_write_tokens_total",
                      "Prompt tokens an upstream wrote to its prompt cache.", {"backend"})});
  // Each replica's children are read from its router (RemoteBackend::Create).
  const std::vector<std::string> replica = {"backend", "replica"};
  reg.Gauge("strata_backend_replica_up",
            "1 while a replica's breaker is closed, 0 while it is ejected or half-open.", replica);
  reg.Gauge("strata_backend_replica_outstanding", "Requests in flight on a replica.", replica);
  reg.Counter("strata_backend_replica_requests_total", "Requests sent to a replica.", replica);
  reg.Counter("strata_backend_replica_failures_total",
              "Requests to a replica that failed (connect, 5xx, 429, timeouts, broken streams).",
              replica);
  reg.Counter("strata_backend_replica_ejections_total", "Times a replica's breaker opened.",
              replica);
  return m;
}

namespace {

// The host and port of a base URL ("http://host:port/...", "https://[::1]";
// the scheme's port when it names none).
RemoteBackend::State::Address AddressOf(std::string_view url) {
  RemoteBackend::State::Address a;
  const bool tls = url.rfind("https://", 0) == 0;
  a.port = tls ? 443 : 80;
  std::string_view rest = url.substr(url.find("://") + 3);
  rest = rest.substr(0, rest.find('/'));
  size_t colon = rest.rfind(':');
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    a.host =
        std::string(rest.substr(1, close == std::string_view::npos ? rest.size() - 1 : close - 1));
    colon = close != std::string_view::npos && close + 1 < rest.size() && rest[close + 1] == ':'
                ? close + 1
                : std::string_view::npos;
  } else {
    a.host = std::string(rest.substr(0, colon));
  }
  if (colon != std::string_view::npos) {
    int port = 0;
    for (char c : rest.substr(colon + 1)) {
      if (c < '0' || c > '9' || port > 65535) break;
      port = port * 10 + (c - '0');
    }
    if (port > 0 && port <= 65535) a.port = port;
  }
  return a;
}

std::string NormaliseBase(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
  return url;
}

// One JSON POST to `path` on a replica the router picks (no affinity, no
// retry), within `deadline`: the 200 answer's body, else the transport's
// failure or the upstream's error in its API's terms. Blocks its caller
// (HttpClient::Fetch). The replica is released with the outcome.
// `trace` (may be null): the call is a CLIENT span of that request's trace
// (`operation`), and carries its context.
util::StatusOr<std::string> PostJson(RemoteBackend::State& s, std::string_view path,
                                     const nlohmann::json& body, Clock::time_point deadline,
                                     const obs::RequestTrace* trace = nullptr,
                                     const char* operation = "") {
  auto replica = s.router->Acquire({}, {});
  if (!replica.ok()) return replica.status();
  net::ClientRequest req;
  req.method = "POST";
  req.url = s.bases[static_cast<size_t>(*replica)] + std::string(path);
  const std::shared_ptr<const RemoteLiveOptions> live = s.live.load();
  req.headers = s.Headers(*live, /*json_body=*/true, /*stream=*/false);
  obs::Span span = s.StartCall(trace, operation, *replica, req.headers);
  req.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  req.total_timeout = std::max(left, std::chrono::milliseconds(1));
  req.first_byte_timeout = std::min(*req.total_timeout, live->first_byte_timeout);
  auto resp = s.client.Fetch(std::move(req));
  if (!resp.ok()) {
    s.router->Release(*replica, OutcomeOf(resp.status()));
    span.SetError(std::string(util::ErrorReasonName(resp.status().reason())));
    return resp.status();
  }
  span.SetInt("http.response.status_code", resp->status);
  if (resp->status != 200) {
    s.router->Release(*replica, OutcomeOfHttp(resp->status));
    const util::Status failure = upstream::UpstreamError(s.options.api, resp->status, resp->body);
    span.SetError(std::string(util::ErrorReasonName(failure.reason())));
    return failure;
  }
  s.router->Release(*replica, Outcome::kSuccess);
  return std::move(resp->body);
}

// Probes the replicas due, then schedules the next round. Holds the state
// weakly: a backend that is gone stops probing.
void HealthTick(std::weak_ptr<RemoteBackend::State> weak) {
  auto s = weak.lock();
  if (s == nullptr) return;
  const auto now = s->clock.Now();
  for (int32_t replica : s->router->ProbesDue(now)) {
    net::ClientRequest req;
    req.method = "GET";
    req.url = s->bases[static_cast<size_t>(replica)] + s->options.health_path;
    req.headers = s->Headers(*s->live.load(), false, false);
    req.first_byte_timeout = s->options.probe_timeout;
    req.total_timeout = s->options.probe_timeout;
    auto status = std::make_shared<int>(0);
    net::ClientCallbacks cb;
    cb.on_head = [status](const net::ClientResponseHead& h) { *status = h.status; };
    cb.on_done = [weak, replica, status](const util::Status& st) {
      if (auto alive = weak.lock()) {
        // 401 and 403 refuse strata's credential, not the replica's health
        // (a request's outcome then is neutral too): ejecting it would turn
        // that clear 502 into "no replica" 503s.
        const bool up = (*status >= 200 && *status < 300) || *status == 401 || *status == 403;
        alive->router->ReportProbe(replica, st.ok() && up);
      }
    };
    s->client.Start(std::move(req), std::move(cb));
  }
  const auto next = s->router->NextProbeAt();
  const auto interval = std::max(s->options.routing.probe_interval, std::chrono::milliseconds(50));
  auto delay = next == Router::TimePoint::max() ? interval : next - s->clock.Now();
  delay = std::clamp<std::chrono::nanoseconds>(delay, std::chrono::milliseconds(20), interval);
  s->client.After(delay, [weak](bool stopped) {
    if (!stopped) HealthTick(weak);
  });
}

}  // namespace

RemoteBackend::RemoteBackend(std::shared_ptr<State> state) : state_(std::move(state)) {}
RemoteBackend::~RemoteBackend() = default;

RemoteLiveOptions LiveOptionsOf(const RemoteOptions& o) {
  return {.credential = o.credential,
          .default_max_tokens = o.default_max_tokens,
          .max_attempts = o.max_attempts,
          .first_byte_timeout = o.first_byte_timeout,
          .total_timeout = o.total_timeout,
          .max_answer_bytes = o.max_answer_bytes,
          .affinity_prefix_bytes = o.affinity_prefix_bytes,
          .routing = o.routing};
}

namespace {

util::Status ValidateLive(const RemoteLiveOptions& o) {
  if (o.max_attempts < 1 || o.max_attempts > 10) {
    return util::InvalidArgumentError(
        fmt::format("backend attempts {} is outside [1, 10]", o.max_attempts));
  }
  if (o.default_max_tokens < 1) {
    return util::InvalidArgumentError("the default max_tokens must be at least 1");
  }
  if (o.max_answer_bytes < (64u << 10) || o.max_answer_bytes > (1u << 30)) {
    return util::InvalidArgumentError("the answer bound is outside [64 KiB, 1 GiB]");
  }
  if (o.affinity_prefix_bytes < 16 || o.affinity_prefix_bytes > (1u << 20)) {
    return util::InvalidArgumentError("the affinity prefix is outside [16 B, 1 MiB]");
  }
  const auto day = std::chrono::hours(24);
  if (o.first_byte_timeout.count() < 1 || o.total_timeout.count() < 1 ||
      o.first_byte_timeout > day || o.total_timeout > day) {
    return util::InvalidArgumentError("the first-byte and total timeouts must be in [1 ms, 1 day]");
  }
  return util::OkStatus();
}

}  // namespace

util::StatusOr<std::unique_ptr<RemoteBackend>> RemoteBackend::Create(const RemoteOptions& options,
                                                                     net::HttpClient& client,
                                                                     RemoteMetrics& metrics,
                                                                     const util::Clock& clock,
                                                                     util::Logger& log) {
  if (options.name.empty()) return util::InvalidArgumentError("a remote backend needs a name");
  STRATA_RETURN_IF_ERROR(ValidateLive(LiveOptionsOf(options)));
  if (!options.health_path.empty() && options.health_path.front() != '/') {
    return util::InvalidArgumentError(
        fmt::format("the health path '{}' must start with '/'", options.health_path));
  }
  auto state = std::make_shared<State>(options, client, clock, log);
  if (state->options.upstream_model.empty()) state->options.upstream_model = options.name;
  RouterOptions ro = options.routing;
  ro.name = options.name;
  state->options.routing.name = options.name;
  state->live.store(std::make_shared<const RemoteLiveOptions>(LiveOptionsOf(state->options)));
  for (const std::string& url : ro.replicas) {
    if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0) {
      return util::InvalidArgumentError(
          fmt::format("backend '{}': replica '{}' is not an http:// or https:// URL", options.name,
                      url.substr(0, 200)));
    }
    state->bases.push_back(NormaliseBase(url));
    state->addresses.push_back(AddressOf(state->bases.back()));
  }
  STRATA_ASSIGN_OR_RETURN(state->router, Router::Create(ro, clock, util::Rng(options.seed)));
  util::Hasher h(0x7374726174615242ULL);  // "strataRB"
  h.Update(upstream::ApiName(options.api));
  h.Update(state->options.upstream_model);
  h.Update(options.name);
  state->fingerprint = h.Digest();
  state->retries = &metrics.retries.With({options.name});
  state->failures = &metrics.failures;
  state->prompt_tokens = &metrics.prompt_tokens.With({options.name});
  state->cached_tokens = &metrics.cached_tokens.With({options.name});
  state->cache_write_tokens = &metrics.cache_write_tokens.With({options.name});
  // Each replica's breaker and load, read at render time (weakly: the
  // registry outlives the backend).
  std::weak_ptr<State> weak = state;
  for (int32_t i = 0; i < state->router->size(); ++i) {
    auto read = [weak, i](double (*field)(const ReplicaStats&)) {
      return [weak, i, field]() -> double {
        auto s = weak.lock();
        return s == nullptr ? 0.0 : field(s->router->Stats()[static_cast<size_t>(i)]);
      };
    };
    const std::vector<std::string> labels = {options.name, ro.replicas[static_cast<size_t>(i)]};
    obs::MetricsRegistry& reg = metrics.registry;
    reg.ChildCallback("strata_backend_replica_up", labels,
                      read([](const ReplicaStats& r) { return r.state == "healthy" ? 1.0 : 0.0; }));
    reg.ChildCallback("strata_backend_replica_outstanding", labels, read([](const ReplicaStats& r) {
                        return static_cast<double>(r.outstanding);
                      }));
    reg.ChildCallback("strata_backend_replica_requests_total", labels,
                      read([](const ReplicaStats& r) { return static_cast<double>(r.requests); }));
    reg.ChildCallback("strata_backend_replica_failures_total", labels,
                      read([](const ReplicaStats& r) { return static_cast<double>(r.failures); }));
    reg.ChildCallback("strata_backend_replica_ejections_total", labels,
                      read([](const ReplicaStats& r) { return static_cast<double>(r.ejections); }));
  }
  if (!options.health_path.empty() && options.routing.probe_interval.count() > 0) {
    client.After(std::chrono::milliseconds(0), [weak](bool stopped) {
      if (!stopped) HealthTick(weak);
    });
  }
  log.Info("backend '{}': {} upstream, {} replica(s), routing {}", options.name,
           upstream::ApiName(options.api), state->bases.size(),
           RoutePolicyName(options.routing.policy));
  return std::unique_ptr<RemoteBackend>(new RemoteBackend(std::move(state)));
}

const std::string& RemoteBackend::name() const { return state_->options.name; }
std::string_view RemoteBackend::kind() const { return upstream::ApiName(state_->options.api); }
uint64_t RemoteBackend::fingerprint() const { return state_->fingerprint; }

std::vector<ReplicaStats> RemoteBackend::replica_stats() const { return state_->router->Stats(); }

RemoteLiveOptions RemoteBackend::live_options() const {
  RemoteLiveOptions live = *state_->live.load();
  live.routing = state_->router->options();
  return live;
}

util::Status RemoteBackend::Reconfigure(const RemoteLiveOptions& live) {
  STRATA_RETURN_IF_ERROR(ValidateLive(live));
  RouterOptions ro = live.routing;
  ro.name = state_->options.name;
  STRATA_RETURN_IF_ERROR(state_->router->Reconfigure(ro));
  state_->live.store(std::make_shared<const RemoteLiveOptions>(live));
  return util::OkStatus();
}

util::StatusOr<std::shared_ptr<const Prepared>> RemoteBackend::Prepare(const Request& r) const {
  const RemoteOptions& o = state_->options;
  const std::shared_ptr<const RemoteLiveOptions> live = state_->live.load();
  auto p = std::make_shared<RemotePrepared>();
  p->chat = !r.completion();
  p->answer_in_tool =
      o.api == upstream::Api::kAnthropic && r.response_format != ResponseFormat::kText;
  p->stops = r.stop;
  p->whole = !r.stream;
  if (r.max_tokens) {
    p->max_tokens = *r.max_tokens;
  } else if (o.api == upstream::Api::kAnthropic) {
    p->max_tokens = live->default_max_tokens;
  }
  STRATA_ASSIGN_OR_RETURN(p->call,
                          upstream::RenderRequest(o.api, r,
                                                  {.model = o.upstream_model,
                                                   .max_tokens = p->max_tokens,
                                                   .cache_system_prompt = o.cache_system_prompt,
                                                   .stream = r.stream}));
  // The route: every turn of a session on one replica; else the prompt's
  // leading bytes, so requests that share a prefix share the replica that
  // has its KV cached.
  if (!r.session_id.empty()) {
    util::Hasher h(0x73657373696f6eULL);  // "session"
    h.Update(r.tenant);
    h.Update(r.session_id);
    p->route.session = h.Digest() | 1;
  }
  std::string lead;
  if (!r.prompt_ids.empty()) {
    for (int32_t id : r.prompt_ids) {
      if (lead.size() >= live->affinity_prefix_bytes) break;
      lead += std::to_string(id);
      lead += ' ';
    }
  } else if (r.prompt) {
    lead = r.prompt->substr(0, live->affinity_prefix_bytes);
  } else {
    for (const auto& m : r.messages) {
      if (lead.size() >= live->affinity_prefix_bytes) break;
      lead += m.role;
      lead += '\n';
      lead += m.content;
      lead += '\n';
    }
    lead.resize(std::min(lead.size(), live->affinity_prefix_bytes));
  }
  p->route.prefix = util::Hash64(lead, 0x70726566ULL) | 1;  // "pref"; never 0 (= none)
  return std::shared_ptr<const Prepared>(std::move(p));
}

util::StatusOr<std::shared_ptr<Run>> RemoteBackend::Start(const Request& r,
                                                          std::shared_ptr<const Prepared> prepared,
                                                          std::shared_ptr<Sink> sink,
                                                          Governor* governor) {
  auto p = std::dynamic_pointer_cast<const RemotePrepared>(prepared);
  if (p == nullptr) return util::InternalError("a request prepared by another backend");
  std::string body = p->call.body;
  std::string terms;
  bool traced = true;
  if (governor != nullptr) {
    // The switcher's terms for a remote model: a max_tokens cap (the upstream
    // is sent the smaller value) and trace sampling; a sampling tier cannot
    // change how an upstream samples.
    const Governor::Terms t = governor->Admit();
    terms = t.describe;
    traced = t.traced;
    if (t.max_tokens_cap > 0 && (p->max_tokens == 0 || t.max_tokens_cap < p->max_tokens)) {
      STRATA_ASSIGN_OR_RETURN(
          upstream::Call capped,
          upstream::RenderRequest(state_->options.api, r,
                                  {.model = state_->options.upstream_model,
                                   .max_tokens = t.max_tokens_cap,
                                   .cache_system_prompt = state_->options.cache_system_prompt,
                                   .stream = r.stream}));
      body = std::move(capped.body);
      sink->DoNotStore();
    }
  }
  return internal::StartRemoteRun(state_, std::move(p), std::move(body), r.n, r.stop,
                                  std::move(sink), std::move(terms), traced, r.request_id, r.trace);
}

util::StatusOr<EmbeddingResult> RemoteBackend::Embed(
    const EmbeddingRequest& r, std::chrono::steady_clock::time_point deadline) {
  const RemoteOptions& o = state_->options;
  if (o.api != upstream::Api::kOpenAI) {
    return util::InvalidArgumentError(fmt::format("backend '{}' ({}) has no embeddings endpoint",
                                                  o.name, upstream::ApiName(o.api)))
        .WithReason(util::ErrorReason::kUnsupportedByBackend);
  }
  nlohmann::json input = nlohmann::json::array();
  for (const std::string& t : r.texts) input.push_back(t);
  for (const auto& ids : r.token_ids) input.push_back(ids);
  if (input.empty()) return util::InvalidFieldError("input", "'input' must not be empty");
  const nlohmann::json body = {{"model", o.upstream_model}, {"input", input}};
  STRATA_ASSIGN_OR_RETURN(
      const std::string answer,
      PostJson(*state_, "/v1/embeddings", body, deadline, r.trace.get(), "embeddings"));
  const auto bad = [](std::string_view why) {
    return util::InternalError(fmt::format("the upstream's embeddings answer {}", why))
        .WithReason(util::ErrorReason::kUpstreamProtocol);
  };
  nlohmann::json j = nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array()) return bad("has no data");
  EmbeddingResult out;
  out.embeddings.resize(input.size());
  size_t filled = 0;
  for (const auto& item : j["data"]) {
    if (!item.is_object() || !item.contains("embedding") || !item["embedding"].is_array()) {
      return bad("has an item without an embedding array");
    }
    size_t index = filled;
    if (item.contains("index") && item["index"].is_number_unsigned()) {
      index = item["index"].get<size_t>();
    }
    if (index >= out.embeddings.size() || !out.embeddings[index].empty()) {
      return bad("has an index out of range or twice");
    }
    std::vector<float>& v = out.embeddings[index];
    for (const auto& x : item["embedding"]) {
      if (!x.is_number()) return bad("has a non-number in an embedding");
      v.push_back(x.get<float>());
    }
    ++filled;
  }
  if (filled != input.size()) return bad("has fewer embeddings than inputs");
  if (j.contains("usage") && j["usage"].is_object() && j["usage"].contains("prompt_tokens") &&
      j["usage"]["prompt_tokens"].is_number_integer()) {
    out.prompt_tokens = j["usage"]["prompt_tokens"].get<int32_t>();
  }
  return out;
}

util::StatusOr<Backend::Relayed> RemoteBackend::CountTokensUpstream(
    std::string_view body, std::chrono::steady_clock::time_point deadline) const {
  const RemoteOptions& o = state_->options;
  if (o.api != upstream::Api::kAnthropic) {
    return util::InvalidArgumentError(
               fmt::format("backend '{}' ({}) cannot count tokens: its API has no token "
                           "counting endpoint",
                           o.name, upstream::ApiName(o.api)))
        .WithReason(util::ErrorReason::kUnsupportedByBackend);
  }
  const nlohmann::json in = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!in.is_object()) {
    return util::InvalidArgumentError("the request body must be a JSON object")
        .WithReason(util::ErrorReason::kMalformedJson);
  }
  nlohmann::json out = nlohmann::json::object();
  for (const char* field :
       {"messages", "system", "tools", "tool_choice", "thinking", "mcp_servers"}) {
    if (in.contains(field)) out[field] = in[field];
  }
  out["model"] = o.upstream_model;
  STRATA_ASSIGN_OR_RETURN(std::string answer,
                          PostJson(*state_, "/v1/messages/count_tokens", out, deadline));
  const nlohmann::json parsed = nlohmann::json::parse(answer, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_object() || !parsed.contains("input_tokens") ||
      !parsed["input_tokens"].is_number_integer()) {
    return util::InternalError("the upstream's count_tokens answer has no input_tokens")
        .WithReason(util::ErrorReason::kUpstreamProtocol);
  }
  return Relayed{.status = 200, .body = std::move(answer)};
}

}  // namespace strata::backend
