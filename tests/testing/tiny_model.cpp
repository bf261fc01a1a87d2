#include "testing/tiny_model.h"

#include <gtest/gtest.h>

#include "util/log.h"

namespace strata::testing {

model::SyntheticShape TinyShape() {
  model::SyntheticShape s;
  s.n_embd = 64;
  s.n_layers = 2;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  s.n_ff = 128;
  s.n_ctx = 256;
  return s;
}

model::SyntheticShape TinyShapeFor(kernels::TensorType type) {
  model::SyntheticShape s = TinyShape();
  const int32_t block = kernels::GetTypeInfo(type).block_size;
  if (s.n_embd % block == 0 && s.n_ff % block == 0) return s;
  s.n_embd = 256;
  s.n_ff = 512;
  s.n_layers = 1;
  s.n_heads = 4;
  s.n_kv_heads = 2;
  return s;
}

TinyModel MakeTinyModel(kernels::TensorType type, uint64_t seed, model::SyntheticShape shape,
                        model::PackMode pack) {
  TinyModel t;
  t.fs = std::make_unique<MemFileSystem>();
  auto log = util::NewNullLogger();
  model::SyntheticOptions o;
  o.shape = shape;
  o.type = type;
  o.seed = seed;
  util::Status st = model::WriteSyntheticModel(*t.fs, "tiny.gguf", o, *log);
  EXPECT_TRUE(st.ok()) << st.ToString();
  auto m = model::Model::Load(*t.fs, "tiny.gguf", {.prefetch = true, .pack = {.mode = pack}}, *log);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  if (m.ok()) t.model = std::move(m).value();
  return t;
}

}  // namespace strata::testing
