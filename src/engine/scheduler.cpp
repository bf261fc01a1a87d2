#include "engine/scheduler.h"

#include <algorithm>
#include <future>

#include <fmt/format.h>

#include "util/thread_pool.h"

namespace strata::engine {

util::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Start(Engine& engine,
                                                            const SchedulerOptions& o,
                                                            util::Logger& log) {
  if (o.max_running < 1 || o.max_running > 4096) {
    return util::InvalidArgumentError(
        fmt::format("max_running {} is outside [1, 4096]", o.max_running));
  }
  if (o.max_queue < 0 || o.max_queue > 1000000) {
    return util::InvalidArgumentError(
        fmt::format("max_queue {} is outside [0, 1000000]", o.max_queue));
  }
  if (o.control != nullptr && o.control->idle_tick().count() <= 0) {
    return util::InvalidArgumentError("the scheduler control's idle tick must be positive");
  }
  std::unique_ptr<Scheduler> s(new Scheduler(engine, o, log));
  // The step loop checks max_batch_tokens and that the KV pool holds one
  // full context.
  STRATA_ASSIGN_OR_RETURN(s->loop_, StepLoop::Create(engine,
                                                     {.max_batch_tokens = o.max_batch_tokens,
                                                      .clock = nullptr,
                                                      .health = o.health,
                                                      .kv_pressure = o.kv_pressure,
                                                      .kv_min_grant = o.kv_min_grant},
                                                     log, s.get()));
  if (o.cpus.empty()) {
    s->thread_ = std::thread([p = s.get()] { p->Loop(); });
    return s;
  }
  // Bound before the loop starts, so that no step runs elsewhere. The
  // promise is the thread's as much as ours: shared, not on this stack.
  auto bound = std::make_shared<std::promise<util::Status>>();
  std::future<util::Status> bound_status = bound->get_future();
  s->thread_ = std::thread([p = s.get(), bound, cpus = o.cpus] {
    util::Status st = util::PinCurrentThread(cpus);
    const bool ok = st.ok();
    bound->set_value(std::move(st));
    if (ok) p->Loop();
  });
  util::Status st = bound_status.get();
  if (!st.ok()) {
    s->thread_.join();  // it did not start the loop
    return st;
  }
  return s;
}

Scheduler::Scheduler(Engine& engine, const SchedulerOptions& options, util::Logger& log)
    : engine_(engine), options_(options), log_(log) {
  stats_.kv_blocks_total = engine_.kv_pool().n_blocks();
}

// One RunOnEngine call: shared by the caller, who may stop waiting, and
// the scheduler thread, which runs it.
struct Scheduler::EngineTask {
  std::function<void(Engine&)> run;
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;     // guarded by mu
  util::Status outcome;  // guarded by mu; set with done
  void Finish(util::Status s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
      outcome = std::move(s);
    }
    done_cv.notify_all();
  }
};

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (const auto& t : engine_tasks_) t->Finish(util::UnavailableError("the scheduler stopped"));
}

util::Status Scheduler::RunOnEngine(std::function<void(Engine&)> task,
                                    std::chrono::milliseconds timeout) {
  auto t = std::make_shared<EngineTask>();
  t->run = std::move(task);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return util::UnavailableError("the scheduler stopped");
    engine_tasks_.push_back(t);
  }
  wake_.notify_all();
  std::unique_lock<std::mutex> lock(t->mu);
  if (!t->done_cv.wait_for(lock, timeout, [&] { return t->done; })) {
    return util::DeadlineExceededError(
        fmt::format("the engine did not get to the task within {} ms", timeout.count()));
  }
  return t->outcome;
}

