// The cost of JSON-constrained decoding per token: building a vocabulary's
// trie (once per model) and computing the allowed tokens from a state (once
// per generated token), on real vocabularies of 32k (llama SPM) and 152k
// (qwen2 BPE) tokens from ../shared/models/vocab (skipped without them).
//
//   build/release/bench/mask_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "format/gguf.h"
#include "grammar/json_machine.h"
#include "grammar/token_mask.h"
#include "text/tokenizer.h"
#include "util/file_system.h"

namespace {

using strata::grammar::JsonMachine;
using strata::grammar::JsonTokenMask;

struct Vocab {
  std::unique_ptr<strata::format::GgufFile> gguf;
  std::unique_ptr<strata::text::Tokenizer> tokenizer;
};

// The vocabulary file `name`, or null tokenizer when it cannot be read.
Vocab Load(const std::string& name) {
  Vocab v;
  auto fs = strata::util::NewPosixFileSystem();
  auto g = strata::format::GgufFile::Open(*fs, "../shared/models/vocab/" + name);
  if (!g.ok()) return v;
  v.gguf = std::move(g).value();
  auto t = strata::text::Tokenizer::FromGguf(*v.gguf);
  if (t.ok()) v.tokenizer = std::move(t).value();
  return v;
}

const char* const kFiles[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-qwen2.gguf"};

// States of a nested document: after '{' (a key or '}'), inside a key,
// after ':' (any value), inside a string value, inside a number.
const char* const kPrefixes[] = {"{", "{\"na", "{\"name\":", "{\"name\":\"Ada L",
                                 "{\"a\":{\"b\":[1,2,{\"c\":12"};

void BM_BuildTrie(benchmark::State& state) {
  const Vocab v = Load(kFiles[state.range(0)]);
  if (!v.tokenizer) {
    state.SkipWithError("../shared/models/vocab is not present");
    return;
  }
  size_t nodes = 0;
  for (auto _ : state) {
    JsonTokenMask mask(*v.tokenizer);
    nodes = mask.trie_nodes();
    benchmark::DoNotOptimize(nodes);
  }
  state.counters["vocab"] = v.tokenizer->n_vocab();
  state.counters["trie_nodes"] = static_cast<double>(nodes);
}
BENCHMARK(BM_BuildTrie)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The allowed tokens at a state (range(1)): walked every time (range(2) =
// 0), or through the memo, as a decoder meets a state again (1: inside a
// long string every step is the same state).
void BM_AllowedTokens(benchmark::State& state) {
  const Vocab v = Load(kFiles[state.range(0)]);
  if (!v.tokenizer) {
    state.SkipWithError("../shared/models/vocab is not present");
    return;
  }
  const JsonTokenMask mask(*v.tokenizer);
  JsonMachine m;
  if (!m.FeedAll(kPrefixes[state.range(1)])) {
    state.SkipWithError("bad prefix");
    return;
  }
  const bool memo = state.range(2) != 0;
  size_t allowed = mask.AllowedCached(m)->size();  // the first visit fills the memo
  for (auto _ : state) {
    allowed = memo ? mask.AllowedCached(m)->size() : mask.Allowed(m).size();
    benchmark::DoNotOptimize(allowed);
  }
  state.counters["vocab"] = v.tokenizer->n_vocab();
  state.counters["allowed"] = static_cast<double>(allowed);
  state.SetLabel(std::string(kPrefixes[state.range(1)]) + (memo ? " (memo)" : ""));
}
BENCHMARK(BM_AllowedTokens)
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3, 4}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
