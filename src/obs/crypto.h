// obs/crypto.h — the digests, MACs and signatures of the audit log and the
// response watermark, over OpenSSL (the only place strata calls its EVP API
// for them).
//
// Promise: SHA-256 and HMAC-SHA256 as in FIPS 180-4 and RFC 2104; Ed25519 as
// in RFC 8032. Keys come from files (LoadSigner, LoadVerifier, LoadHmacKey)
// and never appear in a message, a log line or a Status: errors name the
// file and what is wrong with it, not its bytes. Comparisons of MACs and
// signatures are constant-time (CRYPTO_memcmp).
//
// Key files:
//   - an HMAC secret: the file's bytes, less one trailing "\n" or "\r\n";
//     at least 32 bytes (e.g. `openssl rand -hex 32 > key`).
//   - an Ed25519 private key in PEM (`openssl genpkey -algorithm ed25519`);
//     its public half (`openssl pkey -pubout`) verifies without being able
//     to sign.
//
// Threading: the free functions are thread-safe; a Signer or Verifier is
// immutable after loading and may be used from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "util/file_system.h"
#include "util/status.h"

namespace strata::obs {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest Sha256(std::string_view data);

// SHA-256 of data given in pieces (a response's text as it streams).
// Thread-compatible.
class Sha256Hasher {
 public:
  Sha256Hasher();
  ~Sha256Hasher();
  Sha256Hasher(const Sha256Hasher&) = delete;
  Sha256Hasher& operator=(const Sha256Hasher&) = delete;
  void Update(std::string_view data);
  // The digest of everything given; the hasher then starts over.
  Sha256Digest Finish();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

Sha256Digest HmacSha256(std::span<const uint8_t> key, std::string_view data);

// HMAC-SHA256 under one key, set up once: each Mac copies a keyed context
// instead of setting one up (OpenSSL 3's one-shot HMAC looks the algorithm
// up again on every call, several times the cost of the MAC itself).
// Thread-safe; the key stays in memory until destruction.
class HmacSha256Key {
 public:
  explicit HmacSha256Key(std::string_view secret);
  ~HmacSha256Key();
  HmacSha256Key(const HmacSha256Key&) = delete;
  HmacSha256Key& operator=(const HmacSha256Key&) = delete;
  Sha256Digest Mac(std::string_view data) const;

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// Lower-case hex of `bytes`.
std::string Hex(std::span<const uint8_t> bytes);
// The bytes of lower-case or upper-case hex; nullopt on an odd length or a
// non-hex character.
std::optional<std::string> Unhex(std::string_view hex);

// Whether a and b are equal, in time that depends only on their lengths.
bool ConstantTimeEqual(std::string_view a, std::string_view b);

// The algorithms a key may be for.
enum class SignatureAlgorithm { kHmacSha256, kEd25519 };
// "hmac-sha256", "ed25519".
std::string_view SignatureAlgorithmName(SignatureAlgorithm alg);
std::optional<SignatureAlgorithm> ParseSignatureAlgorithm(std::string_view name);

// Signs checkpoints of the audit log.
class Signer {
 public:
  virtual ~Signer() = default;
  virtual SignatureAlgorithm algorithm() const = 0;
  // 16 hex digits naming the key without revealing it: the first 8 bytes of
  // SHA-256 of the Ed25519 public key, or of "strata-hmac-key-id\0" + secret.
  virtual const std::string& key_id() const = 0;
  // The signature (raw bytes: 32 for HMAC-SHA256, 64 for Ed25519).
  virtual std::string Sign(std::string_view message) const = 0;
};

// Checks what a Signer signed.
class Verifier {
 public:
  virtual ~Verifier() = default;
  virtual SignatureAlgorithm algorithm() const = 0;
  virtual const std::string& key_id() const = 0;  // as Signer::key_id
  virtual bool Verify(std::string_view message, std::string_view signature) const = 0;
};

// An Ed25519 private key in PEM signs with Ed25519; any other file is an
// HMAC-SHA256 secret. InvalidArgument naming `path` when it is neither (a
// PEM key of another type, a secret under 32 bytes); the file system's
// error when it cannot be read.
util::StatusOr<std::unique_ptr<Signer>> LoadSigner(util::FileSystem& fs, const std::string& path);

// An Ed25519 public or private key in PEM verifies Ed25519 signatures; any
// other file is an HMAC-SHA256 secret. Errors as LoadSigner.
util::StatusOr<std::unique_ptr<Verifier>> LoadVerifier(util::FileSystem& fs,
                                                       const std::string& path);

// An HMAC-SHA256 secret from `path` (the watermark key): InvalidArgument
// naming the file when it holds a PEM key or fewer than 32 bytes.
util::StatusOr<std::string> LoadHmacKey(util::FileSystem& fs, const std::string& path);

// The key id of an HMAC secret (Signer::key_id).
std::string HmacKeyId(std::string_view secret);

}  // namespace strata::obs
