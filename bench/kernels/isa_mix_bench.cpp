// The AVX2 instruction mixes of the packed matrix tiles
// (src/kernels/internal/packed_matmul.inc), run alone from L1: how many
// vpmaddubsw per second each mix allows on this CPU, the bound the tiles are
// measured against in docs/benchmarks.md ("The tiles' partial sums kept in
// registers"), and one alternative for Q8_0 that no tile uses. Each mix is
// one asm loop aligned to 64 bytes: the same loop placed wherever the
// compiler puts it ran 1.2-1.4x slower (the decoders and op cache are part
// of the bound). `IsaMix/clock` is a chain of dependent adds, one per cycle:
// its adds/ns estimate the clock, to turn the other rates into per-cycle
// figures.
//
//   build/release/bench/isa_mix_bench --benchmark_repetitions=5
#include <benchmark/benchmark.h>

#include <cstdint>

#if defined(__x86_64__)

namespace strata::bench {
namespace {

// 64-byte aligned input the loops read (its values do not matter).
struct alignas(64) Buffer {
  uint8_t bytes[512] = {};
};

// One iteration of each mix; kQ4MixMadds and kQ8MixMadds say how many of its
// instructions are vpmaddubsw, the unit of the rate reported.
#define BC(off, r) "vpbroadcastd " #off "(%[buf]), %%ymm" #r "\n"
// A token's product of a 4-bit chunk (in ymm w) and its int16 sum into acc.
#define Q4(off, r, w, acc)                        \
  BC(off, r)                                      \
  "vpmaddubsw %%ymm" #r ", %%ymm" #w ", %%ymm" #r \
  "\n"                                            \
  "vpaddw %%ymm" #r ", %%ymm" #acc ", %%ymm" #acc "\n"
// A token's Q8_0 product: signs, vpmaddubsw, vpmaddwd by ones, int32 sum.
#define Q8(off, r, acc)                      \
  BC(off, r)                                 \
  "vpsignb %%ymm0, %%ymm" #r ", %%ymm" #r    \
  "\n"                                       \
  "vpmaddubsw %%ymm" #r ", %%ymm5, %%ymm" #r \
  "\n"                                       \
  "vpmaddwd %%ymm" #r ", %%ymm6, %%ymm" #r   \
  "\n"                                       \
  "vpaddd %%ymm" #r ", %%ymm" #acc ", %%ymm" #acc "\n"
// Q8_0 taken as two 4-bit products (not used by a tile; the alternative
// docs/benchmarks.md measured): w + 128 = 16·h + l, so Σ w·a = 16·Σ h·a +
// Σ l·a − 128·Σ a, and both nibbles meet the token's broadcast bytes
// without signs: two vpmaddubsw and two int16 adds per 4-byte chunk.
#define Q8N(off, r, t, acc, acc2)                 \
  BC(off, r)                                      \
  "vpmaddubsw %%ymm" #r ", %%ymm5, %%ymm" #t      \
  "\n"                                            \
  "vpmaddubsw %%ymm" #r ", %%ymm7, %%ymm" #r      \
  "\n"                                            \
  "vpaddw %%ymm" #t ", %%ymm" #acc ", %%ymm" #acc \
  "\n"                                            \
  "vpaddw %%ymm" #r ", %%ymm" #acc2 ", %%ymm" #acc2 "\n"
#define CLOBBERS                                                                           \
  "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
      "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"

// Q4_K's mix for 4 tokens and two chunks: per chunk a load and its mask (the
// second also a shift, the high nibbles), per token a broadcast, vpmaddubsw
// and vpaddw.
void Q4Mix(const Buffer& b, int64_t n) {
  __asm__ volatile(
      ".p2align 6\n"
      "1:\n"
      "vmovdqu (%[buf]), %%ymm0\n vpand %%ymm14, %%ymm0, %%ymm0\n" Q4(64, 1, 0, 10) Q4(68, 2, 0, 11)
          Q4(72, 3, 0, 12) Q4(76, 4, 0, 13) "vmovdqu 32(%[buf]), %%ymm5\n vpsrlw $4, %%ymm5, %%ymm5\n"
                                            "vpand %%ymm14, %%ymm5, %%ymm5\n" Q4(80, 1, 5, 10)
                                                Q4(84, 2, 5, 11) Q4(88, 3, 5, 12) Q4(92, 4, 5, 13)
      "dec %[n]\n jnz 1b\n"
      : [n] "+r"(n)
      : [buf] "r"(b.bytes)
      : CLOBBERS, "cc");
}
constexpr int kQ4MixMadds = 8;

// Q8_0's mix for 8 token-chunks.
void Q8Mix(const Buffer& b, int64_t n) {
  __asm__ volatile(
      ".p2align 6\n"
      "1:\n" Q8(64, 1, 10) Q8(68, 2, 11) Q8(72, 3, 12) Q8(76, 4, 13) Q8(80, 1, 10) Q8(84, 2, 11)
          Q8(88, 3, 12) Q8(92, 4, 13) "dec %[n]\n jnz 1b\n"
      : [n] "+r"(n)
      : [buf] "r"(b.bytes)
      : CLOBBERS, "cc");
}
constexpr int kQ8MixMadds = 8;

// The nibble form for 4 tokens and two chunks: per chunk a load, a shift
// and two masks; per token a broadcast, two vpmaddubsw and two vpaddw. Its
// rate is reported per 32-byte Q8_0 product (two vpmaddubsw), comparable
// with IsaMix/avx2/q8_0.
void Q8NibbleMix(const Buffer& b, int64_t n) {
  __asm__ volatile(
      ".p2align 6\n"
      "1:\n"
      "vmovdqu (%[buf]), %%ymm5\n vpsrlw $4, %%ymm5, %%ymm7\n"
      "vpand %%ymm14, %%ymm5, %%ymm5\n vpand %%ymm14, %%ymm7, %%ymm7\n" Q8N(64, 1, 0, 8, 9)
          Q8N(68, 2, 6, 10, 11) Q8N(72, 3, 0, 12, 13) Q8N(76, 4, 6, 15, 8)
      "vmovdqu 32(%[buf]), %%ymm5\n vpsrlw $4, %%ymm5, %%ymm7\n"
      "vpand %%ymm14, %%ymm5, %%ymm5\n vpand %%ymm14, %%ymm7, %%ymm7\n" Q8N(80, 1, 0, 8, 9)
          Q8N(84, 2, 6, 10, 11) Q8N(88, 3, 0, 12, 13) Q8N(92, 4, 6, 15, 8)
      "dec %[n]\n jnz 1b\n"
      : [n] "+r"(n)
      : [buf] "r"(b.bytes)
      : CLOBBERS, "cc");
}
constexpr int kQ8NibbleMixProducts = 8;

// A chain of 4 dependent adds per iteration: one per cycle.
void AddChain(int64_t n) {
  uint64_t x = 0;
  for (int64_t i = 0; i < n; ++i) {
    __asm__ volatile("add $1, %0\n add $1, %0\n add $1, %0\n add $1, %0" : "+r"(x));
  }
  benchmark::DoNotOptimize(x);
}

constexpr int64_t kIterations = 1 << 20;

void BM_Clock(benchmark::State& state) {
  for (auto _ : state) AddChain(kIterations);
  state.counters["adds_per_ns"] =
      benchmark::Counter(4.0 * kIterations * static_cast<double>(state.iterations()) * 1e-9,
                         benchmark::Counter::kIsRate);
}

template <void (*Mix)(const Buffer&, int64_t), int kMadds>
void BM_Mix(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx2")) {
    state.SkipWithError("this CPU has no AVX2");
    return;
  }
  const Buffer b;
  for (auto _ : state) Mix(b, kIterations);
  state.counters["madds_per_ns"] = benchmark::Counter(
      static_cast<double>(kMadds) * kIterations * static_cast<double>(state.iterations()) * 1e-9,
      benchmark::Counter::kIsRate);
}

BENCHMARK(BM_Clock)->Name("IsaMix/clock")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Mix<Q4Mix, kQ4MixMadds>)->Name("IsaMix/avx2/q4_k")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Mix<Q8Mix, kQ8MixMadds>)->Name("IsaMix/avx2/q8_0")->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Mix<Q8NibbleMix, kQ8NibbleMixProducts>)
    ->Name("IsaMix/avx2/q8_0_as_nibbles")
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace strata::bench

#endif  // __x86_64__

BENCHMARK_MAIN();
