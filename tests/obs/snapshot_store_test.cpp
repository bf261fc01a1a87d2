#include "obs/snapshot_store.h"

#include <gtest/gtest.h>

#include <array>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "testing/fake_clock.h"
#include "testing/mem_file_system.h"

namespace strata::obs {
namespace {

using namespace std::chrono_literals;

SnapshotKey TestKey() {
  std::array<uint8_t, kSnapshotKeyBytes> raw{};
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(0x80 + i);
  return SnapshotKey::FromBytes(raw);
}

// A file system whose writes fail (a full or read-only disk).
class FailingWrites final : public util::FileSystem {
 public:
  util::StatusOr<std::unique_ptr<util::MappedFile>> MapReadOnly(const std::string& p) override {
    return mem.MapReadOnly(p);
  }
  util::StatusOr<std::string> ReadFile(const std::string& p) override { return mem.ReadFile(p); }
  util::StatusOr<std::unique_ptr<util::WritableFile>> NewWritableFile(const std::string&) override {
    return util::ResourceExhaustedError("write 'x': No space left on device");
  }
  bool Exists(const std::string& p) override { return mem.Exists(p); }
  util::StatusOr<uint64_t> FileSize(const std::string& p) override { return mem.FileSize(p); }
  util::Status CreateDirs(const std::string& p) override { return mem.CreateDirs(p); }
  util::Status Remove(const std::string& p) override { return mem.Remove(p); }
  util::Status Rename(const std::string& a, const std::string& b) override {
    return mem.Rename(a, b);
  }
  util::StatusOr<std::vector<std::string>> ListDir(const std::string& p) override {
    return mem.ListDir(p);
  }
  testing::MemFileSystem mem;
};

class SnapshotStoreTest : public ::testing::Test {
 protected:
  std::unique_ptr<SnapshotStore> Open(SnapshotStoreOptions o = {}) {
    o.dir = "snaps";
    o.sweep_interval = 24h;  // the tests sweep when they say so
    // A registry takes each metric once: a store opened again reports nowhere.
    auto s =
        SnapshotStore::Open(o, TestKey(), fs_, clock_, opened_++ == 0 ? &metrics_ : nullptr, *log_);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  int64_t NowMs() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               clock_.WallNow().time_since_epoch())
        .count();
  }
  bool Put(SnapshotStore& s, const std::string& tenant, const std::string& id, std::string body) {
    const size_t n = body.size();
    return s.Put({.tenant = tenant, .request_id = id, .created_ms = NowMs()}, n,
                 [body = std::move(body)] { return body; });
  }
  std::string FileOf(const std::string& tenant, const std::string& id) {
    return "snaps/" + TestKey().FileName(tenant, id);
  }

  testing::MemFileSystem fs_;
  testing::FakeClock clock_;
  MetricsRegistry metrics_;
  int opened_ = 0;
  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
};

TEST_F(SnapshotStoreTest, ASnapshotIsReadBackByItsOwnTenantOnly) {
  auto s = Open();
  ASSERT_TRUE(Put(*s, "acme", "r1", R"({"a":1})"));
  ASSERT_TRUE(s->Flush(10s));
  auto got = s->Get("acme", "r1");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->plaintext, R"({"a":1})");
  EXPECT_EQ(got->created_ms, NowMs());
  // Another tenant asking for the same id finds nothing, as for an id never seen.
  EXPECT_EQ(s->Get("globex", "r1").status().code(), util::StatusCode::kNotFound);
  EXPECT_EQ(s->Get("acme", "r2").status().code(), util::StatusCode::kNotFound);
  const std::string raw = *fs_.ReadFile(FileOf("acme", "r1"));
  EXPECT_EQ(raw.find("\"a\""), std::string::npos) << "written in the clear";
  EXPECT_EQ(s->stats().written, 1);
  EXPECT_EQ(s->stats().files, 1);
  EXPECT_EQ(s->stats().bytes, static_cast<int64_t>(raw.size()));
  EXPECT_NE(metrics_.Render().find("strata_snapshots_written_total 1"), std::string::npos);
  // The same id of two tenants: two files, each its own.
  ASSERT_TRUE(Put(*s, "globex", "r1", R"({"b":2})"));
  ASSERT_TRUE(s->Flush(10s));
  EXPECT_EQ(s->Get("globex", "r1")->plaintext, R"({"b":2})");
  EXPECT_EQ(s->Get("acme", "r1")->plaintext, R"({"a":1})");
}

TEST_F(SnapshotStoreTest, ALaterSnapshotOfTheSameRequestIdReplacesTheFirst) {
  auto s = Open();
  ASSERT_TRUE(Put(*s, "acme", "r1", "first"));
  ASSERT_TRUE(Put(*s, "acme", "r1", "second, longer"));
  ASSERT_TRUE(s->Flush(10s));
  EXPECT_EQ(s->Get("acme", "r1")->plaintext, "second, longer");
  EXPECT_EQ(s->stats().files, 1);
  EXPECT_EQ(s->stats().bytes, static_cast<int64_t>(14 + kSnapshotOverheadBytes));
}

