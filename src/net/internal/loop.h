// net/internal/loop.h — one I/O thread and its event loop, and how other
// threads reach it (private to net/).
//
// Threading: Loop's context is thread-safe for posting; everything else a
// server or client keeps per loop is owned by the loop's thread. LoopHandle
// is thread-safe.
#pragma once

#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "net/internal/asio.h"

namespace strata::net::internal {

// One I/O thread running one io_context (concurrency hint 1: a handler
// posted from the loop's own thread goes to its private queue, without a
// lock or a wake-up).
struct Loop {
  asio::io_context ctx{1};
  std::thread thread;
};

// How other threads reach a loop on behalf of one user of it (a server or a
// client): Post runs a function on it, or drops it once that user detached.
class LoopHandle {
 public:
  explicit LoopHandle(asio::io_context* ctx) : ctx_(ctx) {}
  void Post(std::function<void()> fn);
  void Detach();  // the user stopped: later posts are dropped

 private:
  std::mutex mu_;
  asio::io_context* ctx_;  // guarded by mu_; null once detached
};

// Runs `fn` on `ctx`'s thread and waits until it has run. Not from that
// thread; the loop must be running.
void RunOnLoop(asio::io_context& ctx, std::function<void()> fn);

}  // namespace strata::net::internal
