// engine/scheduler.h — continuous batching on a dedicated thread.
//
// Promise: requests submitted from any thread join the running batch at the
// next step. Each step first gives every running request its next decode
// token, then fills the rest of the step's token budget with prompt chunks of
// waiting requests (FIFO), so running streams keep flowing while new prompts
// are prefilled. When the KV pool cannot hold a step, the newest running
// request is preempted (its blocks freed, its tokens recomputed later, its
// output unchanged); a request that fits the context never fails for lack of
// blocks. A cancelled request (client gone) is removed and its blocks freed
// within one step. Every request ends with exactly one OnFinish. The steps
// themselves are a StepLoop's (step_loop.h), driven by the scheduler thread;
// the scheduler adds the inbox, the control and the published stats.
//
// An optional SchedulerControl (e.g. the RT-Switcher's, gateway/rt_control.h)
// is asked before every admission round how many sequences may run at once
// and how many requests may wait: lowering the first never preempts (running
// requests finish, new ones wait until the running set is below it); the
// second makes Submit refuse new requests (ResourceExhausted) while that many
// wait, and never drops a request already accepted. Each request's sink is asked once, when
// it first gets a sequence, for the terms it runs with (RequestSink::OnAdmit):
// a preempted request keeps them.
//
// Threading: the scheduler thread owns the Engine and calls every
// RequestSink and SchedulerControl method. Submit, Cancel, Stats and Drain
// are thread-safe.
//
// Usage:
//   auto sched = Scheduler::Start(engine, {.max_running = 16}, log);
//   STRATA_ASSIGN_OR_RETURN(RequestId id, sched->Submit({.prompt = ids, .max_tokens = 64,
//                                                         .sink = my_sink}));
//   ...
//   sched->Drain(std::chrono::seconds(30));  // SIGTERM: finish in-flight work, then stop
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/step_loop.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::engine {

struct SchedulerStats {
  int32_t waiting = 0;
  int32_t running = 0;
  int32_t kv_blocks_used = 0;
  int32_t kv_blocks_total = 0;
  int64_t steps = 0;
  int64_t prompt_tokens = 0;  // prompt tokens evaluated (recomputation included)
  int64_t generated_tokens = 0;
  int64_t preemptions = 0;
  int64_t kv_capped = 0;  // requests granted fewer tokens than they asked, under KV pressure
  int64_t kv_waits = 0;   // admissions held back for KV blocks the running requests will need
  int64_t submitted = 0;  // well-formed Submit calls: accepted, or refused for load
  int64_t refused = 0;    // Submit calls refused for load (full queue or the control's limit)
  bool draining = false;
  // The prefix cache (L2), as of the last step (engine/kv_pool.h). Blocks:
  int64_t prefix_lookups = 0;       // looked up (each admission looks up to the first miss)
  int64_t prefix_hits = 0;          // ... and found cached: prefix blocks reused
  int64_t prefix_partial_hits = 0;  // partly matching blocks whose first positions were copied
  int64_t prefix_evictions = 0;     // cached blocks reclaimed for new data
  int32_t prefix_blocks = 0;        // published blocks held, referenced or not
  int64_t prefix_bytes = 0;         // their KV bytes
  int32_t kv_blocks_shared = 0;     // blocks referenced by more than one sequence
  // Tokens, counted once per request at its first admission (requests with a
  // cache namespace only, embeddings excluded):
  int64_t prefix_prompt_tokens = 0;  // prompt tokens of requests that looked the cache up
  int64_t prefix_cached_tokens = 0;  // ... of them adopted from the cache
};

// Several schedulers seen as one (the local models of one server): every
// field of `s` added to `into`.
SchedulerStats& operator+=(SchedulerStats& into, const SchedulerStats& s);
// The monotonic counters of `s` alone (steps, tokens, preemptions, KV caps
// and waits, submits,
// refusals, prefix lookups, hits, partial hits, evictions and tokens), the
// gauges zero: what a stopped scheduler leaves to a running total, so the
// counters summed over schedulers never go down when one stops.
SchedulerStats CountersOf(const SchedulerStats& s);

// What a SchedulerControl allows from now on.
struct AdmissionLimits {
  int32_t max_running = 0;   // sequences at once; 0 = SchedulerOptions::max_running (the most)
  int32_t max_waiting = -1;  // >= 1: Submit refuses while this many requests wait for a slot;
                             // -1 = only SchedulerOptions::max_queue applies
};

// Step-level control of admission, called on the scheduler thread only.
class SchedulerControl {
 public:
  virtual ~SchedulerControl() = default;
  // Before each admission round (also when idle, at least every idle_tick()),
  // with the state the scheduler sees now. Returns the limits from now on; a
  // max_running above SchedulerOptions::max_running is clamped to it.
  virtual AdmissionLimits BeforeAdmission(const SchedulerStats& stats) = 0;
  // The longest an idle scheduler sleeps before calling BeforeAdmission again
  // (so a controller sees quiet periods); > 0.
  virtual std::chrono::milliseconds idle_tick() const = 0;
};

struct SchedulerOptions {
  int32_t max_running = 16;        // [1, 4096] sequences decoding or prefilling at once
  int32_t max_batch_tokens = 512;  // [1, 65536] tokens per forward pass (decode + prefill)
  int32_t max_queue = 256;  // [0, 1e6] requests waiting beyond max_running before Submit refuses
  // Borrowed; nullptr = none. Must outlive the Scheduler; used only on its thread.
  SchedulerControl* control = nullptr;
  // Asked after every forward pass and by Submit (StepLoopOptions::health):
  // a failure fails the step's requests and refuses new ones with it.
  // Must be thread-safe and cheap (an atomic read).
  std::function<util::Status()> health = nullptr;
  // Memory-aware admission (StepLoopOptions::kv_pressure, kv_min_grant).
  double kv_pressure = 0.25;
  int32_t kv_min_grant = 64;
  // The CPUs the scheduler's thread (the forward pass's thread 0) runs on;
  // empty = wherever the OS puts it. Start fails when it cannot be bound.
  std::vector<int32_t> cpus = {};
};

class Scheduler final : private StepObserver {
 public:
  // Starts the scheduler thread; `engine` (and everything it uses) must outlive
  // the Scheduler and is used only from that thread from now on.
  static util::StatusOr<std::unique_ptr<Scheduler>> Start(Engine& engine,
                                                          const SchedulerOptions& options,
                                                          util::Logger& log);
  // Cancels what is still running and joins the thread.
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // InvalidArgument for a malformed request, OutOfRange when the prompt does
  // not fit the context, ResourceExhausted when the queue is full (or as long
  // as the control's max_waiting allows), Unavailable while draining.
  util::StatusOr<RequestId> Submit(SchedulerRequest request);
  // Ends the request with kCancelled at the next step (no-op if it is done).
  void Cancel(RequestId id);
  SchedulerStats Stats() const;
  // Runs `task` on the scheduler thread between two steps, with the engine
  // it owns (for work on its state, such as an invalidation of the prefix
  // cache), and waits for it up to `timeout`: DeadlineExceeded after that
  // (the task still runs later: it must own what it uses), Unavailable when
  // the scheduler stops before running it.
  util::Status RunOnEngine(std::function<void(Engine&)> task, std::chrono::milliseconds timeout);
  // The context every request must fit (immutable).
  int32_t n_ctx() const { return engine_.n_ctx(); }
  // Stops accepting requests and waits until everything submitted has finished
  // or `grace` has passed; what is left is cancelled with Unavailable
  // (reason shutting_down), so its readers report the cut as an error, never
  // as a normal end. Returns true if nothing had to be cancelled.
  bool Drain(std::chrono::milliseconds grace);

 private:
  Scheduler(Engine& engine, const SchedulerOptions& options, util::Logger& log);
  void Loop();
  // The cap on running sequences for the next admission round.
  int32_t RunningCap();
  // Publishes what the loop reports into stats_ (and wakes Drain).
  void OnStepEvent(StepEvent event) override;
  // Copies the KV pool's state into stats_; the caller holds mu_.
  void PublishPoolStats();

  Engine& engine_;
  const SchedulerOptions options_;
  util::Logger& log_;

  // Shared with submitting threads; guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable wake_;      // new work, cancellation or shutdown
  std::condition_variable finished_;  // a request finished (Drain waits on it)
  std::deque<std::pair<RequestId, SchedulerRequest>> incoming_;
  std::vector<std::pair<RequestId, util::Status>> cancels_;  // OK: the client left
  struct EngineTask;
  std::vector<std::shared_ptr<EngineTask>> engine_tasks_;  // RunOnEngine's, not yet run
  RequestId next_id_ = 1;
  int32_t in_flight_ = 0;     // submitted and not yet finished
  int32_t max_waiting_ = -1;  // the control's limit on waiting requests; -1 = none
  bool draining_ = false;
  bool stop_ = false;
  SchedulerStats stats_;  // published by the scheduler thread after each step

  // Owned by the scheduler thread (set by Start before the thread starts):
  // the waiting and running requests and every step.
  std::unique_ptr<StepLoop> loop_;

  std::thread thread_;  // last: started after everything above is initialised
};

}  // namespace strata::engine
