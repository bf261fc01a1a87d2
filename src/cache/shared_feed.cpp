#include "cache/shared_feed.h"

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

struct SharedFeed::State {
  State(const SharedStoreOptions& o, std::string s, util::Logger& l, size_t max, std::string i)
      : options(o),
        log(l),
        stream(std::move(s)),
        max_len(std::to_string(max)),
        id(i.empty() ? NewInstanceId(this) : std::move(i)) {}

  std::string StreamKey() const { return options.prefix + ":" + stream; }

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
            // Where the stream ends is known: what `start` catches up on
            // and what is appended meanwhile both reach the listener.
            if (start) {
              start();
              start = nullptr;
            }
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
          for (const RedisReply& part : got->elements) {
            if (part.elements.size() != 2) continue;
            for (const RedisReply& entry : part.elements[1].elements) {
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
      if (st.ok() && was_down) log.Info("shared feed '{}': redis back", stream);
      if (!st.ok() && !was_down) {
        log.Warn("shared feed '{}': {} (other instances' messages wait; retrying)", stream,
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
  const std::string stream;   // the stream's name after the prefix
  const std::string max_len;  // messages the stream keeps (XADD MAXLEN ~)
  const std::string id;       // this feed's, in every message it appends

  std::mutex announce_mu;                // guards announcer
  std::unique_ptr<RedisConn> announcer;  // Announce's connection, opened on first use

  std::mutex mu;                                   // guards stop
  std::condition_variable cv;                      // stop
  bool stop = false;                               // StopListening or the destructor
  std::function<void(std::string_view)> listener;  // set once by Listen, before the thread
  std::function<void()> start;                     // likewise
  std::chrono::milliseconds poll{250};
  std::thread watcher;  // runs Watch
};

std::string NewInstanceId(const void* salt) {
  // Unique per process: a seeded source could be shared by two instances,
  // which would then skip each other's messages.
  return fmt::format("{:016x}", (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}() ^
                                    reinterpret_cast<uintptr_t>(salt));
}

util::StatusOr<std::unique_ptr<SharedFeed>> SharedFeed::Create(const SharedStoreOptions& options,
                                                               std::string stream,
                                                               util::Logger& log, size_t max_len,
                                                               std::string id) {
  using std::chrono::milliseconds;
  if (options.host.empty() || options.port < 1 || options.port > 65535 ||
      options.timeout < milliseconds(1) || options.timeout > milliseconds(10'000) ||
      options.backoff_min < milliseconds(1) || options.backoff_max < options.backoff_min ||
      options.prefix.empty() || options.prefix.find_first_of(" \r\n\t") != std::string::npos) {
    return util::InvalidArgumentError(
        "shared feed: host, port [1, 65535], timeout [1 ms, 10 s], backoff and a prefix "
        "without spaces are needed");
  }
  if (stream.empty() ||
      stream.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") != std::string::npos || max_len < 1) {
    return util::InvalidArgumentError(
        fmt::format("shared feed: stream '{}' is not [a-z_]+, or it keeps nothing", stream));
  }
  return std::unique_ptr<SharedFeed>(new SharedFeed(
      std::make_unique<State>(options, std::move(stream), log, max_len, std::move(id))));
}

SharedFeed::SharedFeed(std::unique_ptr<State> state) : state_(std::move(state)) {}

SharedFeed::~SharedFeed() { StopListening(); }

void SharedFeed::Listen(std::function<void(std::string_view)> listener,
                        std::chrono::milliseconds poll, std::function<void()> start) {
  State& s = *state_;
  if (s.watcher.joinable() || !listener) return;
  s.listener = std::move(listener);
  s.start = std::move(start);
  s.poll = std::clamp(poll, std::chrono::milliseconds(10), std::chrono::milliseconds(5000));
  State* p = &s;
  s.watcher = std::thread([p] { p->Watch(); });
}

void SharedFeed::StopListening() {
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    s.stop = true;
  }
  s.cv.notify_all();
  if (s.watcher.joinable()) s.watcher.join();
}

util::Status SharedFeed::Announce(std::string_view message) {
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
    auto r = s.announcer->Command({"XADD", s.StreamKey(), "MAXLEN", "~", s.max_len, "*", "from",
                                   s.id, "m", std::string(message)});
    if (!r.ok()) {
      st = r.status();
    } else if (r->type == RedisReply::Type::kError) {
      st = util::UnavailableError(r->str);
    }
  }
  if (st.ok()) return st;
  return util::UnavailableError(
      fmt::format("redis {}:{}: not announced to the other instances on '{}': {}", s.options.host,
                  s.options.port, s.stream, st.message()));
}

}  // namespace strata::cache
