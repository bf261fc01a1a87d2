// backend/remote.h — a model server reached over HTTP as a backend: any
// OpenAI-compatible server (vLLM, SGLang, llama-server, OpenAI, another
// strata) or the Anthropic Messages API, on one or several replicas.
//
// Promise: Prepare translates the normalised request into the upstream's
// API (backend/upstream_wire.h; a field its API cannot carry is a 400 with
// kUnsupportedByBackend, never a silent drop) and computes its route key.
// Start sends it, always streaming, to the replica the Router picks (prefix
// or session affinity with bounded load, backend/router.h) and turns the
// upstream's stream into events as the bytes arrive, so the client's first
// token leaves as soon as the upstream's does. A request is resent — to
// another replica when there is one, after a jittered exponential backoff —
// only while nothing of it has reached the caller: when the connection
// could not be made (nothing was sent), or the upstream answered 429, 503 or
// 529; never after the first event. Every other failure (an HTTP error, a
// timeout of a phase, a stream cut or malformed mid-way, the upstream's own
// error event) finishes each open choice with a Status whose reason says
// which (kUpstream*), so the client gets an error in its API's shape and its
// stream ends cleanly. Each replica's breaker learns from every outcome, and
// replicas are probed (GET health_path) on their schedule, so a dead replica
// is ejected and a recovered one readmitted. The credential goes only into
// the upstream request's auth header, never into a log line or metric; the
// client's own key is never forwarded.
//
// Metrics (per backend, per replica): the replica's state, outstanding and
// total requests, failures, ejections; retries; the upstream's prompt,
// cached and cache-written prompt tokens (its prompt cache, reported as
// its usage says).
//
// Threading: thread-safe. A run's events are pushed on the I/O thread its
// upstream call runs on: the server connection's own when the run started
// there and the client shares the server's loops (net/event_loops.h), else
// one of the HTTP client's; Cancel may come from any thread. The health
// checks and retry backoffs run on the client's own timers.
//
// Usage:
//   auto metrics = RemoteMetrics::Register(registry);
//   RemoteOptions o{.name = "llama", .api = upstream::Api::kOpenAI,
//                   .routing = {.replicas = {"http://10.0.0.1:8000", "http://10.0.0.2:8000"}}};
//   STRATA_ASSIGN_OR_RETURN(auto b, RemoteBackend::Create(o, *client, *metrics, clock, log));
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/router.h"
#include "backend/upstream_wire.h"
#include "net/http_client.h"
#include "obs/metrics.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::backend {

