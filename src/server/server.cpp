#include "server/server.h"

#include <httplib.h>

#include <sys/socket.h>

#include <fmt/format.h>

#include "server/api.h"
#include "server/internal/handler.h"

namespace strata::server {
namespace {

constexpr const char* kJson = "application/json";

ApiKind KindForPath(const std::string& path) {
  return path.rfind("/v1/messages", 0) == 0 ? ApiKind::kAnthropicMessages : ApiKind::kOpenAIChat;
}

// A DataSink as the handler's FrameSink.
class DataSinkFrames final : public FrameSink {
 public:
  explicit DataSinkFrames(httplib::DataSink& sink) : sink_(sink) {}
  bool Write(std::string_view frame) override { return sink_.write(frame.data(), frame.size()); }
  bool Connected() override { return sink_.is_writable(); }

 private:
  httplib::DataSink& sink_;
};

}  // namespace

// The httplib shell around ApiHandler: routes, limits and timeouts, and the
// translation of requests and replies. Everything a request means is decided
// by the handler.
class HttpServer::Impl {
 public:
  Impl(const ServerOptions& o, ApiKeys keys, obs::MetricsRegistry& metrics,
       const util::Clock& clock, util::Logger& log)
      : options_(o),
        log_(log),
        metrics_(metrics),
        handler_(o, std::move(keys), metrics, clock, log) {}

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

  void SetGateway(gateway::Gateway* g) { handler_.SetGateway(g); }
  void StartDraining() { handler_.StartDraining(); }
  void Stop() {
    if (stopped_.exchange(true)) return;
    svr_.stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  ApiCall Call(const httplib::Request& req) {
    ApiCall call{.method = req.method,
                 .path = req.path,
                 .body = req.body,
                 .request_id = handler_.RequestId(req.get_header_value("X-Request-ID")),
                 .api_key = req.get_header_value("x-api-key")};
    const std::string auth = req.get_header_value("Authorization");
    if (call.api_key.empty() && auth.rfind("Bearer ", 0) == 0) call.api_key = auth.substr(7);
    return call;
  }

  static void Send(ApiReply reply, httplib::Response& res) {
    res.status = reply.status;
    for (const auto& [name, value] : reply.headers) res.set_header(name, value);
    if (reply.stream == nullptr) {
      res.set_content(reply.body, kJson);
      return;
    }
    res.set_chunked_content_provider(
        "text/event-stream", [stream = std::move(reply.stream)](size_t, httplib::DataSink& sink) {
          DataSinkFrames frames(sink);
          const bool ok = stream->Run(frames);
          if (ok) sink.done();
          return ok;
        });
  }

  void Route() {
    svr_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      Send(handler_.Health(), res);
    });
    svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.Render(), "text/plain; version=0.0.4");
    });
    svr_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
      Send(handler_.ListModels(Call(req)), res);
    });
    auto api = [this](ApiKind kind) {
      return [this, kind](const httplib::Request& req, httplib::Response& res) {
        Send(handler_.Complete(kind, Call(req)), res);
      };
    };
    svr_.Post("/v1/chat/completions", api(ApiKind::kOpenAIChat));
    svr_.Post("/v1/completions", api(ApiKind::kOpenAICompletion));
    svr_.Post("/v1/messages", api(ApiKind::kAnthropicMessages));
    svr_.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
      Send(handler_.Embed(Call(req)), res);
    });

    // Anything httplib answers on its own (no route, 413, ...) gets a JSON body.
    svr_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const int status = res.status;
      Send(ApiHandler::ErrorReply(KindForPath(req.path),
                                  handler_.TransportError(status, req.method, req.path)),
           res);
      res.status = status;
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
          Send(ApiHandler::ErrorReply(KindForPath(req.path), util::InternalError("internal error")),
               res);
        });
  }

  const ServerOptions options_;
  util::Logger& log_;
  obs::MetricsRegistry& metrics_;
  ApiHandler handler_;
  httplib::Server svr_;
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
