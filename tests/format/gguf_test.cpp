#include "format/gguf.h"

#include <gtest/gtest.h>

#include <cstring>

#include "format/gguf_writer.h"
#include "testing/shared_data.h"
#include "util/file_system.h"

namespace strata::format {
namespace {

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// A small file exercising every value type, nested arrays and two tensors.
std::string SampleFile(uint32_t alignment = 32) {
  GgufWriter w(alignment);
  w.SetString("general.architecture", "llama");
  w.SetUint32("u32", 4000000000u);
  w.SetInt32("i32", -5);
  w.SetUint64("u64", 1ULL << 40);
  w.SetFloat32("f32", 0.25f);
  w.SetBool("flag", true);
  w.SetStringArray("strs", {"a", "", "ccc"});
  w.SetFloat32Array("floats", {1.5f, -2.0f});
  w.SetInt32Array("ints", {1, -2, 3});
  EXPECT_TRUE(
      w.AddTensor("t0", {4, 2}, kernels::TensorType::kF32, [](int64_t row, std::span<float> out) {
         for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(row * 10 + i);
       }).ok());
  EXPECT_TRUE(
      w.AddTensor("t1", {64}, kernels::TensorType::kQ8_0, [](int64_t, std::span<float> out) {
         for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(i) / 8.0f;
       }).ok());
  return *w.ToBytes();
}

TEST(Gguf, WriterOutputReadsBackExactly) {
  const std::string bytes = SampleFile();
  auto g = GgufFile::ParseBytes(Bytes(bytes), "sample");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  const GgufFile& f = **g;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.GetString("general.architecture"), "llama");
  EXPECT_EQ(*f.GetUint("u32"), 4000000000u);
  EXPECT_EQ(*f.GetInt("i32"), -5);
  EXPECT_EQ(*f.GetUint("u64"), 1ULL << 40);
  EXPECT_EQ(*f.GetFloat("f32"), 0.25);
  EXPECT_TRUE(*f.GetBool("flag"));
  const GgufValue* strs = *f.GetArray("strs");
  ASSERT_EQ(strs->strings().size(), 3u);
  EXPECT_EQ(strs->strings()[2], "ccc");
  EXPECT_EQ(*(*f.GetArray("floats"))->FloatAt(1), -2.0);
  EXPECT_EQ(*(*f.GetArray("ints"))->IntAt(1), -2);
  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensorInfo* t0 = f.FindTensor("t0");
  ASSERT_NE(t0, nullptr);
  EXPECT_EQ(t0->shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(t0->n_rows(), 2);
  float row1[4];
  std::memcpy(row1, t0->data.data() + 16, 16);
  EXPECT_EQ(row1[3], 13.0f);
  EXPECT_EQ(f.FindTensor("t1")->n_bytes, 68u);
  EXPECT_EQ((f.data_offset() + f.FindTensor("t1")->offset) % 32, 0u);
}

TEST(Gguf, CustomAlignmentIsHonoured) {
  const std::string bytes = SampleFile(64);
  auto g = GgufFile::ParseBytes(Bytes(bytes), "aligned");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)->alignment(), 64u);
  for (const auto& t : (*g)->tensors()) EXPECT_EQ(((*g)->data_offset() + t.offset) % 64, 0u);
}

TEST(Gguf, WrongTypeAndMissingKeysAreNamed) {
  const std::string bytes = SampleFile();
  auto g = GgufFile::ParseBytes(Bytes(bytes), "sample");
  ASSERT_TRUE(g.ok());
  auto s = (*g)->GetString("u32");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("'u32' is uint32"), std::string::npos)
      << s.status().message();
  auto m = (*g)->GetUint("nope");
  EXPECT_EQ(m.status().code(), util::StatusCode::kNotFound);
  EXPECT_EQ(*(*g)->GetUintOr("nope", 7), 7u);
  EXPECT_FALSE((*g)->GetUint("i32").ok());  // negative does not convert to unsigned
}

