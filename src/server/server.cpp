#include "server/server.h"

#include <condition_variable>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/api.h"
#include "server/cache_admin.h"
#include "server/internal/dashboard.h"
#include "server/internal/handler.h"
#include "util/work_queue.h"

namespace strata::server {
namespace {

constexpr const char* kJson = "application/json";

// What a path serves. Generation endpoints carry their API kind.
enum class Route {
  kNone,
  kHealth,
  kMetrics,
  kDashboard,
  kDashboardState,
  kAdminReload,
  kCacheInvalidate,  // DELETE /v1/cache (admin)
  kCacheSnapshot,    // GET /admin/cache/snapshot (admin)
  kCanaryState,      // GET /admin/canary (admin)
  kModels,
  kComplete,
  kEmbed,
  kCountTokens,
  kTokenize,
  kDetokenize,
  kSnapshot,       // GET /v1/snapshots/{request_id}
  kSessionList,    // GET /v1/sessions
  kSessionRead,    // GET /v1/sessions/{id}
  kSessionDelete,  // DELETE /v1/sessions/{id}
};

// One endpoint: its paths (the OpenAI ones also without /v1, as the SDKs
// reach them given a base URL without it), its method and the canonical
// path that labels it in metrics.
struct Endpoint {
  const char* path;
  const char* alias;  // nullptr: none
  bool get;           // GET and HEAD; else POST
  Route route;
  ApiKind kind;
};

constexpr Endpoint kEndpoints[] = {
    {"/health", nullptr, true, Route::kHealth, ApiKind::kOpenAIChat},
    {"/metrics", nullptr, true, Route::kMetrics, ApiKind::kOpenAIChat},
    {"/dashboard", nullptr, true, Route::kDashboard, ApiKind::kOpenAIChat},
    {"/dashboard/state", nullptr, true, Route::kDashboardState, ApiKind::kOpenAIChat},
    {"/admin/reload", nullptr, false, Route::kAdminReload, ApiKind::kOpenAIChat},
    {"/admin/cache/snapshot", nullptr, true, Route::kCacheSnapshot, ApiKind::kOpenAIChat},
    {"/admin/canary", nullptr, true, Route::kCanaryState, ApiKind::kOpenAIChat},
    {"/v1/models", "/models", true, Route::kModels, ApiKind::kOpenAIChat},
    {"/v1/chat/completions", "/chat/completions", false, Route::kComplete, ApiKind::kOpenAIChat},
    {"/v1/completions", "/completions", false, Route::kComplete, ApiKind::kOpenAICompletion},
    {"/v1/messages", nullptr, false, Route::kComplete, ApiKind::kAnthropicMessages},
    {"/v1/messages/count_tokens", nullptr, false, Route::kCountTokens, ApiKind::kAnthropicMessages},
    {"/v1/embeddings", "/embeddings", false, Route::kEmbed, ApiKind::kOpenAIChat},
    {"/tokenize", nullptr, false, Route::kTokenize, ApiKind::kOpenAIChat},
    {"/detokenize", nullptr, false, Route::kDetokenize, ApiKind::kOpenAIChat},
};

struct Routed {
  Route route = Route::kNone;
  ApiKind kind = ApiKind::kOpenAIChat;  // the shape of every answer on this path
  const char* endpoint = "";            // the canonical path; "" when none matched
  const char* allow = nullptr;          // the path is an endpoint for these methods only
};

const Endpoint* EndpointAt(std::string_view path) {
  for (const Endpoint& e : kEndpoints) {
    if (path == e.path || (e.alias != nullptr && path == e.alias)) return &e;
  }
  return nullptr;
}

const char* AllowOf(const Endpoint& e) { return e.get ? "GET, HEAD" : "POST"; }

// Request snapshots are read by id, the path's last segment; so are sessions.
constexpr std::string_view kSnapshotsPrefix = "/v1/snapshots/";
constexpr std::string_view kSessionsPrefix = "/v1/sessions/";

Routed RouteFor(std::string_view method, std::string_view path) {
  const ApiKind shape =
      path.rfind("/v1/messages", 0) == 0 ? ApiKind::kAnthropicMessages : ApiKind::kOpenAIChat;
  if (path.rfind(kSnapshotsPrefix, 0) == 0) {
    if (method == "GET" || method == "HEAD") {
      return {Route::kSnapshot, ApiKind::kOpenAIChat, "/v1/snapshots", nullptr};
    }
    return {Route::kNone, shape, "/v1/snapshots", "GET, HEAD"};
  }
  if (path == "/v1/sessions") {
    if (method == "GET" || method == "HEAD") {
      return {Route::kSessionList, ApiKind::kOpenAIChat, "/v1/sessions", nullptr};
    }
    return {Route::kNone, shape, "/v1/sessions", "GET, HEAD"};
  }
  if (path.rfind(kSessionsPrefix, 0) == 0) {
    if (method == "GET" || method == "HEAD") {
      return {Route::kSessionRead, ApiKind::kOpenAIChat, "/v1/sessions", nullptr};
    }
    if (method == "DELETE") {
      return {Route::kSessionDelete, ApiKind::kOpenAIChat, "/v1/sessions", nullptr};
    }
    return {Route::kNone, shape, "/v1/sessions", "GET, HEAD, DELETE"};
  }
  if (path == "/v1/cache") {
    if (method == "DELETE")
      return {Route::kCacheInvalidate, ApiKind::kOpenAIChat, "/v1/cache", nullptr};
    return {Route::kNone, shape, "/v1/cache", "DELETE"};
  }
  const Endpoint* e = EndpointAt(path);
  if (e == nullptr) return {Route::kNone, shape, "", nullptr};
  const bool allowed = e->get ? (method == "GET" || method == "HEAD") : method == "POST";
  if (!allowed) return {Route::kNone, shape, e->path, AllowOf(*e)};
  return {e->route, e->kind, e->path, nullptr};
}

// Whether `name` is an HTTP field name (an RFC 9110 token).
bool IsToken(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (!alnum && std::string_view("!#$%&'*+-.^_`|~").find(c) == std::string_view::npos) {
      return false;
    }
  }
  return true;
}

// The request headers a preflight may announce: the ones strata reads, and
// whatever well-formed names the browser asked for (the SDKs send their own
// x-stainless-* headers), echoed.
std::string AllowedHeaders(std::string_view requested) {
  std::string out =
      "authorization, content-type, x-api-key, anthropic-version, x-request-id, traceparent, "
      "tracestate";
  while (!requested.empty()) {
    const size_t comma = requested.find(',');
    std::string_view name = requested.substr(0, comma);
    requested = comma == std::string_view::npos ? std::string_view() : requested.substr(comma + 1);
    while (!name.empty() && (name.front() == ' ' || name.front() == '\t')) name.remove_prefix(1);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.remove_suffix(1);
    if (IsToken(name)) {
      out += ", ";
      out += name;
    }
  }
  return out;
}

// Browsers may read these response headers of strata's.
constexpr const char* kExposed =
    "x-request-id, request-id, x-strata-cache, x-strata-cache-similarity, x-strata-session-id, "
    "x-strata-watermark, retry-after, traceresponse";
constexpr const char* kPreflightMaxAge = "600";  // seconds a browser may reuse a preflight

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
    no.loops = options_.loops;
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
  void SetApiKeys(ApiKeys keys) { handler_.SetApiKeys(std::move(keys)); }
  void SetRequestTimeout(std::chrono::seconds t) { handler_.SetRequestTimeout(t); }
  void SetAdminKey(std::optional<std::string> key) {
    admin_key_.store(key ? std::make_shared<const std::string>(std::move(*key)) : nullptr);
  }
  void SetReloadHook(std::function<ReloadReport()> hook) {
    std::lock_guard<std::mutex> lock(reload_mu_);
    reload_ = std::move(hook);
  }
  void SetCanaryStateHook(std::function<std::string()> hook) {
    std::lock_guard<std::mutex> lock(reload_mu_);
    canary_state_ = std::move(hook);
  }
  // The canary's state ("" without a canary).
  std::string CanaryState() {
    std::function<std::string()> hook;
    {
      std::lock_guard<std::mutex> lock(reload_mu_);
      hook = canary_state_;
    }
    return hook ? hook() : std::string();
  }
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
        return ToResponse(handler_.Health(), &head);
      case Route::kMetrics: {
        net::Response res;
        res.headers.Set("Content-Type", "text/plain; version=0.0.4");
        res.body = metrics_.Render();
        AddCors(res.headers, &head);
        return res;
      }
      case Route::kDashboard: {
        if (auto refused = ScreenAdmin(head, /*dashboard=*/true)) return std::move(*refused);
        // The page's script and style are inline and it reads only this
        // origin: the policy forbids everything else.
        net::Response res;
        res.headers.Set("Content-Type", "text/html; charset=utf-8");
        res.headers.Set("Content-Security-Policy",
                        "default-src 'none'; script-src 'unsafe-inline'; style-src "
                        "'unsafe-inline'; connect-src 'self'; img-src 'self' data:");
        res.headers.Set("X-Content-Type-Options", "nosniff");
        res.headers.Set("Cache-Control", "no-store");
        res.body = std::string(DashboardPage());
        return res;
      }
      case Route::kDashboardState: {
        if (auto refused = ScreenAdmin(head, /*dashboard=*/true)) return std::move(*refused);
        ApiReply state;
        state.body = DashboardState(handler_.gateway(), CanaryState());
        net::Response res = ToResponse(std::move(state), &head);
        res.headers.Set("Cache-Control", "no-store");
        return res;
      }
      case Route::kCanaryState: {
        if (auto refused = ScreenAdmin(head, /*dashboard=*/false)) return std::move(*refused);
        ApiReply state;
        state.body = CanaryState();
        if (state.body.empty()) {
          state = ApiHandler::ErrorReply(
              ApiKind::kOpenAIChat,
              util::NotFoundError("no canary rollout is running (strata serve --canary)"));
        }
        net::Response res = ToResponse(std::move(state), &head);
        res.headers.Set("Cache-Control", "no-store");
        return res;
      }
      case Route::kAdminReload:
      case Route::kCacheInvalidate:
      case Route::kCacheSnapshot:
        // The key is checked before a body byte is read.
        if (auto refused = ScreenAdmin(head, /*dashboard=*/false)) return std::move(*refused);
        return std::nullopt;
      case Route::kNone:
        return NoRoute(head, r);
      case Route::kModels:
        return ToResponse(handler_.ListModels(Call(head, {})), &head);
      case Route::kSnapshot:
      case Route::kSessionList:
      case Route::kSessionRead:
      case Route::kSessionDelete:
        // The key is checked before anything else; reading the file (or
        // the session store) waits for a worker. Served while draining: it
        // starts no generation.
        if (auto refused = handler_.Screen(r.kind, r.endpoint, Call(head, {}), false)) {
          return ToResponse(std::move(*refused), &head);
        }
        return std::nullopt;
      case Route::kComplete:
      case Route::kEmbed:
      case Route::kCountTokens:
      case Route::kTokenize:
      case Route::kDetokenize: {
        // The key, draining and loading are decided before a body byte is read.
        if (auto refused = handler_.Screen(r.kind, r.endpoint, Call(head, {}), true)) {
          return ToResponse(std::move(*refused), &head);
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
      ApiReply reply;
      switch (r.route) {
        case Route::kAdminReload:
          reply = Reload(call);
          break;
        case Route::kCacheInvalidate:
          reply = InvalidateCache(call);
          break;
        case Route::kCacheSnapshot:
          reply = SnapshotCache(call);
          break;
        case Route::kEmbed:
          reply = handler_.Embed(call);
          break;
        case Route::kCountTokens:
          reply = handler_.CountTokens(call);
          break;
        case Route::kTokenize:
          reply = handler_.Tokenize(call);
          break;
        case Route::kDetokenize:
          reply = handler_.Detokenize(call);
          break;
        case Route::kSnapshot:
          reply = handler_.ReadSnapshot(call);
          break;
        case Route::kSessionList:
          reply = handler_.ListSessions(call);
          break;
        case Route::kSessionRead:
          reply = handler_.ReadSession(call);
          break;
        case Route::kSessionDelete:
          reply = handler_.DeleteSession(call);
          break;
        default:
          reply = handler_.Complete(r.kind, call);
          break;
      }
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
    exchange->Respond(ToResponse(std::move(reply), &exchange->head()));
  }

  net::Response LimitResponse(const net::RequestHead* head, int status,
                              const util::Status& why) override {
    const ApiKind kind = head ? RouteFor(head->method, head->path()).kind : ApiKind::kOpenAIChat;
    const util::Status st =  // the path only matters for a 404, which is no limit
        handler_.TransportError(status, head ? head->method : "", head ? head->path() : "", why);
    ApiReply reply = ApiHandler::ErrorReply(kind, st);
    reply.status = status;  // the reader's status stands (a 400 for bad framing, say)
    return ToResponse(std::move(reply), head);
  }

 private:
  // The origin the request's Origin header names when CORS allows it, else
  // nullopt; with "*" allowed the answer is "*".
  std::optional<std::string> AllowedOrigin(const net::RequestHead* head) const {
    if (head == nullptr || options_.cors_origins.empty()) return std::nullopt;
    const std::string_view origin = head->headers.GetOr("Origin");
    if (origin.empty()) return std::nullopt;
    for (const std::string& o : options_.cors_origins) {
      if (o == "*") return std::string("*");
      if (o == origin) return std::string(origin);
    }
    return std::nullopt;
  }

  // The CORS headers of every response to an allowed origin (none otherwise).
  void AddCors(net::Headers& headers, const net::RequestHead* head) const {
    const auto origin = AllowedOrigin(head);
    if (!origin) return;
    headers.Set("Access-Control-Allow-Origin", *origin);
    headers.Set("Vary", "Origin");
    headers.Set("Access-Control-Expose-Headers", kExposed);
  }

  net::Response ToResponse(ApiReply reply, const net::RequestHead* head) const {
    net::Response r;
    r.status = reply.status;
    for (auto& [name, value] : reply.headers) r.headers.Add(std::move(name), std::move(value));
    r.headers.Set("Content-Type",
                  reply.content_type.empty() ? std::string(kJson) : std::move(reply.content_type));
    r.body = std::move(reply.body);
    AddCors(r.headers, head);
    return r;
  }

  // A path that is no endpoint (404), an endpoint asked with another method
  // (405 with Allow), or a CORS preflight of an allowed origin (204). A
  // preflight needs no API key: browsers never send one with it.
  net::Response NoRoute(const net::RequestHead& head, const Routed& r) {
    const ApiCall call = Call(head, {});
    if (r.allow != nullptr && head.method == "OPTIONS" && AllowedOrigin(&head)) {
      net::Response res;
      res.status = 204;
      AddCors(res.headers, &head);
      res.headers.Set("Access-Control-Allow-Methods", std::string(r.allow) + ", OPTIONS");
      res.headers.Set("Access-Control-Allow-Headers",
                      AllowedHeaders(head.headers.GetOr("Access-Control-Request-Headers")));
      res.headers.Set("Access-Control-Max-Age", kPreflightMaxAge);
      res.headers.Set("X-Request-ID", call.request_id);
      return res;
    }
    util::Status why = handler_.TransportError(404, head.method, head.path());
    if (r.allow != nullptr) {
      why = util::InvalidArgumentError(fmt::format("{} is not allowed on {}; it takes {}",
                                                   head.method, head.path(), r.allow))
                .WithReason(util::ErrorReason::kMethodNotAllowed);
    }
    ApiReply reply = ApiHandler::ErrorReply(r.kind, why);
    reply.headers.emplace_back("X-Request-ID", call.request_id);
    if (r.allow != nullptr) {
      reply.headers.emplace_back("Allow", options_.cors_origins.empty()
                                              ? std::string(r.allow)
                                              : std::string(r.allow) + ", OPTIONS");
    }
    return ToResponse(std::move(reply), &head);
  }

  // The admin key's check for the dashboard (`dashboard`) or the admin API:
  // nullopt when the request may go on, else the refusal (401 asking a
  // browser to log in, or 403 when no admin key is configured; see
  // HttpServer::SetAdminKey). Never logs what was presented.
  std::optional<net::Response> ScreenAdmin(const net::RequestHead& head, bool dashboard) {
    const std::shared_ptr<const std::string> key = admin_key_.load();
    util::Status refused;
    if (key == nullptr) {
      if (dashboard && !handler_.has_api_keys()) return std::nullopt;
      refused = util::PermissionDeniedError(
          dashboard ? "the dashboard shows every tenant's traffic: with API keys configured it "
                      "needs an admin key (start strata with --admin-key-file)"
                    : "the admin API is off: start strata with --admin-key-file (SIGHUP reloads "
                      "the configuration without it)");
    } else {
      const std::string presented = PresentedSecret(head.headers.GetOr("Authorization"));
      if (!presented.empty() && ConstantTimeEquals(presented, *key)) return std::nullopt;
      refused = util::UnauthenticatedError(
          presented.empty()
              ? "the admin key is required: send 'Authorization: Bearer KEY' (or log in with "
                "KEY as the password)"
              : "the admin key presented is not the configured one");
    }
    const ApiCall call = Call(head, {});
    ApiReply reply = ApiHandler::ErrorReply(ApiKind::kOpenAIChat, refused);
    reply.headers.emplace_back("X-Request-ID", call.request_id);
    if (refused.code() == util::StatusCode::kUnauthenticated) {
      reply.headers.emplace_back("WWW-Authenticate",
                                 "Basic realm=\"strata admin\", charset=\"UTF-8\"");
    }
    log_.Warn("req={} {} {} {} ({})", call.request_id, head.method, head.path(), reply.status,
              refused.message());
    net::Response res = ToResponse(std::move(reply), &head);
    res.headers.Set("Cache-Control", "no-store");
    return res;
  }

  // POST /admin/reload on a worker thread: the hook's report as JSON, 200
  // when it applied (even if some knobs need a restart), else the error in
  // the OpenAI shape with the report's details beside it.
  ApiReply Reload(const ApiCall& call) {
    std::function<ReloadReport()> hook;
    {
      std::lock_guard<std::mutex> lock(reload_mu_);
      hook = reload_;
    }
    ApiReply reply = ApiHandler::NewReply(ApiKind::kOpenAIChat, call.request_id);
    if (!hook) {
      return ApiHandler::ErrorReply(
          ApiKind::kOpenAIChat,
          util::UnavailableError("the server is still starting: nothing to reload yet"),
          std::move(reply));
    }
    const ReloadReport report = hook();
    auto changes = [](const std::vector<ReloadReport::Change>& list) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const auto& c : list) out.push_back({{"key", c.key}, {"from", c.from}, {"to", c.to}});
      return out;
    };
    nlohmann::ordered_json body = {{"reloaded", report.status.ok()},
                                   {"config", report.source},
                                   {"applied", changes(report.applied)},
                                   {"restart_required", changes(report.restart_required)},
                                   {"reread", report.reread}};
    if (!report.status.ok()) {
      reply = ApiHandler::ErrorReply(ApiKind::kOpenAIChat, report.status, std::move(reply));
      nlohmann::ordered_json error = nlohmann::ordered_json::parse(reply.body, nullptr, false);
      if (error.is_object()) {
        error["reloaded"] = false;
        error["config"] = report.source;
        reply.body = error.dump();
      }
    } else {
      reply.body = body.dump();
    }
    log_.Info("req={} POST /admin/reload {}: {} applied, {} need a restart", call.request_id,
              reply.status, report.applied.size(), report.restart_required.size());
    return reply;
  }

  // The gateway the admin API's cache endpoints act on; nullptr, with
  // `reply` made the 503, while the model loads.
  gateway::Gateway* AdminGateway(ApiReply& reply) {
    gateway::Gateway* g = handler_.admin_gateway();
    if (g == nullptr) {
      reply = ApiHandler::ErrorReply(
          ApiKind::kOpenAIChat, util::UnavailableError("the server is still loading its model"),
          std::move(reply));
    }
    return g;
  }

  // GET /admin/cache/snapshot on a worker thread: the cache tiers and the
  // cached prefixes as a snapshot (gateway/cache_snapshot.h), for `strata
  // serve --warm-from` on a new instance.
  ApiReply SnapshotCache(const ApiCall& call) {
    ApiReply reply = ApiHandler::NewReply(ApiKind::kOpenAIChat, call.request_id);
    gateway::Gateway* g = AdminGateway(reply);
    if (g == nullptr) return reply;
    auto snapshot = g->ExportCache();
    if (!snapshot.ok()) {
      return ApiHandler::ErrorReply(ApiKind::kOpenAIChat, snapshot.status(), std::move(reply));
    }
    reply.body = std::move(snapshot).value();
    reply.content_type = "application/octet-stream";
    reply.headers.emplace_back("Cache-Control", "no-store");
    log_.Info("req={} GET /admin/cache/snapshot 200 ({} bytes)", call.request_id,
              reply.body.size());
    return reply;
  }

  // DELETE /v1/cache on a worker thread (it may scan Redis): the body says
  // what goes (gateway::Invalidation); the answer counts what went per tier.
  ApiReply InvalidateCache(const ApiCall& call) {
    ApiReply reply = ApiHandler::NewReply(ApiKind::kOpenAIChat, call.request_id);
    gateway::Gateway* g = AdminGateway(reply);
    if (g == nullptr) return reply;
    auto what = ParseInvalidationBody(call.body);
    if (!what.ok())
      return ApiHandler::ErrorReply(ApiKind::kOpenAIChat, what.status(), std::move(reply));
    auto report = g->Invalidate(*what);
    if (!report.ok()) {
      return ApiHandler::ErrorReply(ApiKind::kOpenAIChat, report.status(), std::move(reply));
    }
    const nlohmann::ordered_json body = {{"object", "cache.invalidation"},
                                         {"invalidated",
                                          {{"l1", report->l1},
                                           {"l3", report->l3},
                                           {"semantic", report->semantic},
                                           {"l2_blocks", report->l2_blocks},
                                           {"shared", report->shared}}},
                                         {"reason", what->reason},
                                         {"warnings", report->warnings}};
    reply.body = body.dump();
    log_.Info("req={} DELETE /v1/cache 200", call.request_id);
    return reply;
  }

  // Reads whatever the metrics need from the net server while it exists.
  struct Live {
    std::mutex mu;
    net::HttpServer* server = nullptr;  // guarded by mu; null once stopped
  };

  ApiCall Call(const net::RequestHead& head, std::string_view body) {
    ApiCall call{.method = head.method,
                 .path = std::string(head.path()),
                 .query = head.target.size() > head.path().size()
                              ? head.target.substr(head.path().size() + 1)
                              : std::string(),
                 .if_match = std::string(head.headers.GetOr("If-Match")),
                 .body = body,
                 .request_id = handler_.RequestId(head.headers.GetOr("X-Request-ID")),
                 .api_key = std::string(head.headers.GetOr("x-api-key"))};
    const std::string_view auth = head.headers.GetOr("Authorization");
    if (call.api_key.empty() && auth.rfind("Bearer ", 0) == 0) {
      call.api_key = std::string(auth.substr(7));
    }
    for (const auto& [name, value] : head.headers.fields()) {  // W3C Trace Context
      if (net::EqualsIgnoreCase(name, "traceparent")) call.traceparent.push_back(value);
      if (net::EqualsIgnoreCase(name, "tracestate")) call.tracestate.push_back(value);
    }
    return call;
  }

  // On the exchange's I/O thread: answer now, or start feeding the response
  // from its generation.
  void Deliver(const std::shared_ptr<net::Exchange>& exchange, ApiReply reply) {
    if (reply.responder == nullptr) {
      exchange->Respond(ToResponse(std::move(reply), &exchange->head()));
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
    AddCors(headers, &feed->exchange->head());
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
      if (out.done) ex.Respond(ToResponse(std::move(out.reply), &ex.head()));
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
  std::atomic<std::shared_ptr<const std::string>> admin_key_;  // null: no admin key
  std::mutex reload_mu_;
  std::function<ReloadReport()> reload_;       // guarded by reload_mu_
  std::function<std::string()> canary_state_;  // guarded by reload_mu_
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
void HttpServer::SetApiKeys(ApiKeys keys) { impl_->SetApiKeys(std::move(keys)); }
void HttpServer::SetAdminKey(std::optional<std::string> key) { impl_->SetAdminKey(std::move(key)); }
void HttpServer::SetRequestTimeout(std::chrono::seconds timeout) {
  impl_->SetRequestTimeout(timeout);
}
void HttpServer::SetReloadHook(std::function<ReloadReport()> reload) {
  impl_->SetReloadHook(std::move(reload));
}

void HttpServer::SetCanaryStateHook(std::function<std::string()> state) {
  impl_->SetCanaryStateHook(std::move(state));
}

void HttpServer::StartDraining() { impl_->StartDraining(); }
void HttpServer::Stop(std::chrono::milliseconds flush) { impl_->Stop(flush); }
net::HttpServerStats HttpServer::Stats() const { return impl_->Stats(); }

}  // namespace strata::server