util::StatusOr<RequestId> Scheduler::Submit(SchedulerRequest request) {
  STRATA_RETURN_IF_ERROR(StepLoop::Check(engine_, request));
  if (options_.health) STRATA_RETURN_IF_ERROR(options_.health());
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_ || stop_) {
    return util::UnavailableError("the server is shutting down")
        .WithReason(util::ErrorReason::kShuttingDown);
  }
  ++stats_.submitted;
  if (in_flight_ >= options_.max_running + options_.max_queue) {
    ++stats_.refused;
    return util::ResourceExhaustedError(
               fmt::format("the request queue is full ({} waiting)", options_.max_queue))
        .WithReason(util::ErrorReason::kQueueFull);
  }
  // Requests submitted and not running wait for a slot (stats_.running is as
  // of the last step).
  const int32_t waiting = in_flight_ - stats_.running;
  if (max_waiting_ >= 0 && waiting >= max_waiting_) {
    ++stats_.refused;
    return util::ResourceExhaustedError(
               fmt::format("the server is shedding load: {} requests already wait for a slot, as "
                           "many as can start soon enough",
                           waiting))
        .WithReason(util::ErrorReason::kLoadShed);
  }
  const RequestId id = next_id_++;
  incoming_.emplace_back(id, std::move(request));
  ++in_flight_;
  wake_.notify_one();
  return id;
}

void Scheduler::Cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.emplace_back(id, util::OkStatus());
  }
  wake_.notify_one();
}

SchedulerStats Scheduler::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerStats s = stats_;
  s.waiting += static_cast<int32_t>(incoming_.size());
  s.draining = draining_;
  return s;
}

bool Scheduler::Drain(std::chrono::milliseconds grace) {
  std::unique_lock<std::mutex> lock(mu_);
  draining_ = true;
  if (finished_.wait_for(lock, grace, [this] { return in_flight_ == 0; })) return true;
  log_.Warn("drain: {} requests still running after {} ms; cancelling them", in_flight_,
            grace.count());
  const util::Status cut =
      util::UnavailableError(
          fmt::format("the server shut down: the request was still running at the end "
                      "of the {} ms grace period",
                      grace.count()))
          .WithReason(util::ErrorReason::kShuttingDown);
  for (RequestId id = 1; id < next_id_; ++id) cancels_.emplace_back(id, cut);
  wake_.notify_one();
  finished_.wait(lock, [this] { return in_flight_ == 0; });
  return false;
}

void Scheduler::OnStepEvent(StepEvent event) {
  const StepCounters& c = loop_->counters();
  {
    std::lock_guard<std::mutex> lock(mu_);
    switch (event) {
      case StepEvent::kAdmitted:
        // Submit counts the waiting requests against the control's limit.
        stats_.running = loop_->n_running();
        stats_.prefix_prompt_tokens = c.prefix_prompt_tokens;
        stats_.prefix_cached_tokens = c.prefix_cached_tokens;
        stats_.kv_capped = c.kv_capped;
        stats_.kv_waits = c.kv_waits;
        return;
      case StepEvent::kPreempted:
        stats_.preemptions = c.preemptions;
        return;
      case StepEvent::kStepped:
        stats_.steps = c.steps;
        stats_.prompt_tokens = c.prompt_tokens;
        stats_.generated_tokens = c.generated_tokens;
        return;
      case StepEvent::kFinishing:
        PublishPoolStats();
        return;
      case StepEvent::kFinished:
        --in_flight_;
        break;
    }
  }
  finished_.notify_all();
}

void Scheduler::PublishPoolStats() {
  // Read here, on the scheduler thread that owns the pool, and copied under
  // mu_: /metrics reads the copy (Stats()), never the pool.
  const KvBlockPool& pool = engine_.kv_pool();
  const PrefixCacheStats& p = pool.prefix_stats();
  stats_.kv_blocks_used = pool.n_used();
  stats_.kv_blocks_shared = pool.n_shared();
  stats_.prefix_lookups = p.lookups;
  stats_.prefix_hits = p.hits;
  stats_.prefix_partial_hits = p.partial_hits;
  stats_.prefix_evictions = p.evictions;
  stats_.prefix_blocks = pool.n_published();
  stats_.prefix_bytes = static_cast<int64_t>(pool.bytes_per_block()) * pool.n_published();
}

