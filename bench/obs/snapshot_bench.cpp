// What one request snapshot costs the writer thread, step by step, for a
// typical chat request (a system and a user message, a 120-token prompt, one
// choice of 64 tokens):
//
//   BM_EncodeRecord   the record to its JSON text (server/snapshot_record.h)
//   BM_SealSnapshot   AES-256-GCM of that text with its header (obs/snapshot_envelope.h)
//   BM_WriteAtomic    writing the sealed file as the store does (temporary
//                     file, fsync, rename) into $SNAPSHOT_BENCH_DIR (default
//                     /tmp): the file system's and disk's share
//   BM_OpenSnapshot   reading it back: authenticate and decrypt (the read API, replay)
//   BM_DecodeRecord   the JSON text back to a record
#include <benchmark/benchmark.h>

#include <array>
#include <cstdlib>
#include <string>

#include "obs/snapshot_envelope.h"
#include "server/snapshot_record.h"
#include "util/file_system.h"

namespace strata {
namespace {

server::SnapshotRecord TypicalRecord() {
  server::SnapshotRecord r;
  r.request_id = "0123456789abcdef";
  r.tenant = "acme";
  r.created_ms = 1'790'000'000'000;
  r.api = "openai.chat";
  r.endpoint = "/v1/chat/completions";
  r.strata_version = "0.1.0";
  r.backend = {.name = "llama",
               .kind = "local",
               .fingerprint = 0x0123456789abcdefULL,
               .n_ctx = 4096,
               .model_path = "models/llama.gguf",
               .model_sha256 = std::string(64, 'a'),
               .max_tokens_cap = 4096};
  r.request.model = "llama";
  r.request.messages = {
      {"system", "You are a helpful assistant. Answer briefly and cite your sources."},
      {"user",
       "What is the capital of France, and what is it known for? Give me three "
       "things a first-time visitor should see, and one thing to avoid."}};
  r.request.max_tokens = 64;
  r.request.sampling.temperature = 0.7f;
  r.request.sampling_set.temperature = true;
  server::SnapshotPrompt p;
  for (int i = 0; i < 120; ++i) p.tokens.push_back(1000 + i * 37);
  p.text = std::string(480, 'p');
  p.max_tokens = 64;
  p.stops = {"<|im_end|>"};
  r.prompts = {p};
  server::SnapshotChoice c;
  c.seed = 12'345'678'901'234'567ULL;
  c.text = std::string(300, 't');
  for (int i = 0; i < 64; ++i) c.tokens.push_back(2000 + i * 11);
  c.finish = gateway::FinishReason::kEndOfTurn;
  c.usage = {.prompt_tokens = 120, .completion_tokens = 64};
  r.choices = {c};
  return r;
}

const obs::SnapshotKey& Key() {
  static const obs::SnapshotKey key = [] {
    std::array<uint8_t, obs::kSnapshotKeyBytes> raw{};
    raw.fill(0x5a);
    return obs::SnapshotKey::FromBytes(raw);
  }();
  return key;
}

const obs::SnapshotMeta kMeta{
    .tenant = "acme", .request_id = "0123456789abcdef", .created_ms = 1'790'000'000'000};
std::array<uint8_t, obs::kSnapshotNonceBytes> Nonce() {
  std::array<uint8_t, obs::kSnapshotNonceBytes> n{};
  n.fill(7);
  return n;
}

void BM_EncodeRecord(benchmark::State& state) {
  const server::SnapshotRecord r = TypicalRecord();
  size_t bytes = 0;
  for (auto _ : state) {
    std::string json = server::EncodeSnapshotRecord(r);
    bytes = json.size();
    benchmark::DoNotOptimize(json);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_EncodeRecord);

void BM_SealSnapshot(benchmark::State& state) {
  const std::string json = server::EncodeSnapshotRecord(TypicalRecord());
  for (auto _ : state) {
    auto file = obs::SealSnapshot(Key(), kMeta, json, Nonce());
    benchmark::DoNotOptimize(file);
  }
}
BENCHMARK(BM_SealSnapshot);

void BM_WriteAtomic(benchmark::State& state) {
  const char* dir = std::getenv("SNAPSHOT_BENCH_DIR");
  const std::string path =
      std::string(dir != nullptr ? dir : "/tmp") + "/strata-snapshot-bench.snap";
  const std::string file =
      *obs::SealSnapshot(Key(), kMeta, server::EncodeSnapshotRecord(TypicalRecord()), Nonce());
  auto fs = util::NewPosixFileSystem();
  for (auto _ : state) {
    const util::Status st = fs->WriteFileAtomic(path, file);
    if (!st.ok()) {
      state.SkipWithError(st.message().c_str());
      break;
    }
  }
  (void)fs->Remove(path);
}
BENCHMARK(BM_WriteAtomic)->UseRealTime();

void BM_OpenSnapshot(benchmark::State& state) {
  const std::string file =
      *obs::SealSnapshot(Key(), kMeta, server::EncodeSnapshotRecord(TypicalRecord()), Nonce());
  for (auto _ : state) {
    auto opened = obs::OpenSnapshot(Key(), "acme", "0123456789abcdef", file);
    benchmark::DoNotOptimize(opened);
  }
}
BENCHMARK(BM_OpenSnapshot);

void BM_DecodeRecord(benchmark::State& state) {
  const std::string json = server::EncodeSnapshotRecord(TypicalRecord());
  for (auto _ : state) {
    auto r = server::DecodeSnapshotRecord(json);
    benchmark::DoNotOptimize(r);
  }
}
BENCHMARK(BM_DecodeRecord);

}  // namespace
}  // namespace strata

BENCHMARK_MAIN();
