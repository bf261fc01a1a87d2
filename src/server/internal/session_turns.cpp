#include "server/internal/session_turns.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "server/internal/wire.h"
#include "util/hash.h"

namespace strata::server {
namespace {

bool SameMessage(const backend::ChatMessage& a, const backend::ChatMessage& b) {
  if (a.role != b.role || a.content != b.content || a.tool_call_id != b.tool_call_id ||
      a.name != b.name || a.is_error != b.is_error || a.tool_calls.size() != b.tool_calls.size()) {
    return false;
  }
  for (size_t i = 0; i < a.tool_calls.size(); ++i) {
    const auto& x = a.tool_calls[i];
    const auto& y = b.tool_calls[i];
    if (x.id != y.id || x.name != y.name || x.arguments != y.arguments) return false;
  }
  return true;
}

util::Status Conflict(std::string message) {
  return util::AbortedError(std::move(message)).WithReason(util::ErrorReason::kSessionConflict);
}

// What a tap and its store job share: the job's answer, and whom to tell.
struct StoreState {
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;            // guarded by mu
  util::Status result;          // guarded by mu
  std::function<void()> ready;  // guarded by mu: a reader waiting for `done`
};

class SessionTap final : public gateway::Generation {
 public:
  SessionTap(std::unique_ptr<gateway::Generation> inner, session::SessionStore& store,
             SessionTurn turn, util::WorkQueue* workers)
      : inner_(std::move(inner)), store_(store), turn_(std::move(turn)), workers_(workers) {
    set_provenance(inner_->provenance());
  }

  util::StatusOr<gateway::Event> Next(std::chrono::steady_clock::time_point deadline) override {
    if (held_) return Release(deadline);
    auto e = inner_->Next(deadline);
    if (!e.ok() || e->index != 0 || stored_) return e;
    if (e->kind == gateway::Event::Kind::kDelta) {
      answer_.content += e->text;
      backend::AppendToolCallDeltas(answer_.tool_calls, e->tool_calls);
      return e;
    }
    stored_ = true;
    if (!e->status.ok() || e->finish == gateway::FinishReason::kCancelled) return e;
    // Choice 0's finish waits for its turn to be stored; the store (an
    // fsync, or a round trip to Redis and its replicas) runs on a worker,
    // never on the thread reading this generation.
    held_ = std::move(*e);
    StartStore();
    return Release(deadline);
  }
  void NotifyWhenReady(std::function<void()> ready) override {
    if (!held_) {
      inner_->NotifyWhenReady(std::move(ready));
      return;
    }
    {
      std::lock_guard lock(state_->mu);
      if (!state_->done) {
        state_->ready = std::move(ready);
        return;
      }
    }
    ready();
  }
  void Cancel() override { inner_->Cancel(); }
  int32_t prompt_tokens() const override { return inner_->prompt_tokens(); }
  int32_t n_choices() const override { return inner_->n_choices(); }
  gateway::CacheOutcome cache_outcome() const override { return inner_->cache_outcome(); }
  std::optional<double> cache_similarity() const override { return inner_->cache_similarity(); }
  bool defers_stream_head() const override { return inner_->defers_stream_head(); }

 private:
  // The held finish once its turn is stored (carrying the store's error, if
  // any); DeadlineExceeded while the store still runs.
  util::StatusOr<gateway::Event> Release(std::chrono::steady_clock::time_point deadline) {
    util::Status result;
    {
      std::unique_lock lock(state_->mu);
      if (!state_->done_cv.wait_until(lock, deadline, [&] { return state_->done; })) {
        return util::DeadlineExceededError("the session turn is still being stored");
      }
      result = state_->result;
    }
    gateway::Event e = std::move(*held_);
    held_.reset();
    if (!result.ok()) e.status = std::move(result);
    return e;
  }

