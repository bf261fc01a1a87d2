#include "gateway/internal/flight.h"

#include <algorithm>

#include "gateway/internal/response_tiers.h"

namespace strata::gateway {

Flight::Flight(int32_t n_choices, std::optional<cache::CacheKey> key,
               std::chrono::steady_clock::time_point started, Hook on_complete)
    : n_choices_(n_choices),
      key_(std::move(key)),
      started_(started),
      on_complete_(std::move(on_complete)),
      finished_(static_cast<size_t>(n_choices), false) {}

bool Flight::AdmitLocked(const Event& e, bool* hooked,
                         std::shared_ptr<backend::Run>* finished_run) {
  const size_t i = static_cast<size_t>(e.index);
  if (finished_[i]) return false;
  bool complete = false;
  if (e.kind == Event::Kind::kFinish) {
    finished_[i] = true;
    if (!e.status.ok() || e.finish == FinishReason::kCancelled) succeeded_ = false;
    complete = ++n_finished_ == n_choices_;
    if (complete) *finished_run = std::move(run_);
  }
  *hooked = complete && on_complete_;
  return true;
}

void Flight::AppendLocked(std::vector<Event>&& batch) {
  if (events_.empty()) {
    events_.swap(batch);  // the common case: the readers had read everything
    return;
  }
  const size_t need = events_.size() + batch.size();
  if (need > events_.capacity()) events_.reserve(std::max(need, 2 * events_.capacity()));
  for (Event& e : batch) events_.push_back(std::move(e));
}

void Flight::CompleteWith(Event&& last, const std::vector<Event>& log, bool succeeded) {
  // The hook (store in L1, leave the single-flight table) runs before the
  // last event is readable, so a client that saw its answer end and asks
  // again finds the answer in L1 rather than a finished flight.
  on_complete_(*this, succeeded, log);
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(last));
    ready = TakeReady();
  }
  cv_.notify_all();
  for (auto& fn : ready) fn();
}

void Flight::Push(Event&& e) {
  // Dropped last, after the hook and the readers' callbacks: a run may hold
  // this flight (a remote run holds its sink), so keeping a finished run
  // would keep both alive forever.
  std::shared_ptr<backend::Run> finished_run;
  std::vector<Event> log;  // the whole flight, when `e` completes one with a hook
  bool succeeded = false;
  std::vector<std::function<void()>> ready;
  bool hooked = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!AdmitLocked(e, &hooked, &finished_run)) return;
    if (hooked) {
      log = events_;
      log.push_back(e);
      succeeded = succeeded_ && storable_;
    } else {
      events_.push_back(std::move(e));
      ready = TakeReady();
    }
  }
  if (hooked) {
    CompleteWith(std::move(e), log, succeeded);
    return;
  }
  cv_.notify_all();
  for (auto& fn : ready) fn();
}

void Flight::PushAll(std::vector<Event>&& batch) {
  std::shared_ptr<backend::Run> finished_run;  // dropped last (see Push)
  std::vector<Event> log;
  bool succeeded = false;
  std::optional<Event> last;  // the event that completes a flight with a hook
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The admitted events, kept in place. After the event that finishes
    // the last choice nothing more is admitted.
    size_t kept = 0;
    for (size_t k = 0; k < batch.size(); ++k) {
      bool hooked = false;
      if (!AdmitLocked(batch[k], &hooked, &finished_run)) continue;
      if (hooked) {
        log = events_;
        log.insert(log.end(), batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(kept));
        log.push_back(batch[k]);
        succeeded = succeeded_ && storable_;
        last = std::move(batch[k]);
        break;
      }
      if (kept != k) batch[kept] = std::move(batch[k]);
      ++kept;
    }
    batch.erase(batch.begin() + static_cast<std::ptrdiff_t>(kept), batch.end());
    if (!batch.empty()) {
      AppendLocked(std::move(batch));
      ready = TakeReady();
    }
  }
  cv_.notify_all();
  for (auto& fn : ready) fn();
  if (last) CompleteWith(std::move(*last), log, succeeded);
}

std::vector<std::function<void()>> Flight::TakeReady() {
  std::vector<std::function<void()>> ready;
  for (size_t i = 0; i < waiters_.size();) {
    const bool readable = events_.size() > (shared() ? waiters_[i].cursor : 0);
    if (!readable) {
      ++i;
      continue;
    }
    ready.push_back(std::move(waiters_[i].ready));
    waiters_[i] = std::move(waiters_.back());
    waiters_.pop_back();
  }
  return ready;
}

void Flight::NotifyWhenReadable(const void* reader, size_t cursor, std::function<void()> ready) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const bool readable = events_.size() > (shared() ? cursor : 0);
    auto mine = std::find_if(waiters_.begin(), waiters_.end(),
                             [reader](const Waiter& w) { return w.reader == reader; });
    if (!readable) {
      if (mine != waiters_.end()) {
        *mine = Waiter{reader, cursor, std::move(ready)};
      } else {
        waiters_.push_back(Waiter{reader, cursor, std::move(ready)});
      }
      return;
    }
    if (mine != waiters_.end()) waiters_.erase(mine);
  }
  ready();
}

void Flight::DoNotStore() {
  std::lock_guard<std::mutex> lock(mu_);
  storable_ = false;
}

void Flight::Fail(const util::Status& status) {
  for (int32_t i = 0; i < n_choices_; ++i) {
    Event e;
    e.kind = Event::Kind::kFinish;
    e.index = i;
    e.finish = FinishReason::kCancelled;
    e.status = status;
    Push(std::move(e));
  }
}

