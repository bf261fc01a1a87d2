// What a chat request with a session_id adds to the stored conversation,
// and the stored form of a message.
#include "server/internal/session_turns.h"

#include <gtest/gtest.h>

#include <unistd.h>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <mutex>

#include "session/rocks_store.h"

namespace strata::server {
namespace {

using std::chrono::steady_clock;

backend::ChatMessage TurnMsg(std::string role, std::string content) {
  backend::ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

TEST(SessionMessages, RoundTripEveryField) {
  backend::ChatMessage m = TurnMsg("assistant", "calling \"x\" \xc3\xa9");
  m.tool_calls = {{"call_1", "lookup", R"({"q":1})"}, {"call_2", "other", "{}"}};
  backend::ChatMessage tool = TurnMsg("tool", "42");
  tool.tool_call_id = "call_1";
  tool.name = "lookup";
  tool.is_error = true;
  for (const backend::ChatMessage& original : {m, tool, TurnMsg("user", "")}) {
    auto back = MessageFromJson(MessageJson(original));
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->role, original.role);
    EXPECT_EQ(back->content, original.content);
    EXPECT_EQ(back->tool_call_id, original.tool_call_id);
    EXPECT_EQ(back->name, original.name);
    EXPECT_EQ(back->is_error, original.is_error);
    ASSERT_EQ(back->tool_calls.size(), original.tool_calls.size());
    for (size_t i = 0; i < original.tool_calls.size(); ++i) {
      EXPECT_EQ(back->tool_calls[i].arguments, original.tool_calls[i].arguments);
    }
  }
  for (const char* bad : {"", "[]", R"({"role":"user"})", R"({"role":1,"content":""})",
                          R"({"role":"user","content":"x","tool_calls":{}})",
                          R"({"role":"user","content":"x","is_error":"yes"})"}) {
    EXPECT_EQ(MessageFromJson(bad).status().code(), util::StatusCode::kDataLoss) << bad;
  }
}

TEST(PlanTurn, AFirstTurnIsTakenWhole) {
  auto plan = PlanTurn("s", {}, {TurnMsg("system", "be brief"), TurnMsg("user", "hi")});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->added.size(), 2u);
  EXPECT_EQ(plan->full.size(), 2u);
}

TEST(PlanTurn, ANewTurnGoesAfterTheStoredOnes) {
  const std::vector<backend::ChatMessage> stored = {TurnMsg("system", "sys"), TurnMsg("user", "a"),
                                                    TurnMsg("assistant", "b")};
  auto plan = PlanTurn("s", stored, {TurnMsg("system", "sys"), TurnMsg("user", "c")});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->added.size(), 1u);
  EXPECT_EQ(plan->added[0].content, "c");
  ASSERT_EQ(plan->full.size(), 4u);
  EXPECT_EQ(plan->full[3].content, "c");
  // Without the system message too.
  EXPECT_EQ(PlanTurn("s", stored, {TurnMsg("user", "c"), TurnMsg("user", "d")})->full.size(), 5u);
}

TEST(PlanTurn, TheWholeHistoryIsCheckedAndNotDoubled) {
  const std::vector<backend::ChatMessage> stored = {TurnMsg("user", "a"),
                                                    TurnMsg("assistant", "b")};
  auto plan = PlanTurn("s", stored,
                       {TurnMsg("user", "a"), TurnMsg("assistant", "b"), TurnMsg("user", "c")});
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->full.size(), 3u);
  ASSERT_EQ(plan->added.size(), 1u);
  // Repeating it with nothing new is a 400.
  EXPECT_EQ(PlanTurn("s", stored, stored).status().code(), util::StatusCode::kInvalidArgument);
}

TEST(PlanTurn, ADifferentHistoryIsAConflictNamingTheMessage) {
  const std::vector<backend::ChatMessage> stored = {TurnMsg("user", "a"),
                                                    TurnMsg("assistant", "b")};
  auto edited = PlanTurn("s", stored,
                         {TurnMsg("user", "a"), TurnMsg("assistant", "B"), TurnMsg("user", "c")});
  ASSERT_EQ(edited.status().reason(), util::ErrorReason::kSessionConflict);
  EXPECT_NE(edited.status().message().find("messages[1]"), std::string::npos);
  // A system prompt the session did not start with.
  EXPECT_EQ(
      PlanTurn("s", stored, {TurnMsg("system", "new"), TurnMsg("user", "c")}).status().reason(),
      util::ErrorReason::kSessionConflict);
  // A system message after the start.
  EXPECT_EQ(PlanTurn("s", stored, {TurnMsg("user", "c"), TurnMsg("system", "x")}).status().reason(),
            util::ErrorReason::kSessionConflict);
  // A tool result needs the history it answers.
  EXPECT_EQ(PlanTurn("s", stored, {TurnMsg("tool", "42")}).status().reason(),
            util::ErrorReason::kSessionConflict);
}

TEST(SessionError, StoreErrorsMapToTheClientsReasons) {
  EXPECT_EQ(SessionError(util::AbortedError("x")).reason(), util::ErrorReason::kSessionConflict);
  EXPECT_EQ(SessionError(util::FailedPreconditionError("x")).reason(),
            util::ErrorReason::kSessionConflict);
  EXPECT_EQ(SessionError(util::ResourceExhaustedError("x")).reason(),
            util::ErrorReason::kSessionLimit);
  EXPECT_EQ(SessionError(util::UnavailableError("x")).code(), util::StatusCode::kUnavailable);
}

