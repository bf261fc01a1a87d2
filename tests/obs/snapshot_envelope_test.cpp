#include "obs/snapshot_envelope.h"

#include <gtest/gtest.h>

#include <array>
#include <string>

#include "obs/crypto.h"
#include "obs/digest.h"
#include "testing/mem_file_system.h"

namespace strata::obs {
namespace {

SnapshotKey KeyOf(uint8_t fill) {
  std::array<uint8_t, kSnapshotKeyBytes> raw{};
  raw.fill(fill);
  raw[0] = 0x42;  // not all hex digits
  return SnapshotKey::FromBytes(raw);
}

std::array<uint8_t, kSnapshotNonceBytes> NonceOf(uint8_t fill) {
  std::array<uint8_t, kSnapshotNonceBytes> n{};
  n.fill(fill);
  return n;
}

const SnapshotMeta kMeta{.tenant = "acme", .request_id = "req-1", .created_ms = 1'700'000'000'123};
const std::string kPlain = R"({"request_id":"req-1","answer":"Once upon a time"})";

TEST(SnapshotEnvelope, SealThenOpenGivesThePlaintextAndTimeBack) {
  const SnapshotKey key = KeyOf(7);
  auto file = SealSnapshot(key, kMeta, kPlain, NonceOf(1));
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(file->size(), kPlain.size() + kSnapshotOverheadBytes);
  EXPECT_EQ(file->find("Once upon"), std::string::npos) << "the plaintext is visible";
  auto opened = OpenSnapshot(key, "acme", "req-1", *file);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ(opened->plaintext, kPlain);
  EXPECT_EQ(opened->created_ms, kMeta.created_ms);
  auto header = ParseSnapshotHeader(std::span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(file->data()), kSnapshotHeaderBytes));
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->created_ms, kMeta.created_ms);
  EXPECT_EQ(header->key_id, key.id());
}

TEST(SnapshotEnvelope, EveryChangedByteFailsAuthenticationAndNothingLeaks) {
  const SnapshotKey key = KeyOf(7);
  const std::string file = *SealSnapshot(key, kMeta, kPlain, NonceOf(1));
  for (size_t i = 0; i < file.size(); ++i) {
    std::string changed = file;
    changed[i] = static_cast<char>(changed[i] ^ 0x01);
    auto opened = OpenSnapshot(key, "acme", "req-1", changed);
    ASSERT_FALSE(opened.ok()) << "byte " << i << " changed and the file still opened";
    EXPECT_EQ(opened.status().code(), util::StatusCode::kDataLoss) << i;
    if (i >= 12) {  // past magic, version and the reserved field: only the tag can tell
      EXPECT_NE(opened.status().message().find("authentication failed"), std::string::npos)
          << i << ": " << opened.status().message();
    }
  }
  // Cut short anywhere, it is refused too.
  for (size_t n : {size_t{0}, size_t{10}, kSnapshotHeaderBytes, file.size() - 1}) {
    auto opened = OpenSnapshot(key, "acme", "req-1", std::string_view(file).substr(0, n));
    EXPECT_EQ(opened.status().code(), util::StatusCode::kDataLoss) << n;
  }
}

TEST(SnapshotEnvelope, AWrongKeyTenantOrRequestIdFailsAuthentication) {
  const std::string file = *SealSnapshot(KeyOf(7), kMeta, kPlain, NonceOf(1));
  for (const auto& [key, tenant, id] :
       {std::tuple{KeyOf(8), "acme", "req-1"}, std::tuple{KeyOf(7), "other", "req-1"},
        std::tuple{KeyOf(7), "acme", "req-2"}}) {
    auto opened = OpenSnapshot(key, tenant, id, file);
    ASSERT_FALSE(opened.ok());
    EXPECT_EQ(opened.status().code(), util::StatusCode::kDataLoss);
    EXPECT_NE(opened.status().message().find("authentication failed"), std::string::npos);
  }
  // The wrong key is named as such (by the key ids, which reveal nothing of the keys).
  const std::string other = OpenSnapshot(KeyOf(8), "acme", "req-1", file).status().message();
  EXPECT_NE(other.find("another key (key id " + KeyOf(7).IdHex()), std::string::npos) << other;
  EXPECT_NE(KeyOf(7).IdHex(), KeyOf(8).IdHex());
  // A wrong key whose id was forged into the header still fails, on the tag.
  std::string forged = file;
  const auto id8 = KeyOf(8).id();
  forged.replace(20, id8.size(), reinterpret_cast<const char*>(id8.data()), id8.size());
  auto f = OpenSnapshot(KeyOf(8), "acme", "req-1", forged);
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().message().find("key id"), std::string::npos);
  EXPECT_NE(f.status().message().find("authentication failed"), std::string::npos);
}

TEST(SnapshotEnvelope, AnotherMagicOrVersionIsNamedAsSuch) {
  const SnapshotKey key = KeyOf(7);
  std::string file = *SealSnapshot(key, kMeta, kPlain, NonceOf(1));
  std::string magic = file;
  magic[0] = 'X';
  EXPECT_NE(OpenSnapshot(key, "acme", "req-1", magic).status().message().find("magic"),
            std::string::npos);
  std::string version = file;
  version[8] = 9;
  EXPECT_NE(OpenSnapshot(key, "acme", "req-1", version).status().message().find("version 9"),
            std::string::npos);
}

