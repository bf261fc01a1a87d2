// engine/step_loop.h — the batching loop: the one implementation of
// admission, chunked prefill, decode, preemption and finishing of requests
// (engine/request.h).
//
// Promise: a StepLoop holds waiting and running requests over one Engine.
// Each Step() admits waiting requests (FIFO) while sequence slots and KV
// blocks allow, builds one forward pass — every decoding request's next
// token first, then prompt chunks in admission order within
// max_batch_tokens —, runs it, and applies it: logits go to the request's
// sink (Choose, OnToken), an embedding request's final hidden states go to
// its sink (OnHidden), finished requests free their blocks and get exactly
// one OnFinish. When the KV pool cannot hold a step, the newest running
// request is preempted (blocks freed, tokens kept, OnRestart) and the step
// rebuilt; it is recomputed when readmitted, with the same output. Because
// the forward pass is batch-invariant, a request's tokens do not depend on
// what else runs beside it, nor on the chunk size.
//
// Two drivers: engine::Scheduler (scheduler.h) runs a StepLoop on its thread
// for requests submitted from anywhere; `strata generate` and the tests run
// one on the calling thread (Submit, then RunUntilIdle).
//
// Threading: thread-compatible; the thread that calls Step owns the Engine
// and is the thread every RequestSink and StepObserver method runs on.
// Check is thread-safe.
//
// Usage (synchronous):
//   STRATA_ASSIGN_OR_RETURN(auto loop, StepLoop::Create(engine, {.max_batch_tokens = 512}, log));
//   STRATA_RETURN_IF_ERROR(loop->Submit({.prompt = ids, .max_tokens = 64, .sink = sink}).status());
//   loop->RunUntilIdle(/*max_running=*/16);  // the sink has had its OnFinish
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/request.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::engine {

struct StepLoopOptions {
  int32_t max_batch_tokens = 512;  // [1, 65536] tokens per forward pass (decode + prefill)
  // Borrowed; times each forward pass into StepCounters' seconds when set
  // (nullptr = untimed). Must outlive the loop.
  const util::Clock* clock = nullptr;
  // Asked after every forward pass, before its results are used; a failure
  // fails that step's requests with it (the weights under the model went bad:
  // its file changed on disk). Empty = always healthy. Runs on the loop's thread.
  std::function<util::Status()> health = nullptr;
  // Memory-aware admission: while fewer than this share of the KV blocks
  // are free (cached prefix blocks count as free), a request is admitted
  // only where its prompt and its answer fit in the blocks the running
  // requests will not need to finish theirs (each to its max_tokens), and a
  // new request is granted only as many tokens as fit there: its max_tokens
  // is lowered, never below kv_min_grant (nor above what it asked). One that
  // does not fit waits, so the batch shrinks before a preemption is needed.
  // With nothing running the head is always admitted. [0, 1); 0 = off.
  double kv_pressure = 0.25;
  int32_t kv_min_grant = 64;  // [1, 1 << 20] tokens
};

// Cumulative since the loop was created.
struct StepCounters {
  int64_t steps = 0;             // forward passes that ran
  int64_t prompt_tokens = 0;     // prompt tokens evaluated (recomputation included)
  int64_t generated_tokens = 0;  // tokens chosen
  int64_t preemptions = 0;
  // Memory-aware admission (StepLoopOptions::kv_pressure): new requests
  // granted fewer tokens than they asked, and admission rounds that stopped
  // at a request the free blocks could not hold.
  int64_t kv_capped = 0;
  int64_t kv_waits = 0;
  // Counted once per request at its first admission (requests with a cache
  // namespace only, embeddings excluded):
  int64_t prefix_prompt_tokens = 0;  // prompt tokens of requests that looked the cache up
  int64_t prefix_cached_tokens = 0;  // ... of them adopted from the cache
  // With StepLoopOptions::clock: wall time of the forward passes that held a
  // prompt chunk (prefill), and of those that held decode tokens only.
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// What changed, for whoever drives the loop (the Scheduler publishes its
// stats from these).
enum class StepEvent {
  kAdmitted,   // an admission round ended: n_running() and the prefix counters are current
  kPreempted,  // a running request went back to waiting: counters().preemptions is current
  kStepped,    // a forward pass was applied: steps, prompt and generated tokens are current
  kFinishing,  // a request's blocks were freed; its OnFinish comes next
  kFinished,   // a request's OnFinish returned; it is gone
};

// Called on the stepping thread, never while a sink is being called.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void OnStepEvent(StepEvent event) = 0;
};

class StepLoop {
 public:
  // InvalidArgument when max_batch_tokens is out of range or the KV pool
  // cannot hold one full context. `engine` and `log` (and `observer`, when
  // set) must outlive the loop.
  static util::StatusOr<std::unique_ptr<StepLoop>> Create(Engine& engine,
                                                          const StepLoopOptions& options,
                                                          util::Logger& log,
                                                          StepObserver* observer = nullptr);
  // Cancels what is left (kCancelled, Cancelled status).
  ~StepLoop();
  StepLoop(const StepLoop&) = delete;
  StepLoop& operator=(const StepLoop&) = delete;

  // Whether `request` may run on `engine`: InvalidArgument for a malformed
  // request (no sink, empty prompt, max_tokens < 1, a token outside the
  // vocabulary), OutOfRange when the prompt does not fit the context.
  // Reads only what the engine fixed at creation: any thread may call it.
  static util::Status Check(const Engine& engine, const SchedulerRequest& request);
  // Queues a request that passed Check behind the waiting ones. `id` must be
  // new (ids need not be dense).
  void Add(RequestId id, SchedulerRequest request);
  // Check, then Add with an id above every id added so far.
  util::StatusOr<RequestId> Submit(SchedulerRequest request);
  // Ends the request with kCancelled and `status` (no-op if it is unknown or
  // done). Called from a sink during a step, it takes effect when the step
  // ends.
  void Cancel(RequestId id, const util::Status& status = util::OkStatus());
  // Cancels every request, waiting ones first.
  void CancelAll(const util::Status& status);

  // One forward pass over decode tokens and prompt chunks, admitting waiting
  // requests while fewer than `max_running` (>= 1) run. False if there was
  // nothing to run.
  bool Step(int32_t max_running);
  // Steps until no request is left.
  void RunUntilIdle(int32_t max_running);

  int32_t n_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t n_running() const { return static_cast<int32_t>(running_.size()); }
  const StepCounters& counters() const { return counters_; }

 private:
  struct Active;
  struct Batch;
  StepLoop(Engine& engine, const StepLoopOptions& options, util::Logger& log,
           StepObserver* observer);

  // The stages of Step (step_loop.cpp says what each promises).
  void Admit(int32_t max_running);
  Batch BuildStep() const;
  util::StatusOr<std::span<const float>> RunStep(Batch& batch);
  void ApplyStep(const Batch& batch, std::span<const float> logits);
  void FailStep(const Batch& batch, const util::Status& status);
  // Why a request ends after this step.
  struct Ending {
    FinishReason reason = FinishReason::kLength;
    util::Status status;
  };
  // ApplyStep's per-request parts; each returns the request's ending, if it
  // ends now.
  std::optional<Ending> TakeHidden(Active& a, std::span<const float> rows, int32_t n_rows);
  std::optional<Ending> TakeToken(Active& a, std::span<const float> logits);

  void PreemptNewest();
  std::unique_ptr<Active> TakeRunning(const Active* a);
  // Frees the request's sequence, calls OnFinish and forgets it.
  void Finish(std::unique_ptr<Active> a, FinishReason reason, const util::Status& status);
  void CancelNow(RequestId id, const util::Status& status);
  // Applies the cancellations sinks asked for while the loop was busy.
  void DrainCancels();
  void Notify(StepEvent event) {
    if (observer_ != nullptr) observer_->OnStepEvent(event);
  }

  Engine& engine_;
  const StepLoopOptions options_;
  util::Logger& log_;
  StepObserver* const observer_;  // nullptr = none

  std::deque<std::unique_ptr<Active>> waiting_;   // admitted order, preempted ones at the front
  std::vector<std::unique_ptr<Active>> running_;  // admission order (newest last)
  std::unordered_map<RequestId, Active*> by_id_;  // waiting and running
  RequestId last_id_ = 0;                         // the highest id added
  bool busy_ = false;  // inside Step or a cancellation: Cancel defers to pending_cancels_
  std::vector<std::pair<RequestId, util::Status>> pending_cancels_;
  StepCounters counters_;
};

// The most likely token of `logits` (the lowest id on ties); InvalidArgument
// when `logits` is empty. For sinks that choose greedily.
util::StatusOr<int32_t> GreedyToken(std::span<const float> logits);

}  // namespace strata::engine
