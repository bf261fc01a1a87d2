#include "engine/scheduler.h"

#include <algorithm>

#include <fmt/format.h>

namespace strata::engine {

struct Scheduler::Active {
  RequestId id = 0;
  SchedulerRequest req;
  SeqId seq = 0;                // engine sequence while running, 0 otherwise
  std::vector<int32_t> tokens;  // prompt then generated tokens
  int32_t n_prompt = 0;
  int32_t n_evaluated = 0;  // leading tokens already in the KV cache
  int32_t generated = 0;
  int32_t preemptions = 0;
  int32_t cached_tokens = -1;  // prompt tokens adopted from the prefix cache at first admission
  int32_t remaining() const { return static_cast<int32_t>(tokens.size()) - n_evaluated; }
  bool decoding() const { return !req.embed && remaining() == 1; }
};

util::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Start(Engine& engine,
                                                            const SchedulerOptions& o,
                                                            util::Logger& log) {
  if (o.max_running < 1 || o.max_running > 4096) {
    return util::InvalidArgumentError(
        fmt::format("max_running {} is outside [1, 4096]", o.max_running));
  }
  if (o.max_batch_tokens < 1 || o.max_batch_tokens > 65536) {
    return util::InvalidArgumentError(
        fmt::format("max_batch_tokens {} is outside [1, 65536]", o.max_batch_tokens));
  }
  if (o.max_queue < 0 || o.max_queue > 1000000) {
    return util::InvalidArgumentError(
        fmt::format("max_queue {} is outside [0, 1000000]", o.max_queue));
  }
  if (o.control != nullptr && o.control->idle_tick().count() <= 0) {
    return util::InvalidArgumentError("the scheduler control's idle tick must be positive");
  }
  const int32_t per_ctx =
      (engine.n_ctx() + engine.kv_pool().block_size() - 1) / engine.kv_pool().block_size();
  if (engine.kv_pool().n_blocks() < per_ctx) {
    return util::InvalidArgumentError(
        fmt::format("the KV cache ({} blocks) cannot hold one full context ({} blocks)",
                    engine.kv_pool().n_blocks(), per_ctx));
  }
  return std::unique_ptr<Scheduler>(new Scheduler(engine, o, log));
}

Scheduler::Scheduler(Engine& engine, const SchedulerOptions& options, util::Logger& log)
    : engine_(engine), options_(options), log_(log) {
  stats_.kv_blocks_total = engine_.kv_pool().n_blocks();
  thread_ = std::thread([this] { Loop(); });
}

Scheduler::~Scheduler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

util::StatusOr<RequestId> Scheduler::Submit(SchedulerRequest request) {
  if (request.sink == nullptr) return util::InvalidArgumentError("request has no sink");
  if (request.prompt.empty()) return util::InvalidArgumentError("the prompt is empty");
  if (request.max_tokens < 1 && !request.embed) {
    return util::InvalidArgumentError(
        fmt::format("max_tokens {} must be >= 1", request.max_tokens));
  }
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= engine_.n_vocab()) {
      return util::InvalidArgumentError(
          fmt::format("token id {} is outside the vocabulary [0, {})", t, engine_.n_vocab()));
    }
  }
  if (request.embed && static_cast<int64_t>(request.prompt.size()) > engine_.n_ctx()) {
    return util::OutOfRangeError(
        fmt::format("context length exceeded: the input has {} tokens, the context holds {}",
                    request.prompt.size(), engine_.n_ctx()));
  }
  if (!request.embed && static_cast<int64_t>(request.prompt.size()) >= engine_.n_ctx()) {
    return util::OutOfRangeError(fmt::format(
        "context length exceeded: the prompt has {} tokens, the context holds {} (and at least "
        "one must be generated)",
        request.prompt.size(), engine_.n_ctx()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (draining_ || stop_) return util::UnavailableError("the server is shutting down");
  ++stats_.submitted;
  if (in_flight_ >= options_.max_running + options_.max_queue) {
    ++stats_.refused;
    return util::ResourceExhaustedError(
        fmt::format("the request queue is full ({} waiting)", options_.max_queue));
  }
  // Requests submitted and not running wait for a slot (stats_.running is as
  // of the last step).
  const int32_t waiting = in_flight_ - stats_.running;
  if (max_waiting_ >= 0 && waiting >= max_waiting_) {
    ++stats_.refused;
    return util::ResourceExhaustedError(fmt::format(
        "the server is shedding load: {} requests already wait for a slot, as many as can start "
        "soon enough",
        waiting));
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
    cancels_.push_back(id);
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
  for (RequestId id = 1; id < next_id_; ++id) cancels_.push_back(id);
  wake_.notify_one();
  finished_.wait(lock, [this] { return in_flight_ == 0; });
  return false;
}

void Scheduler::Finish(Active& a, FinishReason reason, const util::Status& status) {
  if (a.seq != 0) {
    engine_.FreeSequence(a.seq);
    a.seq = 0;
  }
  {
    // Publish the freed blocks before the sink hears of the end, so whoever it
    // wakes sees them.
    std::lock_guard<std::mutex> lock(mu_);
    PublishPoolStats();
  }
  Usage u;
  u.prompt_tokens = a.n_prompt;
  u.cached_tokens = std::max(a.cached_tokens, 0);
  u.completion_tokens = a.generated;
  u.preemptions = a.preemptions;
  a.req.sink->OnFinish(reason, status, u);
  by_id_.erase(a.id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_;
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

void Scheduler::PreemptNewest() {
  std::unique_ptr<Active> a = std::move(running_.back());
  running_.pop_back();
  engine_.FreeSequence(a->seq);
  a->seq = 0;
  a->n_evaluated = 0;  // everything is recomputed on readmission
  ++a->preemptions;
  a->req.sink->OnRestart();
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.preemptions;
  }
  log_.Debug("preempted request {} ({} tokens) to free KV blocks", a->id, a->tokens.size());
  waiting_.push_front(std::move(a));
}

int32_t Scheduler::RunningCap() {
  if (options_.control == nullptr) return options_.max_running;
  SchedulerStats now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    now = stats_;
    now.waiting = static_cast<int32_t>(waiting_.size() + incoming_.size());
    now.draining = draining_;
  }
  now.running = static_cast<int32_t>(running_.size());
  now.kv_blocks_used = engine_.kv_pool().n_used();
  const AdmissionLimits limits = options_.control->BeforeAdmission(now);
  {
    std::lock_guard<std::mutex> lock(mu_);
    max_waiting_ = limits.max_waiting >= 1 ? limits.max_waiting : -1;
  }
  return limits.max_running <= 0 ? options_.max_running
                                 : std::min(limits.max_running, options_.max_running);
}

bool Scheduler::StepOnce(int32_t max_running) {
  const KvBlockPool& pool = engine_.kv_pool();
  const int32_t bs = pool.block_size();
  auto blocks_for = [bs](int64_t n) { return static_cast<int32_t>((n + bs - 1) / bs); };

  // Admit waiting requests while sequences and KV blocks allow: a request is
  // admitted when its whole sequence fits beside one spare block per running
  // request, so admitting it does not immediately force a preemption.
  int64_t prefix_prompt_tokens = 0, prefix_cached_tokens = 0;
  while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < max_running) {
    Active& head = *waiting_.front();
    const int32_t need = blocks_for(static_cast<int64_t>(head.tokens.size()) + 1);
    const int32_t spare = pool.n_free() - static_cast<int32_t>(running_.size());
    if (need > spare && !running_.empty()) break;
    head.seq = engine_.NewSequence(head.req.cache_namespace);
    // An embedding needs every prompt token's hidden state, which cached KV
    // blocks do not hold: it computes them all (and still publishes its
    // blocks for later requests).
    head.n_evaluated = head.req.embed ? 0 : engine_.AttachCachedPrefix(head.seq, head.tokens);
    if (head.cached_tokens < 0) {
      // First admission: the request's terms are fixed now, for good.
      head.cached_tokens = std::min(head.n_evaluated, head.n_prompt);
      if (head.req.cache_namespace != 0 && !head.req.embed) {  // it looked the cache up
        prefix_prompt_tokens += head.n_prompt;
        prefix_cached_tokens += head.cached_tokens;
      }
      const int32_t cap = head.req.sink->OnAdmit();
      if (cap > 0) head.req.max_tokens = std::min(head.req.max_tokens, cap);
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  {
    // Submit counts the waiting requests against the control's limit.
    std::lock_guard<std::mutex> lock(mu_);
    stats_.running = static_cast<int32_t>(running_.size());
    stats_.prefix_prompt_tokens += prefix_prompt_tokens;
    stats_.prefix_cached_tokens += prefix_cached_tokens;
  }
  if (running_.empty()) return false;

  while (true) {
    // Decode tokens first (one per request whose sequence lacks only its last
    // token), then prompt chunks in admission order, within the token budget.
    std::vector<Engine::Work> work;
    std::vector<Active*> owners;
    int32_t budget = options_.max_batch_tokens;
    for (auto& a : running_) {
      if (a->decoding() && budget > 0) {
        work.push_back(
            {a->seq, std::span(a->tokens).subspan(static_cast<size_t>(a->n_evaluated), 1), true});
        owners.push_back(a.get());
        --budget;
      }
    }
    for (auto& a : running_) {
      if (!a->decoding() && a->remaining() > 0 && budget > 0) {
        const int32_t k = std::min(a->remaining(), budget);
        const bool last = k == a->remaining();
        work.push_back({a->seq,
                        std::span(a->tokens).subspan(static_cast<size_t>(a->n_evaluated),
                                                     static_cast<size_t>(k)),
                        last && !a->req.embed, a->req.embed});
        owners.push_back(a.get());
        budget -= k;
      }
    }
    if (work.empty()) return false;

    auto logits = engine_.Step(work);
    if (!logits.ok() && logits.status().code() == util::StatusCode::kResourceExhausted &&
        running_.size() > 1) {
      PreemptNewest();
      continue;  // rebuild the step without it
    }
    if (!logits.ok()) {
      // Not a capacity problem: fail the requests of this step rather than retry forever.
      log_.Error("step failed: {}", logits.status().ToString());
      for (Active* a : owners) {
        auto it = std::find_if(running_.begin(), running_.end(),
                               [a](const auto& p) { return p.get() == a; });
        Finish(*a, FinishReason::kCancelled, logits.status());
        running_.erase(it);
      }
      return true;
    }

    int64_t prompt_tokens = 0, generated = 0;
    size_t li = 0, hi = 0;
    const size_t n_embd = static_cast<size_t>(engine_.model().config().n_embd);
    const std::span<const float> hidden = engine_.hidden();
    std::vector<Active*> done;
    std::vector<std::pair<FinishReason, util::Status>> done_why;
    for (size_t k = 0; k < work.size(); ++k) {
      Active& a = *owners[k];
      a.n_evaluated += static_cast<int32_t>(work[k].tokens.size());
      if (a.n_evaluated <= a.n_prompt) prompt_tokens += static_cast<int64_t>(work[k].tokens.size());
      if (work[k].hidden) {
        const size_t n = work[k].tokens.size();
        a.req.sink->OnHidden(hidden.subspan(hi * n_embd, n * n_embd), static_cast<int32_t>(n));
        hi += n;
        if (a.remaining() == 0) {
          done.push_back(&a);
          done_why.emplace_back(FinishReason::kLength, util::OkStatus());
        }
        continue;
      }
      if (!work[k].logits) continue;
      auto row = logits->subspan(li * static_cast<size_t>(engine_.n_vocab()),
                                 static_cast<size_t>(engine_.n_vocab()));
      ++li;
      auto token = a.req.sink->Choose(row);
      if (!token.ok()) {
        done.push_back(&a);
        done_why.emplace_back(FinishReason::kCancelled, token.status());
        continue;
      }
      a.tokens.push_back(*token);
      ++a.generated;
      ++generated;
      const bool keep = a.req.sink->OnToken(*token);
      if (a.req.stop_at_eog && engine_.model().tokenizer().IsEog(*token)) {
        done.push_back(&a);
        done_why.emplace_back(FinishReason::kEndOfTurn, util::OkStatus());
      } else if (!keep) {
        done.push_back(&a);
        done_why.emplace_back(FinishReason::kStopString, util::OkStatus());
      } else if (a.generated >= a.req.max_tokens ||
                 static_cast<int32_t>(a.tokens.size()) >= engine_.n_ctx()) {
        done.push_back(&a);
        done_why.emplace_back(FinishReason::kLength, util::OkStatus());
      }
    }
    for (size_t i = 0; i < done.size(); ++i) {
      Active* a = done[i];
      auto it = std::find_if(running_.begin(), running_.end(),
                             [a](const auto& p) { return p.get() == a; });
      std::unique_ptr<Active> owned = std::move(*it);
      running_.erase(it);
      Finish(*owned, done_why[i].first, done_why[i].second);
    }
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.steps;
    stats_.prompt_tokens += prompt_tokens;
    stats_.generated_tokens += generated;
    return true;
  }
}

void Scheduler::Loop() {
  while (true) {
    std::vector<RequestId> cancels;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const bool busy = !running_.empty() || !waiting_.empty();
      auto woken = [this] { return stop_ || !incoming_.empty() || !cancels_.empty(); };
      if (!busy && options_.control != nullptr) {
        // Wake up now and then so the control sees quiet time pass.
        wake_.wait_for(lock, options_.control->idle_tick(), woken);
      } else if (!busy) {
        wake_.wait(lock, woken);
      }
      while (!incoming_.empty()) {
        auto a = std::make_unique<Active>();
        a->id = incoming_.front().first;
        a->req = std::move(incoming_.front().second);
        incoming_.pop_front();
        a->tokens = a->req.prompt;
        a->n_prompt = static_cast<int32_t>(a->tokens.size());
        by_id_[a->id] = a.get();
        waiting_.push_back(std::move(a));
      }
      cancels.swap(cancels_);
      stop = stop_;
    }
    if (stop) {
      for (auto& a : waiting_) {
        Finish(*a, FinishReason::kCancelled, util::CancelledError("the scheduler stopped"));
      }
      waiting_.clear();
      for (auto& a : running_) {
        Finish(*a, FinishReason::kCancelled, util::CancelledError("the scheduler stopped"));
      }
      running_.clear();
      return;
    }
    for (RequestId id : cancels) {
      auto found = by_id_.find(id);
      if (found == by_id_.end()) continue;
      Active* a = found->second;
      auto rit = std::find_if(running_.begin(), running_.end(),
                              [a](const auto& p) { return p.get() == a; });
      if (rit != running_.end()) {
        std::unique_ptr<Active> owned = std::move(*rit);
        running_.erase(rit);
        Finish(*owned, FinishReason::kCancelled, util::OkStatus());
        continue;
      }
      auto wit = std::find_if(waiting_.begin(), waiting_.end(),
                              [a](const auto& p) { return p.get() == a; });
      if (wit != waiting_.end()) {
        std::unique_ptr<Active> owned = std::move(*wit);
        waiting_.erase(wit);
        Finish(*owned, FinishReason::kCancelled, util::OkStatus());
      }
    }
    StepOnce(RunningCap());
    std::lock_guard<std::mutex> lock(mu_);
    stats_.waiting = static_cast<int32_t>(waiting_.size());
    stats_.running = static_cast<int32_t>(running_.size());
    PublishPoolStats();
  }
}

}  // namespace strata::engine