  void StartStore() {
    session::AppendRequest r;
    r.tenant = turn_.tenant;
    r.session_id = turn_.session_id;
    r.depends_on = turn_.depends_on;
    r.expected_turns = turn_.expected_turns;
    r.writer = turn_.request_id;
    for (const backend::ChatMessage& m : turn_.added) r.messages.push_back(MessageJson(m));
    // A retried request (the same X-Request-ID, the same new messages)
    // stores its turn once; a client that reuses one request id for
    // different turns still has each stored.
    util::Hasher added;
    for (const std::string& m : r.messages) {
      added.Update(m);
      added.Update(std::string_view("\n", 1));
    }
    r.op_id = fmt::format("{}:{:016x}", turn_.request_id, added.Digest());
    answer_.role = "assistant";
    r.messages.push_back(MessageJson(answer_));
    // The local engine's tokens of the conversation through this answer
    // (its prompt as the engine saw it, then what it generated), stored as
    // what they add past the tokens stored before.
    const std::vector<gateway::Provenance>& from = provenance();
    if (from.size() == 1 && from[0].prepared != nullptr && !from[0].prepared->tokens.empty()) {
      std::vector<int32_t> full = from[0].prepared->tokens;
      full.insert(full.end(), held_->token_ids.begin(), held_->token_ids.end());
      const std::vector<int32_t>& before = turn_.stored_tokens;
      const size_t n = std::min(before.size(), full.size());
      size_t common = 0;
      while (common < n && before[common] == full[common]) ++common;
      r.tokens.assign(full.begin() + static_cast<std::ptrdiff_t>(common), full.end());
      r.tokens_from = common;
      if (r.tokens.empty()) {  // nothing new (it cannot be, but a turn keeps one token)
        r.tokens_from = full.size() - 1;
        r.tokens.push_back(full.back());
      }
    }
    // The job owns what it needs: the tap may be gone (the client left)
    // before it runs. The store outlives the server and its workers.
    auto job = [state = state_, store = &store_, r = std::move(r)] {
      auto stored = store->Append(r);
      std::function<void()> ready;
      {
        std::lock_guard lock(state->mu);
        state->done = true;
        state->result = stored.ok() ? util::OkStatus() : SessionError(stored.status());
        ready = std::move(state->ready);
      }
      state->done_cv.notify_all();
      if (ready) ready();
    };
    // No worker free to queue on (or none given): store here, rather than
    // answer before the turn is stored.
    if (workers_ == nullptr || !workers_->Submit(job)) job();
  }

