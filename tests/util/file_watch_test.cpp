#include "util/file_watch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

namespace strata::util {
namespace {

class FileWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("strata_watch_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "model.gguf").string();
    ASSERT_TRUE(fs_->WriteFileAtomic(path_, std::string(64 << 10, 'w')).ok());
    auto mapped = fs_->MapReadOnly(path_);
    ASSERT_TRUE(mapped.ok());
    mapped_ = std::move(mapped).value();
  }
  void TearDown() override {
    mapped_.reset();
    std::filesystem::remove_all(dir_);
  }
  // Starts a watch that records the first change.
  std::unique_ptr<FileWatch> Watch() {
    auto w = FileWatch::Start(*fs_, path_, *mapped_, std::chrono::milliseconds(5),
                              [this](const Status& why) {
                                std::lock_guard<std::mutex> lock(mu_);
                                why_ = why;
                                ++calls_;
                                cv_.notify_all();
                              });
    EXPECT_TRUE(w.ok()) << w.status().ToString();
    return w.ok() ? std::move(w).value() : nullptr;
  }
  Status AwaitChange() {
    std::unique_lock<std::mutex> lock(mu_);
    EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(10), [this] { return calls_ > 0; }));
    return why_;
  }

  std::filesystem::path dir_;
  std::string path_;
  std::unique_ptr<FileSystem> fs_ = NewPosixFileSystem();
  std::unique_ptr<MappedFile> mapped_;
  std::mutex mu_;
  std::condition_variable cv_;
  Status why_;     // guarded by mu_
  int calls_ = 0;  // guarded by mu_
};

TEST_F(FileWatchTest, AnUnchangedFileIsQuiet) {
  auto w = Watch();
  ASSERT_NE(w, nullptr);
  EXPECT_TRUE(w->Check().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(calls_, 0);
}

TEST_F(FileWatchTest, ATruncationInPlaceIsReportedOnceWithItsReason) {
  auto w = Watch();
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(::truncate(path_.c_str(), 4096), 0);
  const Status why = AwaitChange();
  EXPECT_EQ(why.reason(), ErrorReason::kModelChanged);
  EXPECT_NE(why.message().find("modified in place"), std::string::npos) << why.message();
  EXPECT_NE(why.message().find(path_), std::string::npos);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(calls_, 1);  // the watch stops after the first report
}

TEST_F(FileWatchTest, AReadPastATruncationIsReportedAsAFault) {
  auto w = FileWatch::Start(*fs_, path_, *mapped_, std::chrono::hours(1), [](const Status&) {});
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(::truncate(path_.c_str(), 4096), 0);
  volatile const uint8_t* p = mapped_->bytes().data();
  EXPECT_EQ(p[60000], 0);  // a zero page instead of SIGBUS
  const Status why = (*w)->Check();
  EXPECT_EQ(why.reason(), ErrorReason::kModelChanged);
  EXPECT_NE(why.message().find("truncated"), std::string::npos) << why.message();
}

TEST_F(FileWatchTest, AReplacedOrRemovedFileIsReported) {
  auto w = Watch();
  ASSERT_NE(w, nullptr);
  ASSERT_TRUE(fs_->WriteFileAtomic(path_, "another model").ok());
  EXPECT_NE(AwaitChange().message().find("replaced"), std::string::npos);
  ASSERT_TRUE(fs_->Remove(path_).ok());
  EXPECT_NE((*w).Check().message().find("cannot be read"), std::string::npos);
}

}  // namespace
}  // namespace strata::util