// A generation that has already produced its events (choice 0's text, then
// its finish) and counts how its readers are told of them.
class Scripted final : public gateway::Generation {
 public:
  explicit Scripted(std::deque<gateway::Event> events) : events_(std::move(events)) {}
  util::StatusOr<gateway::Event> Next(steady_clock::time_point) override {
    if (events_.empty()) return util::OutOfRangeError("done");
    gateway::Event e = std::move(events_.front());
    events_.pop_front();
    return e;
  }
  void NotifyWhenReady(std::function<void()> ready) override { ready(); }
  void Cancel() override {}
  int32_t prompt_tokens() const override { return 3; }
  int32_t n_choices() const override { return 1; }

 private:
  std::deque<gateway::Event> events_;
};

// The embedded store, with appends held at a gate until the test opens it:
// what a slow disk or a Redis waiting for its replicas looks like.
class GatedStore final : public session::SessionStore {
 public:
  explicit GatedStore(std::unique_ptr<session::SessionStore> inner) : inner_(std::move(inner)) {}
  util::StatusOr<session::Turn> Append(const session::AppendRequest& r) override {
    std::unique_lock lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
    return inner_->Append(r);
  }
  util::StatusOr<session::Session> Read(const std::string& t, const std::string& id) override {
    return inner_->Read(t, id);
  }
  util::StatusOr<session::SessionPage> List(const std::string& t, const std::string& c,
                                            size_t n) override {
    return inner_->List(t, c, n);
  }
  util::Status Delete(const std::string& t, const std::string& id) override {
    return inner_->Delete(t, id);
  }
  void WaitEntered() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return entered_; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::unique_ptr<session::SessionStore> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false;  // guarded by mu_
  bool open_ = false;     // guarded by mu_
};

// The embedded store in a scratch directory of its own, removed with it.
struct ScratchStore {
  explicit ScratchStore(const std::string& name)
      : dir(std::filesystem::temp_directory_path() / (name + std::to_string(::getpid()))) {
    std::filesystem::remove_all(dir);
    auto s = session::OpenRocksStore({.dir = dir.string()});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (s.ok()) store = std::move(*s);
  }
  ~ScratchStore() {
    store.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  const std::filesystem::path dir;
  std::unique_ptr<session::SessionStore> store;
};

TEST(TapForSession, TheFinishWaitsForItsTurnStoredOnAWorkerNotOnTheReader) {
  ScratchStore scratch("strata_tap_");
  ASSERT_NE(scratch.store, nullptr);
  GatedStore store(std::move(scratch.store));
  util::WorkQueue workers(1, 8);

  std::deque<gateway::Event> events(2);
  events[0].text = "Hello";
  events[1].kind = gateway::Event::Kind::kFinish;
  events[1].finish = gateway::FinishReason::kEndOfTurn;
  SessionTurn turn{.tenant = "acme",
                   .session_id = "s1",
                   .request_id = "r1",
                   .depends_on = 0,
                   .expected_turns = std::nullopt,
                   .added = {TurnMsg("user", "Hi")}};
  auto tap = TapForSession(std::make_unique<Scripted>(std::move(events)), store, turn, &workers);

  auto delta = tap->Next(steady_clock::now());
  ASSERT_TRUE(delta.ok());
  EXPECT_EQ(delta->text, "Hello");
  // The finish is held while the worker stores the turn: a poll says not
  // yet, and returns at once (the reader is never the one that waits).
  auto early = tap->Next(steady_clock::now());
  EXPECT_EQ(early.status().code(), util::StatusCode::kDeadlineExceeded);
  store.WaitEntered();
  std::mutex mu;
  std::condition_variable cv;
  bool told = false;
  tap->NotifyWhenReady([&] {
    std::lock_guard lock(mu);
    told = true;
    cv.notify_all();
  });
  EXPECT_EQ(tap->Next(steady_clock::now()).status().code(), util::StatusCode::kDeadlineExceeded);
  store.Open();
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return told; });
  }
  auto finish = tap->Next(steady_clock::now());
  ASSERT_TRUE(finish.ok()) << finish.status().ToString();
  EXPECT_EQ(finish->kind, gateway::Event::Kind::kFinish);
  EXPECT_TRUE(finish->status.ok()) << finish->status.ToString();
  EXPECT_EQ(tap->Next(steady_clock::now()).status().code(), util::StatusCode::kOutOfRange);

  // By the time the client sees the finish, the turn is stored.
  auto stored = store.Read("acme", "s1");
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  ASSERT_EQ(stored->turns.size(), 1u);
  ASSERT_EQ(stored->turns[0].messages.size(), 2u);
  EXPECT_NE(stored->turns[0].messages[1].find("Hello"), std::string::npos);
}

TEST(TapForSession, AStoreErrorReachesTheClientOnTheFinish) {
  ScratchStore scratch("strata_tap_err_");
  ASSERT_NE(scratch.store, nullptr);
  session::SessionStore& store = *scratch.store;
  std::deque<gateway::Event> events(1);
  events[0].kind = gateway::Event::Kind::kFinish;
  events[0].finish = gateway::FinishReason::kEndOfTurn;
  // If-Match 5 on a session with no turns: the store refuses, and the
  // client reads that as a conflict on the finish (here without workers:
  // the store runs on the reader).
  SessionTurn turn{.tenant = "acme",
                   .session_id = "s2",
                   .request_id = "r2",
                   .depends_on = 0,
                   .expected_turns = 5,
                   .added = {TurnMsg("user", "Hi")}};
  auto tap = TapForSession(std::make_unique<Scripted>(std::move(events)), store, turn, nullptr);
  auto finish = tap->Next(steady_clock::now());
  ASSERT_TRUE(finish.ok());
  EXPECT_EQ(finish->status.reason(), util::ErrorReason::kSessionConflict);
  EXPECT_EQ(store.Read("acme", "s2").status().code(), util::StatusCode::kNotFound);
}

}  // namespace
}  // namespace strata::server
