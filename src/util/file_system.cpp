#include "util/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "util/fault_guard.h"

namespace strata::util {
namespace {

Status ErrnoStatus(std::string_view what, const std::string& path, int err) {
  std::string msg(what);
  msg += " '";
  msg += path;
  msg += "': ";
  msg += std::strerror(err);
  if (err == ENOENT) return NotFoundError(std::move(msg));
  if (err == EACCES || err == EPERM) return PermissionDeniedError(std::move(msg));
  if (err == ENOSPC || err == ENOMEM || err == EMFILE)
    return ResourceExhaustedError(std::move(msg));
  return UnavailableError(std::move(msg));
}

FileIdentity IdentityOf(const struct stat& st) {
  FileIdentity id;
  id.device = static_cast<uint64_t>(st.st_dev);
  id.inode = static_cast<uint64_t>(st.st_ino);
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  return id;
}

class PosixMappedFile final : public MappedFile {
 public:
  PosixMappedFile(std::string path, const uint8_t* data, size_t size, FileIdentity identity)
      : path_(std::move(path)),
        data_(data),
        size_(size),
        identity_(identity),
        guard_(MappedRangeGuard::Register(data, size)) {}
  ~PosixMappedFile() override {
    guard_.reset();  // before the range goes
    if (size_ > 0) munmap(const_cast<uint8_t*>(data_), size_);
  }
  std::optional<FileIdentity> identity() const override { return identity_; }
  bool faulted() const override { return guard_ != nullptr && guard_->faulted(); }
  std::span<const uint8_t> bytes() const override { return {data_, size_}; }
  const std::string& path() const override { return path_; }
  void Prefetch() const override {
    if (size_ > 0) madvise(const_cast<uint8_t*>(data_), size_, MADV_WILLNEED);
  }
  void Release(std::span<const uint8_t> range) const override {
    const auto lo = reinterpret_cast<uintptr_t>(data_);
    const uintptr_t begin = std::max(reinterpret_cast<uintptr_t>(range.data()), lo);
    const uintptr_t end =
        std::min(reinterpret_cast<uintptr_t>(range.data()) + range.size(), lo + size_);
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
    if (first < last) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
  }

 private:
  const std::string path_;
  const uint8_t* const data_;
  const size_t size_;
  const FileIdentity identity_;
  std::unique_ptr<MappedRangeGuard> guard_;  // null when unguarded
};

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Append(std::span<const uint8_t> data) override {
    if (fd_ < 0) return FailedPreconditionError("write to closed file '" + path_ + "'");
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus("write", path_, errno);
      }
      done += static_cast<size_t>(n);
    }
    size_ += data.size();
    return OkStatus();
  }
  Status Sync() override {
    if (fd_ < 0) return FailedPreconditionError("sync of closed file '" + path_ + "'");
    if (::fsync(fd_) != 0) return ErrnoStatus("fsync", path_, errno);
    return OkStatus();
  }
  Status Close() override {
    if (fd_ < 0) return OkStatus();
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return ErrnoStatus("close", path_, errno);
    return OkStatus();
  }
  uint64_t size() const override { return size_; }

 private:
  const std::string path_;
  int fd_;
  uint64_t size_ = 0;
};

class PosixFileSystem final : public FileSystem {
 public:
  StatusOr<std::unique_ptr<MappedFile>> MapReadOnly(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("cannot open", path, errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return ErrnoStatus("cannot stat", path, err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return InvalidArgumentError("'" + path + "' is not a regular file");
    }
    const size_t size = static_cast<size_t>(st.st_size);
    const uint8_t* data = nullptr;
    if (size > 0) {
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        int err = errno;
        ::close(fd);
        return ErrnoStatus("cannot mmap", path, err);
      }
      data = static_cast<const uint8_t*>(p);
    }
    ::close(fd);  // the mapping keeps the file alive
    return std::unique_ptr<MappedFile>(
        std::make_unique<PosixMappedFile>(path, data, size, IdentityOf(st)));
  }

  StatusOr<std::string> ReadFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("cannot open", path, errno);
    std::string out;
    char buf[65536];
    while (true) {
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        ::close(fd);
        return ErrnoStatus("cannot read", path, err);
      }
      if (n == 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return out;
  }

  StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoStatus("cannot create", path, errno);
    return std::unique_ptr<WritableFile>(std::make_unique<PosixWritableFile>(path, fd));
  }

  bool Exists(const std::string& path) override {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
  }

  StatusOr<uint64_t> FileSize(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("cannot stat", path, errno);
    return static_cast<uint64_t>(st.st_size);
  }

  StatusOr<FileIdentity> Stat(const std::string& path) override {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return ErrnoStatus("cannot stat", path, errno);
    return IdentityOf(st);
  }

  Status CreateDirs(const std::string& path) override {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec) return ErrnoStatus("cannot create directory", path, ec.value());
    return OkStatus();
  }

  Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return ErrnoStatus("cannot remove", path, errno);
    return OkStatus();
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus("cannot rename to '" + to + "'", from, errno);
    }
    return OkStatus();
  }

  StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return ErrnoStatus("cannot list", path, errno);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(dir)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
    }
    ::closedir(dir);
    return names;
  }
};

}  // namespace

StatusOr<FileIdentity> FileSystem::Stat(const std::string& path) {
  return UnimplementedError("this file system cannot stat '" + path + "'");
}

Status FileSystem::WriteFileAtomic(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp";
  STRATA_ASSIGN_OR_RETURN(auto file, NewWritableFile(tmp));
  STRATA_RETURN_IF_ERROR(file->Append(data));
  STRATA_RETURN_IF_ERROR(file->Sync());
  STRATA_RETURN_IF_ERROR(file->Close());
  return Rename(tmp, path);
}

std::unique_ptr<FileSystem> NewPosixFileSystem() { return std::make_unique<PosixFileSystem>(); }

}  // namespace strata::util
