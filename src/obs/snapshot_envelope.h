// obs/snapshot_envelope.h — the encrypted file a request snapshot is stored
// in: its constants, the key, and sealing and opening one file
// (docs/formats/snapshot.md is the byte layout).
//
// Promise: a snapshot file is its plaintext under AES-256-GCM with a fresh
// random 96-bit nonce, the file's header (magic, format version, creation
// time, nonce) and the tenant and request id authenticated as associated
// data. Open returns the plaintext only when every byte is as Seal wrote it
// under the same key, tenant and request id: any other file, a changed
// byte, a wrong key, or a file copied to another tenant's or request's name
// is DataLoss "snapshot authentication failed ...", never garbage (a file
// whose header names another key's id says so). A file too short, with
// another magic or an unknown version is DataLoss naming that. Files are named by an HMAC of tenant
// and request id under a key derived from the snapshot key (FileName), so names say nothing about
// who or what without the key. Nothing here logs, and no message contains key material.
//
// The key (SnapshotKey) is 32 bytes, given as a file of exactly 32 raw bytes
// or of 64 hex digits (surrounding whitespace ignored). Two keys are derived
// from it with HMAC-SHA256: one encrypts, one names files; and a key id (8
// bytes, public) that every file's header carries, so a file can tell
// which key wrote it without revealing anything of the key.
//
// Threading: SnapshotKey is immutable; the functions are thread-safe.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(SnapshotKey key, SnapshotKey::Load(fs, "snapshot.key"));
//   STRATA_ASSIGN_OR_RETURN(std::string file, SealSnapshot(key, meta, json, nonce));
//   STRATA_ASSIGN_OR_RETURN(OpenedSnapshot s, OpenSnapshot(key, tenant, id, file));
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "util/file_system.h"
#include "util/status.h"

namespace strata::obs {

// The file format's constants (docs/formats/snapshot.md).
inline constexpr char kSnapshotMagic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'S', 'N'};
inline constexpr uint16_t kSnapshotFormatVersion = 1;
// magic, version, reserved, creation time, key id, nonce
inline constexpr size_t kSnapshotHeaderBytes = 40;
inline constexpr size_t kSnapshotKeyIdBytes = 8;
inline constexpr size_t kSnapshotNonceBytes = 12;
inline constexpr size_t kSnapshotTagBytes = 16;
inline constexpr size_t kSnapshotOverheadBytes = kSnapshotHeaderBytes + kSnapshotTagBytes;
inline constexpr size_t kSnapshotKeyBytes = 32;
inline constexpr size_t kSnapshotNameHexDigits = 32;  // 128 bits of the name HMAC
inline constexpr std::string_view kSnapshotSuffix = ".snap";
// The largest plaintext a snapshot may hold (a request's body is at most the
// server's body limit; the answer is bounded by max_tokens).
inline constexpr size_t kMaxSnapshotPlaintextBytes = 256u << 20;
// Tenants and request ids are at most this long (their lengths are u16 in
// the associated data; the server allows 64 and 128).
inline constexpr size_t kMaxSnapshotIdBytes = 1024;

// What a snapshot file says outside its ciphertext (authenticated).
struct SnapshotMeta {
  std::string tenant;      // 1..kMaxSnapshotIdBytes bytes
  std::string request_id;  // 1..kMaxSnapshotIdBytes bytes
  int64_t created_ms = 0;  // Unix milliseconds
};

struct OpenedSnapshot {
  int64_t created_ms = 0;
  std::string plaintext;
};

class SnapshotKey {
 public:
  // From a key file's bytes: exactly 32 bytes, or 64 hex digits with
  // optional whitespace around. InvalidArgument naming `source` and what
  // was found (its length, never its content) otherwise.
  static util::StatusOr<SnapshotKey> Parse(std::string_view file_bytes, std::string_view source);
  static util::StatusOr<SnapshotKey> Load(util::FileSystem& fs, const std::string& path);
  // From the 32 key bytes themselves (tests, the fuzzer).
  static SnapshotKey FromBytes(std::span<const uint8_t, kSnapshotKeyBytes> key);

  SnapshotKey(const SnapshotKey&) = default;
  SnapshotKey& operator=(const SnapshotKey&) = default;
  ~SnapshotKey();

  // The file name (without directory) of the snapshot of (tenant,
  // request_id): 32 hex digits of an HMAC-SHA256 under the naming key, then
  // ".snap".
  std::string FileName(std::string_view tenant, std::string_view request_id) const;
  // The key's public id, in every file it seals; hex for messages.
  const std::array<uint8_t, kSnapshotKeyIdBytes>& id() const { return id_; }
  std::string IdHex() const;

 private:
  SnapshotKey() = default;
  friend util::StatusOr<std::string> SealSnapshot(const SnapshotKey&, const SnapshotMeta&,
                                                  std::string_view,
                                                  std::span<const uint8_t, kSnapshotNonceBytes>);
  friend util::StatusOr<OpenedSnapshot> OpenSnapshot(const SnapshotKey&, std::string_view,
                                                     std::string_view, std::string_view);
  std::array<uint8_t, kSnapshotKeyBytes> encrypt_{};  // AES-256-GCM key
  std::array<uint8_t, kSnapshotKeyBytes> name_{};     // HMAC-SHA256 key of file names
  std::array<uint8_t, kSnapshotKeyIdBytes> id_{};     // public: which key sealed a file
};

// The whole file for `plaintext` under `key`. `nonce` must never repeat
// under one key (draw it from a CSPRNG: RandomNonce). InvalidArgument when
// the tenant or id is empty or too long, or the plaintext is over
// kMaxSnapshotPlaintextBytes.
util::StatusOr<std::string> SealSnapshot(const SnapshotKey& key, const SnapshotMeta& meta,
                                         std::string_view plaintext,
                                         std::span<const uint8_t, kSnapshotNonceBytes> nonce);

// The plaintext of `file` if it is the snapshot of (tenant, request_id)
// sealed under `key`; DataLoss otherwise (see the file comment).
util::StatusOr<OpenedSnapshot> OpenSnapshot(const SnapshotKey& key, std::string_view tenant,
                                            std::string_view request_id, std::string_view file);

// What a file's header claims (authenticated only by OpenSnapshot): for
// retention, which must not decrypt every file, and to tell which key wrote
// a file. DataLoss when `header` is not the start of a snapshot file.
struct SnapshotHeader {
  int64_t created_ms = 0;
  std::array<uint8_t, kSnapshotKeyIdBytes> key_id{};
};
util::StatusOr<SnapshotHeader> ParseSnapshotHeader(std::span<const uint8_t> header);

// A fresh nonce from OpenSSL's CSPRNG; Internal when it has no entropy.
util::Status RandomNonce(std::span<uint8_t, kSnapshotNonceBytes> nonce);

}  // namespace strata::obs