int32_t Scheduler::RunningCap() {
  if (options_.control == nullptr) return options_.max_running;
  SchedulerStats now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    now = stats_;
    now.waiting = loop_->n_waiting() + static_cast<int32_t>(incoming_.size());
    now.draining = draining_;
  }
  now.running = loop_->n_running();
  now.kv_blocks_used = engine_.kv_pool().n_used();
  const AdmissionLimits limits = options_.control->BeforeAdmission(now);
  {
    std::lock_guard<std::mutex> lock(mu_);
    max_waiting_ = limits.max_waiting >= 1 ? limits.max_waiting : -1;
  }
  return limits.max_running <= 0 ? options_.max_running
                                 : std::min(limits.max_running, options_.max_running);
}

void Scheduler::Loop() {
  while (true) {
    std::vector<std::pair<RequestId, util::Status>> cancels;
    std::vector<std::shared_ptr<EngineTask>> tasks;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const bool busy = loop_->n_running() > 0 || loop_->n_waiting() > 0;
      auto woken = [this] {
        return stop_ || !incoming_.empty() || !cancels_.empty() || !engine_tasks_.empty();
      };
      if (!busy && options_.control != nullptr) {
        // Wake up now and then so the control sees quiet time pass.
        wake_.wait_for(lock, options_.control->idle_tick(), woken);
      } else if (!busy) {
        wake_.wait(lock, woken);
      }
      for (auto& [id, request] : incoming_) loop_->Add(id, std::move(request));
      incoming_.clear();
      cancels.swap(cancels_);
      tasks.swap(engine_tasks_);
      stop = stop_;
    }
    for (const auto& t : tasks) {
      if (stop) {
        t->Finish(util::UnavailableError("the scheduler stopped"));
        continue;
      }
      t->run(engine_);
      t->Finish(util::OkStatus());
    }
    tasks.clear();
    if (stop) {
      loop_->CancelAll(util::CancelledError("the scheduler stopped"));
      return;
    }
    for (const auto& [id, status] : cancels) loop_->Cancel(id, status);
    loop_->Step(RunningCap());
    std::lock_guard<std::mutex> lock(mu_);
    stats_.waiting = loop_->n_waiting();
    stats_.running = loop_->n_running();
    PublishPoolStats();
  }
}

SchedulerStats& operator+=(SchedulerStats& into, const SchedulerStats& s) {
  into.waiting += s.waiting;
  into.running += s.running;
  into.kv_blocks_used += s.kv_blocks_used;
  into.kv_blocks_total += s.kv_blocks_total;
  into.prefix_blocks += s.prefix_blocks;
  into.prefix_bytes += s.prefix_bytes;
  into.kv_blocks_shared += s.kv_blocks_shared;
  into.draining = into.draining || s.draining;
  const SchedulerStats c = CountersOf(s);
  into.steps += c.steps;
  into.prompt_tokens += c.prompt_tokens;
  into.generated_tokens += c.generated_tokens;
  into.preemptions += c.preemptions;
  into.kv_capped += c.kv_capped;
  into.kv_waits += c.kv_waits;
  into.submitted += c.submitted;
  into.refused += c.refused;
  into.prefix_lookups += c.prefix_lookups;
  into.prefix_hits += c.prefix_hits;
  into.prefix_partial_hits += c.prefix_partial_hits;
  into.prefix_evictions += c.prefix_evictions;
  into.prefix_prompt_tokens += c.prefix_prompt_tokens;
  into.prefix_cached_tokens += c.prefix_cached_tokens;
  return into;
}

SchedulerStats CountersOf(const SchedulerStats& s) {
  SchedulerStats c;
  c.steps = s.steps;
  c.prompt_tokens = s.prompt_tokens;
  c.generated_tokens = s.generated_tokens;
  c.preemptions = s.preemptions;
  c.kv_capped = s.kv_capped;
  c.kv_waits = s.kv_waits;
  c.submitted = s.submitted;
  c.refused = s.refused;
  c.prefix_lookups = s.prefix_lookups;
  c.prefix_hits = s.prefix_hits;
  c.prefix_partial_hits = s.prefix_partial_hits;
  c.prefix_evictions = s.prefix_evictions;
  c.prefix_prompt_tokens = s.prefix_prompt_tokens;
  c.prefix_cached_tokens = s.prefix_cached_tokens;
  return c;
}

}  // namespace strata::engine
