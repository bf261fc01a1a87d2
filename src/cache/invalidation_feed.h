// cache/invalidation_feed.h — how strata instances sharing one Redis tell
// each other of cache invalidations (DELETE /v1/cache).
//
// Promise: Announce appends a message to a Redis stream
// (<prefix>:invalidations, trimmed to about the last 1,000); every other
// feed on the same Redis and prefix that Listens gets it, in order, within
// about one poll interval. A feed never hears its own announcements. Messages
// from before Listen are not replayed: they concern answers a new instance
// does not hold. Redis being down never blocks anything longer than the
// timeout: Announce fails with Unavailable, the listener reconnects with
// exponential backoff (backoff_min doubling to backoff_max) and resumes
// after the last message it saw, so a short outage loses nothing the stream
// still holds. The messages are opaque bytes to the feed.
//
// Threading: Announce is thread-safe (one connection, under a mutex). The
// listener runs on the feed's own thread, started by Listen; StopListening
// and the destructor join it (within one poll), so no call comes after.
//
// Usage:
//   auto feed = InvalidationFeed::Create(shared_options, log).value();
//   feed->Listen([&](std::string_view m) { ApplyRemote(m); });
//   feed->Announce(Encode(what));  // after invalidating locally
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>

#include "cache/shared_store.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::cache {

class InvalidationFeed {
 public:
  // The address, timeout, backoff and key prefix of `options` are used
  // (validated as SharedStore::Create does). Connects lazily.
  static util::StatusOr<std::unique_ptr<InvalidationFeed>> Create(const SharedStoreOptions& options,
                                                                  util::Logger& log);
  ~InvalidationFeed();
  InvalidationFeed(const InvalidationFeed&) = delete;
  InvalidationFeed& operator=(const InvalidationFeed&) = delete;

  // Unavailable (naming Redis) when it could not be appended.
  util::Status Announce(std::string_view message);
  // Starts the listener thread (once; a second call does nothing); `poll`
  // is clamped to [10 ms, 5 s].
  void Listen(std::function<void(std::string_view message)> listener,
              std::chrono::milliseconds poll = std::chrono::milliseconds(250));
  void StopListening();

 private:
  struct State;
  explicit InvalidationFeed(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace strata::cache
