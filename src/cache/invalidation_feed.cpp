#include "cache/invalidation_feed.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "net/redis.h"

namespace strata::cache {

using net::RedisConn;
using net::RedisReply;

struct InvalidationFeed::State {
  State(const SharedStoreOptions& o, util::Logger& l)
      : options(o),
        log(l),
        // Unique per process (a seeded source could be shared by two
        // instances, which would then skip each other's messages).
        id(fmt::format("{:016x}", (uint64_t{std::random_device{}()} << 32) ^
                                      std::random_device{}() ^ reinterpret_cast<uintptr_t>(this))) {
  }

  std::string StreamKey() const { return options.prefix + ":invalidations"; }

  util::StatusOr<std::unique_ptr<RedisConn>> Connect(std::chrono::milliseconds timeout) const {
    STRATA_ASSIGN_OR_RETURN(auto conn, RedisConn::Connect(options.host, options.port, timeout));
    return conn;
  }

  // The listener's loop: XREAD with a short BLOCK on a connection of its
  // own, so a stop is seen within one poll.
  void Watch() {
    std::unique_ptr<RedisConn> conn;
    std::string last;  // the last id seen; empty until the first connection
    auto retry_in = options.backoff_min;
    bool was_down = false;
    std::unique_lock lock(mu);
    while (!stop) {
      lock.unlock();
      util::Status st;
      if (!conn || conn->broken()) {
        auto c = Connect(options.timeout + poll);
        st = c.status();
        if (c.ok()) conn = std::move(c).value();
        if (st.ok() && last.empty()) {
          // Start after what is there now.
          auto tail = conn->Command({"XREVRANGE", StreamKey(), "+", "-", "COUNT", "1"});
          if (!tail.ok()) {
            st = tail.status();
          } else {
            last = tail->type == RedisReply::Type::kArray && !tail->elements.empty() &&
                           !tail->elements[0].elements.empty()
                       ? tail->elements[0].elements[0].str
                       : "0-0";
          }
        }
      }
      std::vector<std::string> messages;
      if (st.ok()) {
        auto got = conn->Command({"XREAD", "COUNT", "100", "BLOCK", std::to_string(poll.count()),
                                  "STREAMS", StreamKey(), last});
        if (!got.ok()) {
          st = got.status();
        } else if (got->type == RedisReply::Type::kArray) {
          // [[stream, [[id, [field, value, ...]], ...]]]
          for (const RedisReply& stream : got->elements) {
            if (stream.elements.size() != 2) continue;
            for (const RedisReply& entry : stream.elements[1].elements) {
              if (entry.elements.size() != 2) continue;
              last = entry.elements[0].str;
              const auto& fields = entry.elements[1].elements;
              std::string from, body;
              for (size_t i = 0; i + 1 < fields.size(); i += 2) {
                if (fields[i].str == "from") from = fields[i + 1].str;
                if (fields[i].str == "m") body = fields[i + 1].str;
              }
              if (from != id) messages.push_back(std::move(body));
            }
          }
        }
      }
      for (const std::string& m : messages) listener(m);
      if (st.ok() && was_down) log.Info("invalidation feed: redis back");
      if (!st.ok() && !was_down) {
        log.Warn("invalidation feed: {} (other instances' invalidations wait; retrying)",
                 st.message());
      }
      was_down = !st.ok();
      lock.lock();
      if (!st.ok()) {
        conn.reset();
        cv.wait_for(lock, retry_in, [&] { return stop; });
        retry_in = std::min(options.backoff_max, retry_in * 2);
      } else {
        retry_in = options.backoff_min;
      }
    }
  }

  const SharedStoreOptions options;
  util::Logger& log;
  const std::string id;  // this feed's, in every message it appends

  std::mutex announce_mu;                // guards announcer
  std::unique_ptr<RedisConn> announcer;  // Announce's connection, opened on first use

  std::mutex mu;                                   // guards stop
  std::condition_variable cv;                      // stop
  bool stop = false;                               // StopListening or the destructor
  std::function<void(std::string_view)> listener;  // set once by Listen, before the thread
  std::chrono::milliseconds poll{250};
  std::thread watcher;  // runs Watch
};

util::StatusOr<std::unique_ptr<InvalidationFeed>> InvalidationFeed::Create(
    const SharedStoreOptions& options, util::Logger& log) {
  using std::chrono::milliseconds;
  if (options.host.empty() || options.port < 1 || options.port > 65535 ||
      options.timeout < milliseconds(1) || options.timeout > milliseconds(10'000) ||
      options.backoff_min < milliseconds(1) || options.backoff_max < options.backoff_min ||
      options.prefix.empty() || options.prefix.find_first_of(" \r\n\t") != std::string::npos) {
    return util::InvalidArgumentError(
        "invalidation feed: host, port [1, 65535], timeout [1 ms, 10 s], backoff and a prefix "
        "without spaces are needed");
  }
  return std::unique_ptr<InvalidationFeed>(
      new InvalidationFeed(std::make_unique<State>(options, log)));
}

InvalidationFeed::InvalidationFeed(std::unique_ptr<State> state) : state_(std::move(state)) {}

InvalidationFeed::~InvalidationFeed() { StopListening(); }

void InvalidationFeed::Listen(std::function<void(std::string_view)> listener,
                              std::chrono::milliseconds poll) {
  State& s = *state_;
  if (s.watcher.joinable() || !listener) return;
  s.listener = std::move(listener);
  s.poll = std::clamp(poll, std::chrono::milliseconds(10), std::chrono::milliseconds(5000));
  State* p = &s;
  s.watcher = std::thread([p] { p->Watch(); });
}

void InvalidationFeed::StopListening() {
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    s.stop = true;
  }
  s.cv.notify_all();
  if (s.watcher.joinable()) s.watcher.join();
}

util::Status InvalidationFeed::Announce(std::string_view message) {
  State& s = *state_;
  std::lock_guard lock(s.announce_mu);
  util::Status st;
  if (!s.announcer || s.announcer->broken()) {
    auto c = s.Connect(s.options.timeout);
    if (c.ok()) {
      s.announcer = std::move(c).value();
    } else {
      st = c.status();
    }
  }
  if (st.ok()) {
    auto r = s.announcer->Command({"XADD", s.StreamKey(), "MAXLEN", "~", "1000", "*", "from", s.id,
                                   "m", std::string(message)});
    if (!r.ok()) {
      st = r.status();
    } else if (r->type == RedisReply::Type::kError) {
      st = util::UnavailableError(r->str);
    }
  }
  if (st.ok()) return st;
  return util::UnavailableError(
      fmt::format("redis {}:{}: the invalidation was not announced to "
                  "other instances: {}",
                  s.options.host, s.options.port, st.message()));
}

}  // namespace strata::cache
