#include "obs/audit_log.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <set>

#include "audit_test_util.h"
#include "obs/audit_verify.h"
#include "obs/internal/audit_format.h"
#include "obs/internal/audit_writer.h"
#include "testing/fake_clock.h"
#include "testing/mem_file_system.h"

namespace strata::obs {
namespace {

using testing_audit::JoinLines;
using testing_audit::ReadLog;
using testing_audit::Request;
using testing_audit::SplitLines;
using Verdict = AuditVerifyReport::Verdict;
using namespace std::chrono_literals;

constexpr const char* kPath = "/logs/audit.log";

class AuditLogTest : public ::testing::Test {
 protected:
  AuditLogOptions Options() { return {.path = kPath}; }
  util::StatusOr<std::unique_ptr<AuditLog>> Open(const AuditLogOptions& o,
                                                 std::unique_ptr<Signer> signer = nullptr,
                                                 MetricsRegistry* metrics = nullptr) {
    return AuditLog::Open(fs_, clock_, o, std::move(signer), metrics, log_);
  }
  testing_audit::LogFiles Files() { return ReadLog(fs_, "/logs", "audit.log"); }
  AuditVerifyReport Verify(const Verifier* key = nullptr) {
    const auto files = Files();
    return VerifyAuditLog(files.View(), key);
  }
  std::unique_ptr<Signer> HmacKey() {
    fs_.Put("/keys/audit.key", std::string(32, 's'));
    return std::move(LoadSigner(fs_, "/keys/audit.key")).value();
  }

