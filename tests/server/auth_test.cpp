// What an Authorization header presents: a Bearer token, or the password of
// HTTP Basic credentials (a browser's login to the dashboard).
#include "server/auth.h"

#include <gtest/gtest.h>

namespace strata::server {
namespace {

TEST(PresentedSecret, ABearerTokenIsTheSecret) {
  EXPECT_EQ(PresentedSecret("Bearer abc.def-123"), "abc.def-123");
  EXPECT_EQ(PresentedSecret("bearer abc"), "abc");
  EXPECT_EQ(PresentedSecret("Bearer abc  "), "abc");
}

TEST(PresentedSecret, BasicCredentialsPresentTheirPassword) {
  // "admin:s3cret:with:colons"
  EXPECT_EQ(PresentedSecret("Basic YWRtaW46czNjcmV0OndpdGg6Y29sb25z"), "s3cret:with:colons");
  // ":pw" (no user name), unpadded
  EXPECT_EQ(PresentedSecret("basic OnB3"), "pw");
}

TEST(PresentedSecret, AnythingElsePresentsNothing) {
  EXPECT_EQ(PresentedSecret(""), "");
  EXPECT_EQ(PresentedSecret("Token abc"), "");
  EXPECT_EQ(PresentedSecret("Basic !!!!"), "");      // not base64
  EXPECT_EQ(PresentedSecret("Basic dXNlcg=="), "");  // "user": no colon
  EXPECT_EQ(PresentedSecret("Basic QQ"), "");        // one byte, no colon
  EXPECT_EQ(PresentedSecret("Basic Q"), "");         // a length base64 cannot have
  EXPECT_EQ(PresentedSecret("Bearer"), "");
}

}  // namespace
}  // namespace strata::server
