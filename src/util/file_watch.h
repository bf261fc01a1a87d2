// util/file_watch.h — noticing that a mapped file changed under its mapping.
//
// Promise: while the watch lives, it checks every `period` whether the path
// still names the file as it was mapped (device, inode, size, mtime) and
// whether a read of the mapping hit a page the file no longer has
// (MappedFile::faulted); the first time either is so it calls `on_change`
// once, with FailedPrecondition (reason model_changed) saying what changed,
// and stops checking. A file replaced by rename (a new inode at the path) is
// reported too: the mapping still reads the old file, intact, but it is no
// longer what the path names. A path that cannot be stat'ed (removed) is
// reported the same way.
//
// Threading: one background thread, started by Start and joined by the
// destructor (which returns within one period at most, at once usually).
// `on_change` runs on that thread.
//
// Usage:
//   auto watch = util::FileWatch::Start(fs, path, mapped, std::chrono::seconds(1),
//                                       [&](const util::Status& why) { Refuse(why); });
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "util/file_system.h"
#include "util/status.h"

namespace strata::util {

class FileWatch {
 public:
  using OnChange = std::function<void(const Status& why)>;
  // `fs` and `mapped` are borrowed and must outlive the watch. Unimplemented
  // when the mapping has no identity (nothing to compare against).
  static StatusOr<std::unique_ptr<FileWatch>> Start(FileSystem& fs, std::string path,
                                                    const MappedFile& mapped,
                                                    std::chrono::milliseconds period,
                                                    OnChange on_change);
  ~FileWatch();
  FileWatch(const FileWatch&) = delete;
  FileWatch& operator=(const FileWatch&) = delete;

  // What changed, or OK while nothing has. Once per period at most; also
  // callable directly (tests).
  Status Check() const;

 private:
  FileWatch(FileSystem& fs, std::string path, const MappedFile& mapped, FileIdentity mapped_as,
            std::chrono::milliseconds period, OnChange on_change);
  void Run();

  FileSystem& fs_;
  const std::string path_;
  const MappedFile& mapped_;
  const FileIdentity mapped_as_;
  const std::chrono::milliseconds period_;
  const OnChange on_change_;
  std::mutex mu_;
  std::condition_variable cv_;  // stop
  bool stop_ = false;           // guarded by mu_
  std::thread thread_;          // last: started after the rest
};

}  // namespace strata::util
