#include "cli/serve_tracing.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

namespace strata::cli {
namespace {

constexpr size_t kMaxAnswerBytes = 64u << 10;  // of a collector's answer (its partial success)
constexpr size_t kMaxHeaders = 32;             // lines of --otlp-headers-file

// Whether `url` is http[s]://HOST[:PORT][/PATH]: a host (a name, an IPv4
// address or a bracketed IPv6 one), a port in [1, 65535] when given, a
// path without a query or fragment, no whitespace or control characters.
util::Status CheckEndpoint(const std::string& url) {
  const auto bad = [&url](std::string_view why) {
    return util::InvalidArgumentError(
        fmt::format("--otlp-endpoint '{}' {}", url.substr(0, 200), why));
  };
  std::string_view rest;
  if (url.rfind("http://", 0) == 0) {
    rest = std::string_view(url).substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    rest = std::string_view(url).substr(8);
  } else {
    return bad("is not an http:// or https:// URL");
  }
  for (char c : url) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return bad("holds whitespace or a control character");
    }
  }
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  const std::string_view path = slash == std::string_view::npos ? "" : rest.substr(slash);
  if (path.find_first_of("?#") != std::string_view::npos) return bad("has a query or fragment");
  if (authority.find('@') != std::string_view::npos) {
    return bad("has user information (put credentials in --otlp-headers-file)");
  }
  std::string_view host = authority;
  std::string_view port;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos || close == 1) return bad("has a malformed IPv6 host");
    port = host.substr(close + 1);
    host = host.substr(1, close - 1);
    if (!port.empty() && port.front() != ':') return bad("has text after its IPv6 host");
    if (!port.empty()) port.remove_prefix(1);
  } else if (const size_t colon = host.rfind(':'); colon != std::string_view::npos) {
    port = host.substr(colon + 1);
    host = host.substr(0, colon);
  }
  if (host.empty()) return bad("has no host");
  if (authority.find(':') != std::string_view::npos && authority.front() != '[' && port.empty()) {
    return bad("has an empty port");
  }
  if (!port.empty()) {
    int value = 0;
    for (char c : port) {
      if (c < '0' || c > '9' || value > 65535) return bad("has a port that is not a number");
      value = value * 10 + (c - '0');
    }
    if (value < 1 || value > 65535) return bad("has a port outside [1, 65535]");
  }
  return util::OkStatus();
}

// The traces URL of an endpoint: its path without trailing slashes, then /v1/traces.
std::string TracesUrl(std::string endpoint) {
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  return endpoint + "/v1/traces";
}

bool IsFieldName(std::string_view name) {
  if (name.empty()) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    return alnum || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

// --otlp-headers-file: "Name: value" lines; blank lines and lines starting
// with '#' are skipped. Values are never echoed in messages (they are
// credentials); lines are named by number.
util::StatusOr<net::Headers> ReadHeadersFile(const std::string& path, const Env& env) {
  auto bytes = env.fs->ReadFile(path);
  if (!bytes.ok()) {
    return util::InvalidArgumentError(
        fmt::format("--otlp-headers-file '{}': {}", path, bytes.status().message()));
  }
  net::Headers out;
  std::string_view text = *bytes;
  int line_no = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    const auto bad = [&](std::string_view why) {
      return util::InvalidArgumentError(
          fmt::format("--otlp-headers-file '{}' line {}: {}", path, line_no, why));
    };
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return bad("is not 'Name: value'");
    const std::string_view name = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (!IsFieldName(name)) return bad("the name is not an HTTP field name");
    for (const char* reserved : {"host", "content-length", "content-type", "connection",
                                 "transfer-encoding", "traceparent", "tracestate"}) {
      if (net::EqualsIgnoreCase(name, reserved)) return bad("sets a field the exporter sets");
    }
    for (char c : value) {
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t') || c == 0x7f) {
        return bad("the value holds a control character");
      }
    }
    if (value.empty()) return bad("the value is empty");
    if (out.size() == kMaxHeaders) return bad(fmt::format("more than {} fields", kMaxHeaders));
    out.Add(std::string(name), std::string(value));
  }
  return out;
}

// OTLP/HTTP over strata's HTTP client: a POST with the client's deadlines,
// the answer's status and the start of its body.
class HttpOtlpTransport final : public obs::OtlpTransport {
 public:
  HttpOtlpTransport(net::HttpClient& client, std::string url, net::Headers headers)
      : client_(client), url_(std::move(url)), headers_(std::move(headers)) {
    headers_.Set("Content-Type", "application/json");
  }

