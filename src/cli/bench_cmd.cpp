// `strata bench`: prompt-processing and generation speed of a model, in a
// table like llama-bench's and as JSON, with the machine's read bandwidth
// and int8 dot-product peak measured in the same run, so that decode speed
// reads as a fraction of the bandwidth and prefill as a fraction of the peak.
#include <immintrin.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <numeric>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/bench_cache.h"
#include "cli/bench_semantic.h"
#include "cli/commands.h"
#include "engine/engine.h"
#include "model/transformer.h"
#include "util/clock.h"
#include "util/random.h"
#include "util/thread_pool.h"

namespace strata::cli {
namespace {

struct BenchFlags {
  std::string model;
  int32_t n_prompt = 512;
  int32_t n_gen = 128;
  int32_t threads = 2;
  int32_t reps = 5;
  int32_t batch = 512;
  int32_t depth = 0;  // tokens already in the context of every test
  std::string kv_type = "f16";
  std::string repack = "auto";  // row-interleaved weights: auto | on | off
  std::string json;
  bool no_bandwidth = false;
  std::string log_level = "warn";
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2);
}

struct TestResult {
  std::string name;
  int32_t n_prompt = 0, n_gen = 0;
  std::vector<double> tps;              // tokens/s per repetition
  std::vector<double> attention_share;  // of each repetition's time, in the attention kernel
  double Median() const { return cli::Median(tps); }
  double Min() const { return tps.empty() ? 0.0 : *std::min_element(tps.begin(), tps.end()); }
  double Max() const { return tps.empty() ? 0.0 : *std::max_element(tps.begin(), tps.end()); }
};

__attribute__((target("avx2"))) uint64_t ReadSumAvx2(const uint64_t* p, size_t n) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_xor_si256(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_xor_si256(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_xor_si256(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_xor_si256(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  const __m256i x = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
  uint64_t out[4];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), x);
  return out[0] ^ out[1] ^ out[2] ^ out[3];
}

uint64_t ReadSumPlain(const uint64_t* p, size_t n) {
  uint64_t a = 0;
  for (size_t i = 0; i < n; ++i) a ^= p[i];
  return a;
}

// Read bandwidth in bytes/s with all pool threads streaming disjoint parts of
// a buffer much larger than the caches (median of 5 passes).
double MeasureReadBandwidth(util::ThreadPool& pool, const util::Clock& clock) {
  const size_t bytes = size_t{512} << 20;
  const size_t n = bytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t[], void (*)(void*)> buf(
      static_cast<uint64_t*>(std::aligned_alloc(64, bytes)), &std::free);
  if (!buf) return 0.0;
  pool.ParallelFor(static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buf[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
  });
  const bool avx2 = __builtin_cpu_supports("avx2");
  std::vector<double> rates;
  uint64_t sink = 0;
  for (int pass = 0; pass < 6; ++pass) {
    std::vector<uint64_t> parts(static_cast<size_t>(pool.size()));
    const auto t0 = clock.Now();
    pool.RunOnAll([&](int t) {
      auto [b, e] = util::ThreadPool::Chunk(static_cast<int64_t>(n / 16), pool.size(), t);
      const uint64_t* p = buf.get() + b * 16;
      const size_t len = static_cast<size_t>(e - b) * 16;
      parts[static_cast<size_t>(t)] = avx2 ? ReadSumAvx2(p, len) : ReadSumPlain(p, len);
    });
    const double s = util::SecondsBetween(t0, clock.Now());
    for (uint64_t v : parts) sink ^= v;
    if (pass > 0) rates.push_back(static_cast<double>(bytes) / s);  // first pass warms up
  }
  if (sink == 42) std::fputc(' ', stderr);  // keep the reads observable
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

// The int8 dot-product peak of one core, as the quantized kernels use it:
// `iters` rounds of 12 independent multiply-accumulates of unsigned by
// signed bytes into int32 lanes (enough in flight to cover the
// instruction's latency on two ports). Each returns the int8 operations
// done (a product and its addition count two).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int64_t Int8Avx512Vnni(const uint8_t* in,
                                                                              int64_t iters,
                                                                              int64_t* sink) {
  const __m512i a = _mm512_set1_epi8(static_cast<char>(in[0]));
  const __m512i b = _mm512_set1_epi8(static_cast<char>(in[1]));
  __m512i acc[12];
  for (__m512i& x : acc) x = _mm512_setzero_si512();
  for (int64_t i = 0; i < iters; ++i) {
    for (__m512i& x : acc) x = _mm512_dpbusd_epi32(x, a, b);  // 64 products into 16 lanes
  }
  __m512i sum = acc[0];
  for (int k = 1; k < 12; ++k) sum = _mm512_add_epi32(sum, acc[k]);
  int32_t lanes[16];  // (not _mm512_reduce_add_epi32: GCC 12 warns inside it)
  _mm512_storeu_si512(lanes, sum);
  for (int32_t v : lanes) *sink += v;
  return iters * 12 * 64 * 2;
}

__attribute__((target("avx2"))) int64_t Int8Avx2(const uint8_t* in, int64_t iters, int64_t* sink) {
  const __m256i a = _mm256_set1_epi8(static_cast<char>(in[0]));
  const __m256i b = _mm256_set1_epi8(static_cast<char>(in[1]));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[12];
  for (__m256i& x : acc) x = _mm256_setzero_si256();
  for (int64_t i = 0; i < iters; ++i) {
    for (__m256i& x : acc) {
      // 32 products, summed in pairs to int16, then in pairs to int32.
      x = _mm256_add_epi32(x, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
    }
  }
  __m256i sum = acc[0];
  for (int k = 1; k < 12; ++k) sum = _mm256_add_epi32(sum, acc[k]);
  int32_t lanes[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), sum);
  for (int32_t v : lanes) *sink += v;
  return iters * 12 * 32 * 2;
}

// The int8 multiply-accumulate peak of the pool's threads together, in
// operations per second (median of 5 timed passes after a warm-up), and the
// instructions it used; {0, "none"} without AVX2.
std::pair<double, std::string> MeasureInt8Peak(util::ThreadPool& pool, const util::Clock& clock) {
  const bool vnni = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw");
  if (!vnni && !__builtin_cpu_supports("avx2")) return {0.0, "none"};
  // Inputs the compiler cannot see: no folding of the loop.
  volatile uint8_t inputs[2] = {3, 5};
  const uint8_t in[2] = {inputs[0], inputs[1]};
  constexpr int64_t kIters = 20'000'000;  // ~20 ms a pass: long enough to time
  std::vector<double> rates;
  std::vector<int64_t> sinks(static_cast<size_t>(pool.size()));
  for (int pass = 0; pass < 6; ++pass) {
    std::vector<int64_t> ops(static_cast<size_t>(pool.size()));
    const auto t0 = clock.Now();
    pool.RunOnAll([&](int t) {
      int64_t* sink = &sinks[static_cast<size_t>(t)];
      ops[static_cast<size_t>(t)] =
          vnni ? Int8Avx512Vnni(in, kIters, sink) : Int8Avx2(in, kIters, sink);
    });
    const double s = util::SecondsBetween(t0, clock.Now());
    const double total = static_cast<double>(std::accumulate(ops.begin(), ops.end(), int64_t{0}));
    if (pass > 0) rates.push_back(total / s);  // the first pass warms up
  }
  if (std::accumulate(sinks.begin(), sinks.end(), int64_t{0}) == 42) std::fputc(' ', stderr);
  std::sort(rates.begin(), rates.end());
  return {rates[rates.size() / 2], vnni ? "avx512-vnni" : "avx2"};
}

// Resident set (current and peak) from /proc/self/status, in bytes.
std::pair<uint64_t, uint64_t> ResidentBytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  uint64_t rss = 0, hwm = 0;
  while (in >> key) {
    uint64_t kb = 0;
    if (key == "VmRSS:") {
      in >> kb;
      rss = kb * 1024;
    } else if (key == "VmHWM:") {
      in >> kb;
      hwm = kb * 1024;
    }
  }
  return {rss, hwm};
}

std::string HumanBytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
}

