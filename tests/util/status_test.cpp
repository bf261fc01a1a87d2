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