TEST_F(SnapshotStoreTest, AChangedFileIsDataLossAndCounted) {
  auto s = Open();
  ASSERT_TRUE(Put(*s, "acme", "r1", "the answer"));
  ASSERT_TRUE(s->Flush(10s));
  std::string raw = *fs_.ReadFile(FileOf("acme", "r1"));
  raw[raw.size() - 20] ^= 0x40;
  fs_.Put(FileOf("acme", "r1"), raw);
  auto got = s->Get("acme", "r1");
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), util::StatusCode::kDataLoss);
  EXPECT_NE(got.status().message().find("authentication failed"), std::string::npos);
  EXPECT_EQ(s->stats().auth_failures, 1);
  EXPECT_NE(metrics_.Render().find("strata_snapshot_auth_failures_total 1"), std::string::npos);
}

TEST_F(SnapshotStoreTest, SnapshotsPastTheRetentionAreAbsentAndSweptAway) {
  auto s = Open({.retention = 1h});
  ASSERT_TRUE(Put(*s, "acme", "old", "old answer"));
  ASSERT_TRUE(s->Flush(10s));
  clock_.Advance(40min);
  ASSERT_TRUE(Put(*s, "acme", "new", "new answer"));
  ASSERT_TRUE(s->Flush(10s));
  clock_.Advance(21min);  // "old" is 61 minutes old, "new" 21
  EXPECT_EQ(s->Get("acme", "old").status().code(), util::StatusCode::kNotFound);
  EXPECT_TRUE(fs_.Exists(FileOf("acme", "old"))) << "deleted before a sweep";
  s->Sweep();
  EXPECT_FALSE(fs_.Exists(FileOf("acme", "old")));
  EXPECT_TRUE(s->Get("acme", "new").ok());
  EXPECT_EQ(s->stats().deleted_expired, 1);
  EXPECT_EQ(s->stats().files, 1);
  clock_.Advance(40min);
  s->Sweep();
  EXPECT_FALSE(fs_.Exists(FileOf("acme", "new")));
  EXPECT_EQ(s->stats().deleted_expired, 2);
  EXPECT_EQ(s->stats().files, 0);
  EXPECT_EQ(s->stats().bytes, 0);
  EXPECT_NE(metrics_.Render().find("strata_snapshots_deleted_total{reason=\"expired\"} 2"),
            std::string::npos);
}

TEST_F(SnapshotStoreTest, TheOldestSnapshotsGoFirstToKeepTheByteBudget) {
  auto s = Open({.max_bytes = 1u << 20});
  const std::string body(300'000, 'x');
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(Put(*s, "acme", "r" + std::to_string(i), body));
    ASSERT_TRUE(s->Flush(10s));
    clock_.Advance(1s);
  }
  // 3 × 300 kB fit in 1 MiB, 4 do not: r0 and r1 went, oldest first.
  EXPECT_FALSE(fs_.Exists(FileOf("acme", "r0")));
  EXPECT_FALSE(fs_.Exists(FileOf("acme", "r1")));
  for (int i = 2; i < 5; ++i) EXPECT_TRUE(s->Get("acme", "r" + std::to_string(i)).ok()) << i;
  EXPECT_EQ(s->stats().deleted_budget, 2);
  EXPECT_LE(s->stats().bytes, 1 << 20);
  EXPECT_EQ(s->stats().files, 3);
}

TEST_F(SnapshotStoreTest, AFullQueueDropsAndCountsWithoutBlocking) {
  auto s = Open({.max_pending = 2});
  // The first snapshot's rendering holds the writer thread until released.
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false;
  bool release = false;
  ASSERT_TRUE(s->Put({.tenant = "acme", .request_id = "held", .created_ms = NowMs()}, 4, [&] {
    std::unique_lock<std::mutex> lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    return std::string("held");
  }));
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return entered; });
  }
  EXPECT_TRUE(Put(*s, "acme", "q1", "one"));
  EXPECT_TRUE(Put(*s, "acme", "q2", "two"));
  EXPECT_FALSE(Put(*s, "acme", "q3", "three")) << "the queue holds 2";
  EXPECT_EQ(s->stats().dropped_queue_full, 1);
  EXPECT_NE(metrics_.Render().find("strata_snapshot_queue_depth 2"), std::string::npos);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  ASSERT_TRUE(s->Flush(10s));
  EXPECT_EQ(s->stats().written, 3);
  EXPECT_TRUE(s->Get("acme", "q2").ok());
  EXPECT_EQ(s->Get("acme", "q3").status().code(), util::StatusCode::kNotFound);
  EXPECT_NE(metrics_.Render().find("strata_snapshots_dropped_total{reason=\"queue_full\"} 1"),
            std::string::npos);
}

