// net/event_loops.h — I/O threads, each running one event loop, that an
// HttpServer and an HttpClient can share.
//
// Promise: a server given these loops serves its connections on them, and
// a client given them runs a call started on one of their threads on that
// same thread, with that loop's own pool of upstream connections: a request
// that goes on to an upstream then never changes threads (no cross-thread
// wake-up, lock hand-off or task switch between the connection and its
// upstream call). A call started on any other thread still works; it runs
// on the client's own threads, as without shared loops.
//
// Shutdown order: stop every server on the loops (it stops accepting and
// cancels its exchanges), then every client (it cancels its calls still in
// flight), then the loops (Stop, or destruction). Each of the first two
// returns once its part of every loop is gone; the loops keep running until
// Stop joins them, so work a stopped server or client left queued (a
// cancelled socket's completion, say) finishes safely on its own.
//
// Threading: Create and Stop from the owner's thread, never from a loop
// thread; size and OnLoopThread from any thread.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto loops, net::EventLoops::Create(2));
//   net::HttpServerOptions so{.loops = loops.get()};
//   STRATA_ASSIGN_OR_RETURN(auto client, net::HttpClient::Create({}, log, loops.get()));
//   ...
//   server->Stop(); client->Stop(); loops->Stop();
#pragma once

#include <memory>
#include <vector>

#include "util/status.h"

namespace strata::net {

namespace internal {
struct Loop;
}  // namespace internal

class EventLoops {
 public:
  // `threads` loops in [1, 256], each on its own thread, running from now on.
  // InvalidArgument outside that range.
  static util::StatusOr<std::unique_ptr<EventLoops>> Create(int threads);
  ~EventLoops();  // Stop()

  int size() const { return static_cast<int>(loops_.size()); }
  // The index of the loop whose thread calls this, or -1 on any other thread.
  int OnLoopThread() const;
  // Stops every loop and joins its thread; what is still queued is destroyed
  // unrun with the loops. Precondition: the servers and clients on these
  // loops have stopped. Idempotent.
  void Stop();

  // For the module's servers and clients (net/internal/loop.h).
  internal::Loop& loop(int i) { return *loops_[static_cast<size_t>(i)]; }

 private:
  explicit EventLoops(int threads);
  std::vector<std::unique_ptr<internal::Loop>> loops_;
  bool stopped_ = false;
};

}  // namespace strata::net
