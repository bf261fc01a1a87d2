// The invalidation message instances exchange through Redis: what one
// encodes, another decodes to the same selection; damaged input is DataLoss.
#include "gateway/invalidation_message.h"

#include <gtest/gtest.h>

namespace strata::gateway {
namespace {

TEST(InvalidationMessage, RoundTripsEveryField) {
  InvalidationMessage m;
  m.tenant = std::string("a\nb=c\0d", 7);  // any bytes
  m.model = "tiny";
  m.fingerprint = 0xfedcba9876543210ULL;
  m.prefix = "the refund policy";
  m.key = cache::CacheKey{std::string("\0\1key", 5), 42};
  m.prompt_tokens = std::vector<int32_t>{1, -2, 300000};
  m.reason = "policy changed";
  auto d = DecodeInvalidationMessage(EncodeInvalidationMessage(m));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->tenant, m.tenant);
  EXPECT_EQ(d->model, m.model);
  EXPECT_EQ(d->fingerprint, m.fingerprint);
  EXPECT_EQ(d->prefix, m.prefix);
  ASSERT_TRUE(d->key.has_value());
  EXPECT_EQ(*d->key, *m.key);
  EXPECT_EQ(d->prompt_tokens, m.prompt_tokens);
  EXPECT_EQ(d->reason, m.reason);
  // A field a later release adds is skipped.
  auto later = DecodeInvalidationMessage(EncodeInvalidationMessage(m) + "colour=00\n");
  EXPECT_TRUE(later.ok());
}

TEST(InvalidationMessage, DamagedMessagesAreDataLoss) {
  for (const char* bad : {"", "tenant=61\n", "v=02\ntenant=61\n", "v=01\ntenant=6\n",
                          "v=01\ntenant=zz\n", "v=01\nkey=61\n", "v=01\nreason=61\n",
                          "v=01\nno equals sign\n", "v=01\ntenant=61\ntokens=2c\n"}) {
    auto d = DecodeInvalidationMessage(bad);
    EXPECT_EQ(d.status().code(), util::StatusCode::kDataLoss) << bad;
  }
}

}  // namespace
}  // namespace strata::gateway
