#include "engine/step_loop.h"

#include <algorithm>

#include <fmt/format.h>

namespace strata::engine {

struct StepLoop::Active {
  RequestId id = 0;
  SchedulerRequest req;
  SeqId seq = 0;                // engine sequence while running, 0 otherwise
  std::vector<int32_t> tokens;  // prompt then generated tokens
  int32_t n_prompt = 0;
  int32_t n_evaluated = 0;  // leading tokens already in the KV cache
  int32_t generated = 0;
  int32_t preemptions = 0;
  int32_t cached_tokens = -1;  // prompt tokens adopted from the prefix cache at first admission
  int32_t max_tokens_cut = 0;  // taken off max_tokens by memory-aware admission
  int32_t remaining() const { return static_cast<int32_t>(tokens.size()) - n_evaluated; }
  bool decoding() const { return !req.embed && remaining() == 1; }
};

// One forward pass: work[k] is fed by owners[k].
struct StepLoop::Batch {
  std::vector<Engine::Work> work;
  std::vector<Active*> owners;
  bool prefill = false;  // some work is a prompt chunk (for the timing split)
};

util::StatusOr<std::unique_ptr<StepLoop>> StepLoop::Create(Engine& engine, const StepLoopOptions& o,
                                                           util::Logger& log,
                                                           StepObserver* observer) {
  if (o.max_batch_tokens < 1 || o.max_batch_tokens > 65536) {
    return util::InvalidArgumentError(
        fmt::format("max_batch_tokens {} is outside [1, 65536]", o.max_batch_tokens));
  }
  if (!(o.kv_pressure >= 0 && o.kv_pressure < 1) || o.kv_min_grant < 1 ||
      o.kv_min_grant > (1 << 20)) {
    return util::InvalidArgumentError(
        fmt::format("kv_pressure {} is outside [0, 1) or kv_min_grant {} outside [1, 1048576]",
                    o.kv_pressure, o.kv_min_grant));
  }
  const int32_t per_ctx =
      (engine.n_ctx() + engine.kv_pool().block_size() - 1) / engine.kv_pool().block_size();
  if (engine.kv_pool().n_blocks() < per_ctx) {
    return util::InvalidArgumentError(
        fmt::format("the KV cache ({} blocks) cannot hold one full context ({} blocks)",
                    engine.kv_pool().n_blocks(), per_ctx));
  }
  return std::unique_ptr<StepLoop>(new StepLoop(engine, o, log, observer));
}

StepLoop::StepLoop(Engine& engine, const StepLoopOptions& options, util::Logger& log,
                   StepObserver* observer)
    : engine_(engine), options_(options), log_(log), observer_(observer) {}

StepLoop::~StepLoop() { CancelAll(util::CancelledError("the step loop stopped")); }

util::Status StepLoop::Check(const Engine& engine, const SchedulerRequest& request) {
  if (request.sink == nullptr) return util::InvalidArgumentError("request has no sink");
  if (request.prompt.empty()) return util::InvalidArgumentError("the prompt is empty");
  if (request.max_tokens < 1 && !request.embed) {
    return util::InvalidArgumentError(
        fmt::format("max_tokens {} must be >= 1", request.max_tokens));
  }
  for (int32_t t : request.prompt) {
    if (t < 0 || t >= engine.n_vocab()) {
      return util::InvalidArgumentError(
          fmt::format("token id {} is outside the vocabulary [0, {})", t, engine.n_vocab()));
    }
  }
  if (request.embed && static_cast<int64_t>(request.prompt.size()) > engine.n_ctx()) {
    return util::OutOfRangeError(
               fmt::format("context length exceeded: the input has {} tokens, the context holds {}",
                           request.prompt.size(), engine.n_ctx()))
        .WithReason(util::ErrorReason::kContextLengthExceeded);
  }
  if (!request.embed && static_cast<int64_t>(request.prompt.size()) >= engine.n_ctx()) {
    return util::OutOfRangeError(
               fmt::format("context length exceeded: the prompt has {} tokens, the context holds "
                           "{} (and at least one must be generated)",
                           request.prompt.size(), engine.n_ctx()))
        .WithReason(util::ErrorReason::kContextLengthExceeded);
  }
  return util::OkStatus();
}

void StepLoop::Add(RequestId id, SchedulerRequest request) {
  auto a = std::make_unique<Active>();
  a->id = id;
  a->req = std::move(request);
  a->tokens = a->req.prompt;
  a->n_prompt = static_cast<int32_t>(a->tokens.size());
  by_id_[id] = a.get();
  last_id_ = std::max(last_id_, id);
  waiting_.push_back(std::move(a));
}

util::StatusOr<RequestId> StepLoop::Submit(SchedulerRequest request) {
  STRATA_RETURN_IF_ERROR(Check(engine_, request));
  const RequestId id = last_id_ + 1;
  Add(id, std::move(request));
  return id;
}

void StepLoop::Cancel(RequestId id, const util::Status& status) {
  pending_cancels_.emplace_back(id, status);
  if (!busy_) DrainCancels();
}

void StepLoop::DrainCancels() {
  busy_ = true;
  // A sink's OnFinish may cancel again: that lands in the list and is taken here too.
  for (size_t i = 0; i < pending_cancels_.size(); ++i) {
    const auto [id, status] = pending_cancels_[i];
    CancelNow(id, status);
  }
  pending_cancels_.clear();
  busy_ = false;
}

void StepLoop::CancelNow(RequestId id, const util::Status& status) {
  auto found = by_id_.find(id);
  if (found == by_id_.end()) return;
  const Active* a = found->second;
  auto rit =
      std::find_if(running_.begin(), running_.end(), [a](const auto& p) { return p.get() == a; });
  if (rit != running_.end()) {
    Finish(TakeRunning(a), FinishReason::kCancelled, status);
    return;
  }
  auto wit =
      std::find_if(waiting_.begin(), waiting_.end(), [a](const auto& p) { return p.get() == a; });
  if (wit != waiting_.end()) {
    std::unique_ptr<Active> owned = std::move(*wit);
    waiting_.erase(wit);
    Finish(std::move(owned), FinishReason::kCancelled, status);
  }
}

void StepLoop::CancelAll(const util::Status& status) {
  const bool was_busy = busy_;
  busy_ = true;
  std::deque<std::unique_ptr<Active>> waiting = std::move(waiting_);
  waiting_.clear();
  for (auto& a : waiting) Finish(std::move(a), FinishReason::kCancelled, status);
  std::vector<std::unique_ptr<Active>> running = std::move(running_);
  running_.clear();
  for (auto& a : running) Finish(std::move(a), FinishReason::kCancelled, status);
  busy_ = was_busy;
  if (!busy_) DrainCancels();
}

bool StepLoop::Step(int32_t max_running) {
  busy_ = true;
  Admit(max_running);
  bool ran = false;
  if (!running_.empty()) {
    Batch batch;
    auto logits = RunStep(batch);
    ran = !batch.work.empty();
    if (ran && logits.ok() && options_.health) {
      if (util::Status health = options_.health(); !health.ok()) logits = health;
    }
    if (ran && logits.ok()) ApplyStep(batch, *logits);
    if (ran && !logits.ok()) FailStep(batch, logits.status());
  }
  DrainCancels();
  return ran;
}

void StepLoop::RunUntilIdle(int32_t max_running) {
  while ((!running_.empty() || !waiting_.empty()) && Step(max_running)) {
  }
}

// Admits waiting requests in order while fewer than `max_running` run and KV
// blocks allow: a request is admitted when its whole sequence fits beside one
// spare block per running request, so admitting it does not immediately force
// a preemption (with nothing running, the head is always admitted: the pool
// holds a full context). Under KV pressure (fewer than kv_pressure of the
// blocks free) the running requests' growth to their max_tokens is reserved
// first, and a new request gets only what is left (see StepLoopOptions). A
// request admitted for the first time adopts its cached prefix and fixes its
// terms (OnAdmit); a preempted one keeps them.
void StepLoop::Admit(int32_t max_running) {
  const KvBlockPool& pool = engine_.kv_pool();
  const int32_t bs = pool.block_size();
  auto blocks_for = [bs](int64_t n) { return static_cast<int32_t>((n + bs - 1) / bs); };
  // The blocks a request still needs to finish (to its max_tokens, within
  // the context) beyond what it holds.
  auto growth = [&](const Active& a) {
    const int64_t final_len =
        a.req.embed ? a.n_prompt
                    : std::min<int64_t>(a.n_prompt + static_cast<int64_t>(a.req.max_tokens),
                                        engine_.n_ctx());
    return static_cast<int64_t>(
        std::max(0, blocks_for(final_len) - blocks_for(engine_.SequenceLength(a.seq))));
  };
  int64_t reserved = 0;  // what every running request still needs
  int64_t taken = 0;     // prompt blocks of the requests admitted this round
  if (options_.kv_pressure > 0) {
    for (const auto& a : running_) reserved += growth(*a);
  }
  while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < max_running) {
    Active& head = *waiting_.front();
    const int32_t need = blocks_for(static_cast<int64_t>(head.tokens.size()) + 1);
    const int32_t spare = pool.n_free() - static_cast<int32_t>(running_.size());
    if (need > spare && !running_.empty()) break;
    // Pressure: the blocks free once this round's admissions hold their
    // prompts are below the threshold.
    const bool pressure =
        options_.kv_pressure > 0 && static_cast<double>(pool.n_free() - taken) <
                                        options_.kv_pressure * static_cast<double>(pool.n_blocks());
    // The tokens this request may generate in all (0: no limit from memory).
    int32_t grant = 0;
    if (pressure && !head.req.embed) {
      const int64_t room = (static_cast<int64_t>(pool.n_free()) - reserved) * bs;
      const int64_t fits = room - head.n_prompt;
      const bool first = head.cached_tokens < 0;
      // A preempted request has its terms: it waits until they fit again.
      const int64_t least = first ? std::min(head.req.max_tokens, options_.kv_min_grant)
                                  : static_cast<int64_t>(head.req.max_tokens);
      if (fits < least && !running_.empty()) {
        ++counters_.kv_waits;
        break;
      }
      if (first && fits < head.req.max_tokens) {
        grant = static_cast<int32_t>(std::max<int64_t>(fits, least));
      }
    }
    head.seq = engine_.NewSequence(head.req.cache_namespace);
    // An embedding needs every prompt token's hidden state, which cached KV
    // blocks do not hold: it computes them all (and still publishes its
    // blocks for later requests).
    head.n_evaluated = head.req.embed ? 0 : engine_.AttachCachedPrefix(head.seq, head.tokens);
    if (head.cached_tokens < 0) {
      // First admission: the request's terms are fixed now, for good.
      head.cached_tokens = std::min(head.n_evaluated, head.n_prompt);
      if (head.req.cache_namespace != 0 && !head.req.embed) {  // it looked the cache up
        counters_.prefix_prompt_tokens += head.n_prompt;
        counters_.prefix_cached_tokens += head.cached_tokens;
      }
      const int32_t cap = head.req.sink->OnAdmit();
      if (cap > 0) head.req.max_tokens = std::min(head.req.max_tokens, cap);
      if (grant > 0 && grant < head.req.max_tokens) {
        head.max_tokens_cut = head.req.max_tokens - grant;
        head.req.max_tokens = grant;
        ++counters_.kv_capped;
        log_.Debug("KV pressure: request {} granted {} tokens ({} asked), {} of {} blocks free",
                   head.id, grant, grant + head.max_tokens_cut, pool.n_free(), pool.n_blocks());
      }
    }
    if (options_.kv_pressure > 0) {
      reserved += growth(head);
      taken += need;
    }
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  Notify(StepEvent::kAdmitted);
}

// The next forward pass of the running requests: first one token for each
// request whose sequence lacks only its last token (decode), then prompt
// chunks in admission order, within max_batch_tokens. The last chunk of a
// generation request asks for logits, every chunk of an embed request for
// hidden states. Empty when nothing is left to evaluate.
StepLoop::Batch StepLoop::BuildStep() const {
  Batch b;
  int32_t budget = options_.max_batch_tokens;
  for (const auto& a : running_) {
    if (a->decoding() && budget > 0) {
      b.work.push_back(
          {a->seq, std::span(a->tokens).subspan(static_cast<size_t>(a->n_evaluated), 1), true});
      b.owners.push_back(a.get());
      --budget;
    }
  }
  for (const auto& a : running_) {
    if (!a->decoding() && a->remaining() > 0 && budget > 0) {
      const int32_t k = std::min(a->remaining(), budget);
      const bool last = k == a->remaining();
      b.work.push_back({a->seq,
                        std::span(a->tokens).subspan(static_cast<size_t>(a->n_evaluated),
                                                     static_cast<size_t>(k)),
                        last && !a->req.embed, a->req.embed});
      b.owners.push_back(a.get());
      b.prefill = true;
      budget -= k;
    }
  }
  return b;
}

// Builds `batch` and runs it. While the KV pool cannot hold it and more than
// one request runs, the newest is preempted and the batch rebuilt without it.
// Returns the logits ([works with logits][n_vocab]), or the step's error
// (nothing changed in the engine); `batch` is empty when there was nothing to
// run.
util::StatusOr<std::span<const float>> StepLoop::RunStep(Batch& batch) {
  while (true) {
    batch = BuildStep();
    if (batch.work.empty()) return std::span<const float>();
    const auto t0 =
        options_.clock ? options_.clock->Now() : std::chrono::steady_clock::time_point();
    auto logits = engine_.Step(batch.work);
    if (!logits.ok() && logits.status().code() == util::StatusCode::kResourceExhausted &&
        running_.size() > 1) {
      PreemptNewest();
      continue;  // rebuild the step without it
    }
    if (logits.ok() && options_.clock != nullptr) {
      const double s = util::SecondsBetween(t0, options_.clock->Now());
      (batch.prefill ? counters_.prefill_seconds : counters_.decode_seconds) += s;
    }
    return logits;
  }
}

// Applies a forward pass that ran: each request's evaluated tokens join its
// KV cache, its hidden states or logits go to its sink, and the requests that
// ended (end of prompt, end of turn, stop string, length, a failed Choose)
// are finished, in work order, after every request of the pass was applied.
void StepLoop::ApplyStep(const Batch& batch, std::span<const float> logits) {
  const size_t n_embd = static_cast<size_t>(engine_.model().config().n_embd);
  const size_t n_vocab = static_cast<size_t>(engine_.n_vocab());
  const std::span<const float> hidden = engine_.hidden();
  size_t li = 0, hi = 0;  // the next row of logits and of hidden states
  std::vector<std::pair<Active*, Ending>> done;
  for (size_t k = 0; k < batch.work.size(); ++k) {
    const Engine::Work& w = batch.work[k];
    Active& a = *batch.owners[k];
    const int32_t n = static_cast<int32_t>(w.tokens.size());
    a.n_evaluated += n;
    if (a.n_evaluated <= a.n_prompt) counters_.prompt_tokens += n;
    std::optional<Ending> end;
    if (w.hidden) {
      end = TakeHidden(a, hidden.subspan(hi * n_embd, static_cast<size_t>(n) * n_embd), n);
      hi += static_cast<size_t>(n);
    } else if (w.logits) {
      end = TakeToken(a, logits.subspan(li * n_vocab, n_vocab));
      ++li;
    }
    if (end) done.emplace_back(&a, std::move(*end));
  }
  for (auto& [a, end] : done) Finish(TakeRunning(a), end.reason, end.status);
  ++counters_.steps;
  Notify(StepEvent::kStepped);
}

// A forward pass failed for a reason other than capacity: its requests fail
// with that status rather than retry forever.
void StepLoop::FailStep(const Batch& batch, const util::Status& status) {
  log_.Error("step failed: {}", status.ToString());
  for (const Active* a : batch.owners) Finish(TakeRunning(a), FinishReason::kCancelled, status);
}

std::optional<StepLoop::Ending> StepLoop::TakeHidden(Active& a, std::span<const float> rows,
                                                     int32_t n_rows) {
  a.req.sink->OnHidden(rows, n_rows);
  if (a.remaining() > 0) return std::nullopt;
  return Ending{FinishReason::kLength, util::OkStatus()};
}

std::optional<StepLoop::Ending> StepLoop::TakeToken(Active& a, std::span<const float> logits) {
  auto token = a.req.sink->Choose(logits);
  if (!token.ok()) return Ending{FinishReason::kCancelled, token.status()};
  a.tokens.push_back(*token);
  ++a.generated;
  ++counters_.generated_tokens;
  const bool keep = a.req.sink->OnToken(*token);
  if (a.req.stop_at_eog && engine_.model().tokenizer().IsEog(*token)) {
    return Ending{FinishReason::kEndOfTurn, util::OkStatus()};
  }
  if (!keep) return Ending{FinishReason::kStopString, util::OkStatus()};
  if (a.generated >= a.req.max_tokens || static_cast<int32_t>(a.tokens.size()) >= engine_.n_ctx()) {
    return Ending{FinishReason::kLength, util::OkStatus()};
  }
  return std::nullopt;
}

void StepLoop::PreemptNewest() {
  std::unique_ptr<Active> a = std::move(running_.back());
  running_.pop_back();
  engine_.FreeSequence(a->seq);
  a->seq = 0;
  a->n_evaluated = 0;  // everything is recomputed on readmission
  ++a->preemptions;
  ++counters_.preemptions;
  a->req.sink->OnRestart();
  Notify(StepEvent::kPreempted);
  log_.Debug("preempted request {} ({} tokens) to free KV blocks", a->id, a->tokens.size());
  waiting_.push_front(std::move(a));
}

std::unique_ptr<StepLoop::Active> StepLoop::TakeRunning(const Active* a) {
  auto it =
      std::find_if(running_.begin(), running_.end(), [a](const auto& p) { return p.get() == a; });
  std::unique_ptr<Active> owned = std::move(*it);
  running_.erase(it);
  return owned;
}

void StepLoop::Finish(std::unique_ptr<Active> a, FinishReason reason, const util::Status& status) {
  if (a->seq != 0) {
    engine_.FreeSequence(a->seq);
    a->seq = 0;
  }
  // The driver publishes the freed blocks before the sink hears of the end,
  // so whoever it wakes sees them.
  Notify(StepEvent::kFinishing);
  Usage u;
  u.prompt_tokens = a->n_prompt;
  u.cached_tokens = std::max(a->cached_tokens, 0);
  u.completion_tokens = a->generated;
  u.preemptions = a->preemptions;
  u.max_tokens_cut = a->max_tokens_cut;
  a->req.sink->OnFinish(reason, status, u);
  by_id_.erase(a->id);
  Notify(StepEvent::kFinished);
}

util::StatusOr<int32_t> GreedyToken(std::span<const float> logits) {
  if (logits.empty()) return util::InvalidArgumentError("greedy: empty logits");
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

}  // namespace strata::engine
