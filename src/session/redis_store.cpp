#include "session/redis_store.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "net/redis.h"
#include "session/internal/common.h"
#include "session/record.h"

namespace strata::session {
namespace {

namespace rec = record;
using internal::MillisSinceEpoch;
using net::RedisCommand;
using net::RedisConn;
using net::RedisReply;

// The scripts run atomically on the primary. Every key a script touches
// starts with ARGV[1], the tenant's base `<prefix>:{<tenant>}`, so it lies
// in one Cluster slot. Numbers travel as decimal strings; times are the
// caller's wall clock in ms (the injected clock, so tests can move it).
//
// drop(base, sid): removes a session and its index entries.
// prune(base, now, ttl): forgets up to 64 of the tenant's expired sessions
// (their keys carry a Redis TTL too; this keeps the index and count right).
constexpr const char* kHelpers = R"lua(
local function drop(base, sid)
  redis.call('DEL', base .. ':m:' .. sid, base .. ':t:' .. sid, base .. ':o:' .. sid)
  redis.call('ZREM', base .. ':index', sid)
  redis.call('ZREM', base .. ':expiry', sid)
end
-- A Lamport clock as the record's varint (LEB128).
local function varint(n)
  local s = ''
  while n >= 128 do
    s = s .. string.char(n % 128 + 128)
    n = math.floor(n / 128)
  end
  return s .. string.char(n)
end
local function prune(base, now, ttl)
  if ttl <= 0 then return end
  local old = redis.call('ZRANGEBYSCORE', base .. ':expiry', '-inf', now - ttl, 'LIMIT', 0, 64)
  for _, sid in ipairs(old) do drop(base, sid) end
end
-- The session's meta fields, or nil when it has none (an expired one is
-- dropped here).
local function live_meta(base, sid, now, ttl)
  local m = redis.call('HMGET', base .. ':m:' .. sid, 'clock', 'turns', 'bytes', 'created', 'updated')
  if not m[1] then return nil end
  if ttl > 0 and now - tonumber(m[5]) >= ttl then
    drop(base, sid)
    return nil
  end
  return m
end
)lua";

// ARGV: base, sid, depends_on, expected_turns ('' none), op_id ('' none),
// writer, turn record (its clock, the third byte, 0: the script puts the
// clock it gives the turn there), the turn's bytes, now,
// ttl, max_turns, max_bytes, max_sessions.
// Returns {'ok', ref} | {'dup', ref, record} | {'wait', clock} |
// {'aborted', turns} | {'turns'} | {'bytes', bytes} | {'sessions'}.
constexpr const char* kAppendLua = R"lua(
local base, sid = ARGV[1], ARGV[2]
local depends, expected, op, writer = tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6]
local value, tbytes = ARGV[7], tonumber(ARGV[8])
local now, ttl = tonumber(ARGV[9]), tonumber(ARGV[10])
local max_turns, max_bytes, max_sessions = tonumber(ARGV[11]), tonumber(ARGV[12]), tonumber(ARGV[13])
local meta_k, turns_k, ops_k = base .. ':m:' .. sid, base .. ':t:' .. sid, base .. ':o:' .. sid
local m = live_meta(base, sid, now, ttl)
if m and op ~= '' then
  local ref = redis.call('HGET', ops_k, op)
  if ref then return {'dup', ref, redis.call('HGET', turns_k, ref)} end
end
local clock, turns, bytes = 0, 0, 0
if m then clock, turns, bytes = tonumber(m[1]), tonumber(m[2]), tonumber(m[3]) end
if depends > clock then return {'wait', tostring(clock)} end
if expected ~= '' and tonumber(expected) ~= turns then return {'aborted', tostring(turns)} end
if turns + 1 > max_turns then return {'turns'} end
if bytes + tbytes > max_bytes then return {'bytes', string.format('%d', bytes + tbytes)} end
if not m then
  prune(base, now, ttl)
  if redis.call('ZCARD', base .. ':index') >= max_sessions then return {'sessions'} end
  redis.call('ZADD', base .. ':index', 0, sid)
  redis.call('HSET', meta_k, 'created', string.format('%d', now))
