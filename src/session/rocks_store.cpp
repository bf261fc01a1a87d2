#include "session/rocks_store.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "session/internal/common.h"
#include "session/record.h"

namespace strata::session {
namespace {

namespace rec = record;
using internal::MillisSinceEpoch;

constexpr size_t kStripes = 64;

util::Status FromRocks(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return util::OkStatus();
  if (s.IsCorruption()) {
    return util::DataLossError(std::string("session store: ") + std::string(what) + ": " +
                               s.ToString());
  }
  return util::UnavailableError(std::string("session store: ") + std::string(what) + ": " +
                                s.ToString());
}

class RocksStore final : public SessionStore {
 public:
  RocksStore(std::unique_ptr<rocksdb::DB> db, RocksStoreOptions options)
      : db_(std::move(db)),
        options_(std::move(options)),
        clock_(options_.clock != nullptr ? *options_.clock : util::RealClock()) {
    write_options_.sync = options_.sync;
  }

  util::StatusOr<Turn> Append(const AppendRequest& r) override {
    STRATA_RETURN_IF_ERROR(internal::CheckAppend(r));
    Stripe& stripe = StripeOf(r.tenant, r.session_id);
    std::unique_lock lock(stripe.mu);
    STRATA_ASSIGN_OR_RETURN(std::optional<rec::Meta> meta, LiveMeta(r.tenant, r.session_id));

    if (!r.op_id.empty()) {
      std::string ref;
      const rocksdb::Status s = db_->Get({}, rec::OpKey(r.tenant, r.session_id, r.op_id), &ref);
      if (s.ok() && meta) {
        std::string value;
        STRATA_RETURN_IF_ERROR(FromRocks(
            db_->Get({}, rec::TurnPrefix(r.tenant, r.session_id) + ref, &value), "read a turn"));
        return rec::DecodeTurn(value);
      }
      if (!s.ok() && !s.IsNotFound()) return FromRocks(s, "read an op id");
    }

    // A dependency not applied yet: wait for it, bounded. The wait is on a
    // condition variable, so it is measured in real time (steady_clock),
    // not on the injected clock.
    const auto deadline = std::chrono::steady_clock::now() + options_.limits.dependency_wait;
    while (r.depends_on > (meta ? meta->clock : 0)) {
      if (stripe.applied.wait_until(lock, deadline) == std::cv_status::timeout) {
        STRATA_ASSIGN_OR_RETURN(meta, LiveMeta(r.tenant, r.session_id));
        if (r.depends_on <= (meta ? meta->clock : 0)) break;
        return util::FailedPreconditionError(
            "session '" + r.session_id + "' has no turn with clock " +
            std::to_string(r.depends_on) + " yet (its clock is " +
            std::to_string(meta ? meta->clock : 0) + "): the turn this one answers is missing");
      }
      STRATA_ASSIGN_OR_RETURN(meta, LiveMeta(r.tenant, r.session_id));
    }

    const uint64_t turns = meta ? meta->turns : 0;
    if (r.expected_turns && *r.expected_turns != turns) {
      return util::AbortedError("session '" + r.session_id + "' has " + std::to_string(turns) +
                                " turns, the request expected " +
                                std::to_string(*r.expected_turns));
    }
    const Limits& limits = options_.limits;
    if (turns + 1 > limits.max_turns) {
      return util::ResourceExhaustedError("session '" + r.session_id +
                                          "' has reached its limit of " +
                                          std::to_string(limits.max_turns) + " turns");
    }

    Turn turn = internal::NewTurn(r, MillisSinceEpoch(clock_.WallNow()));
    turn.clock = std::max(r.depends_on, meta ? meta->clock : 0) + 1;
    const uint64_t bytes = (meta ? meta->bytes : 0) + rec::TurnBytes(turn);
    if (bytes > limits.max_bytes) {
      return util::ResourceExhaustedError("session '" + r.session_id + "' would hold " +
                                          std::to_string(bytes) + " bytes, over its limit of " +
                                          std::to_string(limits.max_bytes));
    }

    rocksdb::WriteBatch batch;
    std::unique_lock<std::mutex> tenant_lock;  // held from the count's read to its write
    if (!meta) {
      tenant_lock = std::unique_lock(tenants_mu_);
      STRATA_ASSIGN_OR_RETURN(const uint64_t sessions, TenantCount(r.tenant));
      if (sessions >= limits.max_sessions_per_tenant) {
        return util::ResourceExhaustedError("the tenant has reached its limit of " +
                                            std::to_string(limits.max_sessions_per_tenant) +
                                            " sessions");
      }
      batch.Put(rec::TenantKey(r.tenant), rec::EncodeCount(sessions + 1));
      meta = rec::Meta{.created_ms = turn.created_ms};
    }
    meta->clock = turn.clock;
    meta->turns = turns + 1;
    meta->bytes = bytes;
    meta->updated_ms = turn.created_ms;
    batch.Put(rec::TurnKey(r.tenant, r.session_id, turn.clock, turn.writer), rec::EncodeTurn(turn));
    batch.Put(rec::MetaKey(r.tenant, r.session_id), rec::EncodeMeta(*meta));
    if (!r.op_id.empty()) {
      batch.Put(rec::OpKey(r.tenant, r.session_id, r.op_id),
                rec::EncodeTurnRef(turn.clock, turn.writer));
    }
    STRATA_RETURN_IF_ERROR(FromRocks(db_->Write(write_options_, &batch), "append a turn"));
    stripe.applied.notify_all();
    return turn;
  }

