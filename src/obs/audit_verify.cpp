#include "obs/audit_verify.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "obs/internal/audit_format.h"

namespace strata::obs {
namespace {

using Report = AuditVerifyReport;

// One file cut into lines.
struct Lines {
  const AuditFile* file = nullptr;
  std::vector<std::string_view> complete;  // without their "\n"
  std::string_view torn;                   // a last line without "\n" ("" when none)
  std::optional<uint64_t> first_seq;       // of the first line, when it parses
};

Lines Split(const AuditFile& f) {
  Lines l;
  l.file = &f;
  std::string_view rest = f.bytes;
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    if (nl == std::string_view::npos) {
      l.torn = rest;
      break;
    }
    l.complete.push_back(rest.substr(0, nl));
    rest.remove_prefix(nl + 1);
  }
  return l;
}

class Walker {
 public:
  Walker(const Verifier* key, Report& report) : key_(key), r_(report) {}

  // Follows the chain through `file` (files in chain order); false once the
  // log is found tampered (r_.first_bad says where).
  bool File(const Lines& file) {
    const std::string& name = file.file->name;
    std::vector<std::pair<uint64_t, std::string>> hashes;  // (seq, hash) of this file's records
    for (size_t i = 0; i < file.complete.size(); ++i) {
      const uint64_t line = i + 1;
      auto parsed = audit::ParseLine(file.complete[i]);
      if (!parsed.ok()) {
        return Bad(name, line, std::nullopt,
                   "not a valid record (" + parsed.status().message() + ")");
      }
      const audit::ParsedLine& p = *parsed;
      if (p.computed_hash != p.hash) {
        return Bad(name, line, p.seq, "edited: the record's hash does not match its contents");
      }
      if (i == 0 && p.type != audit::kTypeOpen) {
        return Bad(name, line, p.seq,
                   "the file does not start with an open record (its start was cut, or lines "
                   "were moved into it)");
      }
      if (i > 0 && p.type == audit::kTypeOpen) {
        return Bad(name, line, p.seq, "an open record inside a file (a file's start moved here)");
      }
      if (!Link(file, i, p)) return false;
      if (!Record(name, line, p)) return false;
      hashes.emplace_back(p.seq, p.hash);
      expected_seq_ = p.seq + 1;
      head_ = p.hash;
      previous_type_ = last_type_;
      last_type_ = p.type;
      ++r_.records;
    }
    if (!file.torn.empty()) {
      Note(name, file.complete.size() + 1, std::nullopt,
           fmt::format("a partial last line ({} bytes): the writer stopped while writing it (a "
                       "crash or power cut); that record is lost",
                       file.torn.size()),
           /*loss=*/true);
    }
    previous_hashes_ = std::move(hashes);
    previous_file_ = name;
    previous_torn_ = !file.torn.empty();
    return true;
  }

  void Finish() {
    r_.closed = last_type_ == audit::kTypeClose ||
                (last_type_ == audit::kTypeCheckpoint && previous_type_ == audit::kTypeClose);
    r_.last_seq = expected_seq_ == 0 ? 0 : expected_seq_ - 1;
    if (key_ != nullptr && r_.records > 0) {
      r_.unsigned_tail = r_.last_seq - std::max(last_verified_, r_.first_seq - 1);
    }
  }

 private:
  bool Bad(const std::string& file, uint64_t line, std::optional<uint64_t> seq, std::string what) {
    r_.first_bad = AuditProblem{file, line, seq, std::move(what), false};
    return false;
  }

  void Note(const std::string& file, uint64_t line, std::optional<uint64_t> seq, std::string what,
            bool loss) {
    r_.notes.push_back(AuditProblem{file, line, seq, std::move(what), loss});
  }

