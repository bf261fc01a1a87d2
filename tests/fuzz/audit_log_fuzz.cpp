// Fuzz target: the audit log's reader and verifier (obs/audit_verify.h).
// The input is up to four files separated by "\n\x1e" (the seeds are logs
// written per docs/formats/audit_log.md, signed with the HMAC key below).
// Whatever the bytes, verification returns a report and never crashes,
// throws or reads out of bounds; the report is consistent (a tampered log
// names where; otherwise the sequence range and counts agree); a key only
// ever finds more wrong; and the files in reverse order give the same
// verdict.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "obs/audit_verify.h"
#include "obs/crypto.h"

namespace {

constexpr std::string_view kSeparator = "\n\x1e";
constexpr std::string_view kKey = "fuzz-key-fuzz-key-fuzz-key-fuzz!";

// The HMAC key the seeds' checkpoints are signed with (obs::LoadVerifier
// would read it from a file).
class FuzzKey final : public strata::obs::Verifier {
 public:
  strata::obs::SignatureAlgorithm algorithm() const override {
    return strata::obs::SignatureAlgorithm::kHmacSha256;
  }
  const std::string& key_id() const override { return id_; }
  bool Verify(std::string_view message, std::string_view signature) const override {
    const auto mac = strata::obs::HmacSha256(
        {reinterpret_cast<const uint8_t*>(kKey.data()), kKey.size()}, message);
    return strata::obs::ConstantTimeEqual(
        std::string_view(reinterpret_cast<const char*>(mac.data()), mac.size()), signature);
  }

 private:
  const std::string id_ = strata::obs::HmacKeyId(kKey);
};

void Check(const strata::obs::AuditVerifyReport& r) {
  using Verdict = strata::obs::AuditVerifyReport::Verdict;
  if ((r.verdict == Verdict::kTampered) != r.first_bad.has_value()) std::abort();
  if (r.verdict != Verdict::kTampered) {
    if (r.records > 0 && r.last_seq - r.first_seq + 1 != r.records) std::abort();
    if (r.requests > r.records || r.checkpoints_verified > r.checkpoints) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<strata::obs::AuditFile> files;
  size_t from = 0;
  while (files.size() < 4) {
    const size_t at = in.find(kSeparator, from);
    const size_t end = at == std::string_view::npos ? in.size() : at + 1;  // keeps the "\n"
    static constexpr const char* kNames[] = {"f0", "f1", "f2", "f3"};
    files.push_back({kNames[files.size()], in.substr(from, end - from)});
    if (at == std::string_view::npos) break;
    from = at + kSeparator.size();
  }
  for (const auto& f : files) Check(strata::obs::VerifyAuditLog({f}, nullptr));  // each alone
  const FuzzKey key;
  const auto keyed = strata::obs::VerifyAuditLog(files, &key);
  Check(keyed);
  const auto plain = strata::obs::VerifyAuditLog(files, nullptr);
  Check(plain);
  // A key can only find more wrong, never less.
  if (keyed.verdict != strata::obs::AuditVerifyReport::Verdict::kTampered &&
      plain.verdict == strata::obs::AuditVerifyReport::Verdict::kTampered) {
    std::abort();
  }
  std::vector<strata::obs::AuditFile> reversed(files.rbegin(), files.rend());
  if (strata::obs::VerifyAuditLog(reversed, nullptr).verdict != plain.verdict) std::abort();
  return 0;
}
