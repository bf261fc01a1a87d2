#include "server/server.h"

#include <condition_variable>
#include <mutex>

#include <fmt/format.h>

#include "server/api.h"
#include "server/internal/handler.h"
#include "util/work_queue.h"

namespace strata::server {
namespace {

constexpr const char* kJson = "application/json";
constexpr const char* kEmbeddings = "/v1/embeddings";

// What a path serves. Generation endpoints carry their API kind.
enum class Route { kNone, kHealth, kMetrics, kModels, kComplete, kEmbed };
struct Routed {
  Route route = Route::kNone;
  ApiKind kind = ApiKind::kOpenAIChat;  // the shape of every answer on this path
  const char* endpoint = "";
};

Routed RouteFor(std::string_view method, std::string_view path) {
  const bool get = method == "GET" || method == "HEAD";
  const bool post = method == "POST";
  const ApiKind shape =
      path.rfind("/v1/messages", 0) == 0 ? ApiKind::kAnthropicMessages : ApiKind::kOpenAIChat;
  if (get && path == "/health") return {Route::kHealth, shape, "/health"};
  if (get && path == "/metrics") return {Route::kMetrics, shape, "/metrics"};
  if (get && path == "/v1/models") return {Route::kModels, shape, "/v1/models"};
  if (post && path == "/v1/chat/completions") {
    return {Route::kComplete, ApiKind::kOpenAIChat, "/v1/chat/completions"};
  }
  if (post && path == "/v1/completions") {
    return {Route::kComplete, ApiKind::kOpenAICompletion, "/v1/completions"};
  }
  if (post && path == "/v1/messages") {
    return {Route::kComplete, ApiKind::kAnthropicMessages, "/v1/messages"};
  }
  if (post && path == kEmbeddings) return {Route::kEmbed, ApiKind::kOpenAIChat, kEmbeddings};
  return {Route::kNone, shape, ""};
}

net::Response ToResponse(ApiReply reply) {
  net::Response r;
  r.status = reply.status;
  for (auto& [name, value] : reply.headers) r.headers.Add(std::move(name), std::move(value));
  r.headers.Set("Content-Type", kJson);
  r.body = std::move(reply.body);
  return r;
}

// One API response being fed from its generation. Owned by the exchange's
// callbacks (and a worker's posted continuation); everything runs on the
// exchange's I/O thread.
struct Feed {
  std::shared_ptr<net::Exchange> exchange;
  std::shared_ptr<Responder> responder;
  size_t budget = 0;       // frame bytes one pump may queue
  bool head_sent = false;  // a stream's status and headers went out
};

}  // namespace

// The net::HttpHandler around ApiHandler: routes, the head-time checks, the
// hand-off to workers and the pumping of responses. Everything a request
// means is decided by the ApiHandler.
class HttpServer::Impl final : public net::HttpHandler {
 public:
  Impl(const ServerOptions& o, ApiKeys keys, obs::MetricsRegistry& metrics,
       const util::Clock& clock, util::Logger& log)
      : options_(o),
        clock_(clock),
        log_(log),
        metrics_(metrics),
        handler_(o, std::move(keys), metrics, clock, log),
        live_(std::make_shared<Live>()) {}

  ~Impl() override { Stop(std::chrono::milliseconds(0)); }

  util::StatusOr<int> Start() {
    net::HttpServerOptions no;
    no.host = options_.host;
    no.port = options_.port;
    no.io_threads = options_.io_threads;
    no.reuse_port = options_.reuse_port;
    no.limits = options_.limits;
    STRATA_ASSIGN_OR_RETURN(net_, net::HttpServer::Create(no, *this, log_, clock_));
    workers_ =
        std::make_unique<util::WorkQueue>(options_.http_threads, options_.max_queued_requests);
    STRATA_ASSIGN_OR_RETURN(int port, net_->Start());
    {
      std::lock_guard<std::mutex> lock(live_->mu);
      live_->server = net_.get();
    }
    RegisterMetrics();
    return port;
  }