  testing::MemFileSystem fs_;
  testing::FakeClock clock_;
  util::CapturingLogger log_;
};

TEST_F(AuditLogTest, RecordsAreWrittenInOrderAsAChainThatVerifies) {
  auto log = Open(Options());
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  for (int i = 0; i < 5; ++i) EXPECT_TRUE((*log)->Append(Request(i)));
  (*log)->Close();
  EXPECT_FALSE((*log)->Append(Request(9)));  // closed
  const auto report = Verify();
  EXPECT_EQ(report.verdict, Verdict::kIntact) << (report.first_bad ? report.first_bad->what : "");
  EXPECT_EQ(report.requests, 5u);
  EXPECT_EQ(report.records, 7u);  // open, 5 requests, close
  EXPECT_TRUE(report.from_genesis);
  EXPECT_TRUE(report.closed);
  const auto lines = SplitLines(Files().files.at(0).second);
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[0].rfind(R"({"v":1,"seq":1,"type":"open",)", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(R"("prev":"0000000000000000)"), std::string::npos);
  EXPECT_EQ(
      lines[1].rfind(
          R"({"v":1,"seq":2,"type":"request","time":"2027-01-15T08:00:00.000Z","id":"req-0","tenant":"beta","endpoint":"/v1/chat/completions","model":"stories260K","backend":"stories260K","backend_kind":"local","stream":false,"status":200,"outcome":"ok","error":null,"prompt_tokens":10,"completion_tokens":5,"cache":"miss","similarity":null,"request_sha256":")",
          0),
      0u)
      << lines[1];
  EXPECT_NE(lines[6].find(R"("type":"close")"), std::string::npos);
  // Each line's prev is the hash of the one before.
  for (size_t i = 1; i < lines.size(); ++i) {
    auto prev = audit::ParseLine(lines[i - 1].substr(0, lines[i - 1].size() - 1));
    auto cur = audit::ParseLine(lines[i].substr(0, lines[i].size() - 1));
    ASSERT_TRUE(prev.ok() && cur.ok());
    EXPECT_EQ(cur->prev, prev->hash);
    EXPECT_EQ(cur->seq, prev->seq + 1);
  }
}

TEST_F(AuditLogTest, TokenLevelFieldsAndOddTextStayValidJson) {
  AuditRecord r = Request(1);
  r.tenant = std::string("bad\xff\"utf8\n");
  r.error = "timeout";
  r.similarity = 0.875;
  r.watermark = "v1:0011223344556677:" + std::string(64, 'c');
  r.tokens.push_back({.choice = 0, .ids = {17, 42}, .logprobs = {-0.5f, -1.25f}});
  r.tokens.push_back(
      {.choice = 1, .ids = {-1}, .logprobs = {-std::numeric_limits<float>::infinity()}});
  const std::string fields = RenderRequestFields(r);
  EXPECT_NE(fields.find("\"tenant\":\"bad\xef\xbf\xbd\\\"utf8\\n\""), std::string::npos) << fields;
  EXPECT_NE(fields.find(R"("error":"timeout")"), std::string::npos);
  EXPECT_NE(fields.find(R"("similarity":0.875)"), std::string::npos);
  EXPECT_NE(
      fields.find(
          R"("tokens":[{"choice":0,"ids":[17,42],"logprobs":[-0.5,-1.25]},{"choice":1,"ids":[-1],"logprobs":[null]}])"),
      std::string::npos)
      << fields;
  auto log = Open(Options());
  ASSERT_TRUE(log.ok());
  (*log)->Append(r);
  (*log)->Close();
  EXPECT_EQ(Verify().verdict, Verdict::kIntact);
}

TEST_F(AuditLogTest, FlushMakesEveryAppendedRecordDurable) {
  auto log = Open(Options());
  ASSERT_TRUE(log.ok());
  for (int i = 0; i < 3; ++i) (*log)->Append(Request(i));
  ASSERT_TRUE((*log)->Flush(10s));
  fs_.DropUnsyncedData();  // the power goes
  const auto report = Verify();
  EXPECT_EQ(report.verdict, Verdict::kIntact);
  EXPECT_EQ(report.requests, 3u);
  EXPECT_FALSE(report.closed);
}

TEST_F(AuditLogTest, ARestartContinuesTheChainInANewFile) {
  for (int run = 0; run < 3; ++run) {
    auto log = Open(Options());
    ASSERT_TRUE(log.ok()) << log.status().ToString();
    for (int i = 0; i < 4; ++i) (*log)->Append(Request(run * 10 + i));
    (*log)->Close();
  }
  const auto files = Files();
  ASSERT_EQ(files.files.size(), 3u);
  EXPECT_EQ(files.files[0].first, "/logs/audit.log");
  EXPECT_EQ(files.files[1].first, "/logs/audit.log.000001");
  EXPECT_EQ(files.files[2].first, "/logs/audit.log.000002");
  EXPECT_NE(files.files[0].second.find(R"("file":3,"reason":"restart")"), std::string::npos);
  const auto report = Verify();
  EXPECT_EQ(report.verdict, Verdict::kIntact);
  EXPECT_EQ(report.requests, 12u);
  EXPECT_TRUE(report.from_genesis);
  EXPECT_EQ(report.last_seq, 18u);  // 3 x (open, 4 requests, close)
}

TEST_F(AuditLogTest, RotationBySizeKeepsTheChainAcrossFiles) {
  AuditLogOptions o = Options();
  o.max_file_bytes = 4096;
  auto log = Open(o);
  ASSERT_TRUE(log.ok());
  for (int i = 0; i < 60; ++i) (*log)->Append(Request(i));
  (*log)->Close();
  EXPECT_GE((*log)->stats().rotations, 3u);
  const auto files = Files();
  EXPECT_GE(files.files.size(), 4u);
  for (const auto& [name, bytes] : files.files) {
    EXPECT_LE(bytes.size(), 4096u) << name;
    if (name != "/logs/audit.log.000001") {
      EXPECT_NE(bytes.find(R"("reason":"rotate")"), std::string::npos) << name;
    }
  }
  const auto report = Verify();
  EXPECT_EQ(report.verdict, Verdict::kIntact);
  EXPECT_EQ(report.requests, 60u);
}

TEST_F(AuditLogTest, CheckpointsSignTheChainAndAreVerified) {
  AuditLogOptions o = Options();
  o.checkpoint_records = 4;
  auto log = Open(o, HmacKey());
  ASSERT_TRUE(log.ok());
  for (int i = 0; i < 10; ++i) (*log)->Append(Request(i));
  (*log)->Close();
  auto verifier = LoadVerifier(fs_, "/keys/audit.key");
  ASSERT_TRUE(verifier.ok());
  const auto report = Verify(verifier->get());
  EXPECT_EQ(report.verdict, Verdict::kIntact);
  // After every 4 records (the open record counts) and at close.
  EXPECT_EQ(report.checkpoints, 3u);
  EXPECT_EQ(report.checkpoints_verified, 3u);
  EXPECT_EQ(report.unsigned_tail, 0u);
  const auto unkeyed = Verify();
  EXPECT_EQ(unkeyed.verdict, Verdict::kIntact);
  EXPECT_FALSE(unkeyed.checkpoints_checked);
  EXPECT_EQ(unkeyed.checkpoints_verified, 0u);
}

TEST_F(AuditLogTest, ACheckpointIsWrittenAfterItsIntervalWithoutNewRecords) {
  AuditLogOptions o = Options();
  o.checkpoint_interval = 30s;
  auto log = Open(o, HmacKey());
  ASSERT_TRUE(log.ok());
  (*log)->Append(Request(1));
  ASSERT_TRUE((*log)->Flush(10s));
  EXPECT_EQ((*log)->stats().checkpoints, 0u);
  clock_.Advance(31s);
  ASSERT_TRUE((*log)->Flush(10s));  // wakes the writer: its checkpoint is due
  EXPECT_EQ((*log)->stats().checkpoints, 1u);
  (*log)->Close();
}

TEST_F(AuditLogTest, ALogWhoseLastRecordIsBrokenIsNotContinued) {
  fs_.Put(kPath, "{\"v\":1,\"seq\":1,\"type\":\"open\"}\nnot a record\n");
  auto log = Open(Options());
  ASSERT_FALSE(log.ok());
  EXPECT_EQ(log.status().code(), util::StatusCode::kFailedPrecondition);
  EXPECT_NE(log.status().message().find("/logs/audit.log"), std::string::npos);
  EXPECT_NE(log.status().message().find("first line"), std::string::npos);
}

TEST(AuditLogOptions, OutOfRangeValuesAreRefusedNamingTheField) {
  EXPECT_TRUE(ValidateAuditLogOptions({.path = "a"}).ok());
  EXPECT_FALSE(ValidateAuditLogOptions({.path = ""}).ok());
  auto msg = [](const AuditLogOptions& o) { return ValidateAuditLogOptions(o).message(); };
  EXPECT_NE(msg({.path = "a", .max_file_bytes = 100}).find("max_file_bytes"), std::string::npos);
  EXPECT_NE(msg({.path = "a", .sync_interval = 0ms}).find("sync_interval"), std::string::npos);
  EXPECT_NE(msg({.path = "a", .sync_records = 0}).find("sync_records"), std::string::npos);
  EXPECT_NE(msg({.path = "a", .queue_records = 1}).find("queue_records"), std::string::npos);
  EXPECT_NE(msg({.path = "a", .checkpoint_records = 0}).find("checkpoint_records"),
            std::string::npos);
  EXPECT_NE(msg({.path = "a", .checkpoint_interval = 0s}).find("checkpoint_interval"),
            std::string::npos);
}

// A file system whose appends wait at a gate the test opens: the writer
// thread stuck on a slow disk.
class GatedFileSystem final : public util::FileSystem {
 public:
  explicit GatedFileSystem(util::FileSystem& base) : base_(base) {}
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    entered_ = false;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = false;
    }
    cv_.notify_all();
  }
  // Waits until an append is held at the closed gate.
  bool WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 10s, [&] { return entered_; });
  }
  util::StatusOr<std::unique_ptr<util::MappedFile>> MapReadOnly(const std::string& p) override {
    return base_.MapReadOnly(p);
  }
  util::StatusOr<std::string> ReadFile(const std::string& p) override { return base_.ReadFile(p); }
  util::StatusOr<std::unique_ptr<util::WritableFile>> NewWritableFile(
      const std::string& p) override;
  bool Exists(const std::string& p) override { return base_.Exists(p); }
  util::StatusOr<uint64_t> FileSize(const std::string& p) override { return base_.FileSize(p); }
  util::Status CreateDirs(const std::string& p) override { return base_.CreateDirs(p); }
  util::Status Remove(const std::string& p) override { return base_.Remove(p); }
  util::Status Rename(const std::string& a, const std::string& b) override {
    return base_.Rename(a, b);
  }
  util::StatusOr<std::vector<std::string>> ListDir(const std::string& p) override {
    return base_.ListDir(p);
  }

 private:
  friend class GatedFile;
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!closed_) return;
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !closed_; });
  }
  util::FileSystem& base_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;   // guarded by mu_
  bool entered_ = false;  // guarded by mu_: an append waits at the gate
};

