// Writes the GGUF seed corpus (tests/fuzz/corpus/gguf): small valid files that
// reach deep into the parser and the model loader. Run after a format change:
//   build/release/tests/make_gguf_seeds tests/fuzz/corpus/gguf
#include <cstdio>
#include <string>
#include <tuple>

#include "format/gguf_writer.h"
#include "model/synthetic.h"
#include "util/file_system.h"
#include "util/log.h"

using namespace strata;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_gguf_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  auto fs = util::NewPosixFileSystem();
  auto log = util::NewNullLogger();

  model::SyntheticShape shape;
  shape.n_embd = 32;
  shape.n_layers = 1;
  shape.n_heads = 2;
  shape.n_kv_heads = 1;
  shape.n_ff = 32;
  shape.n_ctx = 64;
  int failures = 0;
  for (auto [type, name] : {std::pair{kernels::TensorType::kQ4_0, "tiny_q4_0.gguf"},
                            std::pair{kernels::TensorType::kQ8_0, "tiny_q8_0.gguf"}}) {
    model::SyntheticOptions o;
    o.shape = shape;
    o.type = type;
    o.name = "seed";
    failures += !model::WriteSyntheticModel(*fs, dir + "/" + name, o, *log).ok();
  }

  // Sentence encoders: a bert (F32) and a nomic-bert (Q8_0) with the built-in WordPiece vocabulary.
  for (auto [arch, type, name] :
       {std::tuple{"bert", kernels::TensorType::kF32, "tiny_bert.gguf"},
        std::tuple{"nomic-bert", kernels::TensorType::kQ8_0, "tiny_nomic_bert.gguf"}}) {
    model::SyntheticOptions o;
    o.shape = shape;
    o.shape.architecture = arch;
    o.shape.n_kv_heads = shape.n_heads;
    o.shape.n_ctx = 16;
    o.type = type;
    o.name = "seed";
    failures += !model::WriteSyntheticModel(*fs, dir + "/" + name, o, *log).ok();
  }

  format::GgufWriter w(64);
  w.SetString("general.architecture", "llama");
  w.SetUint32("u32", 7);
  w.SetInt32("i32", -7);
  w.SetUint64("u64", 1ULL << 33);
  w.SetFloat32("f32", 1.5f);
  w.SetBool("b", true);
  w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "b", "ab"});
  w.SetFloat32Array("tokenizer.ggml.scores", {0, 0, 0, -1, -1, -0.5f});
  w.SetInt32Array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1});
  w.SetString("tokenizer.ggml.model", "llama");
  failures +=
      !w.AddTensor("t", {32, 2}, kernels::TensorType::kF16, [](int64_t r, std::span<float> out) {
          for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(r + i);
        }).ok();
  failures += !w.Write(*fs, dir + "/all_types.gguf").ok();
  std::printf("wrote seeds to %s (%d failures)\n", dir.c_str(), failures);
  return failures == 0 ? 0 : 1;
}
