#include "obs/snapshot_envelope.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "obs/crypto.h"

namespace strata::obs {
namespace {

using Bytes = std::span<const uint8_t>;

Bytes AsBytes(std::string_view s) {
  return Bytes(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

void PutU16(std::string& out, uint16_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>(v >> 8));
}

void PutI64(std::string& out, int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}

uint16_t GetU16(Bytes b, size_t at) {
  return static_cast<uint16_t>(b[at] | (static_cast<uint16_t>(b[at + 1]) << 8));
}

int64_t GetI64(Bytes b, size_t at) {
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= static_cast<uint64_t>(b[at + static_cast<size_t>(i)]) << (8 * i);
  return static_cast<int64_t>(u);
}

// Length-prefixed (u16 little-endian) tenant, then request id: what binds a
// file to its owner and name, in the associated data and the file name.
std::string Owner(std::string_view tenant, std::string_view request_id) {
  std::string out;
  out.reserve(4 + tenant.size() + request_id.size());
  PutU16(out, static_cast<uint16_t>(tenant.size()));
  out.append(tenant);
  PutU16(out, static_cast<uint16_t>(request_id.size()));
  out.append(request_id);
  return out;
}

util::Status CheckOwner(std::string_view tenant, std::string_view request_id) {
  if (tenant.empty() || tenant.size() > kMaxSnapshotIdBytes) {
    return util::InvalidArgumentError(fmt::format(
        "snapshot tenant has {} bytes; 1 to {} are allowed", tenant.size(), kMaxSnapshotIdBytes));
  }
  if (request_id.empty() || request_id.size() > kMaxSnapshotIdBytes) {
    return util::InvalidArgumentError(
        fmt::format("snapshot request id has {} bytes; 1 to {} are allowed", request_id.size(),
                    kMaxSnapshotIdBytes));
  }
  return util::OkStatus();
}

struct CipherCtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, CipherCtxFree>;

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

}  // namespace

SnapshotKey::~SnapshotKey() {
  OPENSSL_cleanse(encrypt_.data(), encrypt_.size());
  OPENSSL_cleanse(name_.data(), name_.size());
}

SnapshotKey SnapshotKey::FromBytes(std::span<const uint8_t, kSnapshotKeyBytes> key) {
  // Separate keys for encryption and naming, so neither use can weaken the other.
  SnapshotKey k;
  k.encrypt_ = HmacSha256(key, "strata snapshot v1 encryption key");
  k.name_ = HmacSha256(key, "strata snapshot v1 file name key");
  const auto id = HmacSha256(key, "strata snapshot v1 key id");
  std::memcpy(k.id_.data(), id.data(), k.id_.size());
  return k;
}

util::StatusOr<SnapshotKey> SnapshotKey::Parse(std::string_view bytes, std::string_view source) {
  std::array<uint8_t, kSnapshotKeyBytes> raw{};
  // 32 hex digits are not a raw key but half a hex one (16 bytes): a raw
  // random key is all hex digits with probability (22/256)^32.
  const bool all_hex =
      std::all_of(bytes.begin(), bytes.end(), [](char c) { return HexValue(c) >= 0; });
  if (bytes.size() == kSnapshotKeyBytes && !all_hex) {
    std::memcpy(raw.data(), bytes.data(), raw.size());
  } else {
    std::string_view text = bytes;
    while (!text.empty() && IsSpace(text.front())) text.remove_prefix(1);
    while (!text.empty() && IsSpace(text.back())) text.remove_suffix(1);
    bool hex = text.size() == 2 * kSnapshotKeyBytes;
    for (size_t i = 0; hex && i < kSnapshotKeyBytes; ++i) {
      const int hi = HexValue(text[2 * i]);
      const int lo = HexValue(text[2 * i + 1]);
      hex = hi >= 0 && lo >= 0;
      raw[i] = static_cast<uint8_t>((hi << 4) | (lo & 15));
    }
    if (!hex) {
      OPENSSL_cleanse(raw.data(), raw.size());
      return util::InvalidArgumentError(fmt::format(
          "snapshot key file {} holds {} bytes: it must hold exactly 32 bytes, or 64 hex digits "
          "(e.g. from 'openssl rand -hex 32')",
          source, bytes.size()));
    }
  }
  SnapshotKey key = FromBytes(raw);
  OPENSSL_cleanse(raw.data(), raw.size());
  return key;
}

util::StatusOr<SnapshotKey> SnapshotKey::Load(util::FileSystem& fs, const std::string& path) {
  auto bytes = fs.ReadFile(path);
  if (!bytes.ok()) {
    return util::InvalidArgumentError(
        fmt::format("snapshot key file: {}", bytes.status().message()));
  }
  auto key = Parse(*bytes, path);
  OPENSSL_cleanse(bytes->data(), bytes->size());
  return key;
}

std::string SnapshotKey::IdHex() const { return Hex(id_); }

std::string SnapshotKey::FileName(std::string_view tenant, std::string_view request_id) const {
  const auto mac = HmacSha256(name_, Owner(tenant, request_id));
  return Hex(std::span<const uint8_t>(mac).first(kSnapshotNameHexDigits / 2)) +
         std::string(kSnapshotSuffix);
}

util::StatusOr<std::string> SealSnapshot(const SnapshotKey& key, const SnapshotMeta& meta,
                                         std::string_view plaintext,
                                         std::span<const uint8_t, kSnapshotNonceBytes> nonce) {
  STRATA_RETURN_IF_ERROR(CheckOwner(meta.tenant, meta.request_id));
  if (plaintext.size() > kMaxSnapshotPlaintextBytes) {
    return util::InvalidArgumentError(fmt::format("a snapshot of {} bytes is over the limit of {}",
                                                  plaintext.size(), kMaxSnapshotPlaintextBytes));
  }
  std::string file;
  file.reserve(kSnapshotOverheadBytes + plaintext.size());
  file.append(kSnapshotMagic, sizeof(kSnapshotMagic));
  PutU16(file, kSnapshotFormatVersion);
  PutU16(file, 0);  // reserved
  PutI64(file, meta.created_ms);
  file.append(reinterpret_cast<const char*>(key.id_.data()), key.id_.size());
  file.append(reinterpret_cast<const char*>(nonce.data()), nonce.size());
  const std::string aad = file + Owner(meta.tenant, meta.request_id);
  file.resize(kSnapshotHeaderBytes + plaintext.size() + kSnapshotTagBytes);
  auto* out = reinterpret_cast<unsigned char*>(file.data()) + kSnapshotHeaderBytes;

  CipherCtx ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  int total = 0;
  bool ok =
      ctx != nullptr &&
      EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, static_cast<int>(kSnapshotNonceBytes),
                          nullptr) == 1 &&
      EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, key.encrypt_.data(), nonce.data()) == 1 &&
      EVP_EncryptUpdate(ctx.get(), nullptr, &len,
                        reinterpret_cast<const unsigned char*>(aad.data()),
                        static_cast<int>(aad.size())) == 1 &&
      EVP_EncryptUpdate(ctx.get(), out, &len,
                        reinterpret_cast<const unsigned char*>(plaintext.data()),
                        static_cast<int>(plaintext.size())) == 1;
  total = len;
  ok = ok && EVP_EncryptFinal_ex(ctx.get(), out + total, &len) == 1;
  total += len;
  ok = ok && static_cast<size_t>(total) == plaintext.size() &&
       EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, static_cast<int>(kSnapshotTagBytes),
                           out + total) == 1;
  if (!ok) return util::InternalError("OpenSSL could not encrypt the snapshot");
  return file;
}