class GatedFile final : public util::WritableFile {
 public:
  GatedFile(GatedFileSystem& fs, std::unique_ptr<util::WritableFile> base)
      : fs_(fs), base_(std::move(base)) {}
  util::Status Append(std::span<const uint8_t> data) override {
    fs_.Pass();
    return base_->Append(data);
  }
  util::Status Sync() override { return base_->Sync(); }
  util::Status Close() override { return base_->Close(); }
  uint64_t size() const override { return base_->size(); }

 private:
  GatedFileSystem& fs_;
  std::unique_ptr<util::WritableFile> base_;
};

util::StatusOr<std::unique_ptr<util::WritableFile>> GatedFileSystem::NewWritableFile(
    const std::string& p) {
  STRATA_ASSIGN_OR_RETURN(auto file, base_.NewWritableFile(p));
  return std::unique_ptr<util::WritableFile>(std::make_unique<GatedFile>(*this, std::move(file)));
}

TEST_F(AuditLogTest, AFullQueueDropsRecordsAndTheLogSaysHowMany) {
  GatedFileSystem gated(fs_);
  MetricsRegistry metrics;
  AuditLogOptions o = Options();
  o.queue_records = 16;
  auto log = AuditLog::Open(gated, clock_, o, nullptr, &metrics, log_);
  ASSERT_TRUE(log.ok());
  gated.Close();
  EXPECT_TRUE((*log)->Append(Request(0)));
  ASSERT_TRUE(gated.WaitHeld());  // the writer holds record 0, stuck in its append
  for (int i = 1; i <= 16; ++i) EXPECT_TRUE((*log)->Append(Request(i)));
  EXPECT_TRUE((*log)->healthy());
  for (int i = 17; i < 22; ++i) EXPECT_FALSE((*log)->Append(Request(i)));
  EXPECT_FALSE((*log)->healthy());
  EXPECT_NE(metrics.Render().find("strata_audit_dropped_total{reason=\"queue_full\"} 5"),
            std::string::npos);
  EXPECT_TRUE(log_.Contains("queue of 16 records is full"));
  gated.Open();
  ASSERT_TRUE((*log)->Flush(10s));
  EXPECT_TRUE((*log)->healthy());
  (*log)->Close();
  const AuditLogStats stats = (*log)->stats();
  EXPECT_EQ(stats.dropped_queue_full, 5u);
  EXPECT_EQ(stats.appended, 17u);
  const auto report = Verify();
  EXPECT_EQ(report.verdict, Verdict::kIncomplete);
  EXPECT_EQ(report.requests, 17u);
  EXPECT_EQ(report.dropped, 5u);
  ASSERT_FALSE(report.notes.empty());
  EXPECT_NE(report.notes[0].what.find("dropped 5 record(s) here (queue_full)"), std::string::npos);
}

