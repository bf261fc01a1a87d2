// cache/single_flight.h — one computation per key for concurrent identical misses.
//
// Promise: while a flight (one computation) for a key is registered, every
// Join for that key becomes one of its subscribers instead of starting a new
// one, so N identical concurrent misses cost one computation. A flight stays
// registered until its owner calls Finish, or until its last subscriber
// Leaves before it finished (then Leave returns true and the caller must
// stop the computation: nobody is waiting for it). A flight that was
// abandoned is never joined again, so no subscriber ever waits on a
// computation that was stopped. What a flight is (here: a broadcast log of
// gateway events) is the caller's type; this table only counts subscribers.
//
// Threading: thread-safe; one mutex guards the table and the subscriber
// counts. `on_absent` in Join runs with that mutex held (lock order: this
// table before anything on_absent locks, e.g. the L1 cache); it must not call
// back into the table.
//
// Usage:
//   auto j = flights.Join(key, [&] { return std::make_shared<Flight>(...); });
//   if (j.role == Role::kLeader) StartComputation(j.flight);
//   ... read j.flight ...
//   if (flights.Leave(key, j.flight.get())) StopComputation(j.flight);  // client went away
//   // when the computation ends: flights.Finish(key, flight.get());
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "cache/cache_key.h"

namespace strata::cache {

template <typename Flight>
class SingleFlight {
 public:
  enum class Role {
    kLeader,    // a new flight was registered; the caller starts the computation
    kFollower,  // subscribed to a running flight
    kNone,      // on_absent returned nullptr: nothing registered
  };
  struct Joined {
    std::shared_ptr<Flight> flight;
    Role role = Role::kNone;
  };

  // Subscribes to the flight registered under `key`, or, when there is none,
  // registers what `on_absent` returns (with one subscriber, the leader).
  Joined Join(const CacheKey& key, const std::function<std::shared_ptr<Flight>()>& on_absent) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = flights_.find(key);
    if (it != flights_.end()) {
      ++it->second.subscribers;
      return {it->second.flight, Role::kFollower};
    }
    std::shared_ptr<Flight> f = on_absent();
    if (f == nullptr) return {};
    flights_.emplace(key, Slot{f, 1});
    return {std::move(f), Role::kLeader};
  }

  // Drops one subscriber of `flight`. True when it was the last one of a
  // flight still registered: the flight is unregistered and the caller must
  // stop its computation. False when others still wait or the flight was
  // already finished (or abandoned).
  bool Leave(const CacheKey& key, const Flight* flight) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = flights_.find(key);
    if (it == flights_.end() || it->second.flight.get() != flight) return false;
    if (--it->second.subscribers > 0) return false;
    flights_.erase(it);
    return true;
  }

  // The computation ended: later Joins start a new flight (or, once the
  // result is cached, find it there). No-op when `flight` is not registered.
  void Finish(const CacheKey& key, const Flight* flight) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = flights_.find(key);
    if (it != flights_.end() && it->second.flight.get() == flight) flights_.erase(it);
  }

  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return flights_.size();
  }

 private:
  struct Slot {
    std::shared_ptr<Flight> flight;
    int64_t subscribers = 0;
  };
  mutable std::mutex mu_;  // guards flights_ (and each Slot's subscriber count)
  std::unordered_map<CacheKey, Slot, CacheKeyHash> flights_;
};

}  // namespace strata::cache
