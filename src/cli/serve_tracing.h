// cli/serve_tracing.h — the `strata serve` flags of OpenTelemetry tracing
// (--otlp-endpoint, --trace-sample, the exporter's batching and bounds) and
// what they build: the tracer the server samples requests with, and the
// OTLP/HTTP exporter, which sends through an HTTP client of its own (one
// I/O thread). docs/api.md ("Tracing") lists each flag with its default.
//
// Without --otlp-endpoint nothing is built: no client, no thread, no socket,
// and nothing leaves the process (an incoming traceparent is still passed
// on to remote backends). Every other tracing flag then keeps its default;
// one set to anything else is a usage error (it would change nothing).
//
// Secrets: collector credentials come from --otlp-headers-file ("Name: value"
// lines), never from the command line, and are never logged.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "net/http_client.h"
#include "obs/metrics.h"
#include "obs/otlp.h"
#include "obs/tracer.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::cli {

// Each field's default is here, its range in ValidateTraceFlags and --help.
struct TraceFlags {
  std::string otlp_endpoint;         // http[s]://HOST[:PORT][/PATH]; traces go to it + /v1/traces
  double trace_sample = 1.0;         // [0, 1] share of requests without a parent recorded
  int32_t otlp_timeout_ms = 10'000;  // [100, 600000] ms: connecting and one export request
  int32_t otlp_interval_ms = 1'000;  // [1, 60000] ms a span waits at most for its batch
  int32_t otlp_batch_spans = 512;    // [1, 8192] spans per export request, <= the queue
  int32_t otlp_queue_spans = 4096;   // [1, 1048576] spans waiting; more are dropped and counted
  std::string otlp_headers_file;     // "" = none: "Name: value" lines sent with every export
  std::string otlp_service_name = "strata";  // service.name of the exported spans, 1-128 bytes
};

void RegisterTraceFlags(CLI::App& cmd, TraceFlags& flags);

// InvalidArgument naming the flag that is out of range or malformed, or
// set without --otlp-endpoint.
util::Status ValidateTraceFlags(const TraceFlags& flags);

// The tracer and its exporter; empty (tracer null) without --otlp-endpoint.
// Destroying it sends what is still queued (for at most the export timeout,
// capped at 5 s), then stops the client. It must outlive everything that
// holds the tracer (the server, and the requests' traces).
struct Tracing {
  Tracing() = default;
  Tracing(const Tracing&) = delete;
  Tracing& operator=(const Tracing&) = delete;
  ~Tracing();

  std::unique_ptr<net::HttpClient> client;
  std::unique_ptr<obs::OtlpTransport> transport;  // over `client`
  std::shared_ptr<obs::OtlpExporter> exporter;
  std::shared_ptr<obs::Tracer> tracer;  // null: tracing off
  std::chrono::milliseconds flush_timeout{0};
  util::Logger* log = nullptr;
};

// Builds the tracing the flags ask for (ValidateTraceFlags has passed):
// reads the headers file through `env`, creates the exporter's client.
// Errors name the flag (an unreadable headers file, a malformed line).
util::StatusOr<std::unique_ptr<Tracing>> StartTracing(const TraceFlags& flags, const Env& env,
                                                      obs::MetricsRegistry& metrics,
                                                      const util::Clock& clock, util::Logger& log);

}  // namespace strata::cli