end
local new_clock = math.max(depends, clock) + 1
local ref = string.format('%016x', new_clock) .. writer
redis.call('HSET', turns_k, ref, string.sub(value, 1, 2) .. varint(new_clock) .. string.sub(value, 4))
redis.call('HSET', meta_k, 'clock', string.format('%d', new_clock), 'turns', string.format('%d', turns + 1),
           'bytes', string.format('%d', bytes + tbytes), 'updated', string.format('%d', now))
if op ~= '' then redis.call('HSET', ops_k, op, ref) end
redis.call('ZADD', base .. ':expiry', now, sid)
if ttl > 0 then
  redis.call('PEXPIRE', meta_k, ttl)
  redis.call('PEXPIRE', turns_k, ttl)
  redis.call('PEXPIRE', ops_k, ttl)
end
return {'ok', ref}
)lua";

// ARGV: base, sid, now, ttl. Returns {} or {clock, turns, bytes, created,
// updated, {ref, record, ref, record, ...}}.
constexpr const char* kReadLua = R"lua(
local base, sid, now, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local m = live_meta(base, sid, now, ttl)
if not m then return {} end
return {m[1], m[2], m[3], m[4], m[5], redis.call('HGETALL', base .. ':t:' .. sid)}
)lua";

// ARGV: base, sid, now, ttl. Returns 1 (deleted) or 0 (none).
constexpr const char* kDeleteLua = R"lua(
local base, sid, now, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if not live_meta(base, sid, now, ttl) then return 0 end
drop(base, sid)
return 1
)lua";

// ARGV: base, cursor ('' from the start), limit, now, ttl. Returns {next,
// {id, clock, turns, bytes, created, updated}...}; next is '' on the last
// page. Scans at most 4096 ids a call (expired ones are dropped on the
// way); a page cut short by that returns the last id scanned as `next`.
constexpr const char* kListLua = R"lua(
local base, cursor, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now, ttl = tonumber(ARGV[4]), tonumber(ARGV[5])
local out, scanned, start = {}, 0, (cursor == '' and '-' or '(' .. cursor)
while scanned < 4096 do
  local ids = redis.call('ZRANGEBYLEX', base .. ':index', start, '+', 'LIMIT', 0, 128)
  if #ids == 0 then return {'', out} end
  for _, sid in ipairs(ids) do
    scanned = scanned + 1
    local m = live_meta(base, sid, now, ttl)
    if m then
      if #out == limit then return {out[#out][1], out} end
      out[#out + 1] = {sid, m[1], m[2], m[3], m[4], m[5]}
    elseif not redis.call('EXISTS', base .. ':m:' .. sid) then
      redis.call('ZREM', base .. ':index', sid)
    end
    start = '(' .. sid
  end
end
return {string.sub(start, 2), out}
)lua";

// An error reply that means "this node is not (or not yet) the primary you
// want": find the primary again.
bool NotPrimary(const RedisReply& r) {
  if (r.type != RedisReply::Type::kError) return false;
  for (const char* p : {"READONLY", "LOADING", "MASTERDOWN", "NOREPLICAS"}) {
    if (r.str.rfind(p, 0) == 0) return true;
  }
  return false;
}

util::StatusOr<int64_t> ToInt(const RedisReply& r, std::string_view what) {
  int64_t v = 0;
  const std::string& s = r.str;
  if (r.type == RedisReply::Type::kInteger) return r.integer;
  if (r.type != RedisReply::Type::kString || s.empty() ||
      std::from_chars(s.data(), s.data() + s.size(), v).ptr != s.data() + s.size()) {
    return util::DataLossError(fmt::format("session store: redis holds a bad {}", what));
  }
  return v;
}