  void SetGateway(gateway::Gateway* g) { handler_.SetGateway(g); }
  void SetBroken(util::Status why) { handler_.SetBroken(std::move(why)); }
  void StartDraining() {
    handler_.StartDraining();
    if (net_) net_->SetDraining();
  }

  void Stop(std::chrono::milliseconds flush) {
    if (net_ == nullptr || stopped_) return;
    stopped_ = true;
    if (flush.count() > 0) net_->WaitQuiet(flush);
    {
      std::lock_guard<std::mutex> lock(live_->mu);
      live_->server = nullptr;
    }
    // Workers first: a request being parsed finishes and posts to a loop
    // that still runs; the ones still queued are dropped unrun.
    workers_.reset();
    net_->Stop();
  }

  net::HttpServerStats Stats() const { return net_ ? net_->Stats() : net::HttpServerStats{}; }

  // --- net::HttpHandler (I/O threads) ---------------------------------------

  std::optional<net::Response> OnHead(const net::RequestHead& head) override {
    const Routed r = RouteFor(head.method, head.path());
    switch (r.route) {
      case Route::kHealth:
        return ToResponse(handler_.Health());
      case Route::kMetrics: {
        net::Response res;
        res.headers.Set("Content-Type", "text/plain; version=0.0.4");
        res.body = metrics_.Render();
        return res;
      }
      case Route::kNone: {
        const ApiCall call = Call(head, {});
        ApiReply reply =
            ApiHandler::ErrorReply(r.kind, handler_.TransportError(404, head.method, head.path()));
        reply.headers.emplace_back("X-Request-ID", call.request_id);
        return ToResponse(std::move(reply));
      }
      case Route::kModels:
        return ToResponse(handler_.ListModels(Call(head, {})));
      case Route::kComplete:
      case Route::kEmbed: {
        // The key, draining and loading are decided before a body byte is read.
        if (auto refused = handler_.Screen(r.kind, r.endpoint, Call(head, {}), true)) {
          return ToResponse(std::move(*refused));
        }
        return std::nullopt;
      }
    }
    return std::nullopt;
  }

  void OnRequest(std::shared_ptr<net::Exchange> exchange, std::string body) override {
    const Routed r = RouteFor(exchange->head().method, exchange->head().path());
    if (r.route == Route::kComplete && handler_.CompletesQuickly(body.size())) {
      // Short CPU work: done here, which saves two thread hand-offs per
      // request (an L1 hit's whole cost is of that order).
      Deliver(exchange, handler_.Complete(r.kind, Call(exchange->head(), body)));
      return;
    }
    auto gone = std::make_shared<std::atomic<bool>>(false);
    exchange->OnCancel([gone](net::CancelReason) { gone->store(true); });
    auto task = [this, exchange, gone, r, body = std::move(body)]() {
      if (gone->load()) return;  // the client left while the request waited for a worker
      const ApiCall call = Call(exchange->head(), body);
      ApiReply reply =
          r.route == Route::kEmbed ? handler_.Embed(call) : handler_.Complete(r.kind, call);
      exchange->Post([this, exchange, reply = std::move(reply)]() mutable {
        Deliver(exchange, std::move(reply));
      });
    };
    if (workers_->Submit(std::move(task))) return;
    const ApiCall call = Call(exchange->head(), {});
    const util::Status busy =
        util::ResourceExhaustedError(
            fmt::format("every request worker is busy and {} requests already wait for one",
                        options_.max_queued_requests))
            .WithReason(util::ErrorReason::kServerBusy);
    ApiReply reply = ApiHandler::ErrorReply(r.kind, busy);
    reply.headers.emplace_back("X-Request-ID", call.request_id);
    log_.Warn("req={} {} {} 429 ({}: {})", call.request_id, call.method, call.path,
              util::ErrorReasonName(busy.reason()), busy.message());
    exchange->Respond(ToResponse(std::move(reply)));
  }