  // Whether record `p` (line index `i` of `file`) follows the chain.
  bool Link(const Lines& file, size_t i, const audit::ParsedLine& p) {
    const std::string& name = file.file->name;
    const uint64_t line = i + 1;
    if (!started_) {
      started_ = true;
      r_.first_seq = p.seq;
      if (p.seq == 1) {
        if (p.prev != audit::kGenesisHash) {
          return Bad(name, line, p.seq, "the first record of the chain does not start from zero");
        }
        r_.from_genesis = true;
      } else {
        Note(name, line, p.seq,
             fmt::format("the chain starts at seq {}: records before it (older files) were not "
                         "given, so they are not checked",
                         p.seq),
             false);
      }
      return true;
    }
    if (p.seq == expected_seq_ && p.prev == head_) return true;
    if (i == 0) return LinkFiles(file, p);
    if (p.seq > expected_seq_) {
      return Bad(name, line, p.seq,
                 fmt::format("seq {} where {} was expected: {} removed before it, or records "
                             "reordered",
                             p.seq, expected_seq_,
                             p.seq - expected_seq_ == 1
                                 ? fmt::format("record {} was", expected_seq_)
                                 : fmt::format("records {}..{} were", expected_seq_, p.seq - 1)));
    }
    if (p.seq < expected_seq_) {
      return Bad(name, line, p.seq,
                 fmt::format("seq {} where {} was expected: a record inserted, repeated or "
                             "moved here",
                             p.seq, expected_seq_));
    }
    return Bad(name, line, p.seq,
               fmt::format("its prev is not the hash of record {}: that record was edited and "
                           "re-hashed, or this one was inserted or moved here",
                           expected_seq_ - 1));
  }

  // The open record `p` that starts `file` against the end of the file before it.
  bool LinkFiles(const Lines& file, const audit::ParsedLine& p) {
    const std::string& name = file.file->name;
    if (p.reason == audit::kReasonRecover && p.seq <= expected_seq_) {
      // After a write error the writer went on from the last record it had
      // synced: what the failed file holds after it was superseded.
      for (size_t k = 0; k < previous_hashes_.size(); ++k) {
        if (previous_hashes_[k].first + 1 == p.seq && previous_hashes_[k].second == p.prev) {
          const uint64_t superseded = previous_hashes_.size() - 1 - k;
          if (superseded > 0 || previous_torn_) {
            Note(previous_file_, 0, std::nullopt,
                 fmt::format("{} record(s) after seq {} were written before a write error and "
                             "superseded by '{}' (the recovery's open record)",
                             superseded, previous_hashes_[k].first, name),
                 /*loss=*/true);
          }
          return true;
        }
      }
    }
    if (p.seq > expected_seq_) {
      return Bad(name, 1, p.seq,
                 fmt::format("the file starts at seq {}, but the file before it ('{}') ends at "
                             "seq {}: records {}..{} are missing (a file removed, or records cut "
                             "from the end of '{}')",
                             p.seq, previous_file_, expected_seq_ - 1, expected_seq_, p.seq - 1,
                             previous_file_));
    }
    if (p.seq < expected_seq_) {
      return Bad(name, 1, p.seq,
                 fmt::format("the file starts at seq {}, inside the file before it ('{}', which "
                             "ends at seq {}): files overlap (a copy, or records inserted)",
                             p.seq, previous_file_, expected_seq_ - 1));
    }
    return Bad(name, 1, p.seq,
               fmt::format("its prev is not the hash of the last record of '{}' (seq {}): that "
                           "record was edited and re-hashed, or the file does not belong here",
                           previous_file_, expected_seq_ - 1));
  }

  // Type-specific checks of a linked record.
  bool Record(const std::string& name, uint64_t line, const audit::ParsedLine& p) {
    if (p.type == audit::kTypeRequest) {
      ++r_.requests;
    } else if (p.type == audit::kTypeOpen) {
      run_key_ = p.signing_key;
      if (p.lost > 0) {
        r_.dropped += p.lost;
        Note(
            name, line, p.seq,
            fmt::format("{} record(s) were lost to a write or sync error before this file", p.lost),
            /*loss=*/true);
      }
      if (key_ != nullptr && !run_key_.empty() && run_key_ != key_->key_id() &&
          other_keys_.insert(run_key_).second) {
        Note(name, line, p.seq,
             fmt::format("this run signed its checkpoints with key {}, not the given key {}: "
                         "they are not verified",
                         run_key_, key_->key_id()),
             false);
      }
    } else if (p.type == audit::kTypeDropped) {
      r_.dropped += p.dropped;
      Note(name, line, p.seq,
           fmt::format("the writer dropped {} record(s) here ({})", p.dropped,
                       p.dropped_reason.substr(0, 40)),
           /*loss=*/true);
    } else if (p.type == audit::kTypeCheckpoint) {
      ++r_.checkpoints;
      if (key_ == nullptr) return true;
      if (p.key_id != run_key_) {
        return Bad(name, line, p.seq,
                   fmt::format("a checkpoint signed with key {}, but this run's open record "
                               "names key {}",
                               p.key_id.substr(0, 40), run_key_.empty() ? "none" : run_key_));
      }
      if (p.key_id != key_->key_id()) return true;  // noted at the open record
      const auto alg = ParseSignatureAlgorithm(p.alg);
      if (!alg || *alg != key_->algorithm()) {
        return Bad(name, line, p.seq,
                   fmt::format("a checkpoint of algorithm '{}' with the id of a {} key",
                               p.alg.substr(0, 40), SignatureAlgorithmName(key_->algorithm())));
      }
      if (!key_->Verify(p.signed_part, p.sig)) {
        return Bad(name, line, p.seq,
                   "the checkpoint's signature does not verify: the records before it were "
                   "changed (and re-hashed), or the checkpoint was");
      }
      ++r_.checkpoints_verified;
      last_verified_ = p.seq;
    }
    return true;
  }

