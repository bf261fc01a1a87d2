// cache/shared_feed.h — how strata instances sharing one Redis tell each
// other what changed: cache invalidations (DELETE /v1/cache), and the keys
// of new semantic entries (so each instance's semantic index holds every
// instance's vectors).
//
// Promise: Announce appends a message to a Redis stream
// (<prefix>:<stream>, trimmed to about the last `max_len`); every other feed
// on the same Redis, prefix and stream that Listens gets it, in order,
// within about one poll interval. A feed never hears its own announcements.
// Messages from before Listen are not replayed; Listen's `start` runs
// once on the listener's thread, as soon as it has learnt where the stream
// ends, for whatever catching up the caller wants (messages appended while
// it runs are read after it). Redis being down never blocks anything longer than the timeout:
// Announce fails with Unavailable, the listener reconnects with exponential
// backoff (backoff_min doubling to backoff_max) and resumes after the last
// message it saw, so a short outage loses nothing the stream still holds.
// The messages are opaque bytes to the feed.
//
// Threading: Announce is thread-safe (one connection, under a mutex). The
// listener runs on the feed's own thread, started by Listen; StopListening
// and the destructor join it (within one poll), so no call comes after.
//
// Usage:
//   auto feed = SharedFeed::Create(shared_options, "invalidations", log).value();
//   feed->Listen([&](std::string_view m) { ApplyRemote(m); });
//   feed->Announce(Encode(what));  // after invalidating locally
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "cache/shared_store.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::cache {

// 16 hex digits, unique per process and call site (`salt`): what marks one
// instance's messages on a feed.
std::string NewInstanceId(const void* salt);

class SharedFeed {
 public:
  // The address, timeout, backoff and key prefix of `options` are used
  // (validated as SharedStore::Create does); `stream` names the stream
  // ([a-z_]+), `max_len` how many messages it keeps; `id` is what marks
  // this feed's own messages ("" = a random one; SharedStore::id() when the
  // store appends them). Connects lazily.
  static util::StatusOr<std::unique_ptr<SharedFeed>> Create(const SharedStoreOptions& options,
                                                            std::string stream, util::Logger& log,
                                                            size_t max_len = 1000,
                                                            std::string id = "");
  ~SharedFeed();
  SharedFeed(const SharedFeed&) = delete;
  SharedFeed& operator=(const SharedFeed&) = delete;

  // Unavailable (naming Redis) when it could not be appended.
  util::Status Announce(std::string_view message);
  // Starts the listener thread (once; a second call does nothing), which
  // runs `start` (may be empty) once it has reached Redis; `poll` is
  // clamped to [10 ms, 5 s].
  void Listen(std::function<void(std::string_view message)> listener,
              std::chrono::milliseconds poll = std::chrono::milliseconds(250),
              std::function<void()> start = nullptr);
  void StopListening();

 private:
  struct State;
  explicit SharedFeed(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace strata::cache
