// The local models' flags of `strata serve` (cli/serve_models.h): sizes,
// names and files, on an in-memory file system.
#include "cli/serve_models.h"

#include <gtest/gtest.h>

#include "testing/mem_file_system.h"
#include "util/log.h"

namespace strata::cli {
namespace {

TEST(ParseByteSize, ReadsNumbersWithBinaryUnits) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("12GiB"), 12ull << 30);
  EXPECT_EQ(*ParseByteSize("12G"), 12ull << 30);
  EXPECT_EQ(*ParseByteSize("12gb"), 12ull << 30);
  EXPECT_EQ(*ParseByteSize("512M"), 512ull << 20);
  EXPECT_EQ(*ParseByteSize("1.5K"), 1536u);
  EXPECT_EQ(*ParseByteSize("2T"), 2ull << 40);
  EXPECT_EQ(*ParseByteSize("64 MiB"), 64ull << 20);
  EXPECT_EQ(*ParseByteSize("100B"), 100u);
  for (const char* bad :
       {"", "0", "-1", "12XB", "GiB", "1e30", "nan", "inf", "12 parsecs", "0.4"}) {
    const auto r = ParseByteSize(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), util::StatusCode::kInvalidArgument) << bad;
  }
}

class LocalModelFilesTest : public ::testing::Test {
 protected:
  util::StatusOr<std::vector<LocalModelFile>> Files(const ServeFlags& f) {
    Env env;
    env.fs = &fs_;
    return LocalModelFiles(env, f, *log_);
  }
  testing::MemFileSystem fs_;
  std::unique_ptr<util::Logger> log_ = util::NewStderrLogger(util::LogLevel::kOff);
};

TEST_F(LocalModelFilesTest, NamesComeFromTheFlagOrTheFile) {
  ServeFlags f;
  f.model = {"chat=/m/llama.gguf", "/m/qwen-7b.gguf", "odd=name.gguf", "code=rel/x=y.gguf"};
  auto files = Files(f);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->size(), 4u);
  EXPECT_EQ((*files)[0].name, "chat");
  EXPECT_EQ((*files)[0].path, "/m/llama.gguf");
  EXPECT_EQ((*files)[1].name, "qwen-7b");
  EXPECT_EQ((*files)[1].path, "/m/qwen-7b.gguf");
  // NAME=FILE whenever what precedes "=" is no path.
  EXPECT_EQ((*files)[2].name, "odd");
  EXPECT_EQ((*files)[2].path, "name.gguf");
  EXPECT_EQ((*files)[3].name, "code");
  EXPECT_EQ((*files)[3].path, "rel/x=y.gguf");
}

TEST_F(LocalModelFilesTest, TheAliasNamesAnUnnamedDefaultModel) {
  ServeFlags f;
  f.model = {"/m/llama.gguf", "b=/m/b.gguf"};
  f.aliases = {"gpt-4o", "other"};
  auto files = Files(f);
  ASSERT_TRUE(files.ok());
  EXPECT_EQ((*files)[0].name, "gpt-4o");
  EXPECT_EQ((*files)[1].name, "b");
  f.model = {"a=/m/llama.gguf"};
  files = Files(f);
  ASSERT_TRUE(files.ok());
  EXPECT_EQ((*files)[0].name, "a");  // named by -m: the alias is only an alias
}

TEST_F(LocalModelFilesTest, ADirectoryAddsItsGgufFilesInNameOrder) {
  ASSERT_TRUE(fs_.CreateDirs("/models").ok());
  for (const char* name : {"/models/zeta.gguf", "/models/alpha.gguf", "/models/readme.txt"}) {
    auto w = fs_.NewWritableFile(name);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Close().ok());
  }
  ServeFlags f;
  f.model = {"first=/m/first.gguf"};
  f.models_dir = "/models";
  auto files = Files(f);
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->size(), 3u);
  EXPECT_EQ((*files)[0].name, "first");
  EXPECT_EQ((*files)[1].name, "alpha");
  EXPECT_EQ((*files)[1].path, "/models/alpha.gguf");
  EXPECT_EQ((*files)[2].name, "zeta");
}

TEST_F(LocalModelFilesTest, BadNamesAndDirectoriesAreRefused) {
  ServeFlags f;
  for (const char* bad : {"a b=/m/x.gguf", "=/m/x.gguf", "a="}) {
    f.model = {bad};
    auto files = Files(f);
    EXPECT_FALSE(files.ok()) << bad;
  }
  f.model.clear();
  f.models_dir = "/nowhere";
  EXPECT_FALSE(Files(f).ok());
  ASSERT_TRUE(fs_.CreateDirs("/empty").ok());
  f.models_dir = "/empty";
  auto empty = Files(f);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("holds no .gguf file"), std::string::npos);
}

TEST_F(LocalModelFilesTest, OnlyRemoteBackendsMeansNoLocalModel) {
  ServeFlags f;
  f.backends.specs = {"openai:http://127.0.0.1:1"};
  auto files = Files(f);
  ASSERT_TRUE(files.ok());
  EXPECT_TRUE(files->empty());
}

}  // namespace
}  // namespace strata::cli
