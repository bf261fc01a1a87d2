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

#include "cache/internal/shared_store_state.h"
#include "cache/shared_feed.h"
#include "cache/simhash.h"
#include "net/redis.h"
#include "util/hash.h"

namespace strata::cache {

using net::RedisCommand;
using net::RedisConn;
using net::RedisReply;

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
  state->instance_id = NewInstanceId(state.get());
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
  std::string pattern = fmt::format("{}:{}:{}:*", s.options.prefix,
                                    what.model ? fmt::format("{:016x}", *what.model) : "*",
                                    what.tenant ? net::RedisKeyPart(*what.tenant) : "*");
  if (what.key || what.near) {
    // An exact request: its L1 and L3 keys are known; its semantic entries
    // (one per encoder) end with its key's hash, which a narrow scan finds.
    if (!what.tenant || !what.model || !what.key) {
      return util::InvalidArgumentError("an exact invalidation needs its tenant, model and key");
    }
    const SharedScope scope{*what.tenant, *what.model};
    add_delete(ExactKey(s.options.prefix, scope, *what.key), true);
    if (what.near) {
      add_delete(State::EntryKey(NearBase(s.options.prefix, scope, what.near->first),
                                 what.near->second->sequence_hash),
                 true);
    }
    STRATA_RETURN_IF_ERROR(run_deletes());
    pattern = fmt::format("{}:sem:*{:016x}", Base(s.options.prefix, scope), what.key->hash);
  }
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
    std::vector<std::string> entries;  // L1 strings, L3 and semantic entry hashes
    for (const RedisReply& k : (*page)[0].elements[1].elements) {
      ++out.scanned;
      const bool l1 = k.str.find(":l1:") != std::string::npos;
      const bool entry =
          l1 || k.str.find(":e:") != std::string::npos || k.str.find(":sem:") != std::string::npos;
      if (entry) {
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
        } else if (k.find(":sem:") != std::string::npos) {
          fetch.push_back({"HGET", k, "a"});
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
  auto count = [&s](bool hit, bool error) { s.CountLookup(hit, error ? 1 : 0); };
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
  auto count = [&s](bool hit, uint64_t errors) { s.CountLookup(hit, errors); };
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
