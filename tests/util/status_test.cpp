#include "util/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace strata::util {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2 != 0) return InvalidArgumentError("odd: " + std::to_string(x));
  return x / 2;
}

StatusOr<int> Quarter(int x) {
  STRATA_ASSIGN_OR_RETURN(int h, Half(x));
  STRATA_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

Status CheckEven(int x) {
  STRATA_RETURN_IF_ERROR(Half(x));
  return OkStatus();
}

TEST(Status, OkStatusHasNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
  EXPECT_EQ(Status(StatusCode::kOk, "ignored").message(), "");
}

TEST(Status, ErrorCarriesCodeAndMessage) {
  Status s = NotFoundError("no such model 'x'");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: no such model 'x'");
  EXPECT_EQ(s.WithContext("loading").message(), "loading: no such model 'x'");
}

TEST(Status, ReasonAndFieldAreCarriedAndShown) {
  Status s = OutOfRangeError("context length exceeded: 900 tokens")
                 .WithReason(ErrorReason::kContextLengthExceeded);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(s.reason(), ErrorReason::kContextLengthExceeded);
  EXPECT_EQ(s.field(), "");
  EXPECT_EQ(s.message(), "context length exceeded: 900 tokens");
  EXPECT_EQ(s.ToString(),
            "OUT_OF_RANGE (context_length_exceeded): context length exceeded: 900 tokens");

  Status f = InvalidFieldError("top_p", "'top_p' must be a number in (0, 1]");
  EXPECT_EQ(f.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.reason(), ErrorReason::kInvalidField);
  EXPECT_EQ(f.field(), "top_p");
  EXPECT_EQ(f.ToString(),
            "INVALID_ARGUMENT (invalid_field, field 'top_p'): 'top_p' must be a number in (0, 1]");
  // A field without a reason is shown too.
  EXPECT_EQ(InvalidArgumentError("bad").WithField("n").ToString(),
            "INVALID_ARGUMENT (field 'n'): bad");
  // Without detail the old form stays.
  EXPECT_EQ(InternalError("x").reason(), ErrorReason::kNone);
  EXPECT_EQ(InternalError("x").ToString(), "INTERNAL: x");
}

TEST(Status, WithContextKeepsCodeReasonAndField) {
  const Status s =
      ResourceExhaustedError("the request queue is full").WithReason(ErrorReason::kQueueFull);
  const Status c = s.WithContext("choice 1");
  EXPECT_EQ(c.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(c.reason(), ErrorReason::kQueueFull);
  EXPECT_EQ(c.message(), "choice 1: the request queue is full");
  const Status f = InvalidFieldError("messages[0].role", "'messages[0].role' must be a string")
                       .WithContext("chat");
  EXPECT_EQ(f.reason(), ErrorReason::kInvalidField);
  EXPECT_EQ(f.field(), "messages[0].role");
  // The original is unchanged.
  EXPECT_EQ(s.message(), "the request queue is full");
}

TEST(Status, OkHasNoDetailWhateverIsAsked) {
  const Status ok = OkStatus().WithReason(ErrorReason::kTimeout).WithField("x");
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.reason(), ErrorReason::kNone);
  EXPECT_EQ(ok.field(), "");
  EXPECT_EQ(ok.ToString(), "OK");
  EXPECT_TRUE(ok.WithContext("ctx").ok());
  EXPECT_EQ(ok, OkStatus());
  // An OK Status is a single pointer: cheap to return and copy.
  EXPECT_EQ(sizeof(Status), sizeof(void*));
}

TEST(Status, CopiesAreIndependentAndEqualityCoversTheDetail) {
  Status a = UnavailableError("the model is loading").WithReason(ErrorReason::kModelLoading);
  Status b = a;
  EXPECT_EQ(a, b);
  b = std::move(b).WithReason(ErrorReason::kShuttingDown);
  EXPECT_EQ(a.reason(), ErrorReason::kModelLoading);
  EXPECT_FALSE(a == b);
  EXPECT_FALSE(InvalidArgumentError("m") == InvalidFieldError("f", "m"));
  EXPECT_FALSE(InvalidFieldError("f", "m") == InvalidFieldError("g", "m"));
  a = OkStatus();
  EXPECT_TRUE(a.ok());
  a = b;
  EXPECT_EQ(a.reason(), ErrorReason::kShuttingDown);
}

TEST(Status, ReasonNamesAreStable) {
  EXPECT_EQ(ErrorReasonName(ErrorReason::kNone), "none");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kMalformedJson), "malformed_json");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kInvalidField), "invalid_field");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kContextLengthExceeded), "context_length_exceeded");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kBodyTooLarge), "body_too_large");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kNoRoute), "no_route");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kModelNotFound), "model_not_found");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kMissingApiKey), "missing_api_key");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kInvalidApiKey), "invalid_api_key");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kQueueFull), "queue_full");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kLoadShed), "overloaded");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kModelLoading), "model_loading");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kShuttingDown), "shutting_down");
  EXPECT_EQ(ErrorReasonName(ErrorReason::kTimeout), "timeout");
}

TEST(StatusOr, CarriesTheDetailThroughTheMacros) {
  auto inner = []() -> StatusOr<int> {
    return InvalidFieldError("seed", "'seed' must be an integer");
  };
  auto outer = [&]() -> Status {
    STRATA_ASSIGN_OR_RETURN(int v, inner());
    (void)v;
    return OkStatus();
  };
  const Status s = outer();
  EXPECT_EQ(s.reason(), ErrorReason::kInvalidField);
  EXPECT_EQ(s.field(), "seed");
}

TEST(StatusOr, MacrosPropagateTheFirstError) {
  EXPECT_EQ(*Quarter(12), 3);
  StatusOr<int> r = Quarter(6);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "odd: 3");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(5).code(), StatusCode::kInvalidArgument);
}

TEST(StatusOr, HoldsMoveOnlyValues) {
  StatusOr<std::unique_ptr<int>> p = std::make_unique<int>(7);
  ASSERT_TRUE(p.ok());
  std::unique_ptr<int> v = std::move(p).value();
  EXPECT_EQ(*v, 7);
}

TEST(StatusOrDeathTest, ValueOfAnErrorAborts) {
  StatusOr<int> r = InternalError("boom");
  EXPECT_DEATH((void)r.value(), "boom");
}

}  // namespace
}  // namespace strata::util
