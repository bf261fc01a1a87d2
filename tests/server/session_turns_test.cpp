// What a chat request with a session_id adds to the stored conversation,
// and the stored form of a message.
#include "server/internal/session_turns.h"

#include <gtest/gtest.h>

namespace strata::server {
namespace {

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

}  // namespace
}  // namespace strata::server
