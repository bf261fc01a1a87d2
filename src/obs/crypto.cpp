#include "obs/crypto.h"

#include <openssl/bio.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <openssl/pem.h>

#include <fmt/format.h>

namespace strata::obs {
namespace {

constexpr size_t kMinHmacKeyBytes = 32;
constexpr size_t kMaxKeyFileBytes = 64 << 10;  // a key file is small; more is a wrong file

struct PkeyDeleter {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using Pkey = std::unique_ptr<EVP_PKEY, PkeyDeleter>;
struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

// SHA-256 as OpenSSL 3 fetches it. EVP_sha256() is fetched again on every
// use (a provider lookup under a lock, several times the cost of hashing a
// short record); fetched once, it is immutable and shared by every thread.
const EVP_MD* Sha256Md() {
  static const EVP_MD* const md = [] {
    EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA2-256", nullptr);
    STRATA_CHECK(fetched != nullptr);
    return fetched;
  }();
  return md;
}

// HMAC as OpenSSL 3 fetches it, once (as Sha256Md).
EVP_MAC* HmacAlgorithm() {
  static EVP_MAC* const mac = [] {
    EVP_MAC* fetched = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    STRATA_CHECK(fetched != nullptr);
    return fetched;
  }();
  return mac;
}

struct MacCtxDeleter {
  void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
};

std::string KeyIdOf(std::string_view material) {
  const Sha256Digest d = Sha256(material);
  return Hex(std::span<const uint8_t>(d.data(), 8));
}

bool LooksLikePem(std::string_view text) { return text.find("-----BEGIN ") != std::string::npos; }

// The PEM private key in `text`, or null.
Pkey ReadPrivateKey(std::string_view text) {
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
  if (!bio) return nullptr;
  return Pkey(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
}

// The PEM public key in `text`, or null.
Pkey ReadPublicKey(std::string_view text) {
  std::unique_ptr<BIO, BioDeleter> bio(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
  if (!bio) return nullptr;
  return Pkey(PEM_read_bio_PUBKEY(bio.get(), nullptr, nullptr, nullptr));
}

std::optional<std::string> RawPublicKey(EVP_PKEY* key) {
  size_t len = 0;
  if (EVP_PKEY_get_raw_public_key(key, nullptr, &len) != 1) return std::nullopt;
  std::string raw(len, '\0');
  if (EVP_PKEY_get_raw_public_key(key, reinterpret_cast<unsigned char*>(raw.data()), &len) != 1) {
    return std::nullopt;
  }
  raw.resize(len);
  return raw;
}

util::StatusOr<std::string> ReadKeyFile(util::FileSystem& fs, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(uint64_t size, fs.FileSize(path));
  if (size > kMaxKeyFileBytes) {
    return util::InvalidArgumentError(fmt::format(
        "key file '{}' has {} bytes: not a key (at most {})", path, size, kMaxKeyFileBytes));
  }
  return fs.ReadFile(path);
}

// The secret of an HMAC key file: its bytes less one line ending.
util::StatusOr<std::string> HmacSecret(std::string text, const std::string& path) {
  if (text.size() >= 2 && text.compare(text.size() - 2, 2, "\r\n") == 0) {
    text.resize(text.size() - 2);
  } else if (!text.empty() && text.back() == '\n') {
    text.pop_back();
  }
  if (text.size() < kMinHmacKeyBytes) {
    return util::InvalidArgumentError(fmt::format(
        "key file '{}' holds {} bytes: an HMAC secret needs at least {} (e.g. `openssl rand -hex "
        "32`)",
        path, text.size(), kMinHmacKeyBytes));
  }
  return text;
}

class HmacSigner final : public Signer, public Verifier {
 public:
  explicit HmacSigner(std::string_view secret) : key_(secret), id_(HmacKeyId(secret)) {}
  SignatureAlgorithm algorithm() const override { return SignatureAlgorithm::kHmacSha256; }
  const std::string& key_id() const override { return id_; }
  std::string Sign(std::string_view message) const override {
    const Sha256Digest d = key_.Mac(message);
    return std::string(reinterpret_cast<const char*>(d.data()), d.size());
  }
  bool Verify(std::string_view message, std::string_view signature) const override {
    return ConstantTimeEqual(Sign(message), signature);
  }

 private:
  const HmacSha256Key key_;
  const std::string id_;
};

class Ed25519Signer final : public Signer {
 public:
  Ed25519Signer(Pkey key, std::string id) : key_(std::move(key)), id_(std::move(id)) {}
  SignatureAlgorithm algorithm() const override { return SignatureAlgorithm::kEd25519; }
  const std::string& key_id() const override { return id_; }
  std::string Sign(std::string_view message) const override {
    std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx(EVP_MD_CTX_new());
    std::string sig(64, '\0');
    size_t len = sig.size();
    // Ed25519 signing of a valid key cannot fail but for allocation.
    STRATA_CHECK(ctx && EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) == 1);
    STRATA_CHECK(EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(sig.data()), &len,
                                reinterpret_cast<const unsigned char*>(message.data()),
                                message.size()) == 1);
    sig.resize(len);
    return sig;
  }

 private:
  const Pkey key_;
  const std::string id_;
};

class Ed25519Verifier final : public Verifier {
 public:
  Ed25519Verifier(Pkey key, std::string id) : key_(std::move(key)), id_(std::move(id)) {}
  SignatureAlgorithm algorithm() const override { return SignatureAlgorithm::kEd25519; }
  const std::string& key_id() const override { return id_; }
  bool Verify(std::string_view message, std::string_view signature) const override {
    if (signature.size() != 64) return false;
    std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx(EVP_MD_CTX_new());
    if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key_.get()) != 1) {
      return false;
    }
    return EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                            signature.size(),
                            reinterpret_cast<const unsigned char*>(message.data()),
                            message.size()) == 1;
  }

