#include "obs/audit_verify.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "audit_test_util.h"
#include "obs/audit_log.h"
#include "obs/internal/audit_format.h"
#include "testing/fake_clock.h"
#include "testing/mem_file_system.h"

namespace strata::obs {
namespace {

using testing_audit::JoinLines;
using testing_audit::LogFiles;
using testing_audit::ReadLog;
using testing_audit::Request;
using testing_audit::SplitLines;
using Verdict = AuditVerifyReport::Verdict;
using testing_audit::kEd25519Private;
using testing_audit::kEd25519Public;

// Recomputes `line`'s hash (and sets its prev first, when given), as someone
// editing the file with the format spec at hand would.
std::string Rehash(const std::string& line, const std::string* prev = nullptr) {
  std::string body = line.substr(0, line.size() - 1);  // without "\n"
  const size_t tail = audit::kHashKey.size() + audit::kHashHexChars + audit::kLineEnd.size();
  body.resize(body.size() - tail);
  if (prev != nullptr) {
    const size_t at = body.rfind(",\"prev\":\"") + 9;
    body.replace(at, 64, *prev);
  }
  const std::string hash = Hex(Sha256(body));
  return body + std::string(audit::kHashKey) + hash + "\"}\n";
}

std::string HashOf(const std::string& line) {
  return line.substr(line.size() - 2 - 1 - 64, 64);  // before "}\n
}

// A log of three runs of 16 requests over files of at most 4 KiB, signed
// with an HMAC key every 5 records; its files by name.
class AuditVerifyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs_.Put("/keys/audit.key", std::string(40, 'q'));
    for (int run = 0; run < 3; ++run) {
      auto log = AuditLog::Open(
          fs_, clock_, {.path = "/logs/audit.log", .max_file_bytes = 4096, .checkpoint_records = 5},
          std::move(LoadSigner(fs_, "/keys/audit.key")).value(), nullptr, *log_);
      ASSERT_TRUE(log.ok()) << log.status().ToString();
      for (int i = 0; i < 16; ++i) (*log)->Append(Request(run * 100 + i));
      (*log)->Close();
    }
    files_ = ReadLog(fs_, "/logs", "audit.log");
    // Chain order: audit.log.000001 ... then audit.log.
    std::rotate(files_.files.begin(), files_.files.begin() + 1, files_.files.end());
    key_ = std::move(LoadVerifier(fs_, "/keys/audit.key")).value();
  }
  AuditVerifyReport Verify(const Verifier* key = nullptr) const {
    return VerifyAuditLog(files_.View(), key);
  }
  std::vector<std::string> Lines(size_t file) const {
    return SplitLines(files_.files.at(file).second);
  }
  void SetLines(size_t file, const std::vector<std::string>& lines) {
    files_.files.at(file).second = JoinLines(lines);
  }
  // The index of a line in `file` that is a request record, past the first few.
  size_t RequestLine(size_t file) const {
    const auto lines = Lines(file);
    for (size_t i = 2; i < lines.size(); ++i) {
      if (lines[i].find("\"type\":\"request\"") != std::string::npos) return i;
    }
    return 1;
  }
  // Recomputes the hash and prev of every line from line `at` of `file` on.
  void RechainFrom(size_t file, size_t at) {
    std::string prev;
    for (size_t f = file; f < files_.files.size(); ++f) {
      auto ls = Lines(f);
      for (size_t i = f == file ? at : 0; i < ls.size(); ++i) {
        ls[i] = Rehash(ls[i], prev.empty() ? nullptr : &prev);
        prev = HashOf(ls[i]);
      }
      SetLines(f, ls);
    }
  }
  void ExpectBad(const AuditVerifyReport& r, size_t file, size_t line, const char* what) {
    ASSERT_EQ(r.verdict, Verdict::kTampered);
    ASSERT_TRUE(r.first_bad);
    EXPECT_EQ(r.first_bad->file, files_.files.at(file).first);
    EXPECT_EQ(r.first_bad->line, line + 1);
    EXPECT_NE(r.first_bad->what.find(what), std::string::npos) << r.first_bad->what;
  }

  testing::MemFileSystem fs_;
  testing::FakeClock clock_;
  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  LogFiles files_;
  std::unique_ptr<Verifier> key_;
};

