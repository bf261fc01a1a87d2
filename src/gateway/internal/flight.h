// gateway/internal/flight.h — how events get from one generation to its
// readers, and how a stored generation is replayed (private to gateway/).
//
// A Flight carries the events of one generation (all its choices) from the
// backend's thread (the scheduler thread, an HTTP client I/O thread) to the
// threads reading it. Unshared (one reader, nothing
// kept) it is a queue: events are dropped once read. Shared (single flight
// and L1) it keeps the whole log and each reader has its own cursor, so a
// follower that joins late reads from the first event, and the log is what
// L1 stores. FlightGeneration reads a Flight; ReplayGeneration reads a
// StoredResponse (an L1 hit).
//
// Threading: Flight is thread-safe: Push runs on the backend's thread (Fail
// on a request thread), Read on reader threads. The completion hook runs
// once, on the thread whose event finished the last choice, without the
// flight's mutex held, and before that last event becomes readable: a reader
// that has seen the end of a shared flight knows its answer is already in L1
// and the flight has left the single-flight table. Generations are used by
// one thread each. StoredResponse is immutable.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "cache/response_cache.h"
#include "gateway/gateway.h"

namespace strata::gateway {

class Flight {
 public:
  // (this flight, whether its answer may be stored — every choice succeeded
  // on the request's own terms —, every event in order).
  using Hook = std::function<void(const Flight&, bool, const std::vector<Event>&)>;
  // `key` is set for shared flights; `on_complete` may be empty.
  Flight(int32_t n_choices, std::optional<cache::CacheKey> key,
         std::chrono::steady_clock::time_point started, Hook on_complete);

  bool shared() const { return key_.has_value(); }
  const cache::CacheKey& key() const { return *key_; }  // shared flights only
  int32_t n_choices() const { return n_choices_; }
  std::chrono::steady_clock::time_point started() const { return started_; }

  // Appends `e`; an event of a choice that already finished is dropped (a
  // choice failed by Fail, then cancelled by the engine).
  void Push(Event&& e);
  // Push of each of `events` in order, under one lock (`events` is left in
  // an unspecified state).
  void PushAll(std::vector<Event>&& events);
  // Every choice still running finishes now with `status` (not OK): readers
  // see an error, never a truncated success.
  void Fail(const util::Status& status);
  // A choice runs on cheaper terms than the request asked (the RT-Switcher's
  // policy): readers get the answer, the completion hook is told not to store it.
  void DoNotStore();
  // Every event readable by a reader at `*cursor` (shared: copied, the
  // cursor moved past them) or in the queue (unshared: the whole queue,
  // its vector handed over), into `*out`, which must be empty; false when
  // none came before `deadline`.
  bool Read(size_t* cursor, std::chrono::steady_clock::time_point deadline,
            std::vector<Event>* out);
  // Runs `ready` once an event is readable at `cursor` (shared) or at the
  // queue's head: now, on this thread, if one is; else on the thread whose
  // Push makes one readable, without the mutex held. `reader` names the
  // waiter: a second call with the same one replaces its pending callback.
  void NotifyWhenReadable(const void* reader, size_t cursor, std::function<void()> ready);
  // Drops `reader`'s pending callback (it stops reading).
  void Forget(const void* reader);

  // The backend's run producing this flight's events; held until every
  // choice has finished (then dropped: a run may hold this flight through
  // its sink), not kept at all when that happened before SetRun.
  void SetRun(std::shared_ptr<backend::Run> run);
  // Cancels the run (at once, or as soon as SetRun hands it over).
  void CancelRun();

 private:
  const int32_t n_choices_;
  const std::optional<cache::CacheKey> key_;
  const std::chrono::steady_clock::time_point started_;
  const Hook on_complete_;