  const Verifier* const key_;
  Report& r_;
  bool started_ = false;
  uint64_t expected_seq_ = 0;
  std::string head_;
  std::string last_type_, previous_type_;
  std::string run_key_;  // the key id the current run's open record names
  std::set<std::string> other_keys_;
  uint64_t last_verified_ = 0;
  std::vector<std::pair<uint64_t, std::string>> previous_hashes_;
  std::string previous_file_;
  bool previous_torn_ = false;
};

}  // namespace

std::string_view VerdictName(Report::Verdict verdict) {
  switch (verdict) {
    case Report::Verdict::kIntact:
      return "intact";
    case Report::Verdict::kIncomplete:
      return "incomplete";
    case Report::Verdict::kTampered:
      return "tampered";
  }
  return "?";
}

AuditVerifyReport VerifyAuditLog(const std::vector<AuditFile>& files, const Verifier* key) {
  Report r;
  r.files = files.size();
  r.checkpoints_checked = key != nullptr;
  std::vector<Lines> split;
  split.reserve(files.size());
  for (const AuditFile& f : files) {
    Lines l = Split(f);
    if (l.complete.empty()) {
      r.notes.push_back(AuditProblem{
          f.name, 0, std::nullopt,
          l.torn.empty() ? "the file is empty"
                         : fmt::format("the file holds only a partial line ({} bytes): the writer "
                                       "stopped while starting it",
                                       l.torn.size()),
          !l.torn.empty()});
      continue;
    }
    auto first = audit::ParseLine(l.complete.front());
    if (!first.ok()) {
      r.verdict = Report::Verdict::kTampered;
      r.first_bad = AuditProblem{f.name, 1, std::nullopt,
                                 "not a valid record (" + first.status().message() + ")", false};
      return r;
    }
    l.first_seq = first->seq;
    split.push_back(std::move(l));
  }
  std::stable_sort(split.begin(), split.end(),
                   [](const Lines& a, const Lines& b) { return *a.first_seq < *b.first_seq; });
  for (size_t i = 1; i < split.size(); ++i) {
    if (*split[i].first_seq == *split[i - 1].first_seq) {
      r.verdict = Report::Verdict::kTampered;
      r.first_bad = AuditProblem{
          split[i].file->name, 1, split[i].first_seq,
          fmt::format("starts at seq {}, as '{}' does: the same file given twice, or a copy",
                      *split[i].first_seq, split[i - 1].file->name),
          false};
      return r;
    }
  }
  Walker walker(key, r);
  for (const Lines& l : split) {
    if (!walker.File(l)) {
      r.verdict = Report::Verdict::kTampered;
      return r;
    }
  }
  walker.Finish();
  if (r.records > 0 && !r.closed) {
    r.notes.push_back(AuditProblem{
        split.back().file->name, 0, std::nullopt,
        "the log does not end with a close record: it is still being written, its writer "
        "crashed, or records were cut from its end (only a checkpoint kept elsewhere shows that)",
        false});
  }
  const bool loss =
      std::any_of(r.notes.begin(), r.notes.end(), [](const AuditProblem& p) { return p.loss; });
  r.verdict = loss ? Report::Verdict::kIncomplete : Report::Verdict::kIntact;
  return r;
}

}  // namespace strata::obs