TEST_F(AuditLogTest, AFailingDiskLosesRecordsWithoutCrashingAndTheLogRecovers) {
  MetricsRegistry metrics;
  auto log = Open(Options(), nullptr, &metrics);
  ASSERT_TRUE(log.ok());
  (*log)->Append(Request(0));
  ASSERT_TRUE((*log)->Flush(10s));
  fs_.SetDiskError(util::ResourceExhaustedError("no space left on device"));
  for (int i = 1; i <= 3; ++i) (*log)->Append(Request(i));
  EXPECT_FALSE((*log)->Flush(10s));
  EXPECT_FALSE((*log)->healthy());
  (*log)->Append(Request(4));  // the writer has failed: dropped
  EXPECT_FALSE((*log)->Flush(10s));
  EXPECT_TRUE(log_.Contains("no space left on device"));
  fs_.SetDiskError(util::OkStatus());
  clock_.Advance(2s);  // past the retry interval
  ASSERT_TRUE((*log)->Flush(10s));
  EXPECT_TRUE((*log)->healthy());
  (*log)->Append(Request(5));
  (*log)->Close();
  const AuditLogStats stats = (*log)->stats();
  EXPECT_GE(stats.write_errors, 1u);
  EXPECT_EQ(stats.lost + stats.dropped_write_error, 4u);
  EXPECT_NE(metrics.Render().find("strata_audit_dropped_total{reason=\"write_error\"} 4"),
            std::string::npos)
      << metrics.Render();
  const auto report = Verify();
  EXPECT_EQ(report.verdict, Verdict::kIncomplete)
      << (report.first_bad ? report.first_bad->what : "");
  EXPECT_EQ(report.requests, 2u);  // 0 and 5
  EXPECT_EQ(report.dropped, 4u);
}

