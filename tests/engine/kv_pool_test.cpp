#include "engine/kv_pool.h"

#include <gtest/gtest.h>

#include "testing/tiny_model.h"

namespace strata::engine {
namespace {

model::ModelConfig Config() {
  model::ModelConfig c;
  c.n_layers = 2;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  return c;
}

TEST(KvBlockPool, AllocatesEveryBlockOnceThenReportsExhaustion) {
  KvBlockPool pool(Config(), 4, 16);
  EXPECT_EQ(pool.bytes(), 4u * 2 * 2 * 16 * 16 * sizeof(float));
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(*pool.Allocate());
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_FALSE(pool.Allocate().has_value());
  EXPECT_EQ(pool.n_free(), 0);
}

TEST(KvBlockPool, SharedBlocksAreFreedByTheirLastReference) {
  KvBlockPool pool(Config(), 2, 16);
  const int32_t b = *pool.Allocate();
  pool.Ref(b);
  EXPECT_EQ(pool.ref_count(b), 2);
  pool.Unref(b);
  EXPECT_EQ(pool.n_free(), 1);
  pool.Unref(b);
  EXPECT_EQ(pool.n_free(), 2);
}

TEST(BlockTable, ReserveIsAllOrNothing) {
  KvBlockPool pool(Config(), 3, 16);
  BlockTable a, b;
  ASSERT_TRUE(a.Reserve(pool, 17).ok());  // 2 blocks
  EXPECT_EQ(a.blocks().size(), 2u);
  util::Status st = b.Reserve(pool, 33);  // needs 3, 1 free
  EXPECT_EQ(st.code(), util::StatusCode::kResourceExhausted);
  EXPECT_TRUE(b.blocks().empty());
  EXPECT_EQ(pool.n_free(), 1);
  a.Truncate(pool, 16);
  EXPECT_EQ(a.blocks().size(), 1u);
  a.Release(pool);
  EXPECT_EQ(pool.n_free(), 3);
}

TEST(KvBlockPoolDeathTest, UnrefOfAFreeBlockIsAnInvariantViolation) {
  KvBlockPool pool(Config(), 1, 16);
  EXPECT_DEATH(pool.Unref(0), "CHECK failed");
}

}  // namespace
}  // namespace strata::engine