TEST_F(SnapshotStoreTest, ASnapshotOverItsLimitIsDroppedAsTooLarge) {
  auto s = Open({.max_snapshot_bytes = 4096});
  EXPECT_FALSE(Put(*s, "acme", "big", std::string(5000, 'x')));
  // One whose estimate was low is caught when rendered.
  ASSERT_TRUE(s->Put({.tenant = "acme", .request_id = "sly", .created_ms = NowMs()}, 10,
                     [] { return std::string(5000, 'y'); }));
  ASSERT_TRUE(s->Flush(10s));
  EXPECT_EQ(s->stats().dropped_too_large, 2);
  EXPECT_EQ(s->stats().written, 0);
  EXPECT_EQ(s->Get("acme", "sly").status().code(), util::StatusCode::kNotFound);
}

TEST_F(SnapshotStoreTest, WhatIsQueuedAtShutdownIsWritten) {
  {
    auto s = Open();
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(Put(*s, "acme", "r" + std::to_string(i), "x"));
  }
  auto reopened = Open();
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(reopened->Get("acme", "r" + std::to_string(i)).ok()) << i;
  }
}

TEST_F(SnapshotStoreTest, ASweepCountsFilesItDidNotWriteAndLeavesStrangersAlone) {
  {
    auto first = Open();
    ASSERT_TRUE(Put(*first, "acme", "r1", std::string(1000, 'a')));
  }
  fs_.Put("snaps/README", "not a snapshot");
  fs_.Put("snaps/0123456789abcdef0123456789abcdef.snap", "short");  // a stray, not ours
  auto s = Open();
  // Its first sweep runs on the writer thread: wait for it to have counted
  // the file, so that it cannot be the first to see the temporary file below.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (s->stats().files != 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  s->Sweep();
  EXPECT_EQ(s->stats().files, 1);
  EXPECT_EQ(s->stats().bytes, static_cast<int64_t>(1000 + kSnapshotOverheadBytes));
  EXPECT_TRUE(fs_.Exists("snaps/README"));
  EXPECT_TRUE(fs_.Exists("snaps/0123456789abcdef0123456789abcdef.snap"));
  // A temporary file left by a crash goes at the second sweep that sees it.
  fs_.Put(FileOf("acme", "r9") + ".tmp", "torn");
  s->Sweep();
  EXPECT_TRUE(fs_.Exists(FileOf("acme", "r9") + ".tmp"));
  s->Sweep();
  EXPECT_FALSE(fs_.Exists(FileOf("acme", "r9") + ".tmp"));
  // A file deleted by hand is forgotten.
  ASSERT_TRUE(fs_.Remove(FileOf("acme", "r1")).ok());
  s->Sweep();
  EXPECT_EQ(s->stats().files, 0);
}

TEST_F(SnapshotStoreTest, ReadingUnderAnotherKeySaysSoAndAnAbsentIdIsNotFound) {
  {
    auto s = Open();
    ASSERT_TRUE(Put(*s, "acme", "r1", "x"));
  }
  EXPECT_TRUE(SnapshotStore::Read(fs_, "snaps", TestKey(), "acme", "r1").ok());
  EXPECT_EQ(SnapshotStore::Read(fs_, "snaps", TestKey(), "acme", "r2").status().code(),
            util::StatusCode::kNotFound);
  std::array<uint8_t, kSnapshotKeyBytes> raw{};
  raw.fill(0x33);
  auto other = SnapshotStore::Read(fs_, "snaps", SnapshotKey::FromBytes(raw), "acme", "r1");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), util::StatusCode::kDataLoss);
  EXPECT_NE(other.status().message().find("written under another key"), std::string::npos)
      << other.status().message();
}

TEST(SnapshotStore, AFailedWriteIsCountedAndTheRequestUnharmed) {
  FailingWrites fs;
  testing::FakeClock clock;
  auto log = std::make_unique<util::CapturingLogger>();
  auto s = SnapshotStore::Open({.dir = "snaps"}, TestKey(), fs, clock, nullptr, *log);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE((*s)->Put({.tenant = "t", .request_id = "r", .created_ms = 1}, 1,
                        [] { return std::string("x"); }));
  ASSERT_TRUE((*s)->Flush(10s));
  EXPECT_EQ((*s)->stats().dropped_write_error, 1);
  EXPECT_EQ((*s)->Get("t", "r").status().code(), util::StatusCode::kNotFound);
}

TEST(SnapshotStore, OptionsOutOfRangeAreRefusedByName) {
  testing::MemFileSystem fs;
  testing::FakeClock clock;
  auto log = util::NewNullLogger();
  auto open = [&](SnapshotStoreOptions o) {
    o.dir = "d";
    return SnapshotStore::Open(o, TestKey(), fs, clock, nullptr, *log).status();
  };
  EXPECT_NE(open({.retention = 0s}).message().find("retention"), std::string::npos);
  EXPECT_NE(open({.max_bytes = 100}).message().find("budget"), std::string::npos);
  EXPECT_NE(open({.max_pending = 0}).message().find("queue"), std::string::npos);
  EXPECT_TRUE(open({}).ok());
}

}  // namespace
}  // namespace strata::obs
