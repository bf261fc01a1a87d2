#include "server/server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <mutex>

#include <fmt/format.h>

#include "server/api.h"
#include "util/random.h"

namespace strata::server {
namespace {

constexpr const char* kJson = "application/json";

bool SaneRequestId(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

const char* EndpointLabel(ApiKind k) {
  switch (k) {
    case ApiKind::kOpenAIChat:
      return "/v1/chat/completions";
    case ApiKind::kOpenAICompletion:
      return "/v1/completions";
    case ApiKind::kAnthropicMessages:
      return "/v1/messages";
  }
  return "?";
}

ApiKind KindForPath(const std::string& path) {
  return path.rfind("/v1/messages", 0) == 0 ? ApiKind::kAnthropicMessages : ApiKind::kOpenAIChat;
}

}  // namespace

class HttpServer::Impl {
 public:
  Impl(const ServerOptions& o, ApiKeys keys, obs::MetricsRegistry& metrics,
       const util::Clock& clock, util::Logger& log)
      : options_(o),
        keys_(std::move(keys)),
        clock_(clock),
        log_(log),
        id_rng_(o.request_id_seed),
        requests_(metrics.Counter("strata_http_requests_total",
                                  "HTTP requests by endpoint and status.", {"endpoint", "status"})),
        metrics_(metrics) {}

  ~Impl() { Stop(); }

  util::StatusOr<int> Start() {
    Route();
    const int threads = options_.http_threads;
    svr_.new_task_queue = [threads] {
      return new httplib::ThreadPool(static_cast<size_t>(threads));
    };
    svr_.set_payload_max_length(options_.max_body_bytes);
    // Responses go out in small writes (headers, then the body or SSE
    // frames): with Nagle's algorithm a kept-alive client's delayed ACK held
    // each one back ~40 ms, so a cache hit that takes 0.2 ms took 43 ms.
    svr_.set_tcp_nodelay(true);
    svr_.set_read_timeout(std::chrono::seconds(30));
    svr_.set_write_timeout(std::chrono::seconds(30));
    // The socket that binds is the last one these options see. httplib keeps
    // the callback, so it writes a member rather than a local of Start().
    svr_.set_socket_options([this](socket_t fd) {
      httplib::default_socket_options(fd);
      listen_fd_ = fd;
    });
    int port = options_.port;
    if (port == 0) {
      port = svr_.bind_to_any_port(options_.host);
      if (port <= 0)
        return util::UnavailableError(fmt::format("cannot bind {}:any", options_.host));
    } else if (!svr_.bind_to_port(options_.host, port)) {
      return util::UnavailableError(
          fmt::format("cannot listen on {}:{} (in use, or not an address of this machine)",
                      options_.host, port));
    }
    // httplib listens with a backlog of 5 (compiled into Debian's library).
    // 32 clients connecting at once overflowed it: the kernel fell back to SYN
    // cookies and closed connections whose requests were never read
    // (bench/shared_prompt.sh; ServerTest.ABurstOfConnectionsIsServedInFull).
    // listen() again on the bound socket raises it to the system's cap.
    if (listen_fd_ < 0 || ::listen(listen_fd_, SOMAXCONN) != 0) {
      return util::UnavailableError(
          fmt::format("cannot raise the listen backlog on {}:{}", options_.host, port));
    }
    // The socket is already listening: connections queue until the loop accepts them.
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    return port;
  }

