// GET /v1/sessions, GET and DELETE /v1/sessions/{id} (server/internal/handler.h,
// session/session.h): a tenant's durable sessions.
#include <fmt/format.h>

#include <charconv>

#include "server/internal/handler.h"
#include "server/internal/wire.h"

namespace strata::server {

namespace {
constexpr const char* kSessionsEndpoint = "/v1/sessions";
constexpr std::string_view kSessionsPrefix = "/v1/sessions/";

int64_t Seconds(int64_t ms) { return ms / 1000; }

// The value of `name` in a query string ("limit=10&after=s1"), percent-
// decoding not needed: session ids and numbers are plain.
std::optional<std::string_view> QueryValue(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == name) {
      return eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    }
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
  }
  return std::nullopt;
}

// The id of /v1/sessions/{id}, checked.
util::StatusOr<std::string> PathSessionId(const ApiCall& call) {
  std::string id = call.path.substr(std::min(call.path.size(), kSessionsPrefix.size()));
  if (!session::ValidSessionId(id)) {
    return util::InvalidFieldError("session_id",
                                   "must be 1-128 characters of letters, digits and . _ : @ -");
  }
  return id;
}

// The same answer whether the session never existed, expired or is another
// tenant's: nothing to learn about other tenants' sessions.
util::Status NotFoundAlike(const util::Status& st, const std::string& id) {
  return st.code() == util::StatusCode::kNotFound
             ? util::NotFoundError(fmt::format("no session '{}'", id))
             : st;
}

util::Status SessionsOff() {
  return util::NotFoundError(
      "sessions are off on this server (strata serve --sessions rocksdb:DIR turns them on)");
}

}  // namespace

ApiReply ApiHandler::ListSessions(const ApiCall& call) {
  Scope scope(ApiKind::kOpenAIChat, kSessionsEndpoint, call, clock_.Now(), log_);
  ApiReply reply = NewReply(ApiKind::kOpenAIChat, call.request_id);
  auto admitted = Admit(/*check_draining=*/false, call.api_key);
  if (!admitted.ok()) return Fail(scope, std::move(reply), admitted.status());
  if (options_.sessions == nullptr) return Fail(scope, std::move(reply), SessionsOff());
  size_t limit = 20;
  if (auto v = QueryValue(call.query, "limit")) {
    const auto [end, ec] = std::from_chars(v->data(), v->data() + v->size(), limit);
    if (ec != std::errc() || end != v->data() + v->size() || limit < 1 || limit > 100) {
      return Fail(scope, std::move(reply),
                  util::InvalidFieldError("limit", "'limit' must be an integer from 1 to 100"));
    }
  }
  std::string after;
  if (auto v = QueryValue(call.query, "after")) {
    after = std::string(*v);
    if (!session::ValidSessionId(after)) {
      return Fail(scope, std::move(reply),
                  util::InvalidFieldError("after", "'after' must be a session id"));
    }
  }
  auto page = options_.sessions->List(admitted->tenant, after, limit);
  if (!page.ok()) return Fail(scope, std::move(reply), page.status());
  wire::Json data = wire::Json::array();
  for (const session::SessionSummary& s : page->sessions) {
    data.push_back({{"id", s.id},
                    {"object", "session"},
                    {"turns", s.turns},
                    {"bytes", s.bytes},
                    {"created_at", Seconds(s.created_ms)},
                    {"updated_at", Seconds(s.updated_ms)}});
  }
  wire::Json body = {
      {"object", "list"}, {"data", std::move(data)}, {"has_more", !page->next_cursor.empty()}};
  body["last_id"] =
      page->sessions.empty() ? wire::Json(nullptr) : wire::Json(page->sessions.back().id);
  reply.body = wire::Dump(body);
  Count(kSessionsEndpoint, 200);
  return reply;
}

ApiReply ApiHandler::ReadSession(const ApiCall& call) {
  Scope scope(ApiKind::kOpenAIChat, kSessionsEndpoint, call, clock_.Now(), log_);
  ApiReply reply = NewReply(ApiKind::kOpenAIChat, call.request_id);
  auto admitted = Admit(/*check_draining=*/false, call.api_key);
  if (!admitted.ok()) return Fail(scope, std::move(reply), admitted.status());
  auto path_id = PathSessionId(call);
  if (!path_id.ok()) return Fail(scope, std::move(reply), path_id.status());
  const std::string& id = *path_id;
  if (options_.sessions == nullptr) return Fail(scope, std::move(reply), SessionsOff());
  auto s = options_.sessions->Read(admitted->tenant, id);
  if (!s.ok()) return Fail(scope, std::move(reply), NotFoundAlike(s.status(), id));
  wire::Json messages = wire::Json::array();
  for (const session::Turn& t : s->turns) {
    for (const std::string& m : t.messages) {
      wire::Json j = wire::Json::parse(m, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded()) {
        return Fail(
            scope, std::move(reply),
            util::DataLossError(fmt::format("session '{}' holds an unreadable message", id)));
      }
      messages.push_back(std::move(j));
    }
  }
  reply.headers.emplace_back("ETag", fmt::format("\"{}\"", s->turns.size()));
  reply.body = wire::Dump({{"id", id},
                           {"object", "session"},
                           {"turns", s->turns.size()},
                           {"bytes", s->bytes},
                           {"created_at", Seconds(s->created_ms)},
                           {"updated_at", Seconds(s->updated_ms)},
                           {"messages", std::move(messages)}});
  Count(kSessionsEndpoint, 200);
  return reply;
}

ApiReply ApiHandler::DeleteSession(const ApiCall& call) {
  Scope scope(ApiKind::kOpenAIChat, kSessionsEndpoint, call, clock_.Now(), log_);
  ApiReply reply = NewReply(ApiKind::kOpenAIChat, call.request_id);
  auto admitted = Admit(/*check_draining=*/false, call.api_key);
  if (!admitted.ok()) return Fail(scope, std::move(reply), admitted.status());
  auto path_id = PathSessionId(call);
  if (!path_id.ok()) return Fail(scope, std::move(reply), path_id.status());
  const std::string& id = *path_id;
  if (options_.sessions == nullptr) return Fail(scope, std::move(reply), SessionsOff());
  util::Status st = options_.sessions->Delete(admitted->tenant, id);
  if (!st.ok()) return Fail(scope, std::move(reply), NotFoundAlike(st, id));
  reply.body = wire::Dump({{"id", id}, {"object", "session.deleted"}, {"deleted", true}});
  Count(kSessionsEndpoint, 200);
  scope.log.Info("DELETE {} 200 tenant={}", call.path, admitted->tenant);
  return reply;
}

}  // namespace strata::server
