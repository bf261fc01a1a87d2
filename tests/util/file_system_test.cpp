#include "util/file_system.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace strata::util {
namespace {

class PosixFileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / ("strata_fs_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
  std::unique_ptr<FileSystem> fs_ = NewPosixFileSystem();
};

TEST_F(PosixFileSystemTest, WriteAtomicThenMapAndRead) {
  ASSERT_TRUE(fs_->WriteFileAtomic(Path("a.bin"), "abc\0def").ok());
  auto mapped = fs_->MapReadOnly(Path("a.bin"));
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  EXPECT_EQ((*mapped)->bytes().size(), 3u);  // string literal stops at the NUL
  EXPECT_EQ(*fs_->ReadFile(Path("a.bin")), "abc");
  EXPECT_EQ(*fs_->FileSize(Path("a.bin")), 3u);
  EXPECT_FALSE(fs_->Exists(Path("a.bin.tmp")));
}

TEST_F(PosixFileSystemTest, AMappingSurvivesItsFileBeingTruncated) {
  const std::string path = Path("weights.bin");
  ASSERT_TRUE(fs_->WriteFileAtomic(path, std::string(256 << 10, '\x7f')).ok());
  auto mapped = fs_->MapReadOnly(path);
  ASSERT_TRUE(mapped.ok());
  const auto bytes = (*mapped)->bytes();
  volatile const uint8_t* p = bytes.data();
  EXPECT_EQ(p[200000], 0x7f);
  EXPECT_FALSE((*mapped)->faulted());
  ASSERT_EQ(::truncate(path.c_str(), 4096), 0);
  // Past the new end: without the guard this read is a SIGBUS.
  EXPECT_EQ(p[200000], 0);
  EXPECT_TRUE((*mapped)->faulted());
  EXPECT_EQ(p[100], 0x7f);  // what the file still has reads as before
}

TEST_F(PosixFileSystemTest, StatTellsAReplacedFileFromOneChangedInPlace) {
  const std::string path = Path("model.gguf");
  ASSERT_TRUE(fs_->WriteFileAtomic(path, "first").ok());
  auto mapped = fs_->MapReadOnly(path);
  ASSERT_TRUE(mapped.ok());
  const auto at_map = (*mapped)->identity();
  ASSERT_TRUE(at_map);
  auto now = fs_->Stat(path);
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(*now, *at_map);
  ASSERT_EQ(::truncate(path.c_str(), 2), 0);
  now = fs_->Stat(path);
  ASSERT_TRUE(now.ok());
  EXPECT_TRUE(at_map->ChangedInPlace(*now));
  ASSERT_TRUE(fs_->WriteFileAtomic(path, "second").ok());  // a new file renamed over it
  now = fs_->Stat(path);
  ASSERT_TRUE(now.ok());
  EXPECT_FALSE(at_map->ChangedInPlace(*now));
  EXPECT_NE(now->inode, at_map->inode);
}

TEST_F(PosixFileSystemTest, MissingFileIsNotFoundAndNamesThePath) {
  auto r = fs_->MapReadOnly(Path("missing.gguf"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("missing.gguf"), std::string::npos);
}

TEST_F(PosixFileSystemTest, EmptyFileMapsToNoBytes) {
  ASSERT_TRUE(fs_->WriteFileAtomic(Path("empty"), "").ok());
  auto mapped = fs_->MapReadOnly(Path("empty"));
  ASSERT_TRUE(mapped.ok());
  EXPECT_TRUE((*mapped)->bytes().empty());
}

TEST_F(PosixFileSystemTest, DirectoryIsNotARegularFile) {
  auto r = fs_->MapReadOnly(dir_.string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::util
