#include "cache/shared_store.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "cache/simhash.h"
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

namespace {

constexpr char kExactMagic[4] = {'S', 'L', '1', '\x01'};

std::string Base(const std::string& prefix, const SharedScope& s) {
  return fmt::format("{}:{:016x}:{}", prefix, s.model, net::RedisKeyPart(s.tenant));
}

std::string ExactKey(const std::string& prefix, const SharedScope& s, const CacheKey& key) {
  return fmt::format("{}:l1:{:016x}{:016x}", Base(prefix, s), key.hash,
                     util::Hash64(key.bytes, 0x5348'4152'4544'4c31ULL));  // "SHAREDL1"
}

std::string NearBase(const std::string& prefix, const SharedScope& s, std::string_view ns_id) {
  return fmt::format("{}:l3:{}", Base(prefix, s), ns_id);
}

void AppendU32Le(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

bool ParseHex64(std::string_view s, uint64_t* out) {
  if (s.size() != 16) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::chrono::milliseconds TtlMs(std::chrono::nanoseconds ttl, double jitter, util::Rng& rng) {
  const double j = jitter * (2.0 * rng.Uniform() - 1.0);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::duration<double>(ttl) * (1.0 + j));
  return std::max(ms, std::chrono::milliseconds(1));
}

}  // namespace

// ---------------------------------------------------------------------------

struct SharedStore::State {
  struct Job {
    enum class Kind { kExact, kNear, kForget };
    Kind kind = Kind::kExact;
    std::string key;                           // kExact: the Redis key; kNear: the namespace base
    CacheKey cache_key;                        // kExact
    std::shared_ptr<const NearDupText> text;   // kNear
    std::shared_ptr<const CachedValue> value;  // kExact, kNear
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
  std::thread writer;  // runs WriterLoop; started last, joined first
};

util::StatusOr<std::unique_ptr<SharedStore>> SharedStore::Create(const SharedStoreOptions& o,
                                                                 const ValueCodec& codec,
                                                                 const util::Clock& clock,
                                                                 util::Rng rng, util::Logger& log) {
  auto bad = [](std::string what) { return util::InvalidArgumentError("shared store: " + what); };
  using std::chrono::milliseconds;
  if (o.host.empty()) return bad("host is empty");
  if (o.port < 1 || o.port > 65535)
    return bad(fmt::format("port {} is outside [1, 65535]", o.port));
  if (o.timeout < milliseconds(1) || o.timeout > milliseconds(10'000)) {
    return bad(fmt::format("timeout {} ms is outside [1, 10000]", o.timeout.count()));
  }
  if (o.backoff_min < milliseconds(1) || o.backoff_max < o.backoff_min ||
      o.backoff_max > milliseconds(600'000)) {
    return bad(fmt::format("backoff {}..{} ms is not within 1 ms <= min <= max <= 10 min",
                           o.backoff_min.count(), o.backoff_max.count()));
  }
  if (o.read_connections < 1 || o.read_connections > 256) {
    return bad(fmt::format("read_connections {} is outside [1, 256]", o.read_connections));
  }
  if (o.max_pending_writes < 1 || o.max_pending_writes > (size_t{1} << 20)) {
    return bad(fmt::format("max_pending_writes {} is outside [1, 2^20]", o.max_pending_writes));
  }
  if (!(o.ttl_jitter >= 0 && o.ttl_jitter <= 0.9)) {
    return bad(fmt::format("ttl_jitter {} is outside [0, 0.9]", o.ttl_jitter));
  }
  if (o.prefix.empty() || o.prefix.find_first_of(" \r\n\t") != std::string::npos) {
    return bad(fmt::format("prefix '{}' is empty or has spaces", o.prefix));
  }
  if (o.near_dup.bands < 2 || o.near_dup.bands > 16 || o.near_dup.probe_radius < 0 ||
      o.near_dup.probe_radius > 3 || o.near_dup.max_candidates < 1 ||
      !(o.near_dup.min_similarity > 0 && o.near_dup.min_similarity <= 1)) {
    return bad(
        "near_dup: bands [2, 16], probe_radius [0, 3], max_candidates >= 1, "
        "min_similarity (0, 1]");
  }
  auto state = std::make_unique<State>(o, codec, clock, std::move(rng), log);
  // One attempt now, so a reachable Redis serves the first request.
  std::unique_ptr<RedisConn> probe;
  if (util::Status st = state->Connect(probe); st.ok()) {
    state->up = true;
    log.Info("redis up: {}:{} (shared L1 and L3)", o.host, o.port);
  } else {
    ++state->stats.errors;
    state->backoff = o.backoff_min;
    state->next_retry = clock.Now() + o.backoff_min;
    log.Warn("redis down: {} (serving from the local tiers; retrying)", st.message());
  }
  State* s = state.get();
  state->writer = std::thread([s] { s->WriterLoop(); });
  return std::unique_ptr<SharedStore>(new SharedStore(std::move(state)));
}

SharedStore::SharedStore(std::unique_ptr<State> state) : state_(std::move(state)) {}

SharedStore::~SharedStore() {
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
    state_->writer_cv.notify_all();
    state_->conn_cv.notify_all();
  }
  if (state_->writer.joinable()) state_->writer.join();
}

util::StatusOr<SharedInvalidationResult> SharedStore::Invalidate(
    const SharedInvalidation& what, std::chrono::steady_clock::time_point deadline) {
  State& s = *state_;
  if (!up()) {
    return util::UnavailableError(fmt::format(
        "redis {}:{} is down: its entries were not invalidated", s.options.host, s.options.port));
  }
  // A store queued before this call must not land after the deletion.
  (void)Flush(std::chrono::duration_cast<std::chrono::milliseconds>(std::max(
      deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration{})));
  SharedInvalidationResult out;
  std::vector<RedisCommand> deletes;
  std::vector<bool> is_entry;  // per delete: an entry (counted), or a bucket
  auto add_delete = [&](std::string key, bool entry) {
    deletes.push_back({"UNLINK", std::move(key)});
    is_entry.push_back(entry);
  };
  auto run_deletes = [&]() -> util::Status {
    if (deletes.empty()) return util::OkStatus();
    auto replies = s.Run(deletes);
    if (!replies) return util::UnavailableError("redis went away during the invalidation");
    for (size_t i = 0; i < replies->size(); ++i) {
      const RedisReply& r = (*replies)[i];
      if (is_entry[i] && r.type == RedisReply::Type::kInteger)
        out.entries += static_cast<uint64_t>(r.integer);
    }
    deletes.clear();
    is_entry.clear();
    return util::OkStatus();
  };
  // An exact request: its keys are known, nothing to scan.
  if (what.key || what.near) {
    if (!what.tenant || !what.model) {
      return util::InvalidArgumentError("an exact invalidation needs its tenant and model");
    }
    const SharedScope scope{*what.tenant, *what.model};
    if (what.key) add_delete(ExactKey(s.options.prefix, scope, *what.key), true);
    if (what.near) {
      add_delete(State::EntryKey(NearBase(s.options.prefix, scope, what.near->first),
                                 what.near->second->sequence_hash),
                 true);
    }
    STRATA_RETURN_IF_ERROR(run_deletes());
    return out;
  }
  const std::string pattern = fmt::format("{}:{}:{}:*", s.options.prefix,
                                          what.model ? fmt::format("{:016x}", *what.model) : "*",
                                          what.tenant ? net::RedisKeyPart(*what.tenant) : "*");
  std::string cursor = "0";
  do {
    if (std::chrono::steady_clock::now() >= deadline) {
      return util::DeadlineExceededError(fmt::format(
          "the invalidation scanned {} keys of redis and deleted {} entries before its deadline",
          out.scanned, out.entries));
    }
    auto page = s.Run({{"SCAN", cursor, "MATCH", pattern, "COUNT", "500"}});
    if (!page || (*page)[0].type != RedisReply::Type::kArray || (*page)[0].elements.size() != 2) {
      return util::UnavailableError("redis went away during the invalidation");
    }
    cursor = (*page)[0].elements[0].str;
    std::vector<std::string> entries;  // L1 strings and L3 entry hashes
    for (const RedisReply& k : (*page)[0].elements[1].elements) {
      ++out.scanned;
      const bool l1 = k.str.find(":l1:") != std::string::npos;
      const bool l3_entry = !l1 && k.str.find(":e:") != std::string::npos;
      if (l1 || l3_entry) {
        entries.push_back(k.str);
      } else if (!what.match) {
        add_delete(k.str, false);  // a bucket: goes with its namespace
      }
    }
    if (what.match && !entries.empty()) {
      std::vector<RedisCommand> fetch;
      for (const std::string& k : entries) {
        if (k.find(":l1:") != std::string::npos) {
          fetch.push_back({"GET", k});
        } else {
          fetch.push_back({"HGET", k, "v"});
        }
      }
      auto values = s.Run(fetch);
      if (!values) return util::UnavailableError("redis went away during the invalidation");
      for (size_t i = 0; i < entries.size(); ++i) {
        const RedisReply& v = (*values)[i];
        if (v.type != RedisReply::Type::kString) continue;  // expired meanwhile
        std::string_view bytes = v.str;
        if (entries[i].find(":l1:") != std::string::npos) {
          // Magic, key length, key bytes, then the value.
          uint32_t n = 0;
          for (int b = 0; b < 4 && bytes.size() >= 8; ++b) {
            n |= uint32_t{static_cast<uint8_t>(bytes[4 + static_cast<size_t>(b)])} << (8 * b);
          }
          bytes =
              bytes.size() >= 8 && bytes.size() - 8 >= n ? bytes.substr(8 + n) : std::string_view();
        }
        auto value = s.codec.Decode(bytes);
        if (!value.ok() || what.match(**value)) add_delete(entries[i], true);
      }
    } else {
      for (std::string& k : entries) add_delete(std::move(k), true);
    }
    STRATA_RETURN_IF_ERROR(run_deletes());
  } while (cursor != "0");
  return out;
}

std::optional<SharedHit> SharedStore::GetExact(const SharedScope& scope, const CacheKey& key) {
  State& s = *state_;
  const std::string k = ExactKey(s.options.prefix, scope, key);
  auto replies = s.Run({{"GET", k}, {"PTTL", k}});
  if (!replies) return std::nullopt;
  const RedisReply& got = (*replies)[0];
  const RedisReply& ttl = (*replies)[1];
  auto count = [&](bool hit, bool error) {
    std::lock_guard lock(s.mu);
    ++s.stats.lookups;
    s.stats.hits += hit;
    s.stats.errors += error;
  };
  if (got.type != RedisReply::Type::kString) {
    count(false, got.type == RedisReply::Type::kError);
    return std::nullopt;
  }
  const std::string_view b = got.str;
  if (b.size() < 8 || std::memcmp(b.data(), kExactMagic, sizeof kExactMagic) != 0) {
    count(false, true);
    return std::nullopt;
  }
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= uint32_t{static_cast<uint8_t>(b[4 + i])} << (8 * i);
  if (b.size() - 8 < n) {
    count(false, true);
    return std::nullopt;
  }
  if (b.substr(8, n) != key.bytes) {  // another key under the same hash: not ours
    count(false, false);
    return std::nullopt;
  }
  auto value = s.codec.Decode(b.substr(8 + n));
  if (!value.ok()) {
    count(false, true);
    return std::nullopt;
  }
  const int64_t ttl_ms = ttl.type == RedisReply::Type::kInteger ? ttl.integer : -1;
  if (ttl_ms <= 0) {  // expiring this instant (or no TTL: not one of ours)
    count(false, false);
    return std::nullopt;
  }
  count(true, false);
  return SharedHit{std::move(value).value(), std::chrono::milliseconds(ttl_ms), 1.0};
}

void SharedStore::PutExact(const SharedScope& scope, const CacheKey& key,
                           std::shared_ptr<const CachedValue> value, std::chrono::nanoseconds ttl) {
  State& s = *state_;
  State::Job job;
  job.kind = State::Job::Kind::kExact;
  job.key = ExactKey(s.options.prefix, scope, key);
  job.cache_key = key;
  job.value = std::move(value);
  {
    std::lock_guard lock(s.mu);
    job.ttl = TtlMs(ttl, s.options.ttl_jitter, s.rng);
  }
  s.Enqueue(std::move(job));
}

std::optional<SharedHit> SharedStore::FindNear(const SharedScope& scope, std::string_view ns_id,
                                               const NearDupText& text,
                                               std::optional<double> min_similarity) {
  State& s = *state_;
  const std::string base = NearBase(s.options.prefix, scope, ns_id);
  std::vector<RedisCommand> probe(1);
  probe[0].push_back("SUNION");
  for (std::string& k : s.ProbeKeys(base, text.fingerprint)) probe[0].push_back(std::move(k));
  auto members = s.Run(probe);
  if (!members) return std::nullopt;
  auto count = [&](bool hit, uint64_t errors) {
    std::lock_guard lock(s.mu);
    ++s.stats.lookups;
    s.stats.hits += hit;
    s.stats.errors += errors;
  };
  // Candidates within the index's distance, closest first (ties by id, so the
  // order does not depend on Redis's set order).
  std::vector<std::tuple<int, uint64_t, uint64_t>> found;  // (distance, id, fingerprint)
  uint64_t malformed = 0;
  for (const RedisReply& m : (*members)[0].elements) {
    uint64_t id = 0, fp = 0;
    if (m.str.size() != 32 || !ParseHex64(std::string_view(m.str).substr(0, 16), &id) ||
        !ParseHex64(std::string_view(m.str).substr(16), &fp)) {
      ++malformed;
      continue;
    }
    const int d = HammingDistance(fp, text.fingerprint);
    if (d <= s.max_distance()) found.emplace_back(d, id, fp);
  }
  std::sort(found.begin(), found.end());
  if (found.size() > s.options.near_dup.max_candidates)
    found.resize(s.options.near_dup.max_candidates);
  if (found.empty()) {
    count(false, malformed);
    return std::nullopt;
  }
  std::vector<RedisCommand> fetch;
  for (const auto& [d, id, fp] : found) fetch.push_back({"HGET", State::EntryKey(base, id), "t"});
  auto texts = s.Run(fetch);
  if (!texts) return std::nullopt;
  const double threshold = min_similarity.value_or(s.options.near_dup.min_similarity);
  std::optional<std::pair<double, uint64_t>> best;  // (similarity, id)
  State::Job forget;
  forget.kind = State::Job::Kind::kForget;
  for (size_t i = 0; i < found.size(); ++i) {
    const auto& [d, id, fp] = found[i];
    const RedisReply& r = (*texts)[i];
    if (r.type == RedisReply::Type::kNil) {  // the entry expired; its bucket members stayed
      for (int band = 0; band < s.options.near_dup.bands; ++band) {
        forget.forget.emplace_back(s.BucketKey(base, band, s.Block(fp, band)),
                                   State::Member(id, fp));
      }
      continue;
    }
    auto candidate = r.type == RedisReply::Type::kString
                         ? DecodeNearDupText(r.str)
                         : util::StatusOr<NearDupText>(util::DataLossError("not a string"));
    if (!candidate.ok()) {
      ++malformed;
      continue;
    }
    const PairScore score = ScorePair(text, *candidate, s.options.near_dup.similarity, threshold);
    if (score.rejected_by != Guard::kNone || score.similarity < threshold) continue;
    if (!best || score.similarity > best->first) best.emplace(score.similarity, id);
  }
  if (!forget.forget.empty()) s.Enqueue(std::move(forget));
  if (!best) {
    count(false, malformed);
    return std::nullopt;
  }
  const std::string entry = State::EntryKey(base, best->second);
  auto value_replies = s.Run({{"HGET", entry, "v"}, {"PTTL", entry}});
  if (!value_replies) return std::nullopt;
  const RedisReply& v = (*value_replies)[0];
  const RedisReply& ttl = (*value_replies)[1];
  if (v.type != RedisReply::Type::kString) {
    count(false, malformed);
    return std::nullopt;
  }
  auto value = s.codec.Decode(v.str);
  const int64_t ttl_ms = ttl.type == RedisReply::Type::kInteger ? ttl.integer : -1;
  if (!value.ok() || ttl_ms <= 0) {
    count(false, malformed + (value.ok() ? 0 : 1));
    return std::nullopt;
  }
  count(true, malformed);
  return SharedHit{std::move(value).value(), std::chrono::milliseconds(ttl_ms), best->first};
}

void SharedStore::PutNear(const SharedScope& scope, std::string_view ns_id,
                          std::shared_ptr<const NearDupText> text,
                          std::shared_ptr<const CachedValue> value, std::chrono::nanoseconds ttl) {
  State& s = *state_;
  State::Job job;
  job.kind = State::Job::Kind::kNear;
  job.key = NearBase(s.options.prefix, scope, ns_id);
  job.text = std::move(text);
  job.value = std::move(value);
  {
    std::lock_guard lock(s.mu);
    job.ttl = TtlMs(ttl, s.options.ttl_jitter, s.rng);
  }
  s.Enqueue(std::move(job));
}

bool SharedStore::up() const {
  std::lock_guard lock(state_->mu);
  return state_->up;
}

SharedStoreStats SharedStore::stats() const {
  std::lock_guard lock(state_->mu);
  SharedStoreStats out = state_->stats;
  out.up = state_->up;
  return out;
}

bool SharedStore::Flush(std::chrono::milliseconds timeout) {
  std::unique_lock lock(state_->mu);
  return state_->flush_cv.wait_for(lock, timeout,
                                   [&] { return state_->queue.empty() && !state_->in_flight; });
}

}  // namespace strata::cache