 private:
  const Pkey key_;
  const std::string id_;
};

util::Status NotEd25519(const std::string& path) {
  return util::InvalidArgumentError(fmt::format(
      "key file '{}' holds a PEM key that is not Ed25519 (use `openssl genpkey -algorithm "
      "ed25519`, or an HMAC secret of at least 32 bytes)",
      path));
}

}  // namespace

struct Sha256Hasher::Ctx {
  std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> md{EVP_MD_CTX_new()};
};

Sha256Hasher::Sha256Hasher() : ctx_(std::make_unique<Ctx>()) {
  STRATA_CHECK(ctx_->md && EVP_DigestInit_ex(ctx_->md.get(), Sha256Md(), nullptr) == 1);
}

Sha256Hasher::~Sha256Hasher() = default;

void Sha256Hasher::Update(std::string_view data) {
  if (data.empty()) return;
  STRATA_CHECK(EVP_DigestUpdate(ctx_->md.get(), data.data(), data.size()) == 1);
}

Sha256Digest Sha256Hasher::Finish() {
  Sha256Digest d{};
  unsigned int len = 0;
  STRATA_CHECK(EVP_DigestFinal_ex(ctx_->md.get(), d.data(), &len) == 1 && len == d.size());
  STRATA_CHECK(EVP_DigestInit_ex(ctx_->md.get(), Sha256Md(), nullptr) == 1);
  return d;
}

Sha256Digest Sha256(std::string_view data) {
  Sha256Digest d{};
  unsigned int len = 0;
  STRATA_CHECK(EVP_Digest(data.data(), data.size(), d.data(), &len, Sha256Md(), nullptr) == 1 &&
               len == d.size());
  return d;
}

Sha256Digest HmacSha256(std::span<const uint8_t> key, std::string_view data) {
  Sha256Digest d{};
  unsigned int len = 0;
  // An empty key is a valid HMAC key; OpenSSL wants a non-null pointer for it.
  static constexpr uint8_t kEmpty = 0;
  STRATA_CHECK(HMAC(Sha256Md(), key.empty() ? &kEmpty : key.data(), static_cast<int>(key.size()),
                    reinterpret_cast<const unsigned char*>(data.data()), data.size(), d.data(),
                    &len) != nullptr &&
               len == d.size());
  return d;
}

// A keyed context nobody uses but to copy from: copying is a read.
struct HmacSha256Key::Ctx {
  std::unique_ptr<EVP_MAC_CTX, MacCtxDeleter> keyed;
};

