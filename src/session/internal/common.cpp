#include "session/internal/common.h"

namespace strata::session::internal {

util::Status CheckTenant(const std::string& tenant) {
  if (tenant.empty() || tenant.size() > 256 || tenant.find('\0') != std::string::npos) {
    return util::InvalidArgumentError("session store: the tenant must be 1-256 bytes without NUL");
  }
  return util::OkStatus();
}

util::Status CheckKeyParts(const std::string& tenant, const std::string& id) {
  STRATA_RETURN_IF_ERROR(CheckTenant(tenant));
  if (!ValidSessionId(id)) {
    return util::InvalidFieldError("session_id",
                                   "must be 1-128 characters of letters, digits and . _ : @ -");
  }
  return util::OkStatus();
}

util::Status CheckAppend(const AppendRequest& r) {
  STRATA_RETURN_IF_ERROR(CheckKeyParts(r.tenant, r.session_id));
  if (r.writer.empty() || r.writer.size() > 128) {
    return util::InvalidArgumentError("session store: the writer id must be 1-128 bytes");
  }
  if (r.op_id.size() > 256) {
    return util::InvalidArgumentError("session store: the op id is longer than 256 bytes");
  }
  if (r.messages.empty()) {
    return util::InvalidArgumentError("session store: a turn needs at least one message");
  }
  return util::OkStatus();
}

util::Status CheckList(const std::string& tenant, const std::string& cursor, size_t limit) {
  STRATA_RETURN_IF_ERROR(CheckTenant(tenant));
  if (limit == 0 || limit > 1000) {
    return util::InvalidFieldError("limit", "must be between 1 and 1000");
  }
  if (!cursor.empty() && !ValidSessionId(cursor)) {
    return util::InvalidFieldError("after", "is not a session id");
  }
  return util::OkStatus();
}

util::Status CheckLimits(const Limits& l) {
  if (l.max_turns < 1 || l.max_turns > 1000000) {
    return util::InvalidArgumentError("session store: max_turns must be 1-1000000");
  }
  if (l.max_bytes < 1024 || l.max_bytes > (1ull << 32)) {
    return util::InvalidArgumentError("session store: max_bytes must be 1 KiB - 4 GiB");
  }
  if (l.max_sessions_per_tenant < 1 || l.max_sessions_per_tenant > 1000000000) {
    return util::InvalidArgumentError("session store: max_sessions_per_tenant must be 1-1e9");
  }
  if (l.ttl.count() < 0 || l.dependency_wait.count() < 0 ||
      l.dependency_wait > std::chrono::seconds(60)) {
    return util::InvalidArgumentError(
        "session store: the TTL must be >= 0 and the dependency wait 0-60 s");
  }
  return util::OkStatus();
}

int64_t MillisSinceEpoch(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

Turn NewTurn(const AppendRequest& r, int64_t now_ms) {
  Turn turn;
  turn.depends_on = r.depends_on;
  turn.writer = r.writer;
  turn.messages = r.messages;
  turn.tokens = r.tokens;
  turn.tokens_from = r.tokens_from;
  turn.created_ms = now_ms;
  return turn;
}

}  // namespace strata::session::internal