// A session's meta fields as a script answers them, from elements[at]:
// clock, turns, bytes, created, updated.
util::StatusOr<SessionSummary> MetaFields(const std::string& id,
                                          const std::vector<RedisReply>& elements, size_t at) {
  if (elements.size() < at + 5) return util::DataLossError("session store: a short meta record");
  SessionSummary s{.id = id};
  int64_t v[5];
  const char* what[5] = {"clock", "turn count", "byte count", "creation time", "update time"};
  for (size_t i = 0; i < 5; ++i) {
    STRATA_ASSIGN_OR_RETURN(v[i], ToInt(elements[at + i], what[i]));
  }
  s.clock = static_cast<uint64_t>(v[0]);
  s.turns = static_cast<uint64_t>(v[1]);
  s.bytes = static_cast<uint64_t>(v[2]);
  s.created_ms = v[3];
  s.updated_ms = v[4];
  return s;
}

// The clock in a turn ref: 16 hex digits, then the writer.
util::StatusOr<uint64_t> RefClock(std::string_view ref) {
  uint64_t v = 0;
  if (ref.size() < 16 ||
      std::from_chars(ref.data(), ref.data() + 16, v, 16).ptr != ref.data() + 16) {
    return util::DataLossError("session store: redis holds a bad turn ref");
  }
  return v;
}

util::StatusOr<Turn> DecodeStoredTurn(const std::string& ref, const std::string& value) {
  STRATA_ASSIGN_OR_RETURN(Turn t, rec::DecodeTurn(value));
  STRATA_ASSIGN_OR_RETURN(const uint64_t clock, RefClock(ref));
  if (clock != t.clock || ref.substr(16) != t.writer) {
    return util::DataLossError("session store: a turn's ref and record disagree");
  }
  return t;
}

class RedisStore final : public SessionStore {
 public:
  RedisStore(RedisStoreOptions options, int replicas)
      : options_(std::move(options)),
        replicas_(replicas),
        clock_(options_.clock != nullptr ? *options_.clock : util::RealClock()) {}

  // Finds the primary, checks its AOF, and says how many replicas it has
  // against how many must confirm each write.
  util::Status Open() {
    STRATA_ASSIGN_OR_RETURN(std::unique_ptr<RedisConn> conn, Connect());
    STRATA_RETURN_IF_ERROR(CheckAof(*conn));
    STRATA_ASSIGN_OR_RETURN(RedisReply info, conn->Command({"INFO", "replication"}));
    const size_t at = info.str.find("connected_slaves:");
    const int connected = at == std::string::npos ? 0 : std::atoi(info.str.c_str() + at + 17);
    Log(connected < replicas_ ? util::LogLevel::kWarn : util::LogLevel::kInfo,
        fmt::format(
            "sessions: redis primary {}, {} replica(s) connected, {} must confirm each turn",
            Name(primary_), connected, replicas_));
    Release(std::move(conn));
    return util::OkStatus();
  }