HmacSha256Key::HmacSha256Key(std::string_view secret) : ctx_(std::make_unique<Ctx>()) {
  ctx_->keyed.reset(EVP_MAC_CTX_new(HmacAlgorithm()));
  char digest[] = "SHA2-256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_construct_end()};
  static constexpr uint8_t kEmpty = 0;
  STRATA_CHECK(
      ctx_->keyed &&
      EVP_MAC_init(ctx_->keyed.get(),
                   secret.empty() ? &kEmpty : reinterpret_cast<const unsigned char*>(secret.data()),
                   secret.size(), params) == 1);
}

HmacSha256Key::~HmacSha256Key() = default;

Sha256Digest HmacSha256Key::Mac(std::string_view data) const {
  std::unique_ptr<EVP_MAC_CTX, MacCtxDeleter> c(EVP_MAC_CTX_dup(ctx_->keyed.get()));
  Sha256Digest d{};
  size_t len = 0;
  STRATA_CHECK(c &&
               EVP_MAC_update(c.get(), reinterpret_cast<const unsigned char*>(data.data()),
                              data.size()) == 1 &&
               EVP_MAC_final(c.get(), d.data(), &len, d.size()) == 1 && len == d.size());
  return d;
}

std::string Hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

std::optional<std::string> Unhex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<char>((hi << 4) | lo);
  }
  return out;
}

bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string_view SignatureAlgorithmName(SignatureAlgorithm alg) {
  return alg == SignatureAlgorithm::kEd25519 ? "ed25519" : "hmac-sha256";
}

std::optional<SignatureAlgorithm> ParseSignatureAlgorithm(std::string_view name) {
  if (name == "ed25519") return SignatureAlgorithm::kEd25519;
  if (name == "hmac-sha256") return SignatureAlgorithm::kHmacSha256;
  return std::nullopt;
}

std::string HmacKeyId(std::string_view secret) {
  std::string material("strata-hmac-key-id");
  material.push_back('\0');
  material.append(secret);
  return KeyIdOf(material);
}

util::StatusOr<std::unique_ptr<Signer>> LoadSigner(util::FileSystem& fs, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadKeyFile(fs, path));
  if (!LooksLikePem(text)) {
    STRATA_ASSIGN_OR_RETURN(std::string secret, HmacSecret(std::move(text), path));
    return std::unique_ptr<Signer>(std::make_unique<HmacSigner>(std::move(secret)));
  }
  Pkey key = ReadPrivateKey(text);
  if (!key) {
    return util::InvalidArgumentError(fmt::format(
        "key file '{}' is PEM but holds no private key: checkpoints are signed with the private "
        "key (the public key is for `strata audit verify`)",
        path));
  }
  if (EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519) return NotEd25519(path);
  auto raw = RawPublicKey(key.get());
  if (!raw) return NotEd25519(path);
  const std::string id = KeyIdOf(*raw);
  return std::unique_ptr<Signer>(std::make_unique<Ed25519Signer>(std::move(key), id));
}

util::StatusOr<std::unique_ptr<Verifier>> LoadVerifier(util::FileSystem& fs,
                                                       const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadKeyFile(fs, path));
  if (!LooksLikePem(text)) {
    STRATA_ASSIGN_OR_RETURN(std::string secret, HmacSecret(std::move(text), path));
    return std::unique_ptr<Verifier>(std::make_unique<HmacSigner>(std::move(secret)));
  }
  Pkey key = ReadPublicKey(text);
  if (!key) key = ReadPrivateKey(text);
  if (!key) {
    return util::InvalidArgumentError(
        fmt::format("key file '{}' is PEM but holds no public or private key", path));
  }
  if (EVP_PKEY_get_id(key.get()) != EVP_PKEY_ED25519) return NotEd25519(path);
  auto raw = RawPublicKey(key.get());
  if (!raw) return NotEd25519(path);
  const std::string id = KeyIdOf(*raw);
  return std::unique_ptr<Verifier>(std::make_unique<Ed25519Verifier>(std::move(key), id));
}

util::StatusOr<std::string> LoadHmacKey(util::FileSystem& fs, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, ReadKeyFile(fs, path));
  if (LooksLikePem(text)) {
    return util::InvalidArgumentError(fmt::format(
        "key file '{}' holds a PEM key: the watermark is an HMAC-SHA256 and needs a secret of at "
        "least 32 bytes (e.g. `openssl rand -hex 32`)",
        path));
  }
  return HmacSecret(std::move(text), path);
}

}  // namespace strata::obs
