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
