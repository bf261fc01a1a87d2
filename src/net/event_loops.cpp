#include "net/event_loops.h"

#include <fmt/format.h>

#include "net/internal/loop.h"

namespace strata::net {

namespace internal {

void LoopHandle::Post(std::function<void()> fn) {
  std::unique_lock<std::mutex> lock(mu_);
  if (ctx_ == nullptr) {
    lock.unlock();
    return;  // `fn` is destroyed here, outside the lock
  }
  asio::post(*ctx_, std::move(fn));
}

void LoopHandle::Detach() {
  std::lock_guard<std::mutex> lock(mu_);
  ctx_ = nullptr;
}

void RunOnLoop(asio::io_context& ctx, std::function<void()> fn) {
  std::promise<void> done;
  std::future<void> ran = done.get_future();
  asio::post(ctx, [&fn, &done] {
    fn();
    done.set_value();
  });
  ran.wait();
}

}  // namespace internal

EventLoops::EventLoops(int threads) {
  for (int i = 0; i < threads; ++i) {
    loops_.push_back(std::make_unique<internal::Loop>());
    internal::Loop* l = loops_.back().get();
    l->thread = std::thread([l] {
      auto guard = boost::asio::make_work_guard(l->ctx);
      l->ctx.run();
    });
  }
}

EventLoops::~EventLoops() { Stop(); }

util::StatusOr<std::unique_ptr<EventLoops>> EventLoops::Create(int threads) {
  if (threads < 1 || threads > 256) {
    return util::InvalidArgumentError(
        fmt::format("event loop threads = {} is outside [1, 256]", threads));
  }
  return std::unique_ptr<EventLoops>(new EventLoops(threads));
}

int EventLoops::OnLoopThread() const {
  for (size_t i = 0; i < loops_.size(); ++i) {
    if (loops_[i]->ctx.get_executor().running_in_this_thread()) return static_cast<int>(i);
  }
  return -1;
}

void EventLoops::Stop() {
  if (stopped_) return;
  stopped_ = true;
  for (auto& l : loops_) l->ctx.stop();
  for (auto& l : loops_) {
    if (l->thread.joinable()) l->thread.join();
  }
}

}  // namespace strata::net
