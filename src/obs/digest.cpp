#include "obs/digest.h"

#include <algorithm>

#include "util/status.h"

namespace strata::obs {

FileDigest::FileDigest(std::unique_ptr<util::MappedFile> file) : file_(std::move(file)) {}
FileDigest::~FileDigest() = default;

bool FileDigest::Step(size_t max_bytes) {
  if (done()) return true;
  const std::span<const uint8_t> bytes = file_->bytes();
  const size_t n = std::min(std::max<size_t>(max_bytes, 1), bytes.size() - next_);
  sha_.Update(std::string_view(reinterpret_cast<const char*>(bytes.data()) + next_, n));
  next_ += n;
  if (next_ < bytes.size()) return false;
  const auto digest = sha_.Finish();
  {
    std::lock_guard<std::mutex> lock(mu_);
    hex_ = Hex(digest);
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
