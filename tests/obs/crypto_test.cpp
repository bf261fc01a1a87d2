#include "obs/crypto.h"

#include <gtest/gtest.h>

#include "audit_test_util.h"
#include "testing/mem_file_system.h"

namespace strata::obs {
namespace {

using testing_audit::kEd25519Private;
using testing_audit::kEd25519Public;

// The same seed as an X25519 key: a PEM key, but not one that signs.
constexpr const char* kX25519Private =
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VuBCIEIJ1hsZ3v/VpguoRK9JLsLMREScVpezJpGXA7rAMcrn9g\n"
    "-----END PRIVATE KEY-----\n";

std::string HexOf(const Sha256Digest& d) { return Hex(d); }
std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Sha256, MatchesTheFipsVectors) {
  EXPECT_EQ(HexOf(Sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(HexOf(Sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, PiecesHashAsTheWhole) {
  const std::string text = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  Sha256Hasher h;
  h.Update(text.substr(0, 5));
  h.Update("");
  h.Update(text.substr(5));
  EXPECT_EQ(h.Finish(), Sha256(text));
  h.Update("abc");  // starts over after Finish
  EXPECT_EQ(h.Finish(), Sha256("abc"));
}

TEST(HmacSha256, MatchesRfc4231) {
  // Test case 2.
  EXPECT_EQ(HexOf(HmacSha256(Bytes("Jefe"), "what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 1.
  const std::string key(20, '\x0b');
  EXPECT_EQ(HexOf(HmacSha256(Bytes(key), "Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
}

TEST(Hex, RoundTripsAndRefusesWhatIsNotHex) {
  EXPECT_EQ(Hex(Bytes("\x01\xab\xff")), "01abff");
  EXPECT_EQ(Unhex("01ABff"), std::string("\x01\xab\xff"));
  EXPECT_FALSE(Unhex("abc"));
  EXPECT_FALSE(Unhex("zz"));
}

TEST(ConstantTimeEqual, ComparesBytesAndLengths) {
  EXPECT_TRUE(ConstantTimeEqual("abc", "abc"));
  EXPECT_TRUE(ConstantTimeEqual("", ""));
  EXPECT_FALSE(ConstantTimeEqual("abc", "abd"));
  EXPECT_FALSE(ConstantTimeEqual("abc", "ab"));
}

TEST(LoadSigner, AnEd25519KeySignsAsRfc8032Says) {
  testing::MemFileSystem fs;
  fs.Put("priv.pem", kEd25519Private);
  fs.Put("pub.pem", kEd25519Public);
  auto signer = LoadSigner(fs, "priv.pem");
  ASSERT_TRUE(signer.ok()) << signer.status().ToString();
  EXPECT_EQ((*signer)->algorithm(), SignatureAlgorithm::kEd25519);
  // RFC 8032 test 1: the empty message.
  const std::string sig = (*signer)->Sign("");
  EXPECT_EQ(Hex(Bytes(sig)),
            "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc6"
            "1e39701cf9b46bd25bf5f0595bbe24655141438e7a100b");
  // The key id is that of the public key: the same for both halves.
  EXPECT_EQ((*signer)->key_id(), "21fe31dfa154a261");
  auto pub = LoadVerifier(fs, "pub.pem");
  ASSERT_TRUE(pub.ok()) << pub.status().ToString();
  EXPECT_EQ((*pub)->key_id(), (*signer)->key_id());
  EXPECT_TRUE((*pub)->Verify("", sig));
  const std::string signed_text = (*signer)->Sign("checkpoint 7");
  EXPECT_TRUE((*pub)->Verify("checkpoint 7", signed_text));
  EXPECT_FALSE((*pub)->Verify("checkpoint 8", signed_text));
  EXPECT_FALSE((*pub)->Verify("checkpoint 7", signed_text.substr(1)));
  // The private key verifies too (its public half).
  auto from_private = LoadVerifier(fs, "priv.pem");
  ASSERT_TRUE(from_private.ok());
  EXPECT_TRUE((*from_private)->Verify("checkpoint 7", signed_text));
}

TEST(LoadSigner, AnyOtherFileIsAnHmacSecretLessItsLineEnd) {
  testing::MemFileSystem fs;
  const std::string secret(32, 'k');
  fs.Put("key", secret + "\n");
  fs.Put("key_crlf", secret + "\r\n");
  auto a = LoadSigner(fs, "key");
  auto b = LoadVerifier(fs, "key_crlf");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->algorithm(), SignatureAlgorithm::kHmacSha256);
  EXPECT_EQ((*a)->key_id(), "751589b2327e2126");
  EXPECT_EQ((*a)->key_id(), HmacKeyId(secret));
  EXPECT_EQ((*b)->key_id(), (*a)->key_id());
  const std::string sig = (*a)->Sign("m");
  EXPECT_EQ(sig.size(), 32u);
  EXPECT_EQ(sig,
            std::string(reinterpret_cast<const char*>(HmacSha256(Bytes(secret), "m").data()), 32));
  EXPECT_TRUE((*b)->Verify("m", sig));
  EXPECT_FALSE((*b)->Verify("n", sig));
}

TEST(LoadSigner, BadKeyFilesAreRefusedNamingTheFileNeverTheKey) {
  testing::MemFileSystem fs;
  fs.Put("short", "secret-too-short\n");
  fs.Put("x25519.pem", kX25519Private);
  fs.Put("pub.pem", kEd25519Public);
  auto short_key = LoadSigner(fs, "short");
  ASSERT_FALSE(short_key.ok());
  EXPECT_NE(short_key.status().message().find("'short'"), std::string::npos);
  EXPECT_NE(short_key.status().message().find("at least 32"), std::string::npos);
  EXPECT_EQ(short_key.status().message().find("secret-too-short"), std::string::npos);
  auto x = LoadSigner(fs, "x25519.pem");
  ASSERT_FALSE(x.ok());
  EXPECT_NE(x.status().message().find("not Ed25519"), std::string::npos);
  EXPECT_FALSE(LoadVerifier(fs, "x25519.pem").ok());
  // A public key cannot sign.
  auto pub = LoadSigner(fs, "pub.pem");
  ASSERT_FALSE(pub.ok());
  EXPECT_NE(pub.status().message().find("no private key"), std::string::npos);
  EXPECT_EQ(LoadSigner(fs, "missing").status().code(), util::StatusCode::kNotFound);
  fs.Put("big", std::string(1 << 20, 'a'));
  EXPECT_FALSE(LoadSigner(fs, "big").ok());
}

TEST(LoadHmacKey, RefusesAPemKey) {
  testing::MemFileSystem fs;
  fs.Put("priv.pem", kEd25519Private);
  fs.Put("key", std::string(40, 'w'));
  EXPECT_FALSE(LoadHmacKey(fs, "priv.pem").ok());
  auto key = LoadHmacKey(fs, "key");
  ASSERT_TRUE(key.ok());
  EXPECT_EQ(*key, std::string(40, 'w'));
}

}  // namespace
}  // namespace strata::obs