  util::StatusOr<Turn> Append(const AppendRequest& r) override {
    STRATA_RETURN_IF_ERROR(internal::CheckAppend(r));
    Turn turn = internal::NewTurn(r, MillisSinceEpoch(clock_.WallNow()));
    const uint64_t bytes = rec::TurnBytes(turn);
    const std::string value = rec::EncodeTurn(turn);  // clock 0, one byte: the script sets it
    const Limits& l = options_.limits;

    // A dependency not applied yet: ask again, backing off, until the wait
    // is over (real time, as the embedded store's condition variable).
    const auto deadline = std::chrono::steady_clock::now() + l.dependency_wait;
    auto pause = std::chrono::milliseconds(1);
    while (true) {
      const int64_t now = MillisSinceEpoch(clock_.WallNow());
      RedisCommand args = {Base(r.tenant),
                           r.session_id,
                           std::to_string(r.depends_on),
                           r.expected_turns ? std::to_string(*r.expected_turns) : "",
                           r.op_id,
                           r.writer,
                           value,
                           std::to_string(bytes),
                           std::to_string(now),
                           std::to_string(TtlMs()),
                           std::to_string(l.max_turns),
                           std::to_string(l.max_bytes),
                           std::to_string(l.max_sessions_per_tenant)};
      STRATA_ASSIGN_OR_RETURN(RedisReply reply,
                              Run(Script::kAppend, std::move(args), /*retry=*/!r.op_id.empty(),
                                  /*wait=*/true));
      if (reply.type != RedisReply::Type::kArray || reply.elements.empty()) {
        return util::DataLossError("session store: redis answered the append oddly");
      }
      const std::string& what = reply.elements[0].str;
      const auto arg = [&](size_t i) -> const std::string& {
        static const std::string kNone;
        return i < reply.elements.size() ? reply.elements[i].str : kNone;
      };
      if (what == "ok") {
        STRATA_ASSIGN_OR_RETURN(turn.clock, RefClock(arg(1)));
        return turn;
      }
      if (what == "dup") return DecodeStoredTurn(arg(1), arg(2));
      if (what == "aborted") {
        return util::AbortedError("session '" + r.session_id + "' has " + arg(1) +
                                  " turns, the request expected " +
                                  std::to_string(*r.expected_turns));
      }
      if (what == "turns") {
        return util::ResourceExhaustedError("session '" + r.session_id +
                                            "' has reached its limit of " +
                                            std::to_string(l.max_turns) + " turns");
      }
      if (what == "bytes") {
        return util::ResourceExhaustedError("session '" + r.session_id + "' would hold " + arg(1) +
                                            " bytes, over its limit of " +
                                            std::to_string(l.max_bytes));
      }
      if (what == "sessions") {
        return util::ResourceExhaustedError("the tenant has reached its limit of " +
                                            std::to_string(l.max_sessions_per_tenant) +
                                            " sessions");
      }
      if (what != "wait") return util::DataLossError("session store: redis answered " + what);
      if (std::chrono::steady_clock::now() + pause > deadline) {
        return util::FailedPreconditionError("session '" + r.session_id +
                                             "' has no turn with clock " +
                                             std::to_string(r.depends_on) + " yet (its clock is " +
                                             arg(1) + "): the turn this one answers is missing");
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(16));
    }
  }

  util::StatusOr<Session> Read(const std::string& tenant, const std::string& id) override {
    STRATA_RETURN_IF_ERROR(internal::CheckKeyParts(tenant, id));
    STRATA_ASSIGN_OR_RETURN(RedisReply reply, Run(Script::kRead, SessionArgs(tenant, id),
                                                  /*retry=*/true, /*wait=*/false));
    if (reply.type != RedisReply::Type::kArray) {
      return util::DataLossError("session store: redis answered the read oddly");
    }
    if (reply.elements.empty()) return util::NotFoundError("no session '" + id + "'");
    if (reply.elements.size() != 6 || reply.elements[5].type != RedisReply::Type::kArray) {
      return util::DataLossError("session store: redis answered the read oddly");
    }
    STRATA_ASSIGN_OR_RETURN(const SessionSummary meta, MetaFields(id, reply.elements, 0));
    const uint64_t turns = meta.turns;
    Session s{.id = id,
              .turns = {},
              .clock = meta.clock,
              .bytes = meta.bytes,
              .created_ms = meta.created_ms,
              .updated_ms = meta.updated_ms};
    // HGETALL answers field, value, field, value ... in no order: the refs
    // (clock as 16 hex digits, then the writer) sort in causal order.
    std::vector<std::pair<std::string, std::string>> fields;
    const std::vector<RedisReply>& flat = reply.elements[5].elements;
    for (size_t i = 0; i + 1 < flat.size(); i += 2) {
      fields.emplace_back(flat[i].str, flat[i + 1].str);
    }
    std::sort(fields.begin(), fields.end());
    for (const auto& [ref, value] : fields) {
      STRATA_ASSIGN_OR_RETURN(Turn t, DecodeStoredTurn(ref, value));
      s.turns.push_back(std::move(t));
    }
    if (s.turns.size() != static_cast<size_t>(turns)) {
      return util::DataLossError("session store: session '" + id + "' lists " +
                                 std::to_string(turns) + " turns and holds " +
                                 std::to_string(s.turns.size()));
    }
    return s;
  }