util::StatusOr<SnapshotHeader> ParseSnapshotHeader(std::span<const uint8_t> header) {
  if (header.size() < kSnapshotHeaderBytes) {
    return util::DataLossError(
        fmt::format("a snapshot file of {} bytes is shorter than its {}-byte "
                    "header",
                    header.size(), kSnapshotHeaderBytes));
  }
  if (std::memcmp(header.data(), kSnapshotMagic, sizeof(kSnapshotMagic)) != 0) {
    return util::DataLossError("not a strata snapshot file (its magic is not 'STRATASN')");
  }
  const uint16_t version = GetU16(header, 8);
  if (version != kSnapshotFormatVersion) {
    return util::DataLossError(
        fmt::format("snapshot format version {} is not supported (this strata reads version {})",
                    version, kSnapshotFormatVersion));
  }
  SnapshotHeader h;
  h.created_ms = GetI64(header, 12);
  std::memcpy(h.key_id.data(), header.data() + 20, h.key_id.size());
  return h;
}

util::StatusOr<OpenedSnapshot> OpenSnapshot(const SnapshotKey& key, std::string_view tenant,
                                            std::string_view request_id, std::string_view file) {
  STRATA_RETURN_IF_ERROR(CheckOwner(tenant, request_id));
  const Bytes bytes = AsBytes(file);
  STRATA_ASSIGN_OR_RETURN(const SnapshotHeader header, ParseSnapshotHeader(bytes));
  if (bytes.size() < kSnapshotOverheadBytes) {
    return util::DataLossError(
        fmt::format("a snapshot file of {} bytes is shorter than its header and tag ({} bytes)",
                    bytes.size(), kSnapshotOverheadBytes));
  }
  const size_t n = bytes.size() - kSnapshotOverheadBytes;
  if (n > kMaxSnapshotPlaintextBytes) {
    return util::DataLossError(fmt::format("a snapshot file of {} bytes is over the limit of {}",
                                           bytes.size(),
                                           kMaxSnapshotPlaintextBytes + kSnapshotOverheadBytes));
  }
  const std::string aad =
      std::string(file.substr(0, kSnapshotHeaderBytes)) + Owner(tenant, request_id);
  if (header.key_id != key.id_) {
    return util::DataLossError(fmt::format(
        "snapshot authentication failed: the file was written under another key (key id {}; this "
        "key's is {})",
        Hex(header.key_id), key.IdHex()));
  }
  const uint8_t* nonce = bytes.data() + 28;
  const uint8_t* cipher = bytes.data() + kSnapshotHeaderBytes;
  std::array<uint8_t, kSnapshotTagBytes> tag{};
  std::memcpy(tag.data(), cipher + n, tag.size());

  OpenedSnapshot out;
  out.created_ms = header.created_ms;
  out.plaintext.resize(n);
  auto* plain = reinterpret_cast<unsigned char*>(out.plaintext.data());
  CipherCtx ctx(EVP_CIPHER_CTX_new());
  int len = 0;
  bool ok = ctx != nullptr &&
            EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN,
                                static_cast<int>(kSnapshotNonceBytes), nullptr) == 1 &&
            EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, key.encrypt_.data(), nonce) == 1 &&
            EVP_DecryptUpdate(ctx.get(), nullptr, &len,
                              reinterpret_cast<const unsigned char*>(aad.data()),
                              static_cast<int>(aad.size())) == 1 &&
            EVP_DecryptUpdate(ctx.get(), plain, &len, cipher, static_cast<int>(n)) == 1;
  int total = len;
  ok = ok && EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG,
                                 static_cast<int>(kSnapshotTagBytes), tag.data()) == 1;
  // The tag is checked here: until then the plaintext is unauthenticated.
  ok = ok && EVP_DecryptFinal_ex(ctx.get(), plain + total, &len) == 1;
  total += len;
  if (!ok || static_cast<size_t>(total) != n) {
    OPENSSL_cleanse(out.plaintext.data(), out.plaintext.size());
    return util::DataLossError(
        "snapshot authentication failed: the file was changed, or it was written under another "
        "key, tenant or request id");
  }
  return out;
}

util::Status RandomNonce(std::span<uint8_t, kSnapshotNonceBytes> nonce) {
  if (RAND_bytes(nonce.data(), static_cast<int>(nonce.size())) != 1) {
    return util::InternalError("OpenSSL's random generator could not draw a snapshot nonce");
  }
  return util::OkStatus();
}

}  // namespace strata::obs