TEST_F(AuditVerifyTest, TheUntouchedLogIsIntactInAnyOrderOfItsFiles) {
  ASSERT_GE(files_.files.size(), 6u);  // rotated within each run
  auto r = Verify(key_.get());
  EXPECT_EQ(r.verdict, Verdict::kIntact) << (r.first_bad ? r.first_bad->what : "");
  EXPECT_EQ(r.requests, 48u);
  EXPECT_TRUE(r.from_genesis);
  EXPECT_TRUE(r.closed);
  EXPECT_GE(r.checkpoints_verified, 6u);
  EXPECT_EQ(r.checkpoints_verified, r.checkpoints);
  std::reverse(files_.files.begin(), files_.files.end());
  EXPECT_EQ(Verify(key_.get()).verdict, Verdict::kIntact);
}

TEST_F(AuditVerifyTest, AnEditedRecordIsNamed) {
  auto lines = Lines(2);
  const size_t at = RequestLine(2);
  const size_t pos = lines[at].find("\"prompt_tokens\":");
  ASSERT_NE(pos, std::string::npos);
  lines[at].replace(pos, 17, "\"prompt_tokens\":9");  // one digit changed
  SetLines(2, lines);
  const auto r = Verify();
  ExpectBad(r, 2, at, "edited");
  ASSERT_TRUE(r.first_bad->seq);
}

TEST_F(AuditVerifyTest, AnEditedAndRehashedRecordBreaksTheNextLink) {
  auto lines = Lines(2);
  const size_t at = RequestLine(2);
  const size_t pos = lines[at].find("alpha");
  const size_t pos2 = pos == std::string::npos ? lines[at].find("beta") : pos;
  lines[at].replace(pos2, 4, "gamm");
  lines[at] = Rehash(lines[at]);
  SetLines(2, lines);
  ExpectBad(Verify(), 2, at + 1, "prev is not the hash of record");
}

TEST_F(AuditVerifyTest, ARemovedRecordIsFoundAtTheGap) {
  auto lines = Lines(1);
  const size_t at = RequestLine(1);
  lines.erase(lines.begin() + static_cast<std::ptrdiff_t>(at));
  SetLines(1, lines);
  ExpectBad(Verify(), 1, at, "removed before it");
}

TEST_F(AuditVerifyTest, AnInsertedRecordIsFound) {
  auto lines = Lines(1);
  const size_t at = RequestLine(1);
  lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(at) + 1, lines[at]);
  SetLines(1, lines);
  ExpectBad(Verify(), 1, at + 1, "inserted, repeated or moved");
}

TEST_F(AuditVerifyTest, ReorderedRecordsAreFound) {
  auto lines = Lines(3);
  const size_t at = RequestLine(3);
  std::swap(lines[at], lines[at + 1]);
  SetLines(3, lines);
  ExpectBad(Verify(), 3, at, "reordered");
}

TEST_F(AuditVerifyTest, ARemovedMiddleFileIsFound) {
  const std::string removed = files_.files[2].first;
  files_.files.erase(files_.files.begin() + 2);
  const auto r = Verify();
  ExpectBad(r, 2, 0, "are missing");
  EXPECT_NE(r.first_bad->what.find(files_.files[1].first), std::string::npos);
}

TEST_F(AuditVerifyTest, AFileGivenTwiceIsFound) {
  files_.files.push_back(files_.files[1]);
  const auto r = Verify();
  ASSERT_EQ(r.verdict, Verdict::kTampered);
  EXPECT_NE(r.first_bad->what.find("given twice"), std::string::npos);
}

TEST_F(AuditVerifyTest, RecordsMovedBetweenFilesAreFound) {
  auto a = Lines(1);
  auto b = Lines(2);
  b.insert(b.begin() + 1, a.back());
  a.pop_back();
  SetLines(1, a);
  SetLines(2, b);
  const auto r = Verify();
  ASSERT_EQ(r.verdict, Verdict::kTampered);
  EXPECT_EQ(r.first_bad->file, files_.files[2].first);
}

TEST_F(AuditVerifyTest, ALogRewrittenAfterAnEditPassesTheChainButNotTheCheckpoints) {
  // Someone who can write the files edits a record and recomputes every hash
  // after it: the chain alone cannot tell; the signed checkpoints can.
  auto lines = Lines(1);
  const size_t at = RequestLine(1);
  lines[at].replace(lines[at].find("\"status\":200"), 12, "\"status\":201");
  SetLines(1, lines);
  RechainFrom(1, at);
  EXPECT_EQ(Verify().verdict, Verdict::kIntact);
  const auto r = Verify(key_.get());
  ASSERT_EQ(r.verdict, Verdict::kTampered);
  EXPECT_NE(r.first_bad->what.find("signature does not verify"), std::string::npos);
}