  util::StatusOr<SessionPage> List(const std::string& tenant, const std::string& cursor,
                                   size_t limit) override {
    STRATA_RETURN_IF_ERROR(internal::CheckList(tenant, cursor, limit));
    STRATA_ASSIGN_OR_RETURN(
        RedisReply reply,
        Run(Script::kList,
            {Base(tenant), cursor, std::to_string(limit),
             std::to_string(MillisSinceEpoch(clock_.WallNow())), std::to_string(TtlMs())},
            /*retry=*/true, /*wait=*/false));
    const auto odd = [] {
      return util::DataLossError("session store: redis answered the list oddly");
    };
    if (reply.type != RedisReply::Type::kArray || reply.elements.size() != 2 ||
        reply.elements[1].type != RedisReply::Type::kArray) {
      return odd();
    }
    SessionPage page;
    page.next_cursor = reply.elements[0].str;
    for (const RedisReply& row : reply.elements[1].elements) {
      if (row.type != RedisReply::Type::kArray || row.elements.size() != 6) return odd();
      STRATA_ASSIGN_OR_RETURN(SessionSummary s, MetaFields(row.elements[0].str, row.elements, 1));
      page.sessions.push_back(std::move(s));
    }
    return page;
  }

  util::Status Delete(const std::string& tenant, const std::string& id) override {
    STRATA_RETURN_IF_ERROR(internal::CheckKeyParts(tenant, id));
    STRATA_ASSIGN_OR_RETURN(RedisReply reply, Run(Script::kDelete, SessionArgs(tenant, id),
                                                  /*retry=*/true, /*wait=*/true));
    if (reply.type != RedisReply::Type::kInteger) {
      return util::DataLossError("session store: redis answered the delete oddly");
    }
    if (reply.integer == 0) return util::NotFoundError("no session '" + id + "'");
    return util::OkStatus();
  }

 private:
  enum class Script { kAppend, kRead, kDelete, kList };

  static const char* Body(Script s) {
    switch (s) {
      case Script::kAppend:
        return kAppendLua;
      case Script::kRead:
        return kReadLua;
      case Script::kDelete:
        return kDeleteLua;
      case Script::kList:
        return kListLua;
    }
    return kReadLua;
  }