  void Post(std::string body, std::function<void(util::StatusOr<Answer>)> done) override {
    net::ClientRequest r;
    r.method = "POST";
    r.url = url_;
    r.headers = headers_;
    r.body = std::move(body);
    auto answer = std::make_shared<Answer>();
    net::ClientCallbacks cb;
    cb.on_head = [answer](const net::ClientResponseHead& h) { answer->status = h.status; };
    cb.on_body = [answer](std::string_view bytes) {
      const size_t room = kMaxAnswerBytes - std::min(kMaxAnswerBytes, answer->body.size());
      answer->body.append(bytes.substr(0, room));
    };
    cb.on_done = [answer, done = std::move(done)](const util::Status& st) {
      if (!st.ok()) {
        done(st);
        return;
      }
      done(std::move(*answer));
    };
    client_.Start(std::move(r), std::move(cb));
  }

  void After(std::chrono::nanoseconds delay, std::function<void(bool)> fn) override {
    client_.After(delay, std::move(fn));
  }

 private:
  net::HttpClient& client_;
  const std::string url_;
  net::Headers headers_;  // the file's fields and Content-Type
};

}  // namespace

void RegisterTraceFlags(CLI::App& cmd, TraceFlags& f) {
  cmd.add_option("--otlp-endpoint", f.otlp_endpoint,
                 "Export OpenTelemetry traces (OTLP/HTTP JSON) to this collector: "
                 "http[s]://HOST[:PORT][/PATH], spans POSTed to it + /v1/traces. Without it no "
                 "span is exported and no connection is opened");
  cmd.add_option("--trace-sample", f.trace_sample,
                 "Share of requests without an incoming traceparent that are traced, in [0, 1]; "
                 "an incoming sampled flag is honoured either way, and the RT-Switcher's level "
                 "multiplies the rate by its TRACE_RATE")
      ->capture_default_str();
  cmd.add_option("--otlp-timeout-ms", f.otlp_timeout_ms,
                 "Milliseconds to connect to the collector and for one export request, in "
                 "[100, 600000]")
      ->capture_default_str();
  cmd.add_option("--otlp-interval-ms", f.otlp_interval_ms,
                 "Milliseconds a span waits at most before its batch is sent, in [1, 60000] "
                 "(a full batch goes at once)")
      ->capture_default_str();
  cmd.add_option("--otlp-batch-spans", f.otlp_batch_spans,
                 "Spans per export request, in [1, 8192] and at most --otlp-queue-spans")
      ->capture_default_str();
  cmd.add_option("--otlp-queue-spans", f.otlp_queue_spans,
                 "Spans waiting for export at most, in [1, 1048576]; more are dropped and counted "
                 "(strata_trace_spans_dropped_total), never waited for")
      ->capture_default_str();
  cmd.add_option("--otlp-headers-file", f.otlp_headers_file,
                 "File of 'Name: value' lines sent with every export request (the collector's "
                 "credentials; never logged)");
  cmd.add_option("--otlp-service-name", f.otlp_service_name,
                 "service.name of the exported spans, 1 to 128 bytes")
      ->capture_default_str();
}

util::Status ValidateTraceFlags(const TraceFlags& f) {
  const TraceFlags defaults;
  if (f.otlp_endpoint.empty()) {
    // Tracing is off: a tracing flag set to anything else would do nothing.
    const std::pair<const char*, bool> changed[] = {
        {"--trace-sample", f.trace_sample != defaults.trace_sample},
        {"--otlp-timeout-ms", f.otlp_timeout_ms != defaults.otlp_timeout_ms},
        {"--otlp-interval-ms", f.otlp_interval_ms != defaults.otlp_interval_ms},
        {"--otlp-batch-spans", f.otlp_batch_spans != defaults.otlp_batch_spans},
        {"--otlp-queue-spans", f.otlp_queue_spans != defaults.otlp_queue_spans},
        {"--otlp-headers-file", f.otlp_headers_file != defaults.otlp_headers_file},
        {"--otlp-service-name", f.otlp_service_name != defaults.otlp_service_name}};
    for (const auto& [flag, set] : changed) {
      if (set) {
        return util::InvalidArgumentError(
            fmt::format("{} needs --otlp-endpoint: without a collector nothing is traced", flag));
      }
    }
    return util::OkStatus();
  }
  STRATA_RETURN_IF_ERROR(CheckEndpoint(f.otlp_endpoint));
  if (!(f.trace_sample >= 0 && f.trace_sample <= 1)) {
    return util::InvalidArgumentError(
        fmt::format("--trace-sample {} is outside [0, 1]", f.trace_sample));
  }
  if (f.otlp_timeout_ms < 100 || f.otlp_timeout_ms > 600'000) {
    return util::InvalidArgumentError(
        fmt::format("--otlp-timeout-ms {} is outside [100, 600000]", f.otlp_timeout_ms));
  }
  if (f.otlp_interval_ms < 1 || f.otlp_interval_ms > 60'000) {
    return util::InvalidArgumentError(
        fmt::format("--otlp-interval-ms {} is outside [1, 60000]", f.otlp_interval_ms));
  }
  if (f.otlp_queue_spans < 1 || f.otlp_queue_spans > (1 << 20)) {
    return util::InvalidArgumentError(
        fmt::format("--otlp-queue-spans {} is outside [1, 1048576]", f.otlp_queue_spans));
  }
  if (f.otlp_batch_spans < 1 || f.otlp_batch_spans > 8192 ||
      f.otlp_batch_spans > f.otlp_queue_spans) {
    return util::InvalidArgumentError(
        fmt::format("--otlp-batch-spans {} is outside [1, 8192] or above --otlp-queue-spans {}",
                    f.otlp_batch_spans, f.otlp_queue_spans));
  }
  if (f.otlp_service_name.empty() || f.otlp_service_name.size() > 128) {
    return util::InvalidArgumentError("--otlp-service-name must have 1 to 128 bytes");
  }
  return util::OkStatus();
}

