// obs/audit_verify.h — checks an audit log (obs/audit_log.h) end to end.
//
// Promise: given the log's files in any order (they are put in chain order
// by the sequence number of their first record), VerifyAuditLog recomputes
// every record's hash and follows the chain: an edited record (its hash no
// longer matches it), a removed, inserted or reordered record (its seq or
// prev does not follow the record before it), a removed or duplicated file
// (a gap or overlap between files) and, with a key, a checkpoint whose
// signature does not verify or that another key signed, each make the log
// kTampered, and the report names the first bad record: file, line, seq
// and what is wrong. Damage a crash explains is kIncomplete, not
// tampering: a partial last line of a file (written when the power went),
// records a recovery after a write error superseded, and records the
// writer says it dropped (queue full, write errors). Without a key, the
// chain is checked and the report says the checkpoints were not verified.
// The chain alone shows accidental and naive edits; someone who can rewrite
// the files can recompute every hash after an edit, which only a verified
// checkpoint after it exposes (docs/formats/audit_log.md, "Threat model").
//
// Limits: a line longer than 64 MiB is not a record (kTampered). The work
// is linear in the bytes given.
//
// Threading: a pure function.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "obs/crypto.h"

namespace strata::obs {

struct AuditFile {
  std::string name;        // for messages
  std::string_view bytes;  // the whole file; borrowed for the call
};

struct AuditProblem {
  std::string file;
  uint64_t line = 0;            // 1-based; 0 = the file as a whole
  std::optional<uint64_t> seq;  // when the line has one
  std::string what;
  bool loss = false;  // a note that records are missing (it makes the log kIncomplete)
};

struct AuditVerifyReport {
  enum class Verdict {
    kIntact,      // every record checks out and nothing is missing
    kIncomplete,  // the chain holds, but a crash or the writer lost records (notes say which)
    kTampered,    // first_bad says where the chain breaks
  };
  Verdict verdict = Verdict::kIntact;
  std::optional<AuditProblem> first_bad;  // kTampered
  std::vector<AuditProblem> notes;        // kIncomplete's reasons, and remarks
  uint64_t files = 0;
  uint64_t records = 0;   // every type
  uint64_t requests = 0;  // request records
  uint64_t first_seq = 0, last_seq = 0;
  bool from_genesis = false;         // the chain starts at seq 1 (no earlier files missing)
  bool closed = false;               // the last record is a clean close
  bool checkpoints_checked = false;  // a key was given
  uint64_t checkpoints = 0;          // checkpoint records seen
  uint64_t checkpoints_verified = 0;
  // Records after the last verified checkpoint (covered by the chain only).
  uint64_t unsigned_tail = 0;
  uint64_t dropped = 0;  // records the log says were dropped or lost
};

// `key`: the checkpoints' key (null: checkpoints are not verified).
AuditVerifyReport VerifyAuditLog(const std::vector<AuditFile>& files, const Verifier* key);

// "intact", "incomplete", "tampered".
std::string_view VerdictName(AuditVerifyReport::Verdict verdict);

}  // namespace strata::obs