  std::string Base(const std::string& tenant) const {
    return options_.prefix + ":{" + net::RedisKeyPart(tenant) + "}";
  }
  // The arguments of the read and delete scripts: base, sid, now, ttl.
  RedisCommand SessionArgs(const std::string& tenant, const std::string& id) const {
    return {Base(tenant), id, std::to_string(MillisSinceEpoch(clock_.WallNow())),
            std::to_string(TtlMs())};
  }
  int64_t TtlMs() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(options_.limits.ttl).count();
  }
  std::string Name(size_t node) const {
    if (node >= options_.nodes.size()) return "(none)";
    return options_.nodes[node].first + ":" + std::to_string(options_.nodes[node].second);
  }
  void Log(util::LogLevel level, const std::string& line) const {
    if (options_.log != nullptr) options_.log->Write(level, line);
  }

  // Runs one script on the primary (EVAL with its helpers; Redis caches the
  // compiled script by its SHA-1), then, for a write, WAITs for the
  // replicas. On a transport error or a demoted node the primary is found
  // again and, when `retry`, the script runs once more.
  util::StatusOr<RedisReply> Run(Script script, RedisCommand args, bool retry, bool wait) {
    RedisCommand cmd = {"EVAL", std::string(kHelpers) + Body(script), "0"};
    cmd.insert(cmd.end(), std::make_move_iterator(args.begin()),
               std::make_move_iterator(args.end()));
    util::Status last;
    for (int attempt = 0; attempt < (retry ? 2 : 1); ++attempt) {
      auto conn = Acquire();
      if (!conn.ok()) {
        last = conn.status();
        continue;
      }
      std::vector<RedisCommand> batch = {cmd};
      if (wait && replicas_ > 0) {
        batch.push_back(
            {"WAIT", std::to_string(replicas_), std::to_string(options_.wait_timeout.count())});
      }
      // WAIT answers when its own timeout is over: the reply may take that
      // long besides the usual bound.
      const bool waits = batch.size() == 2;
      util::Status set =
          waits ? (*conn)->SetTimeout(options_.timeout + options_.wait_timeout) : util::OkStatus();
      util::StatusOr<std::vector<RedisReply>> replies =
          set.ok() ? (*conn)->Pipeline(batch) : util::StatusOr<std::vector<RedisReply>>(set);
      if (replies.ok() && waits) {
        set = (*conn)->SetTimeout(options_.timeout);
        if (!set.ok()) replies = set;
      }
      if (!replies.ok()) {
        last = replies.status();
        Forget(fmt::format("{} ({})", Name(primary_), replies.status().message()));
        continue;
      }
      RedisReply& reply = (*replies)[0];
      if (NotPrimary(reply)) {
        last = util::UnavailableError("session store: redis " + Name(primary_) + ": " + reply.str);
        Forget(reply.str);
        continue;
      }
      if (reply.type == RedisReply::Type::kError) {
        Release(std::move(*conn));
        return util::UnavailableError("session store: redis: " + reply.str);
      }
      if (waits) {
        const RedisReply& acks = (*replies)[1];
        if (acks.type != RedisReply::Type::kInteger || acks.integer < replicas_) {
          Release(std::move(*conn));
          return util::UnavailableError(fmt::format(
              "session store: the write reached {} of the {} redis replicas it needs within {} "
              "ms, so it is not acknowledged (a retry with the same request id stores it once)",
              acks.type == RedisReply::Type::kInteger ? acks.integer : 0, replicas_,
              options_.wait_timeout.count()));
        }
      }
      Release(std::move(*conn));
      return std::move(reply);
    }
    return last;
  }

  // A pooled connection to the primary, or a new one (finding the primary
  // first when it is not known).
  util::StatusOr<std::unique_ptr<RedisConn>> Acquire() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        auto conn = std::move(idle_.back());
        idle_.pop_back();
        return conn;
      }
    }
    return Connect();
  }

  void Release(std::unique_ptr<RedisConn> conn) {
    std::lock_guard lock(mu_);
    if (!conn->broken() && idle_.size() < options_.connections) idle_.push_back(std::move(conn));
  }

  // The primary is lost (or demoted): every pooled connection goes, and the
  // next call finds it again.
  void Forget(const std::string& why) {
    std::lock_guard lock(mu_);
    if (primary_ < options_.nodes.size()) {
      Log(util::LogLevel::kWarn,
          fmt::format("sessions: redis primary {} lost: {}; looking for the primary",
                      Name(primary_), why));
    }
    primary_ = options_.nodes.size();
    idle_.clear();
  }

  // A connection to the primary: the known one, else the first node whose
  // ROLE says master.
  util::StatusOr<std::unique_ptr<RedisConn>> Connect() {
    size_t known;
    {
      std::lock_guard lock(mu_);
      known = primary_;
    }
    if (known < options_.nodes.size()) {
      const auto& [host, port] = options_.nodes[known];
      auto conn = RedisConn::Connect(host, port, options_.timeout);
      if (conn.ok()) return conn;
      Forget(std::string(conn.status().message()));
    }
    std::string tried;
    for (size_t i = 0; i < options_.nodes.size(); ++i) {
      const auto& [host, port] = options_.nodes[i];
      auto conn = RedisConn::Connect(host, port, options_.timeout);
      std::string role = "unreachable";
      if (conn.ok()) {
        auto reply = (*conn)->Command({"ROLE"});
        role = !reply.ok() ? "unreachable"
               : reply->type == RedisReply::Type::kArray && !reply->elements.empty()
                   ? reply->elements[0].str
                   : "unknown";
        if (role == "master") {
          std::lock_guard lock(mu_);
          if (primary_ != i) {
            Log(util::LogLevel::kInfo, fmt::format("sessions: redis primary is {}", Name(i)));
          }
          primary_ = i;
          return std::move(*conn);
        }
      }
      tried += (tried.empty() ? "" : ", ") + Name(i) + " " + role;
    }
    return util::UnavailableError("session store: no redis primary among the nodes (" + tried +
                                  ")");
  }

  // A primary whose AOF is off, or not synced on every write, can lose an
  // acknowledged turn in a crash.
  util::Status CheckAof(RedisConn& conn) {
    auto reply = conn.Pipeline({{"CONFIG", "GET", "appendonly"}, {"CONFIG", "GET", "appendfsync"}});
    if (!reply.ok()) return reply.status();
    const auto value = [](const RedisReply& r) -> std::optional<std::string> {
      if (r.type != RedisReply::Type::kArray || r.elements.size() != 2) return std::nullopt;
      return r.elements[1].str;
    };
    const auto appendonly = value((*reply)[0]), appendfsync = value((*reply)[1]);
    if (!appendonly || !appendfsync) {
      Log(util::LogLevel::kWarn,
          fmt::format("sessions: redis {} does not say how it persists (CONFIG GET refused): make "
                      "sure it runs with appendonly yes and appendfsync always",
                      Name(primary_)));
      return util::OkStatus();
    }
    if ((*appendonly != "yes" || *appendfsync != "always") && options_.require_aof) {
      return util::FailedPreconditionError(fmt::format(
          "session store: redis {} runs with appendonly {} and appendfsync {}: a turn it "
          "acknowledged could be lost in a crash. Start it with --appendonly yes --appendfsync "
          "always (or CONFIG SET both)",
          Name(primary_), *appendonly, *appendfsync));
    }
    return util::OkStatus();
  }

  const RedisStoreOptions options_;
  const int replicas_;  // replicas that confirm each write
  const util::Clock& clock_;
  std::mutex mu_;  // guards primary_ and idle_ (never held over I/O)
  size_t primary_ = std::numeric_limits<size_t>::max();  // index into nodes; none when out of range
  std::vector<std::unique_ptr<RedisConn>> idle_;
};

}  // namespace

