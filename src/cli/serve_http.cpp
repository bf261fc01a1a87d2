#include "cli/serve_http.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

namespace strata::cli {
namespace {

template <typename T>
util::Status InRange(const char* flag, T value, T lo, T hi) {
  if (value >= lo && value <= hi) return util::OkStatus();
  return util::InvalidArgumentError(fmt::format("{} {} is outside [{}, {}]", flag, value, lo, hi));
}

util::StatusOr<std::chrono::milliseconds> Seconds(const char* flag, double s) {
  if (!(s >= 0.001 && s <= 86400)) {
    return util::InvalidArgumentError(
        fmt::format("{} {} is outside [0.001, 86400] seconds", flag, s));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(s * 1000)));
}

}  // namespace

void RegisterHttpFlags(CLI::App& cmd, HttpFlags& f) {
  cmd.add_option("--cors-origin", f.cors_origins,
                 "Let browser pages of this origin (scheme://host[:port]; '*' = any) call the API "
                 "(CORS); repeatable. Default: off, no CORS headers and OPTIONS is a 405");
  cmd.add_flag("--reuse-port", f.reuse_port,
               "Let other processes listen on the same port (SO_REUSEPORT); without it a port in "
               "use is an error");
  cmd.add_option("--io-threads", f.io_threads, "Threads serving connections [1, 256]")
      ->capture_default_str();
  cmd.add_option("--http-threads", f.http_threads,
                 "Worker threads that parse and start requests and run embeddings [1, 4096]")
      ->capture_default_str();
  cmd.add_option("--max-queued-requests", f.max_queued_requests,
                 "Read requests waiting for a worker before 429 server_busy [1, 1000000]")
      ->capture_default_str();
  cmd.add_option("--body-limit", f.body_limit,
                 "Largest request body in bytes after decompression, chunked or not (413) "
                 "[1024, 2^30]")
      ->capture_default_str();
  cmd.add_option("--max-inflate-ratio", f.max_inflate_ratio,
                 "Largest decompressed/compressed ratio of a body past 1 MiB (413) [1, 1000000]")
      ->capture_default_str();
  cmd.add_option("--max-request-line", f.max_request_line,
                 "Longest request line in bytes (414) [64, 1 MiB]")
      ->capture_default_str();
  cmd.add_option("--max-header-bytes", f.max_header_bytes,
                 "Most bytes of request line and header fields (431) [1 KiB, 16 MiB]")
      ->capture_default_str();
  cmd.add_option("--max-header-fields", f.max_header_fields,
                 "Most header fields in a request (431) [1, 10000]")
      ->capture_default_str();
  cmd.add_option("--header-timeout", f.header_timeout_s,
                 "Seconds from a request's first byte to the end of its headers (408)")
      ->capture_default_str();
  cmd.add_option("--body-timeout", f.body_timeout_s,
                 "Seconds from the end of the headers to the end of the body (408)")
      ->capture_default_str();
  cmd.add_option("--idle-timeout", f.idle_timeout_s,
                 "Seconds a kept-alive connection may wait for its next request")
      ->capture_default_str();
  cmd.add_option("--write-stall-timeout", f.write_stall_timeout_s,
                 "Seconds a client may read nothing of a pending response before it is dropped "
                 "and its request cancelled")
      ->capture_default_str();
  cmd.add_option("--max-buffered-output", f.max_buffered_output,
                 "Response bytes queued per connection before a stream waits for its reader "
                 "[4 KiB, 2^30]")
      ->capture_default_str();
  cmd.add_option("--max-connections", f.max_connections,
                 "Open connections in all; past it the oldest still sending headers makes room, "
                 "else 503 [1, 1000000]")
      ->capture_default_str();
  cmd.add_option("--max-connections-per-client", f.max_connections_per_client,
                 "Open connections of one client address (503 past it) [1, 1000000]")
      ->capture_default_str();
}

