// Cache snapshots (gateway/cache_snapshot.h): what one instance exports,
// another decodes to the same records; damaged bytes are DataLoss.
#include "gateway/cache_snapshot.h"

#include <gtest/gtest.h>

namespace strata::gateway {
namespace {

TEST(CacheSnapshot, RoundTripsEveryKindOfRecord) {
  std::vector<CacheSnapshotRecord> in(4);
  in[0].kind = CacheSnapshotRecord::Kind::kL1;
  in[0].key = std::string("tenant\0key", 10);
  in[0].hash = 7;
  in[0].ttl_ms = 1234;
  in[0].value = "answer";
  in[1].kind = CacheSnapshotRecord::Kind::kL3;
  in[1].key = "namespace";
  in[1].hash = 9;
  in[1].text = "prepared";
  in[1].value = "answer two";  // no TTL
  in[2].kind = CacheSnapshotRecord::Kind::kSemantic;
  in[2].value = "the semantic tier's own bytes";
  in[3].kind = CacheSnapshotRecord::Kind::kL2;
  in[3].model = "tiny";
  in[3].fingerprint = 0xabcdef;
  in[3].cache_namespace = 42;
  in[3].tokens = {1, 2, 3, -1, 65535};
  auto out = DecodeCacheSnapshot(EncodeCacheSnapshot(in));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 4u);
  EXPECT_EQ((*out)[0].key, in[0].key);
  EXPECT_EQ((*out)[0].hash, 7u);
  EXPECT_EQ((*out)[0].ttl_ms, 1234);
  EXPECT_EQ((*out)[0].value, "answer");
  EXPECT_EQ((*out)[1].text, "prepared");
  EXPECT_FALSE((*out)[1].ttl_ms.has_value());
  EXPECT_EQ((*out)[2].value, in[2].value);
  EXPECT_EQ((*out)[3].model, "tiny");
  EXPECT_EQ((*out)[3].fingerprint, 0xabcdefu);
  EXPECT_EQ((*out)[3].cache_namespace, 42u);
  EXPECT_EQ((*out)[3].tokens, in[3].tokens);
  EXPECT_TRUE(DecodeCacheSnapshot(EncodeCacheSnapshot({}))->empty());
}

TEST(CacheSnapshot, EveryTruncationIsDataLossAndUnknownKindsAreSkipped) {
  CacheSnapshotRecord r;
  r.kind = CacheSnapshotRecord::Kind::kL2;
  r.model = "tiny";
  r.tokens = {1, 2, 3};
  const std::string good = EncodeCacheSnapshot({r, r});
  for (size_t n = 0; n < good.size(); ++n) {
    if (n == 8) continue;  // just the header: a valid, empty snapshot
    auto cut = DecodeCacheSnapshot(std::string_view(good).substr(0, n));
    if (n > 8 && n == good.size() / 2 + 4) continue;  // exactly one whole record
    EXPECT_EQ(cut.status().code(), util::StatusCode::kDataLoss) << n;
  }
  std::string later = good;
  later += std::string("\x09\x02\x00\x00\x00xy", 7);  // kind 9, 2 bytes
  auto skipped = DecodeCacheSnapshot(later);
  ASSERT_TRUE(skipped.ok()) << skipped.status().ToString();
  EXPECT_EQ(skipped->size(), 2u);
  EXPECT_EQ(DecodeCacheSnapshot("SCS1\x02\x00\x00\x00").status().code(),
            util::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeCacheSnapshot("not a snapshot").status().code(), util::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace strata::gateway