  std::mutex mu_;
  std::condition_variable cv_;  // an event was appended
  // Guarded by mu_. Shared: the whole log. Unshared: a queue, which its
  // reader takes whole (Read hands over the vector).
  std::vector<Event> events_;
  std::vector<bool> finished_;         // guarded by mu_; per choice
  int32_t n_finished_ = 0;             // guarded by mu_
  bool succeeded_ = true;              // guarded by mu_
  bool storable_ = true;               // guarded by mu_; false after DoNotStore
  std::shared_ptr<backend::Run> run_;  // guarded by mu_
  bool cancel_requested_ = false;      // guarded by mu_; CancelRun came before SetRun
  // Readers waiting for an event: (reader, cursor, callback); guarded by mu_.
  struct Waiter {
    const void* reader;
    size_t cursor;
    std::function<void()> ready;
  };
  std::vector<Waiter> waiters_;
  // Takes the waiters an event now satisfies; the caller holds mu_.
  std::vector<std::function<void()>> TakeReady();
  // Push's bookkeeping for `e`, the caller holding mu_: false when `e` is
  // dropped (its choice finished). When `e` finishes the last choice, the
  // run moves to `*finished_run`, and for a flight with a hook `*hooked`
  // is set: the caller then runs the hook (CompleteWith) outside mu_.
  bool AdmitLocked(const Event& e, bool* hooked, std::shared_ptr<backend::Run>* finished_run);
  // Appends a batch of admitted events, the caller holding mu_.
  void AppendLocked(std::vector<Event>&& batch);
  // The hook with `log` (the flight up to and with `last`), then `last`
  // made readable; the caller holds no lock.
  void CompleteWith(Event&& last, const std::vector<Event>& log, bool succeeded);
};

// Whose answer a stored generation is, for invalidation (DELETE /v1/cache).
struct AnswerOrigin {
  std::string tenant;
  std::string model;         // the backend's name
  uint64_t fingerprint = 0;  // the backend's fingerprint (the model version)
  std::string prompt;        // PromptText of the request
};

// A finished generation as L1 keeps it: the API-neutral events, exactly as
// the run that produced them emitted them (text, logprobs, finish reasons,
// stop sequences and that run's usage), and whose answer it is.
class StoredResponse final : public cache::CachedValue {
 public:
  StoredResponse(std::vector<Event> events, int32_t n_choices, int32_t prompt_tokens,
                 AnswerOrigin origin = {});
  uint64_t ByteSize() const override { return bytes_; }
  const std::vector<Event>& events() const { return events_; }
  int32_t n_choices() const { return n_choices_; }
  int32_t prompt_tokens() const { return prompt_tokens_; }
  const AnswerOrigin& origin() const { return origin_; }

 private:
  const std::vector<Event> events_;
  const int32_t n_choices_;
  const int32_t prompt_tokens_;
  const AnswerOrigin origin_;
  uint64_t bytes_ = 0;  // set once by the constructor
};

class ResponseTiers;

// A reader of a Flight: the request that started it, or a follower.
class FlightGeneration final : public Generation {
 public:
  // `tiers` is set when the flight is registered in the single-flight table.
  FlightGeneration(std::shared_ptr<Flight> flight, std::shared_ptr<ResponseTiers> tiers,
                   int32_t prompt_tokens, CacheOutcome outcome, bool defers_stream_head);
  ~FlightGeneration() override;

  util::StatusOr<Event> Next(std::chrono::steady_clock::time_point deadline) override;
  void NotifyWhenReady(std::function<void()> ready) override;
  // This reader leaves. The engine stops only when nobody else reads the
  // flight: a leader whose client went away keeps generating for followers.
  void Cancel() override;
  int32_t prompt_tokens() const override { return prompt_tokens_; }
  int32_t n_choices() const override { return flight_->n_choices(); }
  CacheOutcome cache_outcome() const override { return outcome_; }
  bool defers_stream_head() const override { return defers_head_; }

 private:
  const std::shared_ptr<Flight> flight_;
  const std::shared_ptr<ResponseTiers> tiers_;
  size_t cursor_ = 0;  // shared flights: the next event to read
  // Events read from the flight and not yet returned by Next, from read_at_
  // on: one lock per batch of events, not per event.
  std::vector<Event> read_;
  size_t read_at_ = 0;
  int32_t pending_;  // choices not yet finished for this reader
  const int32_t prompt_tokens_;
  const CacheOutcome outcome_;
  const bool defers_head_;
  bool left_ = false;
};

// An L1 or L3 hit: the stored events, read without waiting. An L3 hit
// reports this request's own prompt tokens (none of them from the prefix
// cache) with the stored completion.
class ReplayGeneration final : public Generation {
 public:
  explicit ReplayGeneration(std::shared_ptr<const StoredResponse> stored)
      : stored_(std::move(stored)) {}
  // An approximate tier's answer (kL3 or kSemantic) for a request of
  // `prompt_tokens` tokens.
  ReplayGeneration(std::shared_ptr<const StoredResponse> stored, double similarity,
                   int32_t prompt_tokens, CacheOutcome outcome = CacheOutcome::kL3)
      : stored_(std::move(stored)),
        similarity_(similarity),
        prompt_tokens_(prompt_tokens),
        outcome_(outcome) {}
  util::StatusOr<Event> Next(std::chrono::steady_clock::time_point) override;
  // Every stored event is readable: runs `ready` at once.
  void NotifyWhenReady(std::function<void()> ready) override { ready(); }
  void Cancel() override {}
  int32_t prompt_tokens() const override {
    return prompt_tokens_ ? *prompt_tokens_ : stored_->prompt_tokens();
  }
  int32_t n_choices() const override { return stored_->n_choices(); }
  CacheOutcome cache_outcome() const override { return outcome_; }
  std::optional<double> cache_similarity() const override { return similarity_; }

 private:
  const std::shared_ptr<const StoredResponse> stored_;
  const std::optional<double> similarity_;      // set for L3 answers
  const std::optional<int32_t> prompt_tokens_;  // set for L3 answers
  const CacheOutcome outcome_ = CacheOutcome::kL1;
  size_t next_ = 0;
};

}  // namespace strata::gateway
