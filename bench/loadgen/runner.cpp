#include "loadgen/runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

namespace strata::loadgen {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

// What the watching thread and the workers share during one run.
class RunState {
 public:
  RunState(const RunOptions& options, const std::atomic<bool>& stop)
      : options_(options), stop_(stop), origin_(std::chrono::steady_clock::now()) {}

  std::chrono::steady_clock::time_point origin() const { return origin_; }
  double Now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin_).count();
  }
  bool Stopping() const { return stop_.load(std::memory_order_relaxed); }

  void Register(HttpSession* s) {
    std::lock_guard lock(mu_);
    sessions_.push_back(s);
  }
  void Unregister(HttpSession* s) {
    std::lock_guard lock(mu_);
    sessions_.erase(std::remove(sessions_.begin(), sessions_.end(), s), sessions_.end());
  }
  void Started() { started_.fetch_add(1, std::memory_order_relaxed); }
  void Record(RequestSample s) {
    std::lock_guard lock(mu_);
    if (s.outcome == Outcome::kFailed) ++failed_;
    samples_.push_back(std::move(s));
  }

  // Called by the watching thread every poll: passes an interrupt on to the
  // connections (again each time: a worker may have started a request just
  // after the previous call) and prints progress.
  void Watch() {
    if (Stopping()) {
      std::lock_guard lock(mu_);
      if (interrupt_s_ < 0) {
        interrupt_s_ = Now();
        fmt::print(stderr, "[loadgen] interrupted at {:.1f} s: stopping requests in flight\n",
                   interrupt_s_);
      }
      for (HttpSession* s : sessions_) s->Stop();
      work_cv_.notify_all();
      return;
    }
    if (options_.progress_every_s <= 0) return;
    const double now = Now();
    if (now < next_progress_s_) return;
    next_progress_s_ = now + options_.progress_every_s;
    std::lock_guard lock(mu_);
    const int64_t done = static_cast<int64_t>(samples_.size());
    fmt::print(stderr, "[loadgen] {:.1f} s: {} done ({} failed), {} in flight\n", now, done,
               failed_, started_.load(std::memory_order_relaxed) - done);
  }

  RunResult Result() {
    std::lock_guard lock(mu_);
    RunResult r;
    r.samples = std::move(samples_);
    std::sort(r.samples.begin(), r.samples.end(),
              [](const RequestSample& a, const RequestSample& b) { return a.index < b.index; });
    r.interrupted = interrupt_s_ >= 0;
    if (r.interrupted) {
      r.duration_s = interrupt_s_;
    } else {
      for (const RequestSample& s : r.samples) r.duration_s = std::max(r.duration_s, s.end_s);
    }
    return r;
  }

  // Open-loop work queue (indices of requests due).
  void Push(int64_t index) {
    std::lock_guard lock(mu_);
    queue_.push_back(index);
    work_cv_.notify_one();
  }
  // True when another connection should be opened for the queued work.
  bool NeedWorker(size_t workers) {
    std::lock_guard lock(mu_);
    if (queue_.size() <= idle_ || static_cast<int64_t>(workers) >= options_.max_in_flight) {
      return false;
    }
    ++idle_;  // the new worker counts as idle until it takes work
    return true;
  }
  void WorkerFailedToStart() {
    std::lock_guard lock(mu_);
    --idle_;
  }
  // Blocks for the next due request; nullopt when the run is over.
  std::optional<int64_t> Pop() {
    std::unique_lock lock(mu_);
    work_cv_.wait(lock, [&] { return !queue_.empty() || closed_ || Stopping(); });
    if (Stopping() || queue_.empty()) return std::nullopt;
    const int64_t i = queue_.front();
    queue_.pop_front();
    --idle_;
    return i;
  }
  void Idle() {
    std::lock_guard lock(mu_);
    ++idle_;
  }
  void Close() {
    std::lock_guard lock(mu_);
    closed_ = true;
    work_cv_.notify_all();
  }

 private:
  const RunOptions& options_;
  const std::atomic<bool>& stop_;
  const std::chrono::steady_clock::time_point origin_;
  std::atomic<int64_t> started_{0};
  double next_progress_s_ = options_.progress_every_s;  // used by the watching thread only

  std::mutex mu_;  // guards everything below
  std::condition_variable work_cv_;
  std::vector<RequestSample> samples_;
  int64_t failed_ = 0;
  std::vector<HttpSession*> sessions_;
  double interrupt_s_ = -1;
  std::deque<int64_t> queue_;
  size_t idle_ = 0;  // open-loop workers not sending (waiting, or about to)
  bool closed_ = false;
};

