#include "testing/mem_file_system.h"

namespace strata::testing {
namespace {

class MemMappedFile final : public util::MappedFile {
 public:
  MemMappedFile(std::string path, std::shared_ptr<const std::string> data)
      : path_(std::move(path)), data_(std::move(data)) {}
  std::span<const uint8_t> bytes() const override {
    return {reinterpret_cast<const uint8_t*>(data_->data()), data_->size()};
  }
  const std::string& path() const override { return path_; }

 private:
  std::string path_;
  std::shared_ptr<const std::string> data_;
};

}  // namespace

// Its bytes are its own until Sync or Close publishes them.
class MemWritableFile final : public util::WritableFile {
 public:
  MemWritableFile(MemFileSystem& fs, std::string path, uint64_t generation)
      : fs_(fs), path_(std::move(path)), generation_(generation) {}
  ~MemWritableFile() override {
    std::lock_guard<std::mutex> lock(fs_.mu_);
    auto it = fs_.open_.find(path_);
    if (it != fs_.open_.end() && it->second == this) fs_.open_.erase(it);
  }
  util::Status Append(std::span<const uint8_t> data) override {
    std::lock_guard<std::mutex> lock(fs_.mu_);
    if (generation_ != fs_.generation_) return Dead();
    STRATA_RETURN_IF_ERROR(fs_.DiskError());
    buf_.append(reinterpret_cast<const char*>(data.data()), data.size());
    return util::OkStatus();
  }
  util::Status Sync() override {
    std::lock_guard<std::mutex> lock(fs_.mu_);
    if (generation_ != fs_.generation_) return Dead();
    STRATA_RETURN_IF_ERROR(fs_.DiskError());
    fs_.files_[path_] = std::make_shared<const std::string>(buf_);
    fs_.synced_[path_] = buf_;
    synced_bytes_ = buf_.size();
    return util::OkStatus();
  }
  util::Status Close() override {
    std::lock_guard<std::mutex> lock(fs_.mu_);
    if (generation_ != fs_.generation_) return Dead();
    fs_.files_[path_] = std::make_shared<const std::string>(buf_);
    return util::OkStatus();
  }
  uint64_t size() const override { return buf_.size(); }

 private:
  friend class MemFileSystem;
  util::Status Dead() const {
    return util::UnavailableError("'" + path_ + "': the file system lost power under this file");
  }
  MemFileSystem& fs_;
  const std::string path_;
  const uint64_t generation_;
  std::string buf_;          // guarded by fs_.mu_
  size_t synced_bytes_ = 0;  // guarded by fs_.mu_
};

util::Status MemFileSystem::DiskError() { return disk_error_; }

void MemFileSystem::Put(const std::string& path, std::string bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  synced_[path] = bytes;
  files_[path] = std::make_shared<const std::string>(std::move(bytes));
}

void MemFileSystem::DropUnsyncedData(size_t keep_unsynced_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [path, data] : files_) {
    auto synced = synced_.find(path);
    std::string kept = synced == synced_.end() ? std::string() : synced->second;
    auto open = open_.find(path);
    if (open != open_.end() && open->second->generation_ == generation_) {
      const std::string& buf = open->second->buf_;
      const size_t from = open->second->synced_bytes_;
      if (buf.size() > from)
        kept += buf.substr(from, std::min(keep_unsynced_bytes, buf.size() - from));
    }
    data = std::make_shared<const std::string>(std::move(kept));
  }
  ++generation_;
  open_.clear();
}

void MemFileSystem::SetDiskError(util::Status error) {
  std::lock_guard<std::mutex> lock(mu_);
  disk_error_ = std::move(error);
}

util::StatusOr<std::unique_ptr<util::MappedFile>> MemFileSystem::MapReadOnly(
    const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return util::NotFoundError("cannot open '" + path + "': no such file");
  return std::unique_ptr<util::MappedFile>(std::make_unique<MemMappedFile>(path, it->second));
}

util::StatusOr<std::string> MemFileSystem::ReadFile(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return util::NotFoundError("cannot open '" + path + "': no such file");
  return *it->second;
}

util::StatusOr<std::unique_ptr<util::WritableFile>> MemFileSystem::NewWritableFile(
    const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  STRATA_RETURN_IF_ERROR(DiskError());
  files_[path] = std::make_shared<const std::string>();
  synced_.erase(path);
  auto file = std::make_unique<MemWritableFile>(*this, path, generation_);
  open_[path] = file.get();
  return std::unique_ptr<util::WritableFile>(std::move(file));
}

bool MemFileSystem::Exists(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  return files_.count(path) != 0;
}

util::StatusOr<uint64_t> MemFileSystem::FileSize(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(path);
  if (it == files_.end()) return util::NotFoundError("no such file '" + path + "'");
  return static_cast<uint64_t>(it->second->size());
}

util::Status MemFileSystem::CreateDirs(const std::string&) { return util::OkStatus(); }

util::Status MemFileSystem::Remove(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (files_.erase(path) == 0) return util::NotFoundError("no such file '" + path + "'");
  synced_.erase(path);
  return util::OkStatus();
}

// The rename itself is durable at once (as on a journalled file system).
// Unlike a POSIX descriptor, a writer still open on `from` does not follow
// the file: close a file before renaming it.
util::Status MemFileSystem::Rename(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(from);
  if (it == files_.end()) return util::NotFoundError("no such file '" + from + "'");
  files_[to] = it->second;
  files_.erase(it);
  auto synced = synced_.find(from);
  if (synced != synced_.end()) {
    synced_[to] = std::move(synced->second);
    synced_.erase(synced);
  } else {
    synced_.erase(to);
  }
  open_.erase(from);
  return util::OkStatus();
}

util::StatusOr<std::vector<std::string>> MemFileSystem::ListDir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  const std::string prefix = path.empty() || path.back() == '/' ? path : path + "/";
  for (const auto& [name, _] : files_) {
    if (name.rfind(prefix, 0) == 0 && name.find('/', prefix.size()) == std::string::npos) {
      out.push_back(name.substr(prefix.size()));
    }
  }
  return out;
}

}  // namespace strata::testing