TEST(SnapshotEnvelope, FreshNoncesMakeTwoSealsOfOnePlaintextDiffer) {
  const SnapshotKey key = KeyOf(7);
  std::array<uint8_t, kSnapshotNonceBytes> a{}, b{};
  ASSERT_TRUE(RandomNonce(a).ok());
  ASSERT_TRUE(RandomNonce(b).ok());
  EXPECT_NE(a, b);
  const std::string x = *SealSnapshot(key, kMeta, kPlain, a);
  const std::string y = *SealSnapshot(key, kMeta, kPlain, b);
  EXPECT_NE(x.substr(kSnapshotHeaderBytes), y.substr(kSnapshotHeaderBytes));
  EXPECT_EQ(OpenSnapshot(key, "acme", "req-1", x)->plaintext,
            OpenSnapshot(key, "acme", "req-1", y)->plaintext);
}

TEST(SnapshotEnvelope, FileNamesDependOnKeyTenantAndIdAndRevealNeither) {
  const SnapshotKey key = KeyOf(7);
  const std::string name = key.FileName("acme", "req-1");
  EXPECT_EQ(name.size(), kSnapshotNameHexDigits + kSnapshotSuffix.size());
  EXPECT_EQ(name, key.FileName("acme", "req-1"));
  EXPECT_NE(name, key.FileName("acme2", "req-1"));
  EXPECT_NE(name, key.FileName("acme", "req-2"));
  // The length prefixes keep ("ab", "c") and ("a", "bc") apart.
  EXPECT_NE(key.FileName("ab", "c"), key.FileName("a", "bc"));
  EXPECT_NE(name, KeyOf(8).FileName("acme", "req-1"));
  EXPECT_EQ(name.find("acme"), std::string::npos);
}

TEST(SnapshotEnvelope, OversizedOrEmptyOwnersAreRefused) {
  const SnapshotKey key = KeyOf(7);
  SnapshotMeta m = kMeta;
  m.tenant = "";
  EXPECT_EQ(SealSnapshot(key, m, kPlain, NonceOf(1)).status().code(),
            util::StatusCode::kInvalidArgument);
  m = kMeta;
  m.request_id = std::string(kMaxSnapshotIdBytes + 1, 'r');
  EXPECT_EQ(SealSnapshot(key, m, kPlain, NonceOf(1)).status().code(),
            util::StatusCode::kInvalidArgument);
}

TEST(SnapshotKeyFile, HoldsThirtyTwoRawBytesOrSixtyFourHexDigits) {
  std::string raw(32, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i * 37 + 200);
  const std::string hex =
      Hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()));
  auto a = SnapshotKey::Parse(raw, "k");
  auto b = SnapshotKey::Parse("  " + hex + "\n", "k");
  auto c = SnapshotKey::Parse(hex, "k");
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  // The same key however it is written: one seals, the others open.
  const std::string file = *SealSnapshot(*a, kMeta, kPlain, NonceOf(3));
  EXPECT_TRUE(OpenSnapshot(*b, "acme", "req-1", file).ok());
  EXPECT_TRUE(OpenSnapshot(*c, "acme", "req-1", file).ok());
  EXPECT_EQ(a->FileName("t", "r"), b->FileName("t", "r"));
}

TEST(SnapshotKeyFile, AnythingElseIsRefusedWithoutEchoingIt) {
  const std::string secretish = "0123456789abcdef0123456789abcdef";  // 16 bytes as hex
  for (const std::string& bad :
       {std::string(), std::string(31, 'x'), std::string(33, 'x'), secretish, std::string(63, 'a'),
        std::string(64, 'g'), secretish + secretish + "00"}) {
    auto k = SnapshotKey::Parse(bad, "snap.key");
    ASSERT_FALSE(k.ok()) << bad.size();
    EXPECT_EQ(k.status().code(), util::StatusCode::kInvalidArgument);
    EXPECT_NE(k.status().message().find("snap.key"), std::string::npos);
    if (!bad.empty()) {
      EXPECT_EQ(k.status().message().find(bad), std::string::npos) << "the key was echoed";
    }
  }
  testing::MemFileSystem fs;
  auto missing = SnapshotKey::Load(fs, "nope.key");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.key"), std::string::npos);
}

TEST(FileDigest, SlicesGiveTheDigestOfTheWholeFile) {
  testing::MemFileSystem fs;
  std::string bytes;
  for (int i = 0; i < 10000; ++i) bytes.push_back(static_cast<char>(i * 7));
  fs.Put("m.gguf", bytes);
  FileDigest d(std::move(fs.MapReadOnly("m.gguf")).value());
  EXPECT_FALSE(d.hex().has_value());
  int steps = 0;
  while (!d.Step(4096)) ++steps;
  EXPECT_EQ(steps, 2);  // 4096 + 4096 + 1808
  EXPECT_TRUE(d.done());
  EXPECT_EQ(d.hex(), Hex(Sha256(bytes)));
  EXPECT_TRUE(d.Step(1));  // done stays done
}

}  // namespace
}  // namespace strata::obs