int RunBench(const Env& env, const BenchFlags& f) {
  if (f.n_prompt < 0 || f.n_gen < 0 || (f.n_prompt == 0 && f.n_gen == 0)) {
    return UsageError("-p and -n must be >= 0 and not both 0");
  }
  if (f.threads < 1 || f.threads > 256)
    return UsageError(fmt::format("-t {} is outside [1, 256]", f.threads));
  if (f.reps < 1 || f.reps > 1000)
    return UsageError(fmt::format("-r {} is outside [1, 1000]", f.reps));
  if (f.batch < 1) return UsageError("--batch must be >= 1");
  if (f.depth < 0 || f.depth > (1 << 20)) {
    return UsageError(fmt::format("--depth {} is outside [0, 1048576]", f.depth));
  }
  const util::StatusOr<kernels::TensorType> kv_type = engine::ParseKvType(f.kv_type);
  if (!kv_type.ok()) return UsageError("--kv-type: " + kv_type.status().message());
  const util::StatusOr<model::PackMode> repack = model::ParsePackMode(f.repack);
  if (!repack.ok()) return UsageError("--repack: " + repack.status().message());
  auto log = MakeLogger(f.log_level);
  auto path = ResolveModelPath(env, f.model, *log);
  if (!path.ok()) return ReportError(path.status());
  const util::Clock& clock = util::RealClock();

  const auto t_load = clock.Now();
  auto loaded = model::Model::Load(
      *env.fs, *path,
      {.prefetch = true, .pack = {.mode = *repack, .threads = f.threads, .clock = &clock}}, *log);
  if (!loaded.ok()) return ReportError(loaded.status());
  const model::Model& m = **loaded;
  const model::ModelConfig& c = m.config();
  engine::EngineOptions eo;
  eo.n_threads = f.threads;
  eo.n_ctx = f.depth + std::max(f.n_prompt, f.n_gen) + 16;
  eo.kv_type = *kv_type;
  // Room for a test's sequence beside the cached depth blocks it adopts.
  eo.n_seq_max = f.depth > 0 ? 2 : 1;
  auto created = engine::Engine::Create(m, eo, *log);
  if (!created.ok()) return ReportError(created.status());
  engine::Engine& eng = **created;
  // The attention kernel's share of each timed run (what long contexts cost).
  eng.SetProfileClock(&clock);
  double last_share = 0;
  util::Rng rng(1234);
  auto random_tokens = [&](int32_t n) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(c.n_vocab)));
    return t;
  };
  // Load to first token: the model mapped and parsed, then one token's logits.
  {
    const engine::SeqId s = eng.NewSequence();
    const std::vector<int32_t> one = {m.tokenizer().bos() >= 0 ? m.tokenizer().bos() : 0};
    engine::Engine::Work w{s, one, true};
    auto r = eng.Step(std::span(&w, 1));
    if (!r.ok()) return ReportError(r.status());
    eng.FreeSequence(s);
  }
  const double load_to_first_ms = util::SecondsBetween(t_load, clock.Now()) * 1e3;

  // --depth: every test's sequence starts with the same `depth` tokens,
  // computed once (untimed) and then adopted from the prefix cache, so a
  // test measures its own tokens attending over that much context.
  const std::vector<int32_t> depth_tokens = random_tokens(f.depth);
  constexpr uint64_t kDepthNamespace = 1;
  auto start = [&]() -> util::StatusOr<engine::SeqId> {
    if (f.depth == 0) return eng.NewSequence();
    const engine::SeqId s = eng.NewSequence(kDepthNamespace);
    const int32_t adopted = eng.AttachCachedPrefix(s, depth_tokens);
    for (int32_t i = adopted; i < f.depth; i += f.batch) {
      const int32_t k = std::min(f.batch, f.depth - i);
      engine::Engine::Work w{
          s, std::span(depth_tokens).subspan(static_cast<size_t>(i), static_cast<size_t>(k)),
          false};
      STRATA_RETURN_IF_ERROR(eng.Step(std::span(&w, 1)));
    }
    return s;
  };
  auto run_prompt = [&](int32_t n) -> util::StatusOr<double> {
    const auto tokens = random_tokens(n);
    STRATA_ASSIGN_OR_RETURN(const engine::SeqId s, start());
    const double a0 = eng.attention_seconds();
    const auto t0 = clock.Now();
    for (int32_t i = 0; i < n; i += f.batch) {
      const int32_t k = std::min(f.batch, n - i);
      engine::Engine::Work w{
          s, std::span(tokens).subspan(static_cast<size_t>(i), static_cast<size_t>(k)), i + k == n};
      STRATA_RETURN_IF_ERROR(eng.Step(std::span(&w, 1)));
    }
    const double secs = util::SecondsBetween(t0, clock.Now());
    last_share = (eng.attention_seconds() - a0) / secs;
    eng.FreeSequence(s);
    return n / secs;
  };
  auto run_gen = [&](int32_t n) -> util::StatusOr<double> {
    const auto tokens = random_tokens(n);
    STRATA_ASSIGN_OR_RETURN(const engine::SeqId s, start());
    const double a0 = eng.attention_seconds();
    const auto t0 = clock.Now();
    for (int32_t i = 0; i < n; ++i) {
      engine::Engine::Work w{s, std::span(tokens).subspan(static_cast<size_t>(i), 1), true};
      STRATA_RETURN_IF_ERROR(eng.Step(std::span(&w, 1)));
    }
    const double secs = util::SecondsBetween(t0, clock.Now());
    last_share = (eng.attention_seconds() - a0) / secs;
    eng.FreeSequence(s);
    return n / secs;
  };

  std::vector<TestResult> results;
  // Named as llama-bench names them: "tg128", or "tg128 @ d4096" at a depth.
  const std::string at = f.depth > 0 ? fmt::format(" @ d{}", f.depth) : "";
  if (f.n_prompt > 0) {
    results.push_back({fmt::format("pp{}{}", f.n_prompt, at), f.n_prompt, 0, {}, {}});
  }
  if (f.n_gen > 0) results.push_back({fmt::format("tg{}{}", f.n_gen, at), 0, f.n_gen, {}, {}});
  for (TestResult& t : results) {
    auto run = [&]() { return t.n_prompt > 0 ? run_prompt(t.n_prompt) : run_gen(t.n_gen); };
    auto warm = run();  // warm-up, not counted
    if (!warm.ok()) return ReportError(warm.status());
    for (int r = 0; r < f.reps; ++r) {
      auto tps = run();
      if (!tps.ok()) return ReportError(tps.status());
      t.tps.push_back(*tps);
      t.attention_share.push_back(last_share);
      log->Info("{} rep {}: {:.2f} t/s", t.name, r + 1, *tps);
    }
  }
  const auto [rss, hwm] = ResidentBytes();

  // Bytes one decode step must read: every matrix except the embedding table,
  // of which a step reads one row (unless it doubles as the output head).
  double step_bytes = 0;
  for (const auto& t : m.gguf().tensors()) {
    if (t.name == "token_embd.weight" && !c.tied_embeddings) continue;
    step_bytes += static_cast<double>(t.n_bytes);
  }
  // Int8 operations one prompt token costs: a multiply and an add per
  // weight of every matrix it is multiplied by (the embedding table is only
  // read, unless it doubles as the output head); attention's own products
  // are left out (a few % at pp512).
  double token_ops = 0;
  for (const auto& t : m.gguf().tensors()) {
    if (t.shape.size() < 2 || (t.name == "token_embd.weight" && !c.tied_embeddings)) continue;
    token_ops += 2.0 * static_cast<double>(t.n_elements());
  }
  double bandwidth = 0, int8_peak = 0;
  std::string int8_isa = "none";
  if (!f.no_bandwidth) {
    util::ThreadPool pool(f.threads);
    bandwidth = MeasureReadBandwidth(pool, clock);
    std::tie(int8_peak, int8_isa) = MeasureInt8Peak(pool, clock);
  }
  // A test's share of the machine's limit: decode against the read
  // bandwidth (it streams the weights once per token), prefill against the
  // int8 peak (it multiplies them by a batch of tokens); 0 when unmeasured.
  // A decode step also reads the KV rows of its context: on average the
  // depth and half the test's own tokens.
  const double kv_per_token =
      static_cast<double>(eng.kv_pool().bytes_per_block()) / eng.kv_pool().block_size();
  auto read_bytes = [&](const TestResult& t) {
    return step_bytes + (f.depth + t.n_gen / 2.0) * kv_per_token;
  };
  auto fraction_of_limit = [&](const TestResult& t) {
    if (t.n_gen > 0) return bandwidth > 0 ? t.Median() * read_bytes(t) / bandwidth : 0.0;
    return int8_peak > 0 ? t.Median() * token_ops / int8_peak : 0.0;
  };

  const double file_bytes = static_cast<double>(m.gguf().bytes().size());
  const double kv_bytes = static_cast<double>(eng.kv_pool().bytes());
  const std::string model_desc =
      fmt::format("{} {:.2f}B {}", c.architecture, static_cast<double>(c.n_params) / 1e9,
                  m.WeightTypeSummary());
  const std::string isa(kernels::IsaName(eng.kernels().isa));
  const std::string kv_name(kernels::TypeName(*kv_type));
  fmt::print("| {:<28} | {:>10} | {:>8} | {:<11} | {:>7} | {:>4} | {:>14} | {:>9} | {:>17} |\n",
             "model", "size", "params", "backend", "threads", "KV", "test", "t/s", "min .. max");
  fmt::print(
      "| {:-<28} | {:->10} | {:->8} | {:-<11} | {:->7} | {:->4} | {:->14} | {:->9} | {:->17} |\n",
      "", "", "", "", "", "", "", "", "");
  for (const TestResult& t : results) {
    fmt::print(
        "| {:<28} | {:>10} | {:>8} | {:<11} | {:>7} | {:>4} | {:>14} | {:>9.2f} | {:>7.2f} .. "
        "{:>7.2f} |\n",
        model_desc, HumanBytes(file_bytes),
        fmt::format("{:.2f} B", static_cast<double>(c.n_params) / 1e9), "CPU " + isa, f.threads,
        kv_name, t.name, t.Median(), t.Min(), t.Max());
  }
  std::fprintf(stdout, "\nload to first token: %.1f ms (warm page cache)\n", load_to_first_ms);
  std::fprintf(stdout, "weights packed row-interleaved (--repack %s): %s of %s\n", f.repack.c_str(),
               HumanBytes(static_cast<double>(m.packed_bytes())).c_str(),
               HumanBytes(static_cast<double>(c.weight_bytes)).c_str());
  for (const TestResult& t : results) {
    std::fprintf(stdout, "%s: the attention kernel took %.0f%% of the time\n", t.name.c_str(),
                 100.0 * Median(t.attention_share));
  }
  if (bandwidth > 0) {
    for (const TestResult& t : results) {
      if (t.n_gen == 0) continue;
      std::fprintf(
          stdout,
          "%s reads %.2f GB/token: %.1f GB/s of a measured %.1f GB/s read bandwidth (%.0f%%)\n",
          t.name.c_str(), read_bytes(t) / 1e9, t.Median() * read_bytes(t) / 1e9, bandwidth / 1e9,
          100.0 * fraction_of_limit(t));
    }
  }
  if (int8_peak > 0) {
    for (const TestResult& t : results) {
      if (t.n_prompt == 0) continue;
      std::fprintf(stdout,
                   "%s computes %.2f G int8 ops/token: %.1f G ops/s of a measured %.1f G ops/s "
                   "int8 peak (%s, %d threads) (%.0f%%)\n",
                   t.name.c_str(), token_ops / 1e9, t.Median() * token_ops / 1e9, int8_peak / 1e9,
                   int8_isa.c_str(), f.threads, 100.0 * fraction_of_limit(t));
    }
  }
  std::fprintf(stdout,
               "resident memory: %s now, %s peak; file %s + KV cache %s = %s (peak/limit %.2f)\n",
               HumanBytes(static_cast<double>(rss)).c_str(),
               HumanBytes(static_cast<double>(hwm)).c_str(), HumanBytes(file_bytes).c_str(),
               HumanBytes(kv_bytes).c_str(), HumanBytes(file_bytes + kv_bytes).c_str(),
               static_cast<double>(hwm) / (file_bytes + kv_bytes));

  if (!f.json.empty()) {
    nlohmann::json j;
    j["model"] = *path;
    j["model_desc"] = model_desc;
    j["architecture"] = c.architecture;
    j["weight_type"] = m.WeightTypeSummary();
    j["size_bytes"] = file_bytes;
    j["params"] = c.n_params;
    j["isa"] = isa;
    j["threads"] = f.threads;
    j["load_to_first_token_ms"] = load_to_first_ms;
    j["read_bandwidth_bytes_per_s"] = bandwidth;
    j["int8_peak_ops_per_s"] = int8_peak;
    j["int8_peak_isa"] = int8_isa;
    j["prefill_ops_per_token"] = token_ops;
    j["decode_bytes_per_token"] = step_bytes;
    j["rss_bytes"] = rss;
    j["peak_rss_bytes"] = hwm;
    j["kv_cache_bytes"] = kv_bytes;
    j["kv_type"] = kv_name;
    j["repack"] = f.repack;
    j["packed_bytes"] = m.packed_bytes();
    j["kv_bytes_per_token"] = kv_per_token;
    j["depth"] = f.depth;
    for (const TestResult& t : results) {
      j["tests"].push_back({{"name", t.name},
                            {"n_prompt", t.n_prompt},
                            {"n_gen", t.n_gen},
                            {"depth", f.depth},
                            {"tokens_per_s", t.tps},
                            {"median", t.Median()},
                            {"min", t.Min()},
                            {"max", t.Max()},
                            {"fraction_of_limit", fraction_of_limit(t)},
                            {"attention_share", Median(t.attention_share)}});
    }
    const std::string text = j.dump(2) + "\n";
    if (f.json == "-") {
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else if (util::Status st = env.fs->WriteFileAtomic(f.json, text); !st.ok()) {
      return ReportError(st);
    }
  }
  return kExitOk;
}

}  // namespace