  const std::unique_ptr<gateway::Generation> inner_;
  session::SessionStore& store_;
  const SessionTurn turn_;
  util::WorkQueue* const workers_;
  const std::shared_ptr<StoreState> state_ = std::make_shared<StoreState>();
  backend::ChatMessage answer_;
  bool stored_ = false;                 // choice 0 has finished (stored or not)
  std::optional<gateway::Event> held_;  // choice 0's finish, while its turn is stored
};

}  // namespace

std::string MessageJson(const backend::ChatMessage& m) {
  wire::Json j = {{"role", m.role}, {"content", m.content}};
  if (!m.tool_calls.empty()) {
    wire::Json calls = wire::Json::array();
    for (const auto& c : m.tool_calls) {
      calls.push_back({{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
    }
    j["tool_calls"] = std::move(calls);
  }
  if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
  if (!m.name.empty()) j["name"] = m.name;
  if (m.is_error) j["is_error"] = true;
  return wire::Dump(j);
}

util::StatusOr<backend::ChatMessage> MessageFromJson(std::string_view json) {
  const wire::Json j = wire::Json::parse(json, nullptr, /*allow_exceptions=*/false);
  const auto bad = [] {
    return util::DataLossError("session store: a stored message is not the JSON strata writes");
  };
  if (!j.is_object() || !j.contains("role") || !j["role"].is_string() || !j.contains("content") ||
      !j["content"].is_string()) {
    return bad();
  }
  backend::ChatMessage m;
  m.role = j["role"].get<std::string>();
  m.content = j["content"].get<std::string>();
  if (auto it = j.find("tool_calls"); it != j.end()) {
    if (!it->is_array()) return bad();
    for (const auto& c : *it) {
      if (!c.is_object() || !c.contains("id") || !c["id"].is_string() || !c.contains("name") ||
          !c["name"].is_string() || !c.contains("arguments") || !c["arguments"].is_string()) {
        return bad();
      }
      m.tool_calls.push_back({c["id"].get<std::string>(), c["name"].get<std::string>(),
                              c["arguments"].get<std::string>()});
    }
  }
  if (auto it = j.find("tool_call_id"); it != j.end()) {
    if (!it->is_string()) return bad();
    m.tool_call_id = it->get<std::string>();
  }
  if (auto it = j.find("name"); it != j.end()) {
    if (!it->is_string()) return bad();
    m.name = it->get<std::string>();
  }
  if (auto it = j.find("is_error"); it != j.end()) {
    if (!it->is_boolean()) return bad();
    m.is_error = it->get<bool>();
  }
  return m;
}

util::StatusOr<std::vector<backend::ChatMessage>> StoredMessages(const session::Session& s) {
  std::vector<backend::ChatMessage> out;
  for (const session::Turn& t : s.turns) {
    for (const std::string& m : t.messages) {
      STRATA_ASSIGN_OR_RETURN(backend::ChatMessage message, MessageFromJson(m));
      out.push_back(std::move(message));
    }
  }
  return out;
}

util::StatusOr<TurnPlan> PlanTurn(const std::string& session_id,
                                  const std::vector<backend::ChatMessage>& stored,
                                  const std::vector<backend::ChatMessage>& request) {
  TurnPlan plan;
  // The whole history, and what follows it.
  if (request.size() >= stored.size() &&
      std::equal(stored.begin(), stored.end(), request.begin(), SameMessage)) {
    if (request.size() == stored.size()) {
      return util::InvalidFieldError(
          "messages", fmt::format("the messages repeat session '{}' ({} messages) and add "
                                  "nothing to answer",
                                  session_id, stored.size()));
    }
    plan.full = request;
    plan.added.assign(request.begin() + static_cast<std::ptrdiff_t>(stored.size()), request.end());
    return plan;
  }
  // A new turn: system and user messages only.
  const bool new_turn = std::all_of(request.begin(), request.end(), [](const auto& m) {
    return m.role == "user" || m.role == "system";
  });
  if (!new_turn) {
    size_t i = 0;
    while (i < stored.size() && i < request.size() && SameMessage(stored[i], request[i])) ++i;
    return Conflict(fmt::format(
        "messages[{}] differs from session '{}', which holds {} messages: send the stored "
        "history unchanged and then the new messages, or only the new user message(s), or use "
        "a new session_id",
        i, session_id, stored.size()));
  }
  size_t first = 0;
  if (!request.empty() && request[0].role == "system") {
    if (stored.empty() || stored[0].role != "system" || !SameMessage(stored[0], request[0])) {
      return Conflict(fmt::format(
          "messages[0] is a system prompt that session '{}' does not start with: a session's "
          "system prompt is the one of its first turn",
          session_id));
    }
    first = 1;
  }
  for (size_t i = first; i < request.size(); ++i) {
    if (request[i].role == "system") {
      return Conflict(fmt::format(
          "messages[{}] is a system message after the start of session '{}'", i, session_id));
    }
  }
  plan.added.assign(request.begin() + static_cast<std::ptrdiff_t>(first), request.end());
  if (plan.added.empty()) {
    return util::InvalidFieldError("messages", "a new turn needs at least one user message");
  }
  plan.full = stored;
  plan.full.insert(plan.full.end(), plan.added.begin(), plan.added.end());
  return plan;
}

std::unique_ptr<gateway::Generation> TapForSession(std::unique_ptr<gateway::Generation> gen,
                                                   session::SessionStore& store, SessionTurn turn,
                                                   util::WorkQueue* workers) {
  return std::make_unique<SessionTap>(std::move(gen), store, std::move(turn), workers);
}

util::Status SessionError(const util::Status& st) {
  switch (st.code()) {
    case util::StatusCode::kAborted:
    case util::StatusCode::kFailedPrecondition:
      return util::Status(util::StatusCode::kAborted, st.message())
          .WithReason(util::ErrorReason::kSessionConflict);
    case util::StatusCode::kResourceExhausted:
      return util::Status(util::StatusCode::kInvalidArgument, st.message())
          .WithReason(util::ErrorReason::kSessionLimit);
    default:
      return st;
  }
}

}  // namespace strata::server
