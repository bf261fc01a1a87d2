// Fuzz target: the request snapshot decoder — the encrypted file
// (obs/snapshot_envelope.h) and the JSON record inside it
// (server/snapshot_record.h) — on arbitrary bytes.
//
// The first byte picks what the rest is. Even: a snapshot file, opened under
// a fixed key as the snapshot of tenant "default", request "seed-1": it opens
// (then its record is decoded) or is DataLoss, never anything else, and a
// failed open returns no plaintext. Odd: a record's plaintext, sealed and
// opened again (it must come back byte for byte), then decoded: a record or
// DataLoss; a record that decodes encodes to a record that decodes to the
// same encoding. Nothing throws, crashes or reads out of bounds.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "obs/snapshot_envelope.h"
#include "server/snapshot_record.h"

namespace {

using strata::util::StatusCode;

const strata::obs::SnapshotKey& Key() {
  // The key of the corpus's files: bytes 0, 1, ..., 31.
  static const strata::obs::SnapshotKey key = [] {
    std::array<uint8_t, strata::obs::kSnapshotKeyBytes> raw{};
    for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<uint8_t>(i);
    return strata::obs::SnapshotKey::FromBytes(raw);
  }();
  return key;
}

void CheckRecord(std::string_view plaintext) {
  auto record = strata::server::DecodeSnapshotRecord(plaintext);
  if (!record.ok()) {
    if (record.status().code() != StatusCode::kDataLoss) std::abort();
    return;
  }
  const std::string once = strata::server::EncodeSnapshotRecord(*record);
  auto again = strata::server::DecodeSnapshotRecord(once);
  if (!again.ok()) std::abort();
  if (strata::server::EncodeSnapshotRecord(*again) != once) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) {
    auto opened = strata::obs::OpenSnapshot(Key(), "default", "seed-1", rest);
    if (!opened.ok()) {
      if (opened.status().code() != StatusCode::kDataLoss) std::abort();
      return 0;
    }
    CheckRecord(opened->plaintext);
    return 0;
  }
  if (rest.size() > strata::obs::kMaxSnapshotPlaintextBytes) return 0;
  std::array<uint8_t, strata::obs::kSnapshotNonceBytes> nonce{};
  nonce[0] = data[0];
  const strata::obs::SnapshotMeta meta{
      .tenant = "default", .request_id = "seed-1", .created_ms = 1'790'000'000'000};
  auto sealed = strata::obs::SealSnapshot(Key(), meta, rest, nonce);
  if (!sealed.ok()) std::abort();
  auto opened = strata::obs::OpenSnapshot(Key(), "default", "seed-1", *sealed);
  if (!opened.ok() || opened->plaintext != rest || opened->created_ms != meta.created_ms) {
    std::abort();
  }
  CheckRecord(rest);
  return 0;
}
