// The cost of schema-constrained decoding: compiling a JSON Schema (to GBNF,
// to a grammar, to a mask with its per-position walks) once per schema, and
// the allowed tokens per generated token, on real vocabularies of 32k (llama
// SPM) and 152k (qwen2 BPE) tokens from ../shared/models/vocab (skipped
// without them).
//
//   build/release/bench/schema_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "format/gguf.h"
#include "grammar/grammar.h"
#include "grammar/grammar_mask.h"
#include "grammar/json_schema.h"
#include "text/tokenizer.h"
#include "util/file_system.h"
#include "util/random.h"

namespace {

using strata::grammar::Grammar;
using strata::grammar::GrammarMatcher;
using strata::grammar::GrammarTokenMask;
using strata::grammar::VocabIndex;

struct Vocab {
  std::unique_ptr<strata::format::GgufFile> gguf;
  std::unique_ptr<strata::text::Tokenizer> tokenizer;
  std::shared_ptr<const VocabIndex> index;
};

const char* const kFiles[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-qwen2.gguf"};

// One load per vocabulary for the whole run.
const Vocab& Load(int which) {
  static Vocab vocabs[2];
  Vocab& v = vocabs[which];
  if (v.tokenizer) return v;
  auto fs = strata::util::NewPosixFileSystem();
  auto g =
      strata::format::GgufFile::Open(*fs, std::string("../shared/models/vocab/") + kFiles[which]);
  if (!g.ok()) return v;
  v.gguf = std::move(g).value();
  auto t = strata::text::Tokenizer::FromGguf(*v.gguf);
  if (!t.ok()) return v;
  v.tokenizer = std::move(t).value();
  v.index = std::make_shared<const VocabIndex>(*v.tokenizer);
  return v;
}

// A nested schema of the usual shapes: objects in objects, an array of
// objects, enums, strings with and without bounds, numbers, a date.
const char* const kNested = R"({
  "type": "object",
  "properties": {
    "id": {"type": "string", "format": "uuid"},
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "email": {"type": "string", "maxLength": 40},
    "address": {"type": "object", "properties": {
        "street": {"type": "string"}, "city": {"type": "string"},
        "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
        "geo": {"type": "object", "properties": {"lat": {"type": "number"},
                                                 "lon": {"type": "number"}},
                "required": ["lat", "lon"]}},
      "required": ["street", "city"]},
    "orders": {"type": "array", "maxItems": 4, "items": {"type": "object", "properties": {
        "sku": {"type": "string"}, "qty": {"type": "integer"},
        "status": {"enum": ["new", "paid", "shipped"]},
        "placed": {"type": "string", "format": "date"}},
      "required": ["sku", "qty", "status"]}},
    "vip": {"type": "boolean"},
    "note": {"type": ["string", "null"]}
  },
  "required": ["id", "name", "age", "address", "orders"]
})";

std::string FiftyProperties() {
  std::string s = R"({"type": "object", "properties": {)";
  const char* const kinds[] = {R"({"type": "string"})", R"({"type": "integer"})",
                               R"({"type": "number"})", R"({"type": "boolean"})",
                               R"({"enum": ["a", "b", "c"]})"};
  for (int i = 0; i < 50; ++i) {
    s += fmt::format(R"({}"field_{}": {})", i ? ", " : "", i, kinds[i % 5]);
  }
  return s + R"(}, "required": ["field_0", "field_10", "field_20"]})";
}

std::shared_ptr<const Grammar> MustGrammar(const std::string& schema) {
  auto text = strata::grammar::CompileJsonSchema(schema);
  if (!text.ok()) return nullptr;
  auto g = Grammar::Parse(*text);
  return g.ok() ? *g : nullptr;
}

// JSON Schema → GBNF → compiled grammar (range(0): 0 nested, 1 fifty properties).
void BM_SchemaCompile(benchmark::State& state) {
  const std::string schema = state.range(0) == 0 ? kNested : FiftyProperties();
  size_t rules = 0;
  for (auto _ : state) {
    auto text = strata::grammar::CompileJsonSchema(schema);
    auto g = Grammar::Parse(*text);
    rules = (*g)->rules().size();
    benchmark::DoNotOptimize(rules);
  }
  state.counters["rules"] = static_cast<double>(rules);
  state.SetLabel(state.range(0) == 0 ? "nested" : "50 properties");
}
BENCHMARK(BM_SchemaCompile)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