  util::StatusOr<Session> Read(const std::string& tenant, const std::string& id) override {
    STRATA_RETURN_IF_ERROR(internal::CheckKeyParts(tenant, id));
    Stripe& stripe = StripeOf(tenant, id);
    std::unique_lock lock(stripe.mu);
    STRATA_ASSIGN_OR_RETURN(std::optional<rec::Meta> meta, LiveMeta(tenant, id));
    if (!meta) return util::NotFoundError("no session '" + id + "'");
    Session s{.id = id,
              .turns = {},
              .clock = meta->clock,
              .bytes = meta->bytes,
              .created_ms = meta->created_ms,
              .updated_ms = meta->updated_ms};
    s.turns.reserve(meta->turns);
    const std::string prefix = rec::TurnPrefix(tenant, id);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator({}));
    for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
      STRATA_ASSIGN_OR_RETURN(Turn t, rec::DecodeTurn(it->value().ToStringView()));
      s.turns.push_back(std::move(t));
    }
    STRATA_RETURN_IF_ERROR(FromRocks(it->status(), "read a session"));
    if (s.turns.size() != meta->turns) {
      return util::DataLossError("session store: session '" + id + "' lists " +
                                 std::to_string(meta->turns) + " turns and holds " +
                                 std::to_string(s.turns.size()));
    }
    return s;
  }