TEST_F(AuditVerifyTest, AnotherKeyVerifiesNoCheckpointAndSaysSo) {
  fs_.Put("/keys/other.key", std::string(40, 'o'));
  auto other = LoadVerifier(fs_, "/keys/other.key");
  ASSERT_TRUE(other.ok());
  const auto r = Verify(other->get());
  EXPECT_EQ(r.verdict, Verdict::kIntact);
  EXPECT_EQ(r.checkpoints_verified, 0u);
  EXPECT_EQ(r.unsigned_tail, r.last_seq);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes[0].what.find("not verified"), std::string::npos);
}

TEST_F(AuditVerifyTest, AForgedCheckpointIsFound) {
  auto lines = Lines(1);
  size_t at = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find("\"type\":\"checkpoint\"") != std::string::npos) at = i;
  }
  ASSERT_GT(at, 0u);
  const size_t sig = lines[at].find(",\"sig\":\"") + 8;
  lines[at][sig] = lines[at][sig] == 'a' ? 'b' : 'a';
  SetLines(1, lines);
  RechainFrom(1, at);
  EXPECT_EQ(Verify().verdict, Verdict::kIntact);  // the chain holds
  ExpectBad(Verify(key_.get()), 1, at, "signature does not verify");
}

TEST_F(AuditVerifyTest, CuttingTheEndLeavesALogThatSaysItIsNotClosed) {
  auto lines = Lines(files_.files.size() - 1);
  lines.resize(lines.size() - 3);
  SetLines(files_.files.size() - 1, lines);
  const auto r = Verify(key_.get());
  EXPECT_EQ(r.verdict, Verdict::kIntact);
  EXPECT_FALSE(r.closed);
  EXPECT_GT(r.unsigned_tail, 0u);
  EXPECT_NE(r.notes.back().what.find("does not end with a close record"), std::string::npos);
}

TEST_F(AuditVerifyTest, AGarbageLineIsNotARecord) {
  auto lines = Lines(1);
  lines[2] = "hello world\n";
  SetLines(1, lines);
  ExpectBad(Verify(), 1, 2, "not a valid record");
}

TEST_F(AuditVerifyTest, StartingFromALaterFileIsChecked) {
  files_.files.erase(files_.files.begin());
  const auto r = Verify(key_.get());
  EXPECT_EQ(r.verdict, Verdict::kIntact);
  EXPECT_FALSE(r.from_genesis);
  EXPECT_NE(r.notes[0].what.find("the chain starts at seq"), std::string::npos);
}

TEST(AuditVerify, AnEd25519LogVerifiesWithThePublicKeyAlone) {
  testing::MemFileSystem fs;
  testing::FakeClock clock;
  auto null_log = util::NewNullLogger();
  fs.Put("/keys/priv.pem", kEd25519Private);
  fs.Put("/keys/pub.pem", kEd25519Public);
  auto log =
      AuditLog::Open(fs, clock, {.path = "/logs/a.log", .checkpoint_records = 3},
                     std::move(LoadSigner(fs, "/keys/priv.pem")).value(), nullptr, *null_log);
  ASSERT_TRUE(log.ok());
  for (int i = 0; i < 7; ++i) (*log)->Append(Request(i));
  (*log)->Close();
  auto pub = LoadVerifier(fs, "/keys/pub.pem");
  ASSERT_TRUE(pub.ok());
  auto files = ReadLog(fs, "/logs", "a.log");
  const auto r = VerifyAuditLog(files.View(), pub->get());
  EXPECT_EQ(r.verdict, Verdict::kIntact);
  EXPECT_EQ(r.checkpoints_verified, r.checkpoints);
  EXPECT_GE(r.checkpoints, 3u);
  EXPECT_NE(files.files[0].second.find("\"alg\":\"ed25519\""), std::string::npos);
}

TEST(AuditVerify, EmptyAndPartialFilesAreNotedNotTampered) {
  const std::string partial = "{\"v\":1,\"seq\":1,\"ty";
  const auto r = VerifyAuditLog({{"a", ""}, {"b", partial}}, nullptr);
  EXPECT_EQ(r.verdict, Verdict::kIncomplete);
  EXPECT_EQ(r.notes.size(), 2u);
  EXPECT_EQ(VerifyAuditLog({}, nullptr).verdict, Verdict::kIntact);
}

}  // namespace
}  // namespace strata::obs