TEST(Gguf, EveryTruncationIsAnErrorNeverACrash) {
  const std::string bytes = SampleFile();
  auto whole = GgufFile::ParseBytes(Bytes(bytes), "whole");
  ASSERT_TRUE(whole.ok());
  const GgufTensorInfo& last = (*whole)->tensors().back();
  const size_t data_end = (*whole)->data_offset() + last.offset + last.n_bytes;
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto g = GgufFile::ParseBytes(Bytes(bytes.substr(0, n)), "cut");
    // Only the padding after the last tensor may go missing.
    EXPECT_EQ(g.ok(), n >= data_end) << "cut at " << n << " of " << bytes.size();
  }
}

TEST(Gguf, CorruptedBytesNeverCrash) {
  // Flip every byte of the header in turn; each result must parse or fail cleanly.
  const std::string bytes = SampleFile();
  auto good = GgufFile::ParseBytes(Bytes(bytes), "x");
  ASSERT_TRUE(good.ok());
  const size_t header = (*good)->data_offset();
  for (size_t i = 0; i < header; ++i) {
    for (uint8_t v : {uint8_t{0x00}, uint8_t{0xFF}, uint8_t{0x7F}}) {
      std::string b = bytes;
      b[i] = static_cast<char>(v);
      auto g = GgufFile::ParseBytes(Bytes(b), "corrupt");
      if (g.ok()) {
        for (const auto& t : (*g)->tensors()) {
          EXPECT_LE(t.data.data() + t.data.size(),
                    reinterpret_cast<const uint8_t*>(b.data()) + b.size());
        }
      }
    }
  }
}

std::string Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  std::string s = "GGUF";
  s.append(reinterpret_cast<const char*>(&version), 4);
  s.append(reinterpret_cast<const char*>(&n_tensors), 8);
  s.append(reinterpret_cast<const char*>(&n_kv), 8);
  return s;
}

void ExpectError(const std::string& bytes, const std::string& needle) {
  auto g = GgufFile::ParseBytes(Bytes(bytes), "bad.gguf");
  ASSERT_FALSE(g.ok()) << "accepted; wanted an error containing: " << needle;
  EXPECT_NE(g.status().message().find(needle), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("bad.gguf"), std::string::npos) << g.status().message();
}

TEST(Gguf, HostileHeadersGetPreciseErrors) {
  ExpectError("GG", "too short");
  ExpectError("GGML" + std::string(20, '\0'), "not a GGUF file");
  ExpectError(Header(1, 0, 0), "version 1 is not supported");
  ExpectError(Header(0x03000000, 0, 0), "big-endian");
  ExpectError(Header(7, 0, 0), "unsupported GGUF version 7");
  ExpectError(Header(3, 0, 1ULL << 60), "metadata count");
  ExpectError(Header(3, 1ULL << 40, 0), "tensor count");
  // A key whose string length runs past the end.
  std::string b = Header(3, 0, 1);
  const uint64_t huge = 1ULL << 62;
  b.append(reinterpret_cast<const char*>(&huge), 8);
  b += std::string(16, 'x');
  ExpectError(b, "offset 24: metadata #0 key: string length");
}

TEST(Gguf, HostileValuesGetPreciseErrors) {
  auto kv = [](const std::string& key, uint32_t type, const std::string& payload) {
    std::string b = Header(3, 0, 1);
    const uint64_t len = key.size();
    b.append(reinterpret_cast<const char*>(&len), 8);
    b += key;
    b.append(reinterpret_cast<const char*>(&type), 4);
    return b + payload;
  };
  ExpectError(kv("k", 13, ""), "unknown value type 13");
  ExpectError(kv("k", 7, std::string(1, '\x02')), "bool value 2");
  std::string arr;
  const uint32_t elem = 4;
  const uint64_t count = 1ULL << 50;
  arr.append(reinterpret_cast<const char*>(&elem), 4);
  arr.append(reinterpret_cast<const char*>(&count), 8);
  ExpectError(kv("k", 9, arr), "cannot fit");
  // Arrays nested without end.
  std::string nested;
  for (int i = 0; i < 20; ++i) {
    const uint32_t t = 9;
    const uint64_t one = 1;
    nested.append(reinterpret_cast<const char*>(&t), 4);
    nested.append(reinterpret_cast<const char*>(&one), 8);
  }
  ExpectError(kv("k", 9, nested), "nested deeper");
}

