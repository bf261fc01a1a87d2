// server/internal/session_turns.h — durable sessions (L6) on the request
// path: the stored conversation put in front of a request, and the new turn
// stored when its answer is complete.
//
// Promise: PlanTurn decides what a chat request with a session_id adds to
// the stored conversation (docs/api.md, "Sessions"): a request whose
// messages start with the stored ones (the whole history) adds what follows
// them; a request of system and user messages only (the new turn) is put
// after the stored ones, a system message equal to the stored one dropped;
// anything else differs from the stored history and is refused with 409
// kSessionConflict naming the first message that differs. TapForSession's
// generation behaves as `gen`, except that when choice 0 finishes without
// error it first stores the turn (the new messages and the answer, and on
// the local engine its prompt and answer token ids) and only then passes
// the finish on: a client that saw the end of an answer can
// count on its turn being stored. When storing fails (a limit, a conflict,
// the disk, Redis's replicas), the finish carries that error instead, so the
// client sees it.
//
// Threading: PlanTurn is pure. The tap is read by one thread (as any
// Generation); the store is thread-safe. The store call (an fsync, or a
// round trip to Redis that waits for its replicas) runs on `workers`, so the
// thread reading the tap (an I/O thread) never blocks on it: until it ends,
// Next answers DeadlineExceeded and NotifyWhenReady fires when it does.
// Without workers, or with their backlog full, it runs on the reading
// thread instead.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "gateway/gateway.h"
#include "session/session.h"
#include "util/status.h"
#include "util/work_queue.h"

namespace strata::server {

// The messages of every stored turn, in order.
util::StatusOr<std::vector<backend::ChatMessage>> StoredMessages(const session::Session& s);

// One message as the session store keeps it: a JSON object with "role" and
// "content", and "tool_calls", "tool_call_id", "name" and "is_error" where set.
std::string MessageJson(const backend::ChatMessage& m);
util::StatusOr<backend::ChatMessage> MessageFromJson(std::string_view json);

struct TurnPlan {
  std::vector<backend::ChatMessage> added;  // what this request adds (stored with the answer)
  std::vector<backend::ChatMessage> full;   // the whole conversation the model sees
};
util::StatusOr<TurnPlan> PlanTurn(const std::string& session_id,
                                  const std::vector<backend::ChatMessage>& stored,
                                  const std::vector<backend::ChatMessage>& request);

struct SessionTurn {
  std::string tenant{};
  std::string session_id{};
  std::string request_id{};                  // the turn's writer and op id
  uint64_t depends_on = 0;                   // the clock of the stored conversation it was built on
  std::optional<uint64_t> expected_turns{};  // If-Match
  std::vector<backend::ChatMessage> added{};
  // The conversation's token ids before this turn (session::
  // ConversationTokens): the turn stores only what its own tokens (the
  // local engine's prompt and answer) add past their common prefix.
  std::vector<int32_t> stored_tokens{};
};
std::unique_ptr<gateway::Generation> TapForSession(std::unique_ptr<gateway::Generation> gen,
                                                   session::SessionStore& store, SessionTurn turn,
                                                   util::WorkQueue* workers);

// A store error as the client sees it: a failed precondition or dependency
// is 409 kSessionConflict, a limit 400 kSessionLimit.
util::Status SessionError(const util::Status& st);

}  // namespace strata::server
