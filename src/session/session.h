// session/session.h — durable conversations (L6): the turns of each
// session, per tenant, in one causal order.
//
// Promise: a turn that Append acknowledges is durable (the embedded store has
// synced its write-ahead log before Append returns) and every later Read
// returns it exactly once, whole, in the same place. A session belongs to
// the tenant that wrote its first turn: no call naming another tenant reads,
// lists, changes or deletes it (to that tenant it does not exist).
//
// Causal order. Every turn carries a Lamport clock and the clock of the turn
// it answers (`depends_on`, 0 for none): a turn is stored with clock
// max(depends_on, the session's highest clock) + 1, and a session's turns
// read in clock order, ties broken by the writer's id. So two writers that
// answered the same turn concurrently are both kept, in one order every
// reader sees. A turn whose dependency the store has not applied yet waits
// for it (up to Limits::dependency_wait) and is then refused with
// kFailedPrecondition naming the missing clock; `expected_turns` is an
// optimistic precondition on the session's length (kAborted when it moved).
// An append repeated with the same `op_id` returns the first answer and
// stores nothing twice.
//
// Threading: SessionStore implementations are thread-safe.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto store, session::OpenRocksStore({.dir = "/var/lib/strata"}));
//   STRATA_ASSIGN_OR_RETURN(auto turn, store->Append({.tenant = "acme", .session_id = "s1",
//       .depends_on = 0, .writer = request_id, .messages = {user_json, answer_json}}));
//   STRATA_ASSIGN_OR_RETURN(auto s, store->Read("acme", "s1"));  // s.turns[0] is `turn`
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace strata::session {

// One stored turn: the messages a request added to the conversation (its new
// input messages, then the answer), each one JSON object as the client's API
// wrote it, stored verbatim.
struct Turn {
  uint64_t clock = 0;       // the turn's Lamport clock, >= 1
  uint64_t depends_on = 0;  // the clock of the turn it answers; 0: none
  std::string writer{};     // who wrote it (a request id): the tie-break of equal clocks
  std::vector<std::string> messages{};
  // The local engine's token ids of the conversation through this turn
  // (prompt and answer), so its KV prefix blocks are found again, stored as
  // what this turn adds: they replace the conversation's tokens from index
  // `tokens_from` on (0: they are the whole sequence). ConversationTokens
  // puts them together. Empty for remote backends.
  std::vector<int32_t> tokens{};
  uint64_t tokens_from = 0;
  int64_t created_ms = 0;  // wall clock, ms since the Unix epoch
};

struct Session {
  std::string id{};
  std::vector<Turn> turns{};  // in causal order
  uint64_t clock = 0;         // the highest clock of its turns
  uint64_t bytes = 0;         // the stored size of its turns' messages and tokens
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
};

struct SessionSummary {
  std::string id{};
  uint64_t turns = 0;
  uint64_t clock = 0;
  uint64_t bytes = 0;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
};

struct SessionPage {
  std::vector<SessionSummary> sessions{};  // ordered by id
  std::string next_cursor{};               // empty on the last page
};

struct AppendRequest {
  std::string tenant{};      // non-empty; "" is refused (use the server's anonymous tenant name)
  std::string session_id{};  // 1-128 characters of [A-Za-z0-9._:@-]
  uint64_t depends_on = 0;
  // When set: the session must have exactly this many turns, or kAborted.
  std::optional<uint64_t> expected_turns{};
  std::string writer{};  // non-empty, at most 128 bytes
  // Idempotency key; empty: none. The same key in the same session returns
  // the turn stored the first time.
  std::string op_id{};
  std::vector<std::string> messages{};  // at least one
  std::vector<int32_t> tokens{};        // as Turn::tokens
  uint64_t tokens_from = 0;
};

// Per-session and per-tenant bounds; every field has a default, 0 = no bound
// where stated.
struct Limits {
  uint64_t max_turns = 1000;                       // per session; 1..1e6
  uint64_t max_bytes = 8ull << 20;                 // per session (messages + 4 per token)
  uint64_t max_sessions_per_tenant = 100000;       // 1..1e9
  std::chrono::seconds ttl{7 * 24 * 3600};         // since the last turn; 0 = never expire
  std::chrono::milliseconds dependency_wait{200};  // how long a turn waits for its dependency
};

class SessionStore {
 public:
  virtual ~SessionStore() = default;

  // Stores one turn (see the causal rules above) and returns it as stored.
  // kInvalidArgument for a malformed request, kResourceExhausted when a
  // limit would be exceeded (the message names it), kFailedPrecondition for
  // a dependency not applied in time, kAborted for a failed expected_turns,
  // kUnavailable when the store cannot write.
  virtual util::StatusOr<Turn> Append(const AppendRequest& request) = 0;
  // kNotFound for a session this tenant does not have (or that expired).
  virtual util::StatusOr<Session> Read(const std::string& tenant, const std::string& id) = 0;
  // Up to `limit` (1..1000) of the tenant's sessions after `cursor`.
  virtual util::StatusOr<SessionPage> List(const std::string& tenant, const std::string& cursor,
                                           size_t limit) = 0;
  // Removes the session and every turn; kNotFound when there is none.
  virtual util::Status Delete(const std::string& tenant, const std::string& id) = 0;
};

// Whether `id` is a valid session id (1-128 characters of [A-Za-z0-9._:@-]).
bool ValidSessionId(std::string_view id);

// The token ids of the whole conversation through its last turn: each
// turn's tokens put in place at its tokens_from. Empty when a turn has none
// (a remote backend answered it) or does not continue the sequence before
// it (tokens_from beyond its end). A hint only: the tokens of two turns
// written concurrently may not match the messages (the local engine checks
// their text against the rendered conversation before it uses them).
std::vector<int32_t> ConversationTokens(const Session& s);

}  // namespace strata::session