TEST(Gguf, HostileTensorInfosGetPreciseErrors) {
  auto tensor = [](uint32_t n_dims, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    std::string b = Header(3, 1, 0);
    const std::string name = "w";
    const uint64_t len = name.size();
    b.append(reinterpret_cast<const char*>(&len), 8);
    b += name;
    b.append(reinterpret_cast<const char*>(&n_dims), 4);
    for (uint64_t d : dims) b.append(reinterpret_cast<const char*>(&d), 8);
    b.append(reinterpret_cast<const char*>(&type), 4);
    b.append(reinterpret_cast<const char*>(&offset), 8);
    b.resize((b.size() + 31) / 32 * 32, '\0');
    return b + std::string(64, '\0');
  };
  ExpectError(tensor(5, {1, 1, 1, 1, 1}, 0, 0), "n_dims 5");
  ExpectError(tensor(2, {0, 4}, 0, 0), "invalid size 0");
  ExpectError(tensor(2, {1ULL << 40, 1ULL << 40}, 0, 0), "invalid size");
  ExpectError(tensor(1, {16}, 99, 0), "unknown tensor type id 99");
  ExpectError(tensor(1, {33}, 8, 0), "not a whole number of Q8_0 blocks");
  ExpectError(tensor(1, {16}, 0, 3), "not a multiple of the alignment");
  ExpectError(tensor(1, {64}, 0, 0), "ends past the end of the file");
}

TEST(Gguf, DuplicateKeysAndTensorsAreRejected) {
  std::string b = Header(3, 0, 2);
  for (int i = 0; i < 2; ++i) {
    const uint64_t len = 1;
    b.append(reinterpret_cast<const char*>(&len), 8);
    b += "k";
    const uint32_t t = 0;
    b.append(reinterpret_cast<const char*>(&t), 4);
    b += 'x';
  }
  ExpectError(b, "duplicate metadata key 'k'");
}

TEST(Gguf, ReadsEveryRealModelInShared) {
  STRATA_REQUIRE_SHARED("models/stories260K.gguf");
  auto fs = util::NewPosixFileSystem();
  for (const char* name : {"models/stories260K.gguf", "models/llama-2-tiny-random.gguf",
                           "models/legacy/tinyllamas-stories-260k-q8_0.gguf",
                           "models/vocab/ggml-vocab-llama-spm.gguf"}) {
    auto g = GgufFile::Open(*fs, testing::SharedPath(name));
    ASSERT_TRUE(g.ok()) << name << ": " << g.status().ToString();
  }
  auto g = GgufFile::Open(*fs, testing::SharedPath("models/stories260K.gguf"));
  EXPECT_EQ((*g)->tensors().size(), 48u);
  EXPECT_EQ(*(*g)->GetUint("llama.block_count"), 5u);
  auto legacy =
      GgufFile::Open(*fs, testing::SharedPath("models/legacy/tinyllamas-stories-260k-q8_0.gguf"));
  EXPECT_EQ((*legacy)->version(), 2u);
}

TEST(Gguf, VersionOneFileIsRejectedClearly) {
  STRATA_REQUIRE_SHARED("models/legacy/tinyllamas-stories-260k-f32.gguf");
  auto fs = util::NewPosixFileSystem();
  auto g =
      GgufFile::Open(*fs, testing::SharedPath("models/legacy/tinyllamas-stories-260k-f32.gguf"));
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("version 1 is not supported"), std::string::npos);
}

}  // namespace
}  // namespace strata::format
