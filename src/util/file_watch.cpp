#include "util/file_watch.h"

#include <fmt/format.h>

namespace strata::util {

StatusOr<std::unique_ptr<FileWatch>> FileWatch::Start(FileSystem& fs, std::string path,
                                                      const MappedFile& mapped,
                                                      std::chrono::milliseconds period,
                                                      OnChange on_change) {
  const std::optional<FileIdentity> as = mapped.identity();
  if (!as) return UnimplementedError(fmt::format("{}: the mapping has no file identity", path));
  if (period.count() < 1) return InvalidArgumentError("the watch period must be at least 1 ms");
  return std::unique_ptr<FileWatch>(
      new FileWatch(fs, std::move(path), mapped, *as, period, std::move(on_change)));
}

FileWatch::FileWatch(FileSystem& fs, std::string path, const MappedFile& mapped,
                     FileIdentity mapped_as, std::chrono::milliseconds period, OnChange on_change)
    : fs_(fs),
      path_(std::move(path)),
      mapped_(mapped),
      mapped_as_(mapped_as),
      period_(period),
      on_change_(std::move(on_change)),
      thread_([this] { Run(); }) {}

FileWatch::~FileWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Status FileWatch::Check() const {
  auto changed = [this](std::string what) {
    return FailedPreconditionError(fmt::format("the model file {} {}; the server no longer serves "
                                               "it (restart strata to load the file as it is now)",
                                               path_, what))
        .WithReason(ErrorReason::kModelChanged);
  };
  if (mapped_.faulted()) {
    return changed("was truncated under the running server (a read found bytes missing)");
  }
  StatusOr<FileIdentity> now = fs_.Stat(path_);
  if (!now.ok())
    return changed(fmt::format("cannot be read any more ({})", now.status().message()));
  if (*now == mapped_as_) return OkStatus();
  if (mapped_as_.ChangedInPlace(*now)) {
    return changed(
        fmt::format("was modified in place (size {} -> {} bytes)", mapped_as_.size, now->size));
  }
  return changed("was replaced by another file");
}

void FileWatch::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period_, [this] { return stop_; })) {
    lock.unlock();
    Status why = Check();
    if (!why.ok()) {
      on_change_(why);
      return;
    }
    lock.lock();
  }
}

}  // namespace strata::util
