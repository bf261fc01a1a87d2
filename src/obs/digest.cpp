#include "obs/digest.h"

#include <openssl/evp.h>

#include <algorithm>

#include "util/status.h"

namespace strata::obs {

struct Sha256::Ctx {
  EVP_MD_CTX* md = nullptr;
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  ctx_->md = EVP_MD_CTX_new();
  // Only allocation can fail here, and SHA-256 is always available.
  STRATA_CHECK_MSG(ctx_->md != nullptr && EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) == 1,
                   "OpenSSL could not start a SHA-256");
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_->md); }

void Sha256::Update(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return;
  STRATA_CHECK(EVP_DigestUpdate(ctx_->md, bytes.data(), bytes.size()) == 1);
}

std::array<uint8_t, kSha256Bytes> Sha256::Finish() {
  std::array<uint8_t, kSha256Bytes> out{};
  unsigned int n = 0;
  STRATA_CHECK(EVP_DigestFinal_ex(ctx_->md, out.data(), &n) == 1 && n == kSha256Bytes);
  return out;
}

std::string HexEncode(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const uint8_t b : bytes) {
    out.push_back(kDigits[b >> 4]);
    out.push_back(kDigits[b & 15]);
  }
  return out;
}

std::string Sha256Hex(std::span<const uint8_t> bytes) {
  Sha256 sha;
  sha.Update(bytes);
  const auto digest = sha.Finish();
  return HexEncode(digest);
}

FileDigest::FileDigest(std::unique_ptr<util::MappedFile> file) : file_(std::move(file)) {}
FileDigest::~FileDigest() = default;

bool FileDigest::Step(size_t max_bytes) {
  if (done()) return true;
  const std::span<const uint8_t> bytes = file_->bytes();
  const size_t n = std::min(std::max<size_t>(max_bytes, 1), bytes.size() - next_);
  sha_.Update(bytes.subspan(next_, n));
  next_ += n;
  if (next_ < bytes.size()) return false;
  const auto digest = sha_.Finish();
  {
    std::lock_guard<std::mutex> lock(mu_);
    hex_ = HexEncode(digest);
  }
  done_.store(true, std::memory_order_release);
  return true;
}

std::optional<std::string> FileDigest::hex() const {
  if (!done()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  return hex_;
}

}  // namespace strata::obs