Command RegisterBench(CLI::App& app) {
  auto f = std::make_shared<BenchFlags>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prompt-processing and generation speed");
  cmd->add_option("-m,--model", f->model, "GGUF model file (default as for generate)");
  cmd->add_option("-p,--n-prompt", f->n_prompt, "Prompt tokens per pp test; 0 = skip")
      ->capture_default_str();
  cmd->add_option("-n,--n-gen", f->n_gen, "Generated tokens per tg test; 0 = skip")
      ->capture_default_str();
  cmd->add_option("-t,--threads", f->threads, "Threads")->capture_default_str();
  cmd->add_option("-r,--reps", f->reps, "Repetitions of each test (after one warm-up)")
      ->capture_default_str();
  cmd->add_option("-b,--batch", f->batch, "Prompt tokens per forward pass")->capture_default_str();
  cmd->add_option("-d,--depth", f->depth,
                  "Tokens already in the context of every test (computed once, untimed)")
      ->capture_default_str();
  cmd->add_option("--kv-type", f->kv_type, "KV cache element type: f32, f16 or q8_0")
      ->capture_default_str();
  cmd->add_option("--repack", f->repack,
                  "Store weight matrices row-interleaved at load: auto (the types this CPU's "
                  "kernels run faster packed), on or off")
      ->capture_default_str();
  cmd->add_option("--json", f->json, "Also write the results as JSON to FILE ('-' = stdout)");
  cmd->add_flag("--no-bandwidth", f->no_bandwidth,
                "Skip measuring the machine's limits (read bandwidth, int8 peak)");
  cmd->add_option("--log-level", f->log_level, "debug, info, warn, error or off")
      ->capture_default_str();
  auto cf = std::make_shared<BenchCacheFlags>();
  CLI::App* cache_cmd = cmd->add_subcommand(
      "cache", "Hit ratios of the eviction policies on Zipf workloads and real traces");
  cache_cmd->add_option("--keys", cf->keys, "Distinct keys of the Zipf workloads")
      ->capture_default_str();
  cache_cmd->add_option("--accesses", cf->accesses, "Accesses per Zipf workload")
      ->capture_default_str();
  cache_cmd->add_option("--lambda", cf->lambda, "Dual-factor age decay per second")
      ->capture_default_str();
  cache_cmd->add_option("--k", cf->k, "Dual-factor frequency saturation")->capture_default_str();
  cache_cmd->add_option("--half-life", cf->half_life_s, "Dual-factor access-count half-life (s)")
      ->capture_default_str();
  cache_cmd->add_flag("--admission", cf->admission,
                      "Compare always-admit with cache-aware admission (LRU and dual-factor)");
  cache_cmd
      ->add_option("--admission-gain", cf->admission_gain,
                   "Admission probability of a new key per unit of the new keys' hit ratio")
      ->capture_default_str();
  cache_cmd
      ->add_option("--admission-watch", cf->admission_watch,
                   "Keys the admission gate watches per cache entry")
      ->capture_default_str();
  cache_cmd->add_option("--admission-min", cf->admission_min, "Lowest admission probability")
      ->capture_default_str();
  cache_cmd->add_flag("--l2", cf->l2,
                      "Replay the Mooncake traces through the KV prefix cache (L2) with each "
                      "policy, against the ideal (Belady's MIN) at the same capacity");
  cache_cmd
      ->add_option("--l2-tpot-ms", cf->l2_tpot_ms,
                   "L2 replay: a request holds its blocks for output_length x this many ms "
                   "(0 = only while it is admitted)")
      ->capture_default_str();
  cache_cmd
      ->add_option("--l2-window", cf->l2_window,
                   "L2 replay: W-TinyLFU's window, share of the pool in (0, 1)")
      ->capture_default_str();
  cache_cmd->add_option("--data", cf->data_dir, "Directory holding traces/")->capture_default_str();
  cache_cmd->add_option("--json", cf->json, "Also write the results as JSON to FILE");
  auto sf = std::make_shared<BenchSemanticFlags>();
  CLI::App* semantic_cmd = cmd->add_subcommand(
      "semantic",
      "Lookup latency, recall and candidates of the semantic index per size and index kind");
  semantic_cmd->add_option("--sizes", sf->sizes, "Comma-separated entry counts")
      ->capture_default_str();
  semantic_cmd->add_option("--kinds", sf->kinds, "Comma-separated: hnsw, ivf, lsh, flat")
      ->capture_default_str();
  semantic_cmd->add_option("--dim", sf->dim, "Vector width")->capture_default_str();
  semantic_cmd->add_option("--queries", sf->queries, "Lookups per index (half near, half not)")
      ->capture_default_str();
  semantic_cmd->add_option("--similarity", sf->similarity, "tau5 of the lookups")
      ->capture_default_str();
  semantic_cmd->add_option("--seed", sf->seed, "Vector seed")->capture_default_str();
  semantic_cmd->add_option("--json", sf->json, "Also write the results as JSON to FILE");
  return {cmd, [f, cf, cache_cmd, sf, semantic_cmd](const Env& env) {
            if (semantic_cmd->parsed()) return RunBenchSemantic(env, *sf);
            return cache_cmd->parsed() ? RunBenchCache(env, *cf) : RunBench(env, *f);
          }};
}

}  // namespace strata::cli