// The mask for a compiled grammar on a vocabulary (range(0)): the walks of
// every class element's start frame (range(1) as in BM_SchemaCompile).
void BM_MaskBuild(benchmark::State& state) {
  const Vocab& v = Load(static_cast<int>(state.range(0)));
  if (!v.tokenizer) {
    state.SkipWithError("../shared/models/vocab is not present");
    return;
  }
  const auto g = MustGrammar(state.range(1) == 0 ? kNested : FiftyProperties());
  size_t tops = 0;
  for (auto _ : state) {
    GrammarTokenMask mask(g, v.index);
    tops = mask.top_entries();
    benchmark::DoNotOptimize(tops);
  }
  state.counters["vocab"] = v.tokenizer->n_vocab();
  state.counters["walks"] = static_cast<double>(tops);
  state.SetLabel(state.range(1) == 0 ? "nested" : "50 properties");
}
BENCHMARK(BM_MaskBuild)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond);

// The states of documents a random model writes under the nested schema:
// each step picks uniformly among the allowed tokens (seeded), until the
// document is whole.
std::vector<GrammarMatcher> Documents(const GrammarTokenMask& mask, const Vocab& v, int docs) {
  std::vector<GrammarMatcher> states;
  strata::util::Rng rng(11);
  for (int d = 0; d < docs; ++d) {
    GrammarMatcher m(mask.grammar());
    for (int step = 0; step < 400 && m.can_continue(); ++step) {
      states.push_back(m);
      const std::vector<int32_t> allowed = mask.Allowed(m);
      if (allowed.empty()) break;
      // Close strings sooner than uniform would (a model writes short
      // values): prefer a token that changes the parser's state.
      int32_t id = allowed[rng.Below(allowed.size())];
      for (int tries = 0; tries < 3; ++tries) {
        GrammarMatcher probe = m;
        probe.FeedAll(v.tokenizer->Piece(id));
        if (probe.key() != m.key()) break;
        id = allowed[rng.Below(allowed.size())];
      }
      m.FeedAll(v.tokenizer->Piece(id));
    }
  }
  return states;
}

// The allowed tokens at every state of the documents, per token: walked
// every time (range(1) = 0: what a state met the first time costs), or
// through the whole-state memo (1: a state met before).
void BM_SchemaMaskPerToken(benchmark::State& state) {
  const Vocab& v = Load(static_cast<int>(state.range(0)));
  if (!v.tokenizer) {
    state.SkipWithError("../shared/models/vocab is not present");
    return;
  }
  const auto g = MustGrammar(kNested);
  const GrammarTokenMask mask(g, v.index);
  const std::vector<GrammarMatcher> states = Documents(mask, v, 4);
  const bool memo = state.range(1) != 0;
  size_t allowed = 0;
  for (const auto& m : states) allowed += mask.AllowedCached(m)->size();
  for (auto _ : state) {
    for (const auto& m : states) {
      const size_t n = memo ? mask.AllowedCached(m)->size() : mask.Allowed(m).size();
      benchmark::DoNotOptimize(n);
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * states.size()));
  state.counters["vocab"] = v.tokenizer->n_vocab();
  state.counters["tokens"] = static_cast<double>(states.size());
  state.counters["mean_allowed"] =
      static_cast<double>(allowed) / static_cast<double>(states.size());
  state.counters["us_per_token"] = benchmark::Counter(
      static_cast<double>(states.size()) * 1e-6,
      benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.SetLabel(memo ? "memo" : "walked");
}
BENCHMARK(BM_SchemaMaskPerToken)->ArgsProduct({{0, 1}, {0, 1}})->Unit(benchmark::kMillisecond);

// The worst state of the documents: the slowest single Allowed.
void BM_SchemaMaskWorstState(benchmark::State& state) {
  const Vocab& v = Load(static_cast<int>(state.range(0)));
  if (!v.tokenizer) {
    state.SkipWithError("../shared/models/vocab is not present");
    return;
  }
  const auto g = MustGrammar(kNested);
  const GrammarTokenMask mask(g, v.index);
  const std::vector<GrammarMatcher> states = Documents(mask, v, 4);
  // Find the slowest state once, then time it.
  size_t worst = 0;
  double worst_ns = 0;
  for (size_t i = 0; i < states.size(); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < 3; ++k) benchmark::DoNotOptimize(mask.Allowed(states[i]).size());
    const double ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    if (ns > worst_ns) {
      worst_ns = ns;
      worst = i;
    }
  }
  size_t n = 0;
  for (auto _ : state) {
    n = mask.Allowed(states[worst]).size();
    benchmark::DoNotOptimize(n);
  }
  state.counters["vocab"] = v.tokenizer->n_vocab();
  state.counters["allowed"] = static_cast<double>(n);
}
BENCHMARK(BM_SchemaMaskWorstState)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
