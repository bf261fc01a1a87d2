// tests/testing/tiny_model.h — small random-weight models built in memory.
#pragma once

#include <memory>
#include <string>

#include "model/synthetic.h"
#include "model/transformer.h"
#include "testing/mem_file_system.h"

namespace strata::testing {

// A model of `shape` and weight `type`, written to an in-memory file system and
// loaded from it. The file system is kept alive with the model.
struct TinyModel {
  std::unique_ptr<MemFileSystem> fs;
  std::unique_ptr<model::Model> model;
};

// A shape small enough for sanitizer runs: 2 layers, n_embd 64, 4 heads, 2 KV heads.
model::SyntheticShape TinyShape();

// TinyShape when its rows (n_embd 64, n_ff 128) are whole blocks of `type`;
// otherwise the smallest shape whose rows are whole blocks of 256 (the
// k-quants): 1 layer, n_embd 256, n_ff 512, 4 heads, 2 KV heads.
model::SyntheticShape TinyShapeFor(kernels::TensorType type);

// `pack`: which matrices the load packs (model::PackMode; auto follows the
// best kernel table, as serving does).
TinyModel MakeTinyModel(kernels::TensorType type = kernels::TensorType::kF32, uint64_t seed = 1,
                        model::SyntheticShape shape = TinyShape(),
                        model::PackMode pack = model::PackMode::kAuto);

}  // namespace strata::testing