bool Flight::Read(size_t* cursor, std::chrono::steady_clock::time_point deadline,
                  std::vector<Event>* out) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!shared()) {
    if (!cv_.wait_until(lock, deadline, [this] { return !events_.empty(); })) return false;
    out->swap(events_);  // the flight keeps the reader's empty vector, and its capacity
    return true;
  }
  if (!cv_.wait_until(lock, deadline, [&] { return events_.size() > *cursor; })) return false;
  out->insert(out->end(), events_.begin() + static_cast<std::ptrdiff_t>(*cursor), events_.end());
  *cursor = events_.size();
  return true;
}

void Flight::SetRun(std::shared_ptr<backend::Run> run) {
  bool cancel = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A run that finished every choice inside Start (it failed at once) has
    // nothing left to cancel; keeping it could keep this flight alive.
    if (n_finished_ == n_choices_) return;
    run_ = run;
    cancel = cancel_requested_;
  }
  if (cancel) run->Cancel();
}

void Flight::CancelRun() {
  std::shared_ptr<backend::Run> run;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_requested_ = true;
    run = run_;
  }
  if (run) run->Cancel();  // without the lock: the run may push events as it stops
}

StoredResponse::StoredResponse(std::vector<Event> events, int32_t n_choices, int32_t prompt_tokens,
                               AnswerOrigin origin)
    : events_(std::move(events)),
      n_choices_(n_choices),
      prompt_tokens_(prompt_tokens),
      origin_(std::move(origin)) {
  // What the entry holds on the heap, for L1's byte budget.
  bytes_ = sizeof(*this) + events_.capacity() * sizeof(Event) + origin_.tenant.capacity() +
           origin_.model.capacity() + origin_.prompt.capacity();
  for (const Event& e : events_) {
    bytes_ += e.text.capacity() + e.stop_sequence.capacity() + e.status.message().size() +
              e.terms.capacity() + e.logprobs.capacity() * sizeof(TokenLogprob) +
              e.token_ids.capacity() * sizeof(int32_t) + e.replica.capacity();
    for (const TokenLogprob& lp : e.logprobs) {
      bytes_ += lp.text.capacity() + lp.bytes.capacity() + lp.top.capacity() * sizeof(lp.top[0]);
      for (const auto& t : lp.top) bytes_ += t.first.capacity();
    }
  }
}

void Flight::Forget(const void* reader) {
  std::function<void()> dropped;  // destroyed after the lock is released
  std::lock_guard<std::mutex> lock(mu_);
  auto mine = std::find_if(waiters_.begin(), waiters_.end(),
                           [reader](const Waiter& w) { return w.reader == reader; });
  if (mine == waiters_.end()) return;
  dropped = std::move(mine->ready);
  waiters_.erase(mine);
}

FlightGeneration::FlightGeneration(std::shared_ptr<Flight> flight,
                                   std::shared_ptr<ResponseTiers> tiers, int32_t prompt_tokens,
                                   CacheOutcome outcome, bool defers_stream_head)
    : flight_(std::move(flight)),
      tiers_(std::move(tiers)),
      pending_(flight_->n_choices()),
      prompt_tokens_(prompt_tokens),
      outcome_(outcome),
      defers_head_(defers_stream_head) {}

FlightGeneration::~FlightGeneration() {
  flight_->Forget(this);
  if (pending_ > 0) Cancel();
}

util::StatusOr<Event> FlightGeneration::Next(std::chrono::steady_clock::time_point deadline) {
  if (pending_ == 0) return util::OutOfRangeError("every choice has finished");
  if (read_at_ == read_.size()) {
    read_.clear();  // keeps its capacity for the next batch
    read_at_ = 0;
    if (!flight_->Read(&cursor_, deadline, &read_)) {
      return util::DeadlineExceededError("no token before the deadline");
    }
  }
  Event& e = read_[read_at_++];
  if (e.kind == Event::Kind::kFinish) --pending_;
  return std::move(e);
}

void FlightGeneration::NotifyWhenReady(std::function<void()> ready) {
  if (pending_ == 0 || read_at_ < read_.size()) {
    ready();  // Next answers without waiting
    return;
  }
  flight_->NotifyWhenReadable(this, cursor_, std::move(ready));
}

void FlightGeneration::Cancel() {
  if (left_) return;
  left_ = true;
  // An unregistered flight has this one reader; a registered one stops when
  // its last subscriber leaves (the table then forgets it, so nobody joins a
  // stopped flight).
  const bool last = tiers_ ? tiers_->Leave(*flight_) : true;
  if (last) flight_->CancelRun();
}

util::StatusOr<Event> ReplayGeneration::Next(std::chrono::steady_clock::time_point) {
  if (next_ == stored_->events().size()) return util::OutOfRangeError("every choice has finished");
  Event e = stored_->events()[next_++];
  // A replayed answer read nothing from a prefix cache; its own prompt's
  // size replaces the stored one wherever the stored counts stand.
  const bool counts = e.kind == Event::Kind::kFinish || e.usage.prompt_tokens != 0;
  if (prompt_tokens_ && counts) {
    e.usage.prompt_tokens = *prompt_tokens_;
    e.usage.cached_tokens = 0;
    e.usage.cache_write_tokens = 0;
  }
  return e;
}

}  // namespace strata::gateway