util::Status ApplyHttpFlags(const HttpFlags& f, server::ServerOptions& so) {
  STRATA_RETURN_IF_ERROR(InRange("--io-threads", f.io_threads, 1, 256));
  STRATA_RETURN_IF_ERROR(InRange("--http-threads", f.http_threads, 1, 4096));
  STRATA_RETURN_IF_ERROR(
      InRange("--max-queued-requests", f.max_queued_requests, int64_t{1}, int64_t{1'000'000}));
  STRATA_RETURN_IF_ERROR(InRange("--body-limit", f.body_limit, uint64_t{1024}, uint64_t{1} << 30));
  STRATA_RETURN_IF_ERROR(InRange("--max-inflate-ratio", f.max_inflate_ratio, 1.0, 1e6));
  STRATA_RETURN_IF_ERROR(
      InRange("--max-request-line", f.max_request_line, uint64_t{64}, uint64_t{1} << 20));
  STRATA_RETURN_IF_ERROR(
      InRange("--max-header-bytes", f.max_header_bytes, uint64_t{1} << 10, uint64_t{16} << 20));
  STRATA_RETURN_IF_ERROR(InRange("--max-header-fields", f.max_header_fields, 1, 10000));
  STRATA_RETURN_IF_ERROR(InRange("--max-buffered-output", f.max_buffered_output, uint64_t{4} << 10,
                                 uint64_t{1} << 30));
  STRATA_RETURN_IF_ERROR(InRange("--max-connections", f.max_connections, 1, 1'000'000));
  STRATA_RETURN_IF_ERROR(
      InRange("--max-connections-per-client", f.max_connections_per_client, 1, 1'000'000));
  if (f.max_request_line > f.max_header_bytes) {
    return util::InvalidArgumentError(
        fmt::format("--max-request-line {} exceeds --max-header-bytes {}", f.max_request_line,
                    f.max_header_bytes));
  }
  net::HttpLimits& l = so.limits;
  STRATA_ASSIGN_OR_RETURN(l.header_timeout, Seconds("--header-timeout", f.header_timeout_s));
  STRATA_ASSIGN_OR_RETURN(l.body_timeout, Seconds("--body-timeout", f.body_timeout_s));
  STRATA_ASSIGN_OR_RETURN(l.idle_timeout, Seconds("--idle-timeout", f.idle_timeout_s));
  STRATA_ASSIGN_OR_RETURN(l.write_stall_timeout,
                          Seconds("--write-stall-timeout", f.write_stall_timeout_s));
  l.max_body_bytes = f.body_limit;
  l.max_inflate_ratio = f.max_inflate_ratio;
  l.max_request_line_bytes = f.max_request_line;
  l.max_header_bytes = f.max_header_bytes;
  l.max_header_fields = f.max_header_fields;
  l.max_buffered_output = f.max_buffered_output;
  l.max_connections = f.max_connections;
  l.max_connections_per_client = f.max_connections_per_client;
  so.reuse_port = f.reuse_port;
  so.io_threads = f.io_threads;
  so.http_threads = f.http_threads;
  so.max_queued_requests = static_cast<size_t>(f.max_queued_requests);
  for (const std::string& origin : f.cors_origins) {
    // An origin is one header value: no spaces, commas or control bytes.
    const bool sane = !origin.empty() && origin.size() <= 512 &&
                      std::all_of(origin.begin(), origin.end(),
                                  [](char c) { return c > ' ' && c < 0x7f && c != ','; });
    if (!sane) {
      return util::InvalidArgumentError(
          fmt::format("--cors-origin '{}' is not an origin (scheme://host[:port]) or '*'", origin));
    }
  }
  so.cors_origins = f.cors_origins;
  return util::OkStatus();
}

void RaiseFileLimit(const HttpFlags& f, util::Logger& log) {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  // Each connection is one descriptor; 256 more for the model, logs, Redis
  // and the I/O threads' own.
  const rlim_t want = static_cast<rlim_t>(f.max_connections) + 256;
  if (rl.rlim_cur < want && rl.rlim_cur != RLIM_INFINITY) {
    const rlim_t before = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? want : std::min(want, rl.rlim_max);
    if (::setrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != before) {
      log.Info("open-file limit raised from {} to {}", before, rl.rlim_cur);
    }
  }
  if (rl.rlim_cur < want) {
    log.Warn(
        "the open-file limit ({}) is below --max-connections + 256 ({}): connections past "
        "it are refused by the kernel; raise the hard limit (ulimit -Hn) or lower "
        "--max-connections",
        rl.rlim_cur, want);
  }
}

}  // namespace strata::cli
