// The per-request cost of the audit log and the watermark on the request's
// own thread (hashing the body and the answer, the watermark's HMAC,
// rendering and queueing the record), and the writer thread's cost per
// record (chain hash, append; fsync batched). docs/benchmarks.md has the
// numbers and the end-to-end cost through `strata serve`.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <filesystem>

#include "obs/audit_log.h"
#include "obs/crypto.h"
#include "obs/watermark.h"
#include "util/clock.h"
#include "util/file_system.h"
#include "util/log.h"

namespace strata::obs {
namespace {

AuditRecord Record() {
  AuditRecord r;
  r.time = std::chrono::system_clock::now();
  r.request_id = "5f1e2d3c4b5a6978";
  r.tenant = "alpha";
  r.endpoint = "/v1/chat/completions";
  r.model = "llama-3-8b";
  r.backend = "llama-3-8b";
  r.backend_kind = "local";
  r.outcome = "ok";
  r.prompt_tokens = 512;
  r.completion_tokens = 256;
  r.cache = "miss";
  r.request_sha256 = std::string(64, 'a');
  r.response_sha256 = std::string(64, 'b');
  r.watermark = "v1:0011223344556677:" + std::string(64, 'c');
  r.duration_ms = 812.5;
  return r;
}

ResponseContent Answer(size_t bytes) {
  ResponseContent c;
  c.choices.push_back({std::string(bytes, 'x'), {}});
  return c;
}

// SHA-256 of a request body of `range(0)` bytes.
void BM_RequestHash(benchmark::State& state) {
  const std::string body(static_cast<size_t>(state.range(0)), 'q');
  for (auto _ : state) benchmark::DoNotOptimize(Sha256(body));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_RequestHash)->Arg(1 << 10)->Arg(16 << 10);

// The response's digest and its watermark, for an answer of `range(0)` bytes.
void BM_ResponseDigestAndWatermark(benchmark::State& state) {
  const ResponseContent c = Answer(static_cast<size_t>(state.range(0)));
  const Watermarker wm(std::string(32, 'k'));
  for (auto _ : state) {
    benchmark::DoNotOptimize(ResponseDigest(c));
    benchmark::DoNotOptimize(wm.Mark("5f1e2d3c4b5a6978", "llama-3-8b", c));
  }
}
BENCHMARK(BM_ResponseDigestAndWatermark)->Arg(1 << 10)->Arg(8 << 10);

// Rendering a record's fields (the request thread's share of Append).
void BM_RenderRecord(benchmark::State& state) {
  const AuditRecord r = Record();
  for (auto _ : state) benchmark::DoNotOptimize(RenderRequestFields(r));
}
BENCHMARK(BM_RenderRecord);

// A real audit log (writer thread, a file in the temp directory, fsync every
// 100 ms), with an HMAC checkpoint key when `signed`.
struct RealLog {
  explicit RealLog(bool signed_log) {
    std::filesystem::remove_all(dir);
    std::unique_ptr<Signer> signer;
    if (signed_log) {
      (void)fs->WriteFileAtomic(dir + ".key", std::string(32, 's'));
      signer = std::move(LoadSigner(*fs, dir + ".key")).value();
    }
    audit = std::move(AuditLog::Open(*fs, util::RealClock(),
                                     {.path = dir + "/audit.log", .queue_records = 1 << 20},
                                     std::move(signer), nullptr, *log))
                .value();
  }
  ~RealLog() {
    audit->Close();
    std::filesystem::remove_all(dir);
    std::filesystem::remove(dir + ".key");
  }
  const std::string dir = (std::filesystem::temp_directory_path() / "strata_audit_bench").string();
  std::unique_ptr<util::FileSystem> fs = util::NewPosixFileSystem();
  std::unique_ptr<util::Logger> log = util::NewNullLogger();
  std::unique_ptr<AuditLog> audit;
};

// Append: what a request thread pays (render, queue).
void BM_Append(benchmark::State& state) {
  RealLog real(state.range(0) != 0);
  const AuditRecord r = Record();
  for (auto _ : state) real.audit->Append(r);
  real.audit->Flush(std::chrono::seconds(60));
  state.counters["dropped"] = static_cast<double>(real.audit->stats().dropped_queue_full);
}
BENCHMARK(BM_Append)->Arg(0)->Arg(1);

// The writer's throughput: 20,000 records appended, then flushed to disk;
// time per record.
void BM_WriterThroughput(benchmark::State& state) {
  RealLog real(state.range(0) != 0);
  const AuditRecord r = Record();
  constexpr int kRecords = 20000;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kRecords; ++i) real.audit->Append(r);
    real.audit->Flush(std::chrono::seconds(60));
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / kRecords);
  }
}
BENCHMARK(BM_WriterThroughput)->Arg(0)->Arg(1)->UseManualTime()->Iterations(3);

}  // namespace
}  // namespace strata::obs

BENCHMARK_MAIN();