// --- durability: the writer's own calls, on a clock and a disk the test drives ---

PendingRecord Pending(int i) {
  const AuditRecord r = Request(i);
  return {audit::FormatTime(r.time), RenderRequestFields(r)};
}

// The request ids present in the log's files.
std::set<std::string> IdsIn(const testing_audit::LogFiles& files) {
  std::set<std::string> ids;
  for (const auto& [name, bytes] : files.files) {
    for (const std::string& line : SplitLines(bytes)) {
      if (line.empty() || line.back() != '\n') continue;
      auto p = audit::ParseLine(line.substr(0, line.size() - 1));
      if (p.ok() && p->type == "request") ids.insert(p->request_id);
    }
  }
  return ids;
}

TEST(AuditWriterDurability, APowerCutLosesNoRecordWrittenASyncIntervalBeforeIt) {
  const auto interval = 100ms;
  for (int crash_after : {1, 5, 14, 15, 29, 44, 90}) {
    SCOPED_TRACE(crash_after);
    testing::MemFileSystem fs;
    testing::FakeClock clock;
    auto null_log = util::NewNullLogger();
    const AuditLogOptions o{.path = kPath, .sync_interval = interval, .sync_records = 100000};
    auto w = AuditWriter::Open(fs, clock, o, nullptr, *null_log);
    ASSERT_TRUE(w.ok());
    // The clock moves to `t`, the writer waking at each deadline on the way
    // as its thread does.
    auto run_until = [&](std::chrono::steady_clock::time_point t) {
      for (auto d = (*w)->NextDeadline(); d && *d <= t; d = (*w)->NextDeadline()) {
        clock.Advance(*d - clock.Now());
        ASSERT_TRUE((*w)->MaybeSync(clock.Now()).ok());
      }
      clock.Advance(t - clock.Now());
    };
    std::vector<std::chrono::steady_clock::time_point> written_at;
    for (int i = 0; i < crash_after; ++i) {
      // One record every 7 ms, handled as the writer thread handles a wake.
      run_until(clock.Now() + 7ms);
      std::vector<PendingRecord> batch{Pending(i)};
      ASSERT_TRUE((*w)->Write(batch, 0).ok());
      written_at.push_back(clock.Now());
      ASSERT_TRUE((*w)->MaybeSync(clock.Now()).ok());
    }
    run_until(clock.Now() + 3ms);
    const auto cut = clock.Now();
    fs.DropUnsyncedData();
    w->reset();
    const std::set<std::string> ids = IdsIn(ReadLog(fs, "/logs", "audit.log"));
    for (int i = 0; i < crash_after; ++i) {
      if (cut - written_at[i] >= interval) {
        EXPECT_TRUE(ids.count("req-" + std::to_string(i))) << "record " << i << " was lost";
      }
    }
    // What survives is a prefix: no holes.
    for (int i = 0; i < static_cast<int>(ids.size()); ++i) {
      EXPECT_TRUE(ids.count("req-" + std::to_string(i))) << i;
    }
    // The next run goes on from what survived, and the whole verifies.
    auto again = AuditWriter::Open(fs, clock, o, nullptr, *null_log);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    ASSERT_TRUE((*again)->Close().ok());
    const auto files = ReadLog(fs, "/logs", "audit.log");
    const auto report = VerifyAuditLog(files.View(), nullptr);
    EXPECT_NE(report.verdict, Verdict::kTampered) << report.first_bad->what;
    EXPECT_EQ(report.requests, ids.size());
    EXPECT_NE(files.files[0].second.find("restart_after_crash"), std::string::npos);
  }
}