  util::StatusOr<SessionPage> List(const std::string& tenant, const std::string& cursor,
                                   size_t limit) override {
    STRATA_RETURN_IF_ERROR(internal::CheckList(tenant, cursor, limit));
    SessionPage page;
    const std::string prefix = rec::MetaPrefix(tenant);
    std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator({}));
    it->Seek(cursor.empty() ? prefix : rec::MetaKey(tenant, cursor));
    const int64_t now = MillisSinceEpoch(clock_.WallNow());
    for (; it->Valid() && it->key().starts_with(prefix); it->Next()) {
      std::string id(it->key().ToStringView().substr(prefix.size()));
      if (id == cursor) continue;
      STRATA_ASSIGN_OR_RETURN(rec::Meta m, rec::DecodeMeta(it->value().ToStringView()));
      if (Expired(m, now)) continue;  // removed by the next call that touches it
      if (page.sessions.size() == limit) {
        page.next_cursor = page.sessions.back().id;
        break;
      }
      page.sessions.push_back({.id = std::move(id),
                               .turns = m.turns,
                               .clock = m.clock,
                               .bytes = m.bytes,
                               .created_ms = m.created_ms,
                               .updated_ms = m.updated_ms});
    }
    STRATA_RETURN_IF_ERROR(FromRocks(it->status(), "list sessions"));
    return page;
  }

  util::Status Delete(const std::string& tenant, const std::string& id) override {
    STRATA_RETURN_IF_ERROR(internal::CheckKeyParts(tenant, id));
    Stripe& stripe = StripeOf(tenant, id);
    std::unique_lock lock(stripe.mu);
    STRATA_ASSIGN_OR_RETURN(std::optional<rec::Meta> meta, LiveMeta(tenant, id));
    if (!meta) return util::NotFoundError("no session '" + id + "'");
    STRATA_RETURN_IF_ERROR(Remove(tenant, id));
    stripe.applied.notify_all();
    return util::OkStatus();
  }

 private:
  struct Stripe {
    std::mutex mu;                    // guards the read-modify-write of the sessions hashed here
    std::condition_variable applied;  // notified after each append to them
  };

  Stripe& StripeOf(const std::string& tenant, const std::string& id) {
    const size_t h = std::hash<std::string>{}(tenant)*31 + std::hash<std::string>{}(id);
    return stripes_[h % kStripes];
  }

  bool Expired(const rec::Meta& m, int64_t now_ms) const {
    const auto ttl = options_.limits.ttl;
    return ttl.count() > 0 &&
           now_ms - m.updated_ms >=
               std::chrono::duration_cast<std::chrono::milliseconds>(ttl).count();
  }

  util::StatusOr<uint64_t> TenantCount(const std::string& tenant) {
    std::string value;
    const rocksdb::Status s = db_->Get({}, rec::TenantKey(tenant), &value);
    if (s.IsNotFound()) return uint64_t{0};
    STRATA_RETURN_IF_ERROR(FromRocks(s, "read a tenant's count"));
    return rec::DecodeCount(value);
  }

  // The session's meta record; nullopt when there is none. An expired
  // session is removed here (the caller holds its stripe's lock).
  util::StatusOr<std::optional<rec::Meta>> LiveMeta(const std::string& tenant,
                                                    const std::string& id) {
    std::string value;
    const rocksdb::Status s = db_->Get({}, rec::MetaKey(tenant, id), &value);
    if (s.IsNotFound()) return std::optional<rec::Meta>();
    STRATA_RETURN_IF_ERROR(FromRocks(s, "read a session"));
    STRATA_ASSIGN_OR_RETURN(rec::Meta m, rec::DecodeMeta(value));
    if (Expired(m, MillisSinceEpoch(clock_.WallNow()))) {
      STRATA_RETURN_IF_ERROR(Remove(tenant, id));
      return std::optional<rec::Meta>();
    }
    return std::optional<rec::Meta>(m);
  }

  // Deletes every record of the session in one synced batch and takes it
  // off the tenant's count (the caller holds its stripe's lock).
  util::Status Remove(const std::string& tenant, const std::string& id) {
    rocksdb::WriteBatch batch;
    for (const std::string& prefix : {rec::TurnPrefix(tenant, id), rec::OpPrefix(tenant, id)}) {
      std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator({}));
      for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
        batch.Delete(it->key());
      }
      STRATA_RETURN_IF_ERROR(FromRocks(it->status(), "delete a session"));
    }
    batch.Delete(rec::MetaKey(tenant, id));
    std::lock_guard tenant_lock(tenants_mu_);
    STRATA_ASSIGN_OR_RETURN(const uint64_t sessions, TenantCount(tenant));
    batch.Put(rec::TenantKey(tenant), rec::EncodeCount(sessions > 0 ? sessions - 1 : 0));
    return FromRocks(db_->Write(write_options_, &batch), "delete a session");
  }

  const std::unique_ptr<rocksdb::DB> db_;
  const RocksStoreOptions options_;
  const util::Clock& clock_;
  rocksdb::WriteOptions write_options_;
  std::array<Stripe, kStripes> stripes_;
  std::mutex tenants_mu_;  // guards the read-modify-write of the tenants' session counts
};

}  // namespace

util::StatusOr<std::unique_ptr<SessionStore>> OpenRocksStore(const RocksStoreOptions& options) {
  if (options.dir.empty()) {
    return util::InvalidArgumentError("session store: no directory given");
  }
  STRATA_RETURN_IF_ERROR(internal::CheckLimits(options.limits));
  rocksdb::Options db_options;
  db_options.create_if_missing = true;
  db_options.paranoid_checks = true;
  // A torn record at the log's end (a crash mid-write) was never
  // acknowledged: recovery stops before it and keeps everything synced.
  db_options.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
  db_options.max_open_files = 256;
  db_options.keep_log_file_num = 4;
  rocksdb::DB* raw = nullptr;
  const rocksdb::Status s = rocksdb::DB::Open(db_options, options.dir, &raw);
  if (!s.ok()) return FromRocks(s, "open " + options.dir);
  return std::unique_ptr<SessionStore>(
      std::make_unique<RocksStore>(std::unique_ptr<rocksdb::DB>(raw), options));
}

}  // namespace strata::session