Tracing::~Tracing() {
  if (exporter != nullptr) {
    const bool drained = exporter->Shutdown(flush_timeout);
    const obs::OtlpExporterStats st = exporter->stats();
    if (log != nullptr) {
      log->Info("traces: {} spans exported, {} dropped{}", st.exported,
                st.dropped_queue_full + st.dropped_export_failed + st.dropped_rejected +
                    st.dropped_shutdown,
                drained ? "" : " (the collector did not take the last ones in time)");
    }
  }
  if (client != nullptr) client->Stop();  // cancels what is in flight; joins its thread
}

util::StatusOr<std::unique_ptr<Tracing>> StartTracing(const TraceFlags& f, const Env& env,
                                                      obs::MetricsRegistry& metrics,
                                                      const util::Clock& clock, util::Logger& log) {
  auto t = std::make_unique<Tracing>();
  if (f.otlp_endpoint.empty()) return t;
  net::Headers headers;
  if (!f.otlp_headers_file.empty()) {
    STRATA_ASSIGN_OR_RETURN(headers, ReadHeadersFile(f.otlp_headers_file, env));
  }
  const std::chrono::milliseconds timeout(f.otlp_timeout_ms);
  net::HttpClientOptions co;
  co.io_threads = 1;  // batches are encoded and sent here, off the request threads
  co.connect_timeout = timeout;
  co.first_byte_timeout = timeout;
  co.idle_timeout = timeout;
  co.total_timeout = timeout;
  co.max_idle_per_host = 2;
  STRATA_ASSIGN_OR_RETURN(t->client, net::HttpClient::Create(co, log));
  const std::string url = TracesUrl(f.otlp_endpoint);
  const size_t n_headers = headers.size();
  t->transport = std::make_unique<HttpOtlpTransport>(*t->client, url, std::move(headers));
  std::random_device rd;
  const uint64_t seed = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  obs::OtlpExporterOptions eo;
  eo.max_queue_spans = static_cast<size_t>(f.otlp_queue_spans);
  eo.max_batch_spans = static_cast<size_t>(f.otlp_batch_spans);
  eo.batch_interval = std::chrono::milliseconds(f.otlp_interval_ms);
  eo.resource.service_name = f.otlp_service_name;
  eo.resource.service_version = STRATA_VERSION;
  eo.resource.instance_id = fmt::format("{:016x}", seed ^ 0x696e7374616e6365ULL);  // "instance"
  STRATA_ASSIGN_OR_RETURN(t->exporter,
                          obs::OtlpExporter::Create(eo, *t->transport, metrics, clock, log));
  STRATA_ASSIGN_OR_RETURN(
      t->tracer, obs::Tracer::Create({.sample_rate = f.trace_sample, .seed = seed}, t->exporter,
                                     metrics, clock));
  t->flush_timeout = std::min(timeout, std::chrono::milliseconds(5000));
  t->log = &log;
  log.Info(
      "traces: OTLP/HTTP JSON to {} as service '{}'; sampling {} (parent-based, times the "
      "RT-Switcher level's trace rate), batches of {} spans or every {} ms, queue {}{}",
      url, f.otlp_service_name, f.trace_sample, f.otlp_batch_spans, f.otlp_interval_ms,
      f.otlp_queue_spans, n_headers == 0 ? "" : fmt::format(", {} header field(s)", n_headers));
  return t;
}

}  // namespace strata::cli