struct RemoteOptions {
  std::string name;  // the model id clients use ("model" field, /v1/models)
  upstream::Api api = upstream::Api::kOpenAI;
  std::string upstream_model;  // the "model" sent upstream; "" = `name`
  // The replicas' base URLs ("http://host:port" or "https://host[:port]", a
  // trailing "/v1" or "/" is dropped; https as the client's TLS options
  // say), the routing policy, per-replica limits, breaker and backoff.
  RouterOptions routing;
  // The upstream's API key: "Authorization: Bearer" (openai) or "x-api-key"
  // (anthropic). "" = none. Never logged.
  std::string credential;
  std::string anthropic_version = "2023-06-01";  // the anthropic-version header
  // Anthropic requires max_tokens: what a request that gave none is sent
  // ([1, max_tokens_cap]).
  int32_t default_max_tokens = 4096;
  // Anthropic: mark the system prompt as a prompt-cache breakpoint when the
  // client set none (the provider's cache then holds the stable prefix).
  bool cache_system_prompt = false;
  int32_t max_attempts = 3;  // [1, 10] tries per request, the first included
  // Per request: the upstream's first response byte, and the whole exchange
  // (the connect and idle deadlines are the HTTP client's). A request for a
  // whole answer (Request::stream false) waits for its first byte up to the
  // total deadline: the upstream sends nothing before it is done.
  std::chrono::milliseconds first_byte_timeout{120'000};
  std::chrono::milliseconds total_timeout{600'000};
  // The most bytes one upstream answer may send (a stream's body, or a whole
  // JSON answer): past them the run ends with kUpstreamProtocol. The flight
  // keeps a run's answer for its joiners and L1 whatever the client's pace,
  // so this bound, not the client's reading, is what caps its memory.
  size_t max_answer_bytes = 64u << 20;  // [64 KiB, 1 GiB]
  // The prompt's leading bytes that decide its replica under affinity routing.
  size_t affinity_prefix_bytes = 1024;  // [16, 1 MiB]
  // Probed on each replica (GET): 2xx is healthy, and so are 401 and 403
  // (a refused credential is each request's error, not the replica's). ""
  // = no active checks.
  std::string health_path = "/v1/models";
  std::chrono::milliseconds probe_timeout{2000};  // one probe, in all
  uint64_t seed = 0;                              // the retry jitter's random stream
};

// What a running remote backend can change (RemoteBackend::Reconfigure),
// each field as in RemoteOptions. A request keeps the values in force when
// it was prepared (its tries, deadlines, answer bound, credential).
struct RemoteLiveOptions {
  std::string credential;  // a rotated key file's
  int32_t default_max_tokens = 4096;
  int32_t max_attempts = 3;
  std::chrono::milliseconds first_byte_timeout{120'000};
  std::chrono::milliseconds total_timeout{600'000};
  size_t max_answer_bytes = 64u << 20;
  size_t affinity_prefix_bytes = 1024;
  // The router's options but its name, replicas and ring (Router::Reconfigure).
  RouterOptions routing;
};
RemoteLiveOptions LiveOptionsOf(const RemoteOptions& options);

// The metric families every remote backend reports into; registered once
// per registry, shared by all remote backends.
struct RemoteMetrics {
  static std::unique_ptr<RemoteMetrics> Register(obs::MetricsRegistry& registry);
  obs::MetricsRegistry& registry;
  obs::Family<obs::CounterValue>& retries;             // {backend}
  obs::Family<obs::CounterValue>& failures;            // {backend, reason}
  obs::Family<obs::CounterValue>& prompt_tokens;       // {backend}
  obs::Family<obs::CounterValue>& cached_tokens;       // {backend}
  obs::Family<obs::CounterValue>& cache_write_tokens;  // {backend}
};

class RemoteBackend final : public Backend {
 public:
  // `client`, `metrics`, `clock` and `log` are borrowed and must outlive the
  // backend; the client's timeouts are the connect and idle ones.
  static util::StatusOr<std::unique_ptr<RemoteBackend>> Create(const RemoteOptions& options,
                                                               net::HttpClient& client,
                                                               RemoteMetrics& metrics,
                                                               const util::Clock& clock,
                                                               util::Logger& log);
  ~RemoteBackend() override;

  const std::string& name() const override;
  std::string_view kind() const override;
  uint64_t fingerprint() const override;
  int32_t n_ctx() const override { return 0; }
  util::StatusOr<std::shared_ptr<const Prepared>> Prepare(const Request& r) const override;
  util::StatusOr<std::shared_ptr<Run>> Start(const Request& r,
                                             std::shared_ptr<const Prepared> prepared,
                                             std::shared_ptr<Sink> sink,
                                             Governor* governor) override;
  util::StatusOr<EmbeddingResult> Embed(const EmbeddingRequest& r,
                                        std::chrono::steady_clock::time_point deadline) override;
  bool defers_stream_head() const override { return true; }
  // An Anthropic upstream only: the body's counting fields (model — replaced
  // by the upstream's —, messages, system, tools, tool_choice, thinking,
  // mcp_servers) to its /v1/messages/count_tokens, on the replica the
  // router picks; a 200 comes back as it is, any other answer as the Status
  // UpstreamError maps it to. Not retried.
  util::StatusOr<Relayed> CountTokensUpstream(
      std::string_view body, std::chrono::steady_clock::time_point deadline) const override;

  // Each replica's breaker state and counters.
  std::vector<ReplicaStats> replica_stats() const;
  // Swaps the live options (a reload): requests prepared from now on use
  // them. InvalidArgument, changing nothing, when one is out of range or
  // `live.routing` changes the replicas.
  util::Status Reconfigure(const RemoteLiveOptions& live);
  // The live options in force.
  RemoteLiveOptions live_options() const;

  struct State;  // shared with runs and health checks (remote.cpp)

 private:
  explicit RemoteBackend(std::shared_ptr<State> state);
  std::shared_ptr<State> state_;
};

}  // namespace strata::backend