  void SetGateway(gateway::Gateway* g) { gateway_.store(g); }
  void StartDraining() { draining_.store(true); }
  void Stop() {
    if (stopped_.exchange(true)) return;
    svr_.stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Route() {
    svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (draining_.load()) {
        res.status = 503;
        res.set_content(R"({"status":"draining"})", kJson);
      } else if (gateway_.load() == nullptr) {
        res.status = 503;
        res.set_content(R"({"status":"loading"})", kJson);
      } else {
        res.set_content(R"({"status":"ok"})", kJson);
      }
    });
    svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.Render(), "text/plain; version=0.0.4");
    });
    svr_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string rid = RequestId(req);
      res.set_header("X-Request-ID", rid);
      gateway::Gateway* g = gateway_.load();
      if (g == nullptr)
        return Error(res, ApiKind::kOpenAIChat,
                     util::UnavailableError("the model is loading")
                         .WithReason(util::ErrorReason::kModelLoading),
                     "/v1/models");
      auto tenant = Authenticate(req);
      if (!tenant.ok()) return Error(res, ApiKind::kOpenAIChat, tenant.status(), "/v1/models");
      const int64_t created =
          std::chrono::duration_cast<std::chrono::seconds>(clock_.WallNow().time_since_epoch())
              .count();
      res.set_content(
          fmt::format(
              R"({{"object":"list","data":[{{"id":"{}","object":"model","created":{},"owned_by":"strata"}}]}})",
              g->model_name(), created),
          kJson);
      requests_.With({"/v1/models", "200"}).Inc();
    });
    auto api = [this](ApiKind kind) {
      return [this, kind](const httplib::Request& req, httplib::Response& res) {
        HandleApi(req, res, kind);
      };
    };
    svr_.Post("/v1/chat/completions", api(ApiKind::kOpenAIChat));
    svr_.Post("/v1/completions", api(ApiKind::kOpenAICompletion));
    svr_.Post("/v1/messages", api(ApiKind::kAnthropicMessages));
    svr_.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
      HandleEmbeddings(req, res);
    });

    // Anything httplib answers on its own (no route, 413, ...) gets a JSON body.
    svr_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const ApiKind kind = KindForPath(req.path);
      util::Status st;
      if (res.status == 413) {
        st =
            util::InvalidArgumentError(fmt::format("the request body exceeds the limit of {} bytes",
                                                   options_.max_body_bytes))
                .WithReason(util::ErrorReason::kBodyTooLarge);
        res.set_content(RenderError(kind, st), kJson);
        return;
      }
      if (res.status == 404) {
        st = util::NotFoundError(fmt::format("no route for {} {}", req.method, req.path))
                 .WithReason(util::ErrorReason::kNoRoute);
      } else {
        st = util::InvalidArgumentError(fmt::format("HTTP {}", res.status));
      }
      const int keep = res.status;
      res.set_content(RenderError(kind, st), kJson);
      res.status = keep;
    });
    svr_.set_exception_handler(
        [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown";
          try {
            if (ep) std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          log_.Error("internal error serving {} {}: {}", req.method, req.path, what);
          res.status = 500;
          res.set_content(RenderError(KindForPath(req.path), util::InternalError("internal error")),
                          kJson);
        });
  }

  std::string RequestId(const httplib::Request& req) {
    const std::string given = req.get_header_value("X-Request-ID");
    if (SaneRequestId(given)) return given;
    std::lock_guard<std::mutex> lock(id_mu_);
    return fmt::format("{:016x}", id_rng_.Next());
  }

  util::StatusOr<std::string> Authenticate(const httplib::Request& req) const {
    if (keys_.empty()) return std::string("default");
    std::string key = req.get_header_value("x-api-key");
    const std::string auth = req.get_header_value("Authorization");
    if (key.empty() && auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
    if (key.empty()) {
      return util::UnauthenticatedError(
                 "missing API key: send 'Authorization: Bearer KEY' or 'x-api-key: KEY'")
          .WithReason(util::ErrorReason::kMissingApiKey);
    }
    return keys_.Authenticate(key);
  }

  void Error(httplib::Response& res, ApiKind kind, const util::Status& st, const char* endpoint) {
    res.status = HttpStatus(st);
    res.set_content(RenderError(kind, st), kJson);
    if (res.status == 429) res.set_header("Retry-After", std::to_string(kRetryAfterSeconds));
    requests_.With({endpoint, std::to_string(res.status)}).Inc();
  }

  void HandleEmbeddings(const httplib::Request& req, httplib::Response& res) {
    const auto t0 = clock_.Now();
    const std::string rid = RequestId(req);
    res.set_header("X-Request-ID", rid);
    util::PrefixLogger log(log_, "req=" + rid);
    const char* endpoint = "/v1/embeddings";
    auto fail = [&](const util::Status& st) {
      Error(res, ApiKind::kOpenAIChat, st, endpoint);
      log.Info("POST {} {} ({})", endpoint, res.status, st.message());
    };
    if (draining_.load())
      return fail(util::UnavailableError("the server is shutting down")
                      .WithReason(util::ErrorReason::kShuttingDown));
    gateway::Gateway* g = gateway_.load();
    if (g == nullptr)
      return fail(util::UnavailableError("the model is loading; retry shortly")
                      .WithReason(util::ErrorReason::kModelLoading));
    auto tenant = Authenticate(req);
    if (!tenant.ok()) return fail(tenant.status());
    auto parsed = ParseEmbeddingRequest(req.body);
    if (!parsed.ok()) return fail(parsed.status());
    if (!ServesModel(*g, parsed->model)) return fail(UnknownModel(*g, parsed->model));
    parsed->request.request_id = rid;
    parsed->request.tenant = *tenant;
    auto result = g->Embed(parsed->request, t0 + options_.request_timeout);
    if (!result.ok()) return fail(result.status());
    res.set_content(RenderEmbeddings(parsed->model, *result, parsed->base64), kJson);
    requests_.With({endpoint, "200"}).Inc();
    log.Info("POST {} 200 tenant={} inputs={} tokens={} {:.1f} ms", endpoint, *tenant,
             result->embeddings.size(), result->prompt_tokens,
             util::SecondsBetween(t0, clock_.Now()) * 1e3);
  }

  bool ServesModel(const gateway::Gateway& g, const std::string& model) const {
    return model == g.model_name() ||
           std::find(options_.model_aliases.begin(), options_.model_aliases.end(), model) !=
               options_.model_aliases.end();
  }
  static util::Status UnknownModel(const gateway::Gateway& g, const std::string& model) {
    return util::NotFoundError(fmt::format("model '{}' does not exist; this server serves '{}'",
                                           model, g.model_name()))
        .WithReason(util::ErrorReason::kModelNotFound);
  }

  void HandleApi(const httplib::Request& req, httplib::Response& res, ApiKind kind) {
    const auto t0 = clock_.Now();
    const std::string rid = RequestId(req);
    res.set_header("X-Request-ID", rid);
    // The Anthropic SDKs read the id from 'request-id' (what api.anthropic.com
    // sends); the OpenAI SDKs read 'x-request-id'.
    if (kind == ApiKind::kAnthropicMessages) res.set_header("request-id", rid);
    util::PrefixLogger log(log_, "req=" + rid);
    const char* endpoint = EndpointLabel(kind);
    std::string session_note;  // " session=ID" once the body named one
    auto fail = [&](const util::Status& st) {
      Error(res, kind, st, endpoint);
      log.Info("{} {} {}{} ({}) {:.1f} ms", req.method, req.path, res.status, session_note,
               st.message(), util::SecondsBetween(t0, clock_.Now()) * 1e3);
    };
    if (draining_.load())
      return fail(util::UnavailableError("the server is shutting down")
                      .WithReason(util::ErrorReason::kShuttingDown));
    gateway::Gateway* g = gateway_.load();
    if (g == nullptr)
      return fail(util::UnavailableError("the model is loading; retry shortly")
                      .WithReason(util::ErrorReason::kModelLoading));
    auto tenant = Authenticate(req);
    if (!tenant.ok()) return fail(tenant.status());
    auto parsed = ParseRequest(kind, req.body);
    if (!parsed.ok()) return fail(parsed.status());
    if (!ServesModel(*g, parsed->model)) return fail(UnknownModel(*g, parsed->model));
    if (kind == ApiKind::kAnthropicMessages && parsed->request.n != 1) {
      return fail(util::InvalidFieldError("n", "'n' is not part of the messages API"));
    }
    parsed->request.request_id = rid;
    parsed->request.tenant = *tenant;
    // The session (a client-chosen, checked name) comes back so a proxy can
    // see it, and labels this request's log lines.
    if (const std::string& session = parsed->request.session_id; !session.empty()) {
      res.set_header("x-strata-session-id", session);
      session_note = " session=" + session;
    }
    auto started = g->Start(parsed->request);
    if (!started.ok()) return fail(started.status());
    // How this response is served: miss, l1, l3 or coalesced (docs/api.md);
    // a near-duplicate's answer also says how similar the request was.
    res.set_header("x-strata-cache",
                   std::string(gateway::CacheOutcomeName((*started)->cache_outcome())));
    if (const auto similarity = (*started)->cache_similarity()) {
      res.set_header("x-strata-cache-similarity", fmt::format("{:.3f}", *similarity));
    }

    ResponseMeta meta;
    meta.id = (kind == ApiKind::kAnthropicMessages ? "msg_"
               : kind == ApiKind::kOpenAIChat      ? "chatcmpl-"
                                                   : "cmpl-") +
              rid;
    meta.model = parsed->model;
    meta.created =
        std::chrono::duration_cast<std::chrono::seconds>(clock_.WallNow().time_since_epoch())
            .count();
    meta.prompt_tokens = (*started)->prompt_tokens();
    meta.fingerprint = "strata";
    const auto deadline = t0 + options_.request_timeout;

    if (!parsed->stream) {
      std::unique_ptr<gateway::Generation> gen = std::move(started).value();
      std::vector<ChoiceResult> results(static_cast<size_t>(gen->n_choices()));
      while (true) {
        auto e = gen->Next(deadline);
        if (!e.ok()) {
          if (e.status().code() == util::StatusCode::kOutOfRange) break;  // all finished
          gen->Cancel();
          return fail(
              util::DeadlineExceededError(fmt::format("the request did not finish within {} s",
                                                      options_.request_timeout.count()))
                  .WithReason(util::ErrorReason::kTimeout));
        }
        ChoiceResult& c = results[static_cast<size_t>(e->index)];
        if (e->kind == gateway::Event::Kind::kDelta) {
          c.text += e->text;
          for (auto& lp : e->logprobs) c.logprobs.push_back(std::move(lp));
          continue;
        }
        if (!e->status.ok()) return fail(e->status);
        c.finish = e->finish;
        c.stop_sequence = e->stop_sequence;
        c.completion_tokens = e->usage.completion_tokens;
        meta.cached_tokens = std::max(meta.cached_tokens, e->usage.cached_tokens);
      }
      res.set_content(RenderResponse(kind, meta, results, parsed->logprobs), kJson);
      requests_.With({endpoint, "200"}).Inc();
      int32_t completion = 0;
      for (const auto& c : results) completion += c.completion_tokens;
      log.Info("{} {} 200 tenant={}{} prompt={} completion={} cache={} {:.1f} ms", req.method,
               req.path, *tenant, session_note, meta.prompt_tokens, completion,
               gateway::CacheOutcomeName(gen->cache_outcome()),
               util::SecondsBetween(t0, clock_.Now()) * 1e3);
      return;
    }

    // Streaming: everything from here on travels inside the 200 response.
    struct Stream {
      std::unique_ptr<gateway::Generation> gen;
      ResponseMeta meta;
      ParsedRequest parsed;
      std::string tenant, method, path, rid, session_note;
    };
    auto s = std::make_shared<Stream>();
    s->gen = std::move(started).value();
    s->meta = meta;
    s->parsed = std::move(parsed).value();
    s->tenant = *tenant;
    s->method = req.method;
    s->path = req.path;
    s->rid = rid;
    s->session_note = session_note;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    requests_.With({endpoint, "200"}).Inc();
    res.set_chunked_content_provider(
        "text/event-stream", [this, s, kind, t0, deadline](size_t, httplib::DataSink& sink) {
          util::PrefixLogger slog(log_, "req=" + s->rid);
          auto write = [&](const std::string& frame) {
            return frame.empty() || sink.write(frame.data(), frame.size());
          };
          std::string end_note = "done";
          int32_t completion = 0;
          bool ok = write(RenderStreamStart(kind, s->meta, s->gen->n_choices()));
          while (ok) {
            // Wake up regularly to notice a client that went away during a long prefill.
            const auto step = std::min(deadline, clock_.Now() + std::chrono::milliseconds(200));
            auto e = s->gen->Next(step);
            if (!e.ok()) {
              if (e.status().code() == util::StatusCode::kOutOfRange) {
                ok = write(RenderStreamEnd(kind, s->meta, completion, s->parsed.include_usage));
                break;
              }
              if (clock_.Now() >= deadline) {
                write(RenderStreamError(kind, util::DeadlineExceededError("the request timed out")
                                                  .WithReason(util::ErrorReason::kTimeout)));
                end_note = "timed out";
                break;
              }
              if (!sink.is_writable()) {
                ok = false;
                break;
              }
              continue;
            }
            if (e->kind == gateway::Event::Kind::kDelta) {
              ok = write(RenderStreamDelta(kind, s->meta, *e, s->parsed.logprobs));
            } else if (!e->status.ok()) {
              write(RenderStreamError(kind, e->status));
              end_note = "failed: " + e->status.message();
              break;
            } else {
              completion += e->usage.completion_tokens;
              s->meta.cached_tokens = std::max(s->meta.cached_tokens, e->usage.cached_tokens);
              ok = write(RenderStreamFinish(kind, s->meta, *e));
            }
          }
          if (!ok) {
            s->gen->Cancel();
            end_note = "client disconnected";
          }
          slog.Info("{} {} 200 stream tenant={}{} prompt={} completion={} cache={} {} {:.1f} ms",
                    s->method, s->path, s->tenant, s->session_note, s->meta.prompt_tokens,
                    completion, gateway::CacheOutcomeName(s->gen->cache_outcome()), end_note,
                    util::SecondsBetween(t0, clock_.Now()) * 1e3);
          if (ok) sink.done();
          return ok;
        });
  }

  const ServerOptions options_;
  const ApiKeys keys_;
  const util::Clock& clock_;
  util::Logger& log_;
  std::mutex id_mu_;
  util::Rng id_rng_;  // guarded by id_mu_
  obs::Family<obs::CounterValue>& requests_;
  obs::MetricsRegistry& metrics_;
  httplib::Server svr_;
  std::atomic<gateway::Gateway*> gateway_{nullptr};
  std::atomic<bool> draining_{false};
  int listen_fd_ = -1;  // set while Start() binds (socket options callback)
  std::atomic<bool> stopped_{false};
  std::thread thread_;
};

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() = default;

util::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Create(const ServerOptions& options,
                                                               ApiKeys keys,
                                                               obs::MetricsRegistry& metrics,
                                                               const util::Clock& clock,
                                                               util::Logger& log) {
  if (options.http_threads < 2 || options.http_threads > 4096) {
    return util::InvalidArgumentError(
        fmt::format("HTTP threads {} is outside [2, 4096]", options.http_threads));
  }
  if (options.port < 0 || options.port > 65535) {
    return util::InvalidArgumentError(fmt::format("port {} is outside [0, 65535]", options.port));
  }
  if (options.max_body_bytes < 1024) return util::InvalidArgumentError("body limit below 1 KiB");
  return std::unique_ptr<HttpServer>(
      new HttpServer(std::make_unique<Impl>(options, std::move(keys), metrics, clock, log)));
}

util::StatusOr<int> HttpServer::Start() { return impl_->Start(); }
void HttpServer::SetGateway(gateway::Gateway* g) { impl_->SetGateway(g); }
void HttpServer::StartDraining() { impl_->StartDraining(); }
void HttpServer::Stop() { impl_->Stop(); }

}  // namespace strata::server
