// tests/testing/mem_file_system.h — an in-memory FileSystem for tests, and
// the faults of a real disk on demand.
//
// Files live in a map; MapReadOnly hands out a snapshot of the bytes. Writes
// become visible when the WritableFile is closed or synced, and durable only
// when synced: DropUnsyncedData() is a power cut (every file goes back to
// what was last synced, and every file open at that moment is dead: what is
// written to it later is ignored). SetDiskError(status) makes creating,
// appending to and syncing files fail with `status` until it is cleared
// (reads, renames and removes still work), as a full or failing disk does.
//
// Threading: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "util/file_system.h"

namespace strata::testing {

class MemWritableFile;

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

  // Sets a file's content (visible and durable).
  void Put(const std::string& path, std::string bytes);

  // A power cut: each file goes back to its last synced content (a file
  // never synced becomes empty), keeping at most `keep_unsynced_bytes` of
  // what an open file had written since (a partly written last page).
  // Files open now are dead from here on: their writes are ignored.
  void DropUnsyncedData(size_t keep_unsynced_bytes = 0);

  // From now on NewWritableFile, Append and Sync fail with `error`; an OK
  // status clears it.
  void SetDiskError(util::Status error);

 private:
  friend class MemWritableFile;
  util::Status DiskError();  // under mu_
  std::mutex mu_;
  // Guarded by mu_:
  std::map<std::string, std::shared_ptr<const std::string>> files_;  // what readers see
  std::map<std::string, std::string> synced_;                        // what survives a power cut
  std::map<std::string, MemWritableFile*> open_;  // the writer of each path open now
  uint64_t generation_ = 0;                       // power cuts so far
  util::Status disk_error_;
};

}  // namespace strata::testing
