// obs/digest.h — the SHA-256 of a whole file (obs/crypto.h's), computed a
// slice at a time.
//
// Promise: a file's digest here equals what `sha256sum FILE` prints.
// FileDigest hashes a memory-mapped
// file in slices of a caller-chosen size, so that the digest of a model of
// many gigabytes is computed in the background without holding a thread for
// more than one slice, and start-up never waits for it.
//
// Threading: Step is called by one thread at a time; hex() and done() are
// thread-safe.
//
// Usage:
//   FileDigest d(std::move(mapped));
//   while (!d.Step(16 << 20)) {}
//   std::optional<std::string> sum = d.hex();  // as sha256sum prints it
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "obs/crypto.h"
#include "util/file_system.h"

namespace strata::obs {

// The SHA-256 of the bytes of `file`, hashed a slice at a time.
class FileDigest {
 public:
  explicit FileDigest(std::unique_ptr<util::MappedFile> file);
  ~FileDigest();

  // Hashes up to `max_bytes` (at least 1) more of the file; true once the
  // whole file is hashed (then it does nothing more).
  bool Step(size_t max_bytes);
  // The file's digest in lower-case hex; nullopt until Step has hashed it all.
  std::optional<std::string> hex() const;
  bool done() const { return done_.load(std::memory_order_acquire); }
  const std::string& path() const { return file_->path(); }
  const util::MappedFile& file() const { return *file_; }

 private:
  const std::unique_ptr<util::MappedFile> file_;
  Sha256Hasher sha_;  // Step's thread only
  size_t next_ = 0;   // Step's thread only: the first byte not yet hashed
  std::atomic<bool> done_{false};
  mutable std::mutex mu_;
  std::string hex_;  // guarded by mu_; set once, with done_
};

}  // namespace strata::obs