TEST(AuditWriterDurability, APowerCutLosesFewerThanSyncRecords) {
  testing::MemFileSystem fs;
  testing::FakeClock clock;
  auto null_log = util::NewNullLogger();
  const AuditLogOptions o{.path = kPath, .sync_interval = 60s, .sync_records = 10};
  auto w = AuditWriter::Open(fs, clock, o, nullptr, *null_log);
  ASSERT_TRUE(w.ok());
  for (int i = 0; i < 47; ++i) {
    std::vector<PendingRecord> batch{Pending(i)};
    ASSERT_TRUE((*w)->Write(batch, 0).ok());
    ASSERT_TRUE((*w)->MaybeSync(clock.Now()).ok());
  }
  fs.DropUnsyncedData();
  const auto ids = IdsIn(ReadLog(fs, "/logs", "audit.log"));
  EXPECT_GE(ids.size(), 47u - 9u);
}

TEST(AuditWriterDurability, ATornLastLineIsLeftAndReportedAsACrash) {
  testing::MemFileSystem fs;
  testing::FakeClock clock;
  auto null_log = util::NewNullLogger();
  const AuditLogOptions o{.path = kPath};
  auto w = AuditWriter::Open(fs, clock, o, nullptr, *null_log);
  ASSERT_TRUE(w.ok());
  std::vector<PendingRecord> batch{Pending(0), Pending(1), Pending(2)};
  ASSERT_TRUE((*w)->Write(batch, 0).ok());
  ASSERT_TRUE((*w)->Sync().ok());
  batch = {Pending(3), Pending(4)};
  ASSERT_TRUE((*w)->Write(batch, 0).ok());
  fs.DropUnsyncedData(/*keep_unsynced_bytes=*/40);  // part of record 3 reached the disk
  w->reset();
  const std::string torn = *fs.ReadFile(kPath);
  ASSERT_NE(torn.back(), '\n');
  auto again = AuditWriter::Open(fs, clock, o, nullptr, *null_log);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  batch = {Pending(5)};
  ASSERT_TRUE((*again)->Write(batch, 0).ok());
  ASSERT_TRUE((*again)->Close().ok());
  const auto files = ReadLog(fs, "/logs", "audit.log");
  EXPECT_EQ(files.files[1].second, torn);  // left as it was, under its index
  const auto report = VerifyAuditLog(files.View(), nullptr);
  EXPECT_EQ(report.verdict, Verdict::kIncomplete);
  EXPECT_EQ(report.requests, 4u);
  ASSERT_FALSE(report.notes.empty());
  EXPECT_EQ(report.notes[0].file, "/logs/audit.log.000001");
  EXPECT_EQ(report.notes[0].line, 5u);
  EXPECT_NE(report.notes[0].what.find("partial last line"), std::string::npos);
}

TEST_F(AuditLogTest, MetricsCountWhatTheLogDid) {
  MetricsRegistry metrics;
  AuditLogOptions o = Options();
  o.checkpoint_records = 2;
  auto log = Open(o, HmacKey(), &metrics);
  ASSERT_TRUE(log.ok());
  for (int i = 0; i < 3; ++i) (*log)->Append(Request(i));
  ASSERT_TRUE((*log)->Flush(10s));
  const std::string text = metrics.Render();
  EXPECT_NE(text.find("strata_audit_records_total 6"), std::string::npos) << text;
  EXPECT_NE(text.find("strata_audit_checkpoints_total 2"), std::string::npos) << text;
  EXPECT_NE(text.find("strata_audit_healthy 1"), std::string::npos) << text;
  EXPECT_NE(text.find("strata_audit_queue_records 0"), std::string::npos) << text;
  (*log)->Close();
}

}  // namespace
}  // namespace strata::obs
