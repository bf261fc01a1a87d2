// tune/simulator.h — a calibrated cost model of strata serving a scenario:
// thousands of configurations evaluated in the time one real run takes.
//
// Promise: Simulate replays a scenario's requests (tune/scenario.h) through
// a model of strata's serving path with the knobs of SimConfig:
//  - the response tiers at arrival: L1 (exact repeats of greedy requests,
//    within its TTL and bytes, least recently used first out), single
//    flight (a repeat of a request still running waits for its answer), L3
//    and the semantic tier (a reworded question finds its earlier answer
//    with the tier's recall at its similarity threshold; a new question
//    gets a wrong answer with the tier's false-hit rate: both measured by
//    `strata eval l3` / `eval semantic` and kept in the CostModel; the
//    semantic tier generates its first `semantic_verify_min` would-be hits,
//    then a `semantic_verify` share of them, to verify them, as it does);
//  - the queue (`queue` waiting at most, then refused: an error) and
//    continuous batching (`parallel` sequences at once, prefill in chunks
//    of `batch_tokens` per step), with each step costing the calibrated
//    step, per-sequence, prefill-token and attention times (a decoder
//    attends to its context, a prefilled token to the tokens before it:
//    prefill's attention grows with the square of the prompt);
//  - the prefix cache (L2): a request whose leading tokens were computed
//    before (a system prompt, its session's earlier turns, a trace's shared
//    blocks) prefills only the rest while they are still cached; cached
//    prefixes live in the KV tokens no running sequence holds, least
//    recently used first out;
//  - limits: a prompt over the context, or a request asking for more than
//    max_tokens_cap tokens, is refused (an error); an answer that would run
//    past the context is cut short (its quality is the share delivered).
//  - the KV cache as the engine holds it: a running sequence holds its own
//    tokens (its prompt after the cached prefix, which it shares, then its
//    answer as it grows); it is admitted when its prompt fits beside a spare
//    block per running sequence.
// It reports throughput, time to first token (P50/P95/P99), the error rate
// and the quality score (docs/tuning.md): the mean over answered requests of
// 1 for an answer generated in full or found exactly, 0 for a wrong
// approximate hit, the delivered share for a cut answer.
//
// Deterministic: the same inputs and seed give the same result. Pure: no
// I/O, no clock. Thread-compatible (Simulate is a pure function).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tune/scenario.h"
#include "util/status.h"

namespace strata::tune {

// The knobs of `strata serve` the simulator models (their config keys in
// docs/api.md: engine.parallel, engine.queue, ...).
struct SimConfig {
  int32_t parallel = 16;
  int32_t queue = 64;
  int32_t batch_tokens = 512;
  int32_t ctx = 4096;
  int64_t kv_tokens = 0;  // 0 = 8 contexts
  int64_t l1_bytes = int64_t{64} << 20;
  double l1_ttl_s = 600;
  bool coalesce = true;
  bool l3 = false;
  double l3_similarity = 0.93;
  bool semantic = false;
  double semantic_similarity = 0.9;
  double semantic_verify = 0.05;     // share of would-be hits generated to verify them
  int64_t semantic_verify_min = 50;  // every would-be hit is, until this many were
  int32_t max_tokens_cap = 4096;
};

// A tier's measured behaviour at similarity thresholds (ascending): the
// share of reworded questions it finds, and of new questions it answers
// wrongly. Values between thresholds are interpolated linearly.
struct TierCurve {
  std::vector<double> threshold;
  std::vector<double> recall;
  std::vector<double> false_hit;
  double RecallAt(double t) const;
  double FalseHitAt(double t) const;
};

struct CostModel {
  // The built-in values: llama-100m (Q8_0) on 2 threads of an AMD EPYC
  // (docs/benchmarks.md, "Tuning"). `strata tune calibrate` measures yours.
  std::string source = "built-in: llama-100m Q8_0, 2 threads, AMD EPYC";
  double prefill_s_per_token = 0.598e-3;   // per prompt token prefilled
  double step_s = 2.11e-3;                 // per engine step (the weights streamed once)
  double decode_s_per_sequence = 1.09e-3;  // per decoding sequence per step
  double attention_s_per_token = 1.33e-6;  // per step, per context token of the decoding sequences
  // per prompt token prefilled, per token before it (prefill's attention;
  // batched, so far cheaper per pair than a decoder's)
  double prefill_attention_s_per_token = 0.252e-6;
  double hit_s = 5e-4;                 // serving an answer from a cache tier
  double answer_bytes_per_token = 24;  // an L1 entry's bytes per answer token
  double entry_bytes = 1024;           // an L1 entry's fixed bytes
  TierCurve l3;
  TierCurve semantic;
  CostModel();
};

// {"source", "prefill_s_per_token", "step_s", "decode_s_per_sequence",
//  "attention_s_per_token", "prefill_attention_s_per_token", "hit_s",
//  "answer_bytes_per_token",
//  "entry_bytes", "l3": {"threshold": [...], "recall": [...],
//  "false_hit": [...]}, "semantic": {...}}; missing fields keep the
// built-in values. InvalidArgument naming the field at fault.
util::StatusOr<CostModel> ParseCostModel(std::string_view json);
std::string CostModelJson(const CostModel& model);

struct SimResult {
  int64_t requests = 0;  // sent (a closed loop sends none after the duration)
  int64_t answered = 0;  // generated, or served from a tier
  int64_t errors = 0;    // refused (queue full, over the context) or never answered
  int64_t l1_hits = 0, coalesced = 0, l3_hits = 0, semantic_hits = 0, false_hits = 0;
  int64_t prompt_tokens = 0, cached_prompt_tokens = 0, output_tokens = 0;
  double duration_s = 0;  // first arrival to last answer
  double throughput_rps = 0;
  double output_tokens_per_s = 0;
  double ttft_p50_s = 0, ttft_p95_s = 0, ttft_p99_s = 0;  // 0 without samples
  int64_t ttft_samples = 0;  // answered requests outside the warm-up (and inside first_seconds)
  double error_rate = 0;
  double quality = 1;
};

SimResult Simulate(const Scenario& scenario, const std::vector<WorkloadRequest>& requests,
                   const SimConfig& config, const CostModel& cost, uint64_t seed);

}  // namespace strata::tune