util::StatusOr<std::vector<std::pair<std::string, int>>> ParseRedisNodes(std::string_view text) {
  std::string_view t = text;
  if (t.rfind("redis://", 0) == 0) t.remove_prefix(8);
  std::vector<std::pair<std::string, int>> nodes;
  while (true) {
    const size_t comma = t.find(',');
    STRATA_ASSIGN_OR_RETURN(auto node, net::ParseRedisAddress(t.substr(0, comma)));
    if (std::find(nodes.begin(), nodes.end(), node) != nodes.end()) {
      return util::InvalidArgumentError(
          fmt::format("redis node {}:{} is listed twice in '{}'", node.first, node.second, text));
    }
    nodes.push_back(std::move(node));
    if (comma == std::string_view::npos) break;
    t.remove_prefix(comma + 1);
  }
  if (nodes.size() > 16) {
    return util::InvalidArgumentError("at most 16 redis nodes may be listed");
  }
  return nodes;
}

util::StatusOr<std::unique_ptr<SessionStore>> OpenRedisStore(const RedisStoreOptions& options) {
  STRATA_RETURN_IF_ERROR(internal::CheckLimits(options.limits));
  const auto ms = [](std::chrono::milliseconds d) { return d.count() >= 1 && d.count() <= 60000; };
  if (options.nodes.empty()) return util::InvalidArgumentError("session store: no redis nodes");
  if (!ms(options.timeout) || !ms(options.wait_timeout)) {
    return util::InvalidArgumentError(
        "session store: the redis timeout and wait timeout must be 1 ms - 60 s");
  }
  const int n = static_cast<int>(options.nodes.size());
  if (options.wait_replicas < -1 || options.wait_replicas > n - 1) {
    return util::InvalidArgumentError(fmt::format(
        "session store: {} replicas cannot confirm a write when {} node(s) are listed (at most {})",
        options.wait_replicas, n, n - 1));
  }
  if (options.connections < 1 || options.connections > 256) {
    return util::InvalidArgumentError("session store: connections must be 1-256");
  }
  if (options.prefix.empty() ||
      std::any_of(options.prefix.begin(), options.prefix.end(),
                  [](char c) { return c <= ' ' || c > '~' || c == '{' || c == '}'; })) {
    return util::InvalidArgumentError(
        "session store: the key prefix must be printable, without spaces or braces");
  }
  auto store = std::make_unique<RedisStore>(
      options, options.wait_replicas >= 0 ? options.wait_replicas : n / 2);
  STRATA_RETURN_IF_ERROR(store->Open());
  return std::unique_ptr<SessionStore>(std::move(store));
}

}  // namespace strata::session
