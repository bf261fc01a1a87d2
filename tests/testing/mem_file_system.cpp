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

class MemWritableFile final : public util::WritableFile {
 public:
  MemWritableFile(MemFileSystem& fs, std::string path) : fs_(fs), path_(std::move(path)) {}
  util::Status Append(std::span<const uint8_t> data) override {
    buf_.append(reinterpret_cast<const char*>(data.data()), data.size());
    return util::OkStatus();
  }
  util::Status Sync() override {
    fs_.Put(path_, buf_);
    return util::OkStatus();
  }
  util::Status Close() override { return Sync(); }
  uint64_t size() const override { return buf_.size(); }

 private:
  MemFileSystem& fs_;
  std::string path_;
  std::string buf_;
};

void MemFileSystem::Put(const std::string& path, std::string bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[path] = std::make_shared<const std::string>(std::move(bytes));
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
  Put(path, "");
  return std::unique_ptr<util::WritableFile>(std::make_unique<MemWritableFile>(*this, path));
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
  return util::OkStatus();
}

util::Status MemFileSystem::Rename(const std::string& from, const std::string& to) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(from);
  if (it == files_.end()) return util::NotFoundError("no such file '" + from + "'");
  files_[to] = it->second;
  files_.erase(it);
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