  net::Response LimitResponse(const net::RequestHead* head, int status,
                              const util::Status& why) override {
    const ApiKind kind = head ? RouteFor(head->method, head->path()).kind : ApiKind::kOpenAIChat;
    const util::Status st =  // the path only matters for a 404, which is no limit
        handler_.TransportError(status, head ? head->method : "", head ? head->path() : "", why);
    ApiReply reply = ApiHandler::ErrorReply(kind, st);
    reply.status = status;  // the reader's status stands (a 400 for bad framing, say)
    return ToResponse(std::move(reply));
  }

 private:
  // Reads whatever the metrics need from the net server while it exists.
  struct Live {
    std::mutex mu;
    net::HttpServer* server = nullptr;  // guarded by mu; null once stopped
  };

  ApiCall Call(const net::RequestHead& head, std::string_view body) {
    ApiCall call{.method = head.method,
                 .path = std::string(head.path()),
                 .body = body,
                 .request_id = handler_.RequestId(head.headers.GetOr("X-Request-ID")),
                 .api_key = std::string(head.headers.GetOr("x-api-key"))};
    const std::string_view auth = head.headers.GetOr("Authorization");
    if (call.api_key.empty() && auth.rfind("Bearer ", 0) == 0) {
      call.api_key = std::string(auth.substr(7));
    }
    return call;
  }

  // On the exchange's I/O thread: answer now, or start feeding the response
  // from its generation.
  void Deliver(const std::shared_ptr<net::Exchange>& exchange, ApiReply reply) {
    if (reply.responder == nullptr) {
      exchange->Respond(ToResponse(std::move(reply)));
      return;
    }
    auto feed = std::make_shared<Feed>();
    feed->exchange = exchange;
    feed->responder = std::move(reply.responder);
    feed->budget = std::max<size_t>(options_.limits.max_buffered_output / 2, 4096);
    if (exchange->cancelled()) {
      feed->responder->Abandon("client gone before the response started");
      return;
    }
    exchange->OnCancel(
        [feed](net::CancelReason why) { feed->responder->Abandon(net::CancelReasonName(why)); });
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        feed->responder->deadline() - clock_.Now());
    exchange->SetTimeout(std::max(left, std::chrono::milliseconds(0)),
                         [this, feed] { Emit(feed, feed->responder->Expire()); });
    if (feed->responder->streaming() && !feed->responder->defers_head()) StartHead(feed);
    Pump(feed);
  }

  // A stream's status and headers; from then on a drained client pumps again.
  void StartHead(const std::shared_ptr<Feed>& feed) {
    feed->head_sent = true;
    net::Headers headers;
    for (const auto& [name, value] : feed->responder->head().headers) headers.Add(name, value);
    headers.Set("Content-Type", "text/event-stream");
    feed->exchange->StartStream(feed->responder->head().status, std::move(headers));
    feed->exchange->OnWritable([this, feed] { Pump(feed); });
  }

  // Reads what the generation has ready and sends it; then waits for more
  // events, or for the client to drain its output.
  void Pump(const std::shared_ptr<Feed>& feed) {
    net::Exchange& ex = *feed->exchange;
    if (ex.cancelled()) return;
    if (feed->responder->streaming() && ex.congested()) return;  // OnWritable pumps again
    Responder::Output out = feed->responder->Pump(feed->budget);
    const bool done = out.done;
    const bool more = out.more;
    Emit(feed, std::move(out));
    if (done) return;
    if (more) {
      if (!ex.congested()) ex.Post([this, feed] { Pump(feed); });
      return;
    }
    std::weak_ptr<Feed> weak = feed;
    feed->responder->WhenReady([this, weak] {
      auto f = weak.lock();
      if (f == nullptr) return;
      f->exchange->Post([this, weak] {
        if (auto alive = weak.lock()) Pump(alive);
      });
    });
  }

