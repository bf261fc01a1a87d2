// The local models' flags of `strata serve` (cli/serve_models.h): sizes,
// names and files, and the NUMA nodes to place on, on an in-memory file
// system (a fake sysfs for the machine's nodes).
#include "cli/serve_models.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

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

// A fake /sys/devices/system/node of `cpus.size()` nodes of 4 GiB each.
void WriteNodes(testing::MemFileSystem& fs, const std::vector<std::string>& cpus) {
  const std::string root = "/sys/node";
  ASSERT_TRUE(fs.CreateDirs(root).ok());
  ASSERT_TRUE(fs.WriteFileAtomic(root + "/online", fmt::format("0-{}\n", cpus.size() - 1)).ok());
  for (size_t i = 0; i < cpus.size(); ++i) {
    const std::string dir = fmt::format("{}/node{}", root, i);
    ASSERT_TRUE(fs.CreateDirs(dir).ok());
    ASSERT_TRUE(
        fs.WriteFileAtomic(dir + "/meminfo", fmt::format("Node {} MemTotal: 4194304 kB\n", i))
            .ok());
    std::string distance;
    for (size_t j = 0; j < cpus.size(); ++j)
      distance += i == j ? "10 " : fmt::format("{} ", 20 + j);
    ASSERT_TRUE(fs.WriteFileAtomic(dir + "/distance", distance + "\n").ok());
    ASSERT_TRUE(fs.WriteFileAtomic(dir + "/cpulist", cpus[i] + "\n").ok());
  }
}

TEST(NumaTopology, TheMachinesNodesAreKeptToTheCpusThisProcessMayUse) {
  testing::MemFileSystem fs;
  Env env;
  env.fs = &fs;
  auto log = util::NewStderrLogger(util::LogLevel::kOff);
  ServeFlags f;
  // Three nodes; the process may use CPUs 0-3 and 8-9: node 1 has none of
  // them (a cpuset), node 2 only two.
  WriteNodes(fs, {"0-3", "4-7", "8-11"});
  auto t = NumaTopology(env, f, {0, 1, 2, 3, 8, 9}, *log, "/sys/node");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->has_value());
  const engine::Topology& nodes = **t;
  ASSERT_EQ(nodes.nodes.size(), 2u);
  EXPECT_EQ(nodes.nodes[0].id, 0);
  EXPECT_EQ(nodes.nodes[1].id, 2);
  EXPECT_EQ(nodes.nodes[1].cpus, (std::vector<int32_t>{8, 9}));
  // The distances of the nodes kept: node 0 to node 2 was 22.
  EXPECT_EQ(nodes.distance, (std::vector<std::vector<int32_t>>{{10, 22}, {20, 10}}));

  // One usable node, or --numa off: nothing to place.
  auto one = NumaTopology(env, f, {0, 1}, *log, "/sys/node");
  ASSERT_TRUE(one.ok());
  EXPECT_FALSE(one->has_value());
  f.numa = "off";
  auto off = NumaTopology(env, f, {0, 1, 2, 3, 8, 9}, *log, "/sys/node");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->has_value());
}

TEST(NumaTopology, ATopologyFileMayNameOnlyCpusThisProcessMayUse) {
  testing::MemFileSystem fs;
  Env env;
  env.fs = &fs;
  auto log = util::NewStderrLogger(util::LogLevel::kOff);
  ASSERT_TRUE(fs.WriteFileAtomic("/t.json", R"({"nodes": [{"memory_gib": 1, "cpus": "0"},
                                                           {"memory_gib": 1, "cpus": "5"}]})")
                  .ok());
  ServeFlags f;
  f.topology = "/t.json";
  auto bad = NumaTopology(env, f, {0, 1}, *log, "/sys/node");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("CPU 5"), std::string::npos) << bad.status().message();
  auto good = NumaTopology(env, f, {0, 5}, *log, "/sys/node");
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  ASSERT_TRUE(good->has_value());
  EXPECT_EQ((*good)->nodes.size(), 2u);
  f.topology = "/missing.json";
  EXPECT_FALSE(NumaTopology(env, f, {0, 5}, *log, "/sys/node").ok());
}

}  // namespace
}  // namespace strata::cli
