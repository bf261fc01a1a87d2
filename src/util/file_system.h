// util/file_system.h — the injected file system.
//
// Promise: every file strata reads or writes goes through a FileSystem, so
// tests can substitute an in-memory or fault-injecting one. Model weights are
// memory-mapped read-only (MapReadOnly) and never copied whole. Errors name the
// path and the OS reason.
//
// Threading: implementations are thread-safe; a MappedFile is immutable and may
// be read from any thread for as long as it lives.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace strata::util {

// Which file a path names and how it looked: a rename over the path changes
// device/inode, a write or truncate in place changes size/mtime.
struct FileIdentity {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  friend bool operator==(const FileIdentity&, const FileIdentity&) = default;
  // True when the same file (device and inode) but different content (size
  // or mtime); false when another file took the path, or nothing changed.
  bool ChangedInPlace(const FileIdentity& now) const {
    return device == now.device && inode == now.inode && !(*this == now);
  }
};

// A read-only view of a whole file; unmapped when destroyed.
class MappedFile {
 public:
  virtual ~MappedFile() = default;
  virtual std::span<const uint8_t> bytes() const = 0;
  virtual const std::string& path() const = 0;
  // Hints that the bytes will be needed soon (madvise WILLNEED); best effort.
  virtual void Prefetch() const {}
  // Hints that `range` (bytes of this file) will not be read again: the whole
  // pages inside it leave the process's memory (madvise DONTNEED; a later
  // read fetches them from the file again); best effort.
  virtual void Release(std::span<const uint8_t> /*range*/) const {}
  // The file as it was when mapped (nullopt where the file system has no such
  // notion).
  virtual std::optional<FileIdentity> identity() const { return std::nullopt; }
  // A read of the mapping found a page the file no longer has (it was
  // truncated under the mapping): such reads return zeros instead of killing
  // the process (util/fault_guard.h), and whatever used them is suspect.
  virtual bool faulted() const { return false; }
};

// Append-only output file.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status Append(std::span<const uint8_t> data) = 0;
  Status Append(std::string_view data) {
    return Append(
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  }
  // Makes everything appended so far durable (fsync).
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
  virtual uint64_t size() const = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  virtual StatusOr<std::unique_ptr<MappedFile>> MapReadOnly(const std::string& path) = 0;
  virtual StatusOr<std::string> ReadFile(const std::string& path) = 0;
  // Truncates or creates `path`.
  virtual StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) = 0;
  virtual bool Exists(const std::string& path) = 0;
  virtual StatusOr<uint64_t> FileSize(const std::string& path) = 0;
  // What `path` names now (Unimplemented where the file system cannot say).
  virtual StatusOr<FileIdentity> Stat(const std::string& path);
  virtual Status CreateDirs(const std::string& path) = 0;
  virtual Status Remove(const std::string& path) = 0;
  // Atomic within one file system (POSIX rename).
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual StatusOr<std::vector<std::string>> ListDir(const std::string& path) = 0;

  // Writes `data` to a temporary sibling, syncs it and renames it over `path`:
  // readers see the old or the new content, never a torn file.
  Status WriteFileAtomic(const std::string& path, std::string_view data);
};

// The real POSIX file system. MapReadOnly uses mmap(PROT_READ, MAP_PRIVATE)
// and guards the mapping against truncation (util/fault_guard.h).
std::unique_ptr<FileSystem> NewPosixFileSystem();

}  // namespace strata::util