// Builds and sends request `index`. Never throws: a throw from the factory or
// the HTTP library (e.g. a --model that is not valid UTF-8) becomes a failed sample.
RequestSample SendOne(HttpSession& session, const RequestFactory& factory, int64_t index,
                      double scheduled_s) {
  try {
    PreparedRequest p = factory(index);
    p.base.index = index;
    p.base.scheduled_s = scheduled_s;
    return session.Send(p.body, std::move(p.base));
  } catch (const std::exception& e) {
    RequestSample s;
    s.index = index;
    s.scheduled_s = s.sent_s = s.end_s = scheduled_s;
    s.outcome = Outcome::kFailed;
    s.error_kind = "client";
    s.error_message = e.what();
    return s;
  }
}

// Watches until every worker has finished, then joins them.
void WatchAndJoin(RunState& st, std::vector<std::thread>& threads, std::atomic<int64_t>& active) {
  while (active.load() > 0) {
    st.Watch();
    std::this_thread::sleep_for(kPollInterval);
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace

RunResult RunClosedLoop(const RunOptions& options, const RequestFactory& factory,
                        const std::atomic<bool>& stop) {
  RunState st(options, stop);
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> active{0};
  auto worker = [&] {
    HttpSession session(options.session, st.origin(), stop);
    st.Register(&session);
    while (!st.Stopping()) {
      if (options.duration_s > 0 && st.Now() >= options.duration_s) break;
      const int64_t i = next.fetch_add(1);
      if (options.max_requests > 0 && i >= options.max_requests) break;
      st.Started();
      st.Record(SendOne(session, factory, i, st.Now()));
    }
    st.Unregister(&session);
    active.fetch_sub(1);
  };
  std::vector<std::thread> threads;
  for (int64_t c = 0; c < std::max<int64_t>(1, options.concurrency); ++c) {
    active.fetch_add(1);
    try {
      threads.emplace_back(worker);
    } catch (const std::system_error& e) {
      active.fetch_sub(1);
      fmt::print(stderr, "[loadgen] could start only {} of {} clients: {}\n", c,
                 options.concurrency, e.what());
      break;
    }
  }
  WatchAndJoin(st, threads, active);
  return st.Result();
}

RunResult RunOpenLoop(const RunOptions& options, const std::vector<double>& arrivals_s,
                      const RequestFactory& factory, const std::atomic<bool>& stop) {
  RunState st(options, stop);
  std::atomic<int64_t> active{0};
  auto worker = [&] {
    HttpSession session(options.session, st.origin(), stop);
    st.Register(&session);
    while (auto i = st.Pop()) {
      st.Started();
      st.Record(SendOne(session, factory, *i, arrivals_s[static_cast<size_t>(*i)]));
      st.Idle();
    }
    st.Unregister(&session);
    active.fetch_sub(1);
  };
  std::vector<std::thread> threads;
  bool can_spawn = true;
  for (size_t i = 0; i < arrivals_s.size(); ++i) {
    while (!st.Stopping()) {
      const double wait_s = arrivals_s[i] - st.Now();
      if (wait_s <= 0) break;
      st.Watch();
      std::this_thread::sleep_for(std::min<std::chrono::duration<double>>(
          kPollInterval, std::chrono::duration<double>(wait_s)));
    }
    if (st.Stopping()) break;
    st.Push(static_cast<int64_t>(i));
    if (can_spawn && st.NeedWorker(threads.size())) {
      active.fetch_add(1);
      try {
        threads.emplace_back(worker);
      } catch (const std::system_error& e) {
        active.fetch_sub(1);
        st.WorkerFailedToStart();
        can_spawn = false;
        fmt::print(stderr, "[loadgen] no more connections after {}: {}\n", threads.size(),
                   e.what());
      }
    }
  }
  st.Close();
  WatchAndJoin(st, threads, active);
  return st.Result();
}

}  // namespace strata::loadgen
