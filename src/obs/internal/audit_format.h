// obs/internal/audit_format.h — the constants and the line layout of the
// audit log (docs/formats/audit_log.md is the spec; this is its one
// constants header), shared by the writer and the verifier.
//
// A record is one line: a JSON object with its keys in a fixed order per
// type, no whitespace, ending
//   ,"prev":"<64 hex>","hash":"<64 hex>"}\n
// (a checkpoint: ,"prev":"<64 hex>","sig":"<hex>","hash":"<64 hex>"}\n).
// hash = SHA-256 of the line's bytes before ,"hash":" ; a checkpoint's sig
// signs the line's bytes before ,"sig":" . prev is the hash of the record
// before it in the chain (kGenesisHash for the first record ever).
//
// Threading: pure functions.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "obs/crypto.h"
#include "util/status.h"

namespace strata::obs::audit {

inline constexpr int kFormatVersion = 1;
inline constexpr std::string_view kGenesisHash =
    "0000000000000000000000000000000000000000000000000000000000000000";
inline constexpr std::string_view kHashKey = ",\"hash\":\"";
inline constexpr std::string_view kSigKey = ",\"sig\":\"";
inline constexpr size_t kHashHexChars = 64;
// What every line ends with after the hash's hex digits.
inline constexpr std::string_view kLineEnd = "\"}";
// The longest line the reader accepts (a record with token-level audit of a
// long answer is the largest); a longer one is not a record.
inline constexpr size_t kMaxLineBytes = 64u << 20;
// Rotated files are named FILE.<index>, the index zero-padded to this many digits.
inline constexpr int kIndexDigits = 6;

// Record types.
inline constexpr std::string_view kTypeOpen = "open";
inline constexpr std::string_view kTypeRequest = "request";
inline constexpr std::string_view kTypeCheckpoint = "checkpoint";
inline constexpr std::string_view kTypeDropped = "dropped";
inline constexpr std::string_view kTypeClose = "close";

// Why a file was opened (an open record's "reason").
inline constexpr std::string_view kReasonNew = "new";          // no log before
inline constexpr std::string_view kReasonRestart = "restart";  // the last run closed its log
inline constexpr std::string_view kReasonCrash = "restart_after_crash";  // it did not
inline constexpr std::string_view kReasonRotate = "rotate";              // the file was full
inline constexpr std::string_view kReasonRecover = "recover";  // after a write or sync error

// "2026-11-30T12:00:00.123Z" (RFC 3339, UTC, milliseconds).
std::string FormatTime(std::chrono::system_clock::time_point t);

// The path of rotated file `index` of the log at `path`: "PATH.000042".
std::string RotatedPath(const std::string& path, uint64_t index);

// `{"v":1,"seq":SEQ,"type":"TYPE","time":"TIME"` — a line's start.
std::string LineStart(uint64_t seq, std::string_view type, std::string_view time);
// Appends `,"prev":"PREV"`, then, for a checkpoint (`signer` set), its
// signature of the bytes so far (`,"sig":"HEX"`), then `,"hash":"HASH"}` and
// "\n"; returns HASH (hex).
std::string FinishLine(std::string& line, std::string_view prev, const Signer* signer = nullptr);

// What the reader needs of one line.
struct ParsedLine {
  uint64_t seq = 0;
  std::string type;
  std::string time;
  std::string prev;           // 64 hex
  std::string hash;           // as stored, 64 hex
  std::string computed_hash;  // SHA-256 of the hashed bytes, hex
  // open
  std::optional<uint64_t> file_index;
  std::string reason;
  uint64_t lost = 0;        // open (recover): records assigned but not known written
  std::string signing_key;  // open: the key id checkpoints of this run use ("" = none)
  // checkpoint
  std::string alg, key_id;
  std::string sig;          // raw bytes
  std::string signed_part;  // the bytes the signature covers
  // dropped
  uint64_t dropped = 0;
  std::string dropped_reason;
  // request
  std::string request_id;
};

// Parses one line (without its "\n"). InvalidArgument saying what is wrong
// (not JSON, a field missing or of the wrong type, the layout of the tail)
// — the verifier calls that corruption or tampering.
util::StatusOr<ParsedLine> ParseLine(std::string_view line);

}  // namespace strata::obs::audit
