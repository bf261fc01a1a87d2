// cli/serve_backends.h — the `strata serve` flags of the remote backends
// (--backend KIND:URL[,URL...] and the options every one of them shares)
// and how they become backend::RemoteBackend instances over one HTTP client.
// docs/api.md ("Remote backends") lists each flag with its default.
//
// Pairing: the i-th --backend-name, --backend-model and --backend-key-file
// belong to the i-th --backend. A backend's name (the model id clients
// send) defaults to its --backend-model; one of the two is required. Its
// credential comes from its --backend-key-file (the file's first line), or
// else the environment variable STRATA_BACKEND_KEY; never from the command
// line, and it is never logged.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/remote.h"
#include "cli/commands.h"
#include "net/http_client.h"
#include "obs/metrics.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::cli {

struct BackendFlags {
  std::vector<std::string> specs;      // --backend KIND:URL[,URL...]
  std::vector<std::string> names;      // --backend-name
  std::vector<std::string> models;     // --backend-model
  std::vector<std::string> key_files;  // --backend-key-file
  std::string routing = "affinity";
  int32_t max_concurrency = 0;  // per replica; 0 = unlimited
  int32_t retries = 2;          // resends after the first try
  double connect_timeout_s = 5;
  double first_byte_timeout_s = 120;
  double idle_timeout_s = 60;
  double total_timeout_s = 600;
  int32_t eject_after = 3;
  double eject_s = 1;
  std::string health_path = "/v1/models";
  double health_interval_s = 2;  // 0 = no active checks
  int32_t affinity_bytes = 1024;
  double load_bound = 1.25;    // affinity: a replica's load over the average at most
  int32_t affinity_floor = 4;  // affinity: in-flight requests below which nothing spills
  int64_t max_answer_bytes = 64 << 20;
  bool cache_system = false;  // anthropic: a cache breakpoint after the system prompt
  int32_t io_threads = 2;     // of the upstream HTTP client
  // https replicas: a PEM bundle trusted besides the system's ("" = none),
  // and the opt-out of certificate verification.
  std::string ca_file;
  bool insecure_skip_verify = false;
};

void RegisterBackendFlags(CLI::App& cmd, BackendFlags& flags);

// The remote backends' options from the flags (credentials read through
// `env`); InvalidArgument naming the flag at fault. `max_tokens_cap` is what
// an Anthropic request without max_tokens is sent.
util::StatusOr<std::vector<backend::RemoteOptions>> RemoteBackendOptions(const BackendFlags& flags,
                                                                         const Env& env,
                                                                         int32_t max_tokens_cap);

// The upstream HTTP client and the remote backends over it. Destroyed in
// reverse order of declaration: the backends before the client they use.
struct RemoteBackends {
  std::unique_ptr<net::HttpClient> client;
  std::unique_ptr<backend::RemoteMetrics> metrics;
  std::vector<std::unique_ptr<backend::RemoteBackend>> backends;
};

// Nothing (no client, no backends) without --backend. The client shares
// `loops` (the server's: a call started on one runs there) and must be
// stopped (destroyed) before they are.
util::StatusOr<RemoteBackends> StartRemoteBackends(const BackendFlags& flags,
                                                   std::vector<backend::RemoteOptions> options,
                                                   net::EventLoops& loops,
                                                   obs::MetricsRegistry& metrics,
                                                   const util::Clock& clock, util::Logger& log);

}  // namespace strata::cli