  void Emit(const std::shared_ptr<Feed>& feed, Responder::Output out) {
    net::Exchange& ex = *feed->exchange;
    if (ex.cancelled()) return;
    if (!feed->responder->streaming() || out.whole) {
      if (out.done) ex.Respond(ToResponse(std::move(out.reply)));
      return;
    }
    if (!feed->head_sent) {
      if (out.frames.empty() && !out.done) return;  // a deferred head waits for its first frames
      StartHead(feed);
    }
    if (!out.frames.empty()) ex.Write(std::move(out.frames));
    if (out.done) ex.End();
  }

  void RegisterMetrics() {
    if (metrics_registered_) return;
    metrics_registered_ = true;
    auto read = [live = live_](int64_t net::HttpServerStats::*field) {
      return [live, field]() -> double {
        std::lock_guard<std::mutex> lock(live->mu);
        return live->server ? static_cast<double>(live->server->Stats().*field) : 0.0;
      };
    };
    metrics_.GaugeCallback("strata_http_connections_open", "Open client connections.",
                           read(&net::HttpServerStats::connections_open));
    metrics_.CounterCallback("strata_http_connections_accepted_total",
                             "Client connections accepted.",
                             read(&net::HttpServerStats::connections_accepted));
    metrics_.CounterCallback(
        "strata_http_connections_refused_total",
        "Connections refused at accept: the per-client or total cap, with none to displace.",
        read(&net::HttpServerStats::connections_refused));
    metrics_.CounterCallback(
        "strata_http_connections_displaced_total",
        "Connections closed to make room at the cap (the oldest still waiting for headers).",
        read(&net::HttpServerStats::connections_displaced));
    metrics_.CounterCallback(
        "strata_http_rejected_total",
        "Requests the reader refused by a limit or as malformed (400, 408, 413, 414, 415, 431).",
        read(&net::HttpServerStats::rejected_by_limit));
  }

  const ServerOptions options_;
  const util::Clock& clock_;
  util::Logger& log_;
  obs::MetricsRegistry& metrics_;
  ApiHandler handler_;
  const std::shared_ptr<Live> live_;
  std::unique_ptr<net::HttpServer> net_;
  std::unique_ptr<util::WorkQueue> workers_;
  bool metrics_registered_ = false;
  bool stopped_ = false;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

util::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(const ServerOptions& options,
                                                               ApiKeys keys,
                                                               obs::MetricsRegistry& metrics,
                                                               const util::Clock& clock,
                                                               util::Logger& log) {
  if (options.http_threads < 1 || options.http_threads > 4096) {
    return util::InvalidArgumentError(
        fmt::format("HTTP worker threads {} is outside [1, 4096]", options.http_threads));
  }
  if (options.max_queued_requests < 1 || options.max_queued_requests > 1'000'000) {
    return util::InvalidArgumentError(
        fmt::format("queued requests {} is outside [1, 1000000]", options.max_queued_requests));
  }
  if (options.port < 0 || options.port > 65535) {
    return util::InvalidArgumentError(fmt::format("port {} is outside [0, 65535]", options.port));
  }
  if (options.request_timeout.count() < 1) {
    return util::InvalidArgumentError("the request timeout must be at least 1 s");
  }
  return std::unique_ptr<HttpServer>(
      new HttpServer(std::make_unique<Impl>(options, std::move(keys), metrics, clock, log)));
}

util::StatusOr<int> HttpServer::Start() { return impl_->Start(); }
void HttpServer::SetGateway(gateway::Gateway* g) { impl_->SetGateway(g); }
void HttpServer::SetBroken(util::Status why) { impl_->SetBroken(std::move(why)); }
void HttpServer::StartDraining() { impl_->StartDraining(); }
void HttpServer::Stop(std::chrono::milliseconds flush) { impl_->Stop(flush); }
net::HttpServerStats HttpServer::Stats() const { return impl_->Stats(); }

}  // namespace strata::server
