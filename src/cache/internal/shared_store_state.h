// cache/internal/shared_store_state.h — the shared tier's state, its key
// names and its writer thread, shared by the files that implement
// SharedStore (shared_store.cpp: L1, L3, invalidation; shared_semantic.cpp:
// the semantic entries). Private to cache/.
//
// Threading: as SharedStore's (cache/shared_store.h).
#pragma once

#include <algorithm>
#include <bit>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cache/shared_store.h"
#include "net/redis.h"
#include "util/hash.h"

namespace strata::cache {

using net::RedisCommand;
using net::RedisConn;
using net::RedisReply;

// Keys and values carry explicit little-endian integers: instances on other
// hosts read them. CacheKey bytes are compared as they are, which holds
// between instances of one build on little-endian machines (the only ones
// strata builds for).
static_assert(std::endian::native == std::endian::little,
              "shared cache keys assume a little-endian host");

namespace shared_internal {

inline constexpr char kExactMagic[4] = {'S', 'L', '1', '\x01'};

inline std::string Base(const std::string& prefix, const SharedScope& s) {
  return fmt::format("{}:{:016x}:{}", prefix, s.model, net::RedisKeyPart(s.tenant));
}

inline std::string ExactKey(const std::string& prefix, const SharedScope& s, const CacheKey& key) {
  return fmt::format("{}:l1:{:016x}{:016x}", Base(prefix, s), key.hash,
                     util::Hash64(key.bytes, 0x5348'4152'4544'4c31ULL));  // "SHAREDL1"
}

inline std::string NearBase(const std::string& prefix, const SharedScope& s,
                            std::string_view ns_id) {
  return fmt::format("{}:l3:{}", Base(prefix, s), ns_id);
}

inline void AppendU32Le(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

inline bool ParseHex64(std::string_view s, uint64_t* out) {
  if (s.size() != 16) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// A vector as little-endian float32 bytes, and back (nullopt when the
// byte count is not a whole number of floats).
inline std::string VectorBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}
inline std::optional<std::vector<float>> VectorFromBytes(std::string_view b) {
  if (b.size() % sizeof(float) != 0) return std::nullopt;
  std::vector<float> v(b.size() / sizeof(float));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

inline std::chrono::milliseconds TtlMs(std::chrono::nanoseconds ttl, double jitter,
                                       util::Rng& rng) {
  const double j = jitter * (2.0 * rng.Uniform() - 1.0);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(ttl) * (1.0 + j));
  return std::max(ms, std::chrono::milliseconds(1));
}

}  // namespace shared_internal

using shared_internal::AppendU32Le;
using shared_internal::Base;
using shared_internal::ExactKey;
using shared_internal::kExactMagic;
using shared_internal::NearBase;
using shared_internal::ParseHex64;
using shared_internal::TtlMs;

// ---------------------------------------------------------------------------

struct SharedStore::State {
  struct Job {
    enum class Kind { kExact, kNear, kForget, kSemantic };
    Kind kind = Kind::kExact;
    std::string key;     // kExact, kSemantic: the Redis key; kNear: the namespace base
    CacheKey cache_key;  // kExact
    std::shared_ptr<const NearDupText> text;   // kNear, kSemantic (may be null)
    std::shared_ptr<const CachedValue> value;  // kExact, kNear, kSemantic
    std::string ns;                            // kSemantic
    std::vector<float> vector;                 // kSemantic
    std::chrono::milliseconds ttl{0};
    std::vector<std::pair<std::string, std::string>> forget;  // kForget: (bucket, member)
  };
  struct Pooled {
    std::unique_ptr<RedisConn> conn;
    uint64_t epoch = 0;  // the up-period it was opened in
  };

  State(const SharedStoreOptions& o, const ValueCodec& c, const util::Clock& cl, util::Rng r,
        util::Logger& l)
      : options(o), codec(c), clock(cl), log(l), rng(std::move(r)) {
    int start = 0;
    for (int b = 0; b < o.near_dup.bands; ++b) {
      const int width = 64 / o.near_dup.bands + (b < 64 % o.near_dup.bands ? 1 : 0);
      block_shift.push_back(start);
      block_width.push_back(width);
      start += width;
    }
  }

  uint64_t Block(uint64_t fp, int band) const {
    const int w = block_width[static_cast<size_t>(band)];
    return (fp >> block_shift[static_cast<size_t>(band)]) & ((uint64_t{1} << w) - 1);
  }
  std::string BucketKey(const std::string& base, int band, uint64_t bits) const {
    return fmt::format("{}:b:{}:{:x}", base, band, bits);
  }
  static std::string EntryKey(const std::string& base, uint64_t id) {
    return fmt::format("{}:e:{:016x}", base, id);
  }
  static std::string Member(uint64_t id, uint64_t fp) {
    return fmt::format("{:016x}{:016x}", id, fp);
  }
  int max_distance() const {
    return options.near_dup.bands * (options.near_dup.probe_radius + 1) - 1;
  }

  // Every bucket key within probe_radius bits of each block of `fp`.
  std::vector<std::string> ProbeKeys(const std::string& base, uint64_t fp) const {
    std::vector<std::string> keys;
    const int r = options.near_dup.probe_radius;
    for (int band = 0; band < options.near_dup.bands; ++band) {
      const int width = block_width[static_cast<size_t>(band)];
      const uint64_t bits = Block(fp, band);
      keys.push_back(BucketKey(base, band, bits));
      for (int i = 0; i < width && r >= 1; ++i) {
        const uint64_t b1 = bits ^ (uint64_t{1} << i);
        keys.push_back(BucketKey(base, band, b1));
        for (int j = i + 1; j < width && r >= 2; ++j) {
          const uint64_t b2 = b1 ^ (uint64_t{1} << j);
          keys.push_back(BucketKey(base, band, b2));
          for (int k = j + 1; k < width && r >= 3; ++k) {
            keys.push_back(BucketKey(base, band, b2 ^ (uint64_t{1} << k)));
          }
        }
      }
    }
    return keys;
  }

  // --- health (mu held) ---------------------------------------------------
  // Returns the line to log (outside the lock) when this is a state change.
  std::optional<std::string> MarkDownLocked(const util::Status& why) {
    ++stats.errors;
    if (!up) return std::nullopt;
    up = false;
    // A new epoch counts its own connections: those still borrowed belong to
    // the old one and are closed when they come back.
    ++epoch;
    pool_size = 0;
    idle.clear();
    stats.dropped_writes += queue.size();
    queue.clear();
    backoff = options.backoff_min;
    next_retry = clock.Now() + backoff;
    writer_cv.notify_all();
    conn_cv.notify_all();
    flush_cv.notify_all();
    return fmt::format("redis down: {} (serving from the local tiers; retrying)", why.message());
  }
  void MarkDown(const util::Status& why) {
    std::optional<std::string> line;
    {
      std::lock_guard lock(mu);
      line = MarkDownLocked(why);
    }
    if (line) log.Warn("{}", *line);
  }

  // --- lookups: pooled connections ----------------------------------------
  // Counts one lookup sent to Redis: answered or not, with `errors`
  // (transport or undecodable entries) met on the way.
  void CountLookup(bool hit, uint64_t errors) {
    std::lock_guard lock(mu);
    ++stats.lookups;
    stats.hits += hit;
    stats.errors += errors;
  }

  std::optional<Pooled> Borrow() {
    std::unique_lock lock(mu);
    if (!up) {
      ++stats.skipped;
      return std::nullopt;
    }
    const bool ready = conn_cv.wait_for(lock, options.timeout, [&] {
      return !up || !idle.empty() || pool_size < options.read_connections;
    });
    if (!ready || !up) {
      ++stats.skipped;
      return std::nullopt;
    }
    if (!idle.empty()) {
      Pooled p = std::move(idle.back());
      idle.pop_back();
      return p;
    }
    ++pool_size;
    const uint64_t e = epoch;
    lock.unlock();
    auto conn = RedisConn::Connect(options.host, options.port, options.timeout);
    if (!conn.ok()) {
      {
        std::lock_guard relock(mu);
        if (epoch == e) --pool_size;
      }
      MarkDown(conn.status());
      return std::nullopt;
    }
    return Pooled{std::move(conn).value(), e};
  }
  void Return(Pooled p) {
    std::lock_guard lock(mu);
    if (p.epoch != epoch) return;  // opened before Redis went down: already uncounted
    if (p.conn->broken() || !up) {
      --pool_size;
    } else {
      idle.push_back(std::move(p));
    }
    conn_cv.notify_one();
  }
  // Runs `commands` on a pooled connection; nullopt when skipped or failed.
  std::optional<std::vector<RedisReply>> Run(const std::vector<RedisCommand>& commands) {
    std::optional<Pooled> p = Borrow();
    if (!p) return std::nullopt;
    auto replies = p->conn->Pipeline(commands);
    const bool broken = p->conn->broken();
    Return(std::move(*p));
    if (!replies.ok()) {
      if (broken) MarkDown(replies.status());
      return std::nullopt;
    }
    return std::move(replies).value();
  }

  // --- stores: the writer thread -------------------------------------------
  void Enqueue(Job job) {
    std::lock_guard lock(mu);
    if (!up || stop || queue.size() >= options.max_pending_writes) {
      ++stats.dropped_writes;
      return;
    }
    queue.push_back(std::move(job));
    writer_cv.notify_one();
  }

  std::vector<RedisCommand> Commands(const Job& job) {
    const auto ttl = std::to_string(job.ttl.count());
    std::vector<RedisCommand> cmds;
    switch (job.kind) {
      case Job::Kind::kExact: {
        std::string payload(kExactMagic, sizeof kExactMagic);
        AppendU32Le(payload, static_cast<uint32_t>(job.cache_key.bytes.size()));
        payload += job.cache_key.bytes;
        payload += codec.Encode(*job.value);
        cmds.push_back({"SET", job.key, std::move(payload), "PX", ttl});
        break;
      }
      case Job::Kind::kNear: {
        const uint64_t id = job.text->sequence_hash, fp = job.text->fingerprint;
        const std::string entry = EntryKey(job.key, id);
        cmds.push_back(
            {"HSET", entry, "t", EncodeNearDupText(*job.text), "v", codec.Encode(*job.value)});
        cmds.push_back({"PEXPIRE", entry, ttl});
        for (int band = 0; band < options.near_dup.bands; ++band) {
          const std::string bucket = BucketKey(job.key, band, Block(fp, band));
          cmds.push_back({"SADD", bucket, Member(id, fp)});
          cmds.push_back({"PEXPIRE", bucket, ttl});
        }
        break;
      }
      case Job::Kind::kForget:
        for (const auto& [bucket, member] : job.forget) cmds.push_back({"SREM", bucket, member});
        break;
      case Job::Kind::kSemantic:
        // The entry, then its key on the stream every instance's semantic
        // feed reads (cache/shared_feed.h's message layout).
        cmds.push_back({"HSET", job.key, "n", job.ns, "v", shared_internal::VectorBytes(job.vector),
                        "t", job.text ? EncodeNearDupText(*job.text) : std::string(), "a",
                        codec.Encode(*job.value)});
        cmds.push_back({"PEXPIRE", job.key, ttl});
        cmds.push_back({"XADD", options.prefix + ":semantic", "MAXLEN", "~", "10000", "*", "from",
                        instance_id, "m", job.key});
        break;
    }
    return cmds;
  }

  // Connects (once) and PINGs; true when Redis answers.
  util::Status Connect(std::unique_ptr<RedisConn>& conn) {
    STRATA_ASSIGN_OR_RETURN(conn, RedisConn::Connect(options.host, options.port, options.timeout));
    STRATA_ASSIGN_OR_RETURN(RedisReply pong, conn->Command({"PING"}));
    if (pong.type != RedisReply::Type::kStatus || pong.str != "PONG") {
      conn.reset();
      return util::UnavailableError(
          fmt::format("redis {}:{}: PING answered '{}'", options.host, options.port, pong.str));
    }
    return util::OkStatus();
  }

  void WriterLoop() {
    std::unique_ptr<RedisConn> conn;  // the writer's own connection
    std::unique_lock lock(mu);
    while (!stop) {
      if (!up) {
        const auto now = clock.Now();
        if (now < next_retry) {
          writer_cv.wait_for(lock, next_retry - now);
          continue;
        }
        lock.unlock();
        conn.reset();
        util::Status st = Connect(conn);
        lock.lock();
        if (stop) break;
        if (!st.ok()) {
          ++stats.errors;
          backoff = std::min(options.backoff_max, backoff * 2);
          next_retry = clock.Now() + backoff;
          continue;
        }
        up = true;
        ++stats.reconnects;
        lock.unlock();
        log.Info("redis back: {}:{}", options.host, options.port);
        lock.lock();
        continue;
      }
      if (queue.empty()) {
        writer_cv.wait(lock, [&] { return stop || !up || !queue.empty(); });
        continue;
      }
      Job job = std::move(queue.front());
      queue.pop_front();
      in_flight = true;
      lock.unlock();
      util::Status st;
      if (!conn || conn->broken()) {
        conn.reset();
        st = Connect(conn);
      }
      if (st.ok()) {
        auto replies = conn->Pipeline(Commands(job));
        if (!replies.ok()) st = replies.status();
      }
      lock.lock();
      in_flight = false;
      if (st.ok()) {
        ++stats.writes;
      } else {
        ++stats.dropped_writes;
        conn.reset();
        if (auto line = MarkDownLocked(st)) {
          lock.unlock();
          log.Warn("{}", *line);
          lock.lock();
        }
      }
      flush_cv.notify_all();
    }
    stats.dropped_writes += queue.size();
    queue.clear();
    flush_cv.notify_all();
  }

  const SharedStoreOptions options;
  const ValueCodec& codec;
  const util::Clock& clock;
  util::Logger& log;
  std::vector<int> block_shift, block_width;  // per band, fixed at construction

  mutable std::mutex mu;              // guards everything below
  std::condition_variable writer_cv;  // work for the writer: a job, a retry, stop
  std::condition_variable conn_cv;    // a pooled connection came back (or Redis went down)
  std::condition_variable flush_cv;   // the queue drained a little
  util::Rng rng;                      // TTL jitter
  bool up = false;
  bool stop = false;
  uint64_t epoch = 0;        // incremented each time Redis goes down
  std::vector<Pooled> idle;  // lookup connections not in use
  size_t pool_size = 0;      // lookup connections of this epoch, idle or in use
  std::deque<Job> queue;     // stores waiting for the writer
  bool in_flight = false;    // the writer is sending a job
  std::chrono::milliseconds backoff{0};
  TimePoint next_retry{};
  SharedStoreStats stats;
  std::string instance_id;  // marks this store's messages on the semantic stream
  std::thread writer;       // runs WriterLoop; started last, joined first
};

}  // namespace strata::cache
