// tests/testing/mem_file_system.h — an in-memory FileSystem for tests.
//
// Files live in a map; MapReadOnly hands out a snapshot of the bytes. Writes
// become visible when the WritableFile is closed or synced.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "util/file_system.h"

namespace strata::testing {

class MemFileSystem final : public util::FileSystem {
 public:
  util::StatusOr<std::unique_ptr<util::MappedFile>> MapReadOnly(const std::string& path) override;
  util::StatusOr<std::string> ReadFile(const std::string& path) override;
  util::StatusOr<std::unique_ptr<util::WritableFile>> NewWritableFile(
      const std::string& path) override;
  bool Exists(const std::string& path) override;
  util::StatusOr<uint64_t> FileSize(const std::string& path) override;
  util::Status CreateDirs(const std::string& path) override;
  util::Status Remove(const std::string& path) override;
  util::Status Rename(const std::string& from, const std::string& to) override;
  util::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override;

  void Put(const std::string& path, std::string bytes);

 private:
  friend class MemWritableFile;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const std::string>> files_;  // guarded by mu_
};

}  // namespace strata::testing
