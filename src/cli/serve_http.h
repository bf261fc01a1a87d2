// cli/serve_http.h — the `strata serve` flags of the HTTP layer (listening,
// threads, every limit of the request reader) and how they fill the
// server's options. docs/api.md ("Limits") lists each with its default.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "server/server.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::cli {

struct HttpFlags {
  bool reuse_port = false;
  int32_t io_threads = 2;
  int32_t http_threads = 8;
  int64_t max_queued_requests = 1024;
  uint64_t body_limit = 4u << 20;
  double max_inflate_ratio = 100;
  uint64_t max_request_line = 8u << 10;
  uint64_t max_header_bytes = 32u << 10;
  int32_t max_header_fields = 100;
  double header_timeout_s = 10;
  double body_timeout_s = 30;
  double idle_timeout_s = 30;
  double write_stall_timeout_s = 30;
  uint64_t max_buffered_output = 1u << 20;
  int32_t max_connections = 10000;
  int32_t max_connections_per_client = 256;
  std::vector<std::string> cors_origins;  // --cors-origin, repeatable; "*" = any; none = off
};

void RegisterHttpFlags(CLI::App& cmd, HttpFlags& flags);

// Fills the listening, thread and limit parts of `so`. InvalidArgument
// naming the flag that is out of range.
util::Status ApplyHttpFlags(const HttpFlags& flags, server::ServerOptions& so);

// Raises this process's open-file limit (soft, up to the hard one) so that
// --max-connections connections fit beside the model and the other files;
// warns when the hard limit is too low for them.
void RaiseFileLimit(const HttpFlags& flags, util::Logger& log);

}  // namespace strata::cli
