// session/internal/common.h — the argument checks both session stores make
// before touching their storage, so they refuse the same things with the
// same words.
//
// Threading: pure functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "session/session.h"
#include "util/status.h"

namespace strata::session::internal {

// kInvalidArgument for a tenant that is empty, over 256 bytes or holds a
// NUL; kInvalidArgument naming `session_id` for an invalid id.
util::Status CheckTenant(const std::string& tenant);
util::Status CheckKeyParts(const std::string& tenant, const std::string& id);
// The tenant and id, and a writer of 1-128 bytes, an op id of at most 256
// bytes and at least one message.
util::Status CheckAppend(const AppendRequest& r);
// The tenant, a limit of 1-1000 (naming `limit`), a cursor that is a
// session id or empty (naming `after`).
util::Status CheckList(const std::string& tenant, const std::string& cursor, size_t limit);
// Every limit within the range session.h gives it.
util::Status CheckLimits(const Limits& limits);

// Milliseconds since the Unix epoch: a turn's and a session's stamps.
int64_t MillisSinceEpoch(std::chrono::system_clock::time_point t);

// The turn `r` asks to store, made at `now_ms`; its clock is the store's to
// give (0 here).
Turn NewTurn(const AppendRequest& r, int64_t now_ms);

}  // namespace strata::session::internal
