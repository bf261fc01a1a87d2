// GET /v1/snapshots/{request_id} (server/internal/handler.h, server/snapshots.h).
#include <fmt/format.h>

#include "server/internal/handler.h"

namespace strata::server {

namespace {
constexpr const char* kSnapshotsEndpoint = "/v1/snapshots";
constexpr std::string_view kSnapshotsPrefix = "/v1/snapshots/";
}  // namespace

ApiReply ApiHandler::ReadSnapshot(const ApiCall& call) {
  Scope scope(ApiKind::kOpenAIChat, kSnapshotsEndpoint, call, clock_.Now(), log_);
  ApiReply reply = NewReply(ApiKind::kOpenAIChat, call.request_id);
  // Readable while draining: it starts no generation.
  auto admitted = Admit(/*check_draining=*/false, call.api_key);
  if (!admitted.ok()) return Fail(scope, std::move(reply), admitted.status());
  const std::string id = call.path.substr(std::min(call.path.size(), kSnapshotsPrefix.size()));
  // Only an id this server would have kept for a request can name a snapshot.
  if (RequestId(id) != id) {
    return Fail(scope, std::move(reply),
                util::InvalidFieldError(
                    "request_id", "'request_id' must be 1 to 128 characters of [A-Za-z0-9._-]"));
  }
  if (options_.snapshots == nullptr) {
    return Fail(scope, std::move(reply),
                util::NotFoundError("request snapshots are off on this server (strata serve "
                                    "--snapshots DIR turns them on)"));
  }
  auto snapshot = options_.snapshots->Read(admitted->tenant, id);
  if (!snapshot.ok()) {
    util::Status st = snapshot.status();
    if (st.code() == util::StatusCode::kNotFound) {
      // The same answer whether it never existed, expired or is another
      // tenant's: nothing to learn about other tenants' requests.
      st = util::NotFoundError(fmt::format("no snapshot of request '{}'", id));
    } else if (st.code() == util::StatusCode::kDataLoss) {
      scope.log.Error("snapshot of request '{}' unreadable: {}", id, st.message());
      st = util::InternalError(
          fmt::format("the snapshot of request '{}' cannot be read: it failed authentication", id));
    }
    return Fail(scope, std::move(reply), st);
  }
  reply.body = std::move(snapshot).value();
  Count(kSnapshotsEndpoint, 200);
  scope.log.Info("GET {} 200 tenant={} {:.1f} ms", call.path, admitted->tenant,
                 util::SecondsBetween(scope.t0, clock_.Now()) * 1e3);
  return reply;
}

}  // namespace strata::server
