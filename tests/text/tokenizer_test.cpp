#include "text/tokenizer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <span>
#include <sstream>

#include "format/gguf_writer.h"
#include "testing/shared_data.h"
#include "testing/tiny_model.h"
#include "text/internal/bpe.h"
#include "text/internal/string_table.h"
#include "text/internal/unicode.h"
#include "text/internal/wordpiece.h"
#include "util/file_system.h"

namespace strata::text {
namespace {

struct VocabCase {
  std::string text;
  std::vector<int32_t> ids;
};

// The reference vectors: .inp holds texts separated by "\n__ggml_vocab_test__\n",
// .out one line of space-separated ids per text.
std::vector<VocabCase> ReadVectors(const std::string& name) {
  std::ifstream inp(testing::SharedPath("golden/tokenizer/" + name + ".inp"), std::ios::binary);
  std::ifstream out(testing::SharedPath("golden/tokenizer/" + name + ".out"));
  std::stringstream ss;
  ss << inp.rdbuf();
  const std::string raw = ss.str();
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(raw.substr(pos));
      break;
    }
    texts.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<VocabCase> cases;
  std::string line;
  size_t i = 0;
  while (std::getline(out, line)) {
    VocabCase c;
    c.text = i < texts.size() ? texts[i] : "";
    std::istringstream ids(line);
    int32_t id;
    while (ids >> id) c.ids.push_back(id);
    cases.push_back(std::move(c));
    ++i;
  }
  EXPECT_EQ(cases.size(), texts.size()) << name;
  return cases;
}

std::unique_ptr<Tokenizer> LoadVocab(const std::string& name,
                                     std::unique_ptr<format::GgufFile>& keep) {
  auto fs = util::NewPosixFileSystem();
  auto g = format::GgufFile::Open(*fs, testing::SharedPath("models/vocab/" + name));
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  keep = std::move(g).value();
  auto t = Tokenizer::FromGguf(*keep);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

std::string Ids(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

void ExpectReferenceTokenization(const std::string& vocab, bool check_round_trip) {
  std::unique_ptr<format::GgufFile> g;
  auto tok = LoadVocab(vocab, g);
  ASSERT_NE(tok, nullptr);
  const auto cases = ReadVectors(vocab);
  ASSERT_GT(cases.size(), 20u);
  for (const auto& c : cases) {
    const auto ids = tok->Encode(c.text, {.add_special = false, .parse_special = false});
    EXPECT_EQ(Ids(ids), Ids(c.ids)) << "text: '" << c.text << "'";
    if (check_round_trip) {
      EXPECT_EQ(tok->Decode(ids), c.text);
    }
  }
}

TEST(StringTable, FindsEveryEntryAndTheFirstOfDuplicates) {
  text::internal::StringTable table;
  std::vector<std::string> texts;
  for (int i = 0; i < 5000; ++i) texts.push_back(fmt::format("t{}", i * 7919 % 10007));
  texts.push_back("");
  texts.push_back("t0");  // a duplicate of entry 0
  for (const std::string& t : texts) ASSERT_TRUE(table.Append(t));
  table.BuildIndex();
  ASSERT_EQ(table.size(), static_cast<int32_t>(texts.size()));
  for (int32_t i = 0; i + 1 < table.size(); ++i) {
    EXPECT_EQ(table[i], texts[static_cast<size_t>(i)]);
    EXPECT_EQ(table.Find(texts[static_cast<size_t>(i)]), i);
  }
  EXPECT_EQ(table[table.size() - 1], "t0");
  EXPECT_EQ(table.Find("t0"), 0);
  EXPECT_EQ(table.Find("absent"), -1);
  EXPECT_EQ(table.Find("t"), -1);

  text::internal::StringTable unindexed;
  ASSERT_TRUE(unindexed.Append("x"));
  EXPECT_EQ(unindexed[0], "x");
  EXPECT_EQ(unindexed.Find("x"), -1);
}

TEST(Tokenizer, ReproducesLlamaSentencePieceExactly) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  ExpectReferenceTokenization("ggml-vocab-llama-spm.gguf", /*check_round_trip=*/true);
}

TEST(Tokenizer, ReproducesPhi3Exactly) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-phi-3.gguf");
  ExpectReferenceTokenization("ggml-vocab-phi-3.gguf", /*check_round_trip=*/true);
}

TEST(Tokenizer, ReproducesGpt2Exactly) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-gpt-2.gguf");
  ExpectReferenceTokenization("ggml-vocab-gpt-2.gguf", /*check_round_trip=*/true);
}

TEST(Tokenizer, ReproducesLlama3BpeExactly) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-bpe.gguf");
  ExpectReferenceTokenization("ggml-vocab-llama-bpe.gguf", /*check_round_trip=*/true);
}

TEST(Tokenizer, ReproducesQwen2Exactly) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-qwen2.gguf");
  ExpectReferenceTokenization("ggml-vocab-qwen2.gguf", /*check_round_trip=*/true);
}

TEST(Tokenizer, ReproducesBertWordPieceExactly) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-bert-bge.gguf");
  // Lossy (lower case, no accents): no round trip.
  ExpectReferenceTokenization("ggml-vocab-bert-bge.gguf", /*check_round_trip=*/false);
}

TEST(Tokenizer, BertWrapsTextInClsAndSepAndDecodesWords) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-bert-bge.gguf");
  std::unique_ptr<format::GgufFile> g;
  auto tok = LoadVocab("ggml-vocab-bert-bge.gguf", g);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), text::TokenizerKind::kWpm);
  const auto ids = tok->Encode("Hello, World!", {.add_special = true});
  EXPECT_EQ(Ids(ids), "101 7592 1010 2088 999 102 ");
  EXPECT_EQ(tok->Decode(ids), "hello , world !");
  // A word no piece covers is one [UNK]; control characters vanish; accents fall away.
  EXPECT_EQ(Ids(tok->Encode("\x01"
                            "caf\xC3\xA9",
                            {.add_special = false})),
            Ids(tok->Encode("cafe", {.add_special = false})));
  // [SEP] written in user text stays text unless special tokens are parsed.
  EXPECT_EQ(Ids(tok->Encode("[SEP]", {.add_special = false, .parse_special = true})), "102 ");
  EXPECT_NE(Ids(tok->Encode("[SEP]", {.add_special = false})), "102 ");
}

TEST(WordPiece, SplitsPunctuationSymbolsAndIdeographs) {
  using text::internal::WordPieceWords;
  EXPECT_EQ(WordPieceWords("  Hi,there  $5 \xE4\xB8\xAD\xE6\x96\x87ok "),
            (std::vector<std::string>{"hi", ",", "there", "$", "5", "\xE4\xB8\xAD", "\xE6\x96\x87",
                                      "ok"}));
  EXPECT_TRUE(WordPieceWords(" \t\n").empty());
  // A non-ASCII symbol stays inside its word; U+00A0 separates words.
  EXPECT_EQ(WordPieceWords("a\xE2\x82\xAC"
                           "b\xC2\xA0"
                           "C"),
            (std::vector<std::string>{"a\xE2\x82\xAC"
                                      "b",
                                      "c"}));
}

TEST(Tokenizer, AddsBosAndKnowsEndOfGeneration) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  std::unique_ptr<format::GgufFile> g;
  auto tok = LoadVocab("ggml-vocab-llama-spm.gguf", g);
  const auto ids = tok->Encode("Hello world", {.add_special = true});
  EXPECT_EQ(Ids(ids), "1 15043 3186 ");
  EXPECT_TRUE(tok->IsEog(2));
  EXPECT_FALSE(tok->IsEog(15043));
  EXPECT_EQ(tok->Decode(ids), "Hello world");
}

TEST(Tokenizer, AContinuationGetsNoSpacePrefixButAfterASpecialToken) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  std::unique_ptr<format::GgufFile> g;
  auto tok = LoadVocab("ggml-vocab-llama-spm.gguf", g);
  const std::vector<int32_t> head = tok->Encode("Hello", {.add_special = true});
  const text::TextSegment rest[] = {{" world", false}};
  // Encoded as a text of its own, " world" gets SentencePiece's space prefix
  // (two spaces in all); as a continuation of "Hello", it does not.
  std::vector<int32_t> fresh = head, continued = head;
  const auto own = tok->EncodeSegments(rest, /*add_special=*/false);
  const auto cont = tok->EncodeContinuation(rest, /*after_special=*/false);
  fresh.insert(fresh.end(), own.begin(), own.end());
  continued.insert(continued.end(), cont.begin(), cont.end());
  EXPECT_EQ(tok->Decode(continued), "Hello world");
  EXPECT_NE(tok->Decode(fresh), "Hello world");
  // After a special token the prefix is there, as in one encoding.
  const text::TextSegment after[] = {{"x", false}};
  EXPECT_EQ(tok->EncodeContinuation(after, /*after_special=*/true),
            tok->EncodeSegments(after, /*add_special=*/false));
}

TEST(Tokenizer, ControlTokensInUserTextStayText) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-spm.gguf");
  std::unique_ptr<format::GgufFile> g;
  auto tok = LoadVocab("ggml-vocab-llama-spm.gguf", g);
  const auto plain = tok->Encode("a</s>b", {.add_special = false, .parse_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  const auto parsed = tok->Encode("a</s>b", {.add_special = false, .parse_special = true});
  EXPECT_EQ(std::count(parsed.begin(), parsed.end(), 2), 1);
}

TEST(Tokenizer, BuiltInVocabularyRoundTripsAnyText) {
  auto tiny = testing::MakeTinyModel();
  ASSERT_NE(tiny.model, nullptr);
  const Tokenizer& tok = tiny.model->tokenizer();
  for (std::string s :
       {std::string("once upon a time the little dog"), std::string("Zürich 東京 🙂"),
        std::string("\x01\x7f control bytes\ttab\nnewline"), std::string("  two  spaces "),
        std::string()}) {
    const auto ids = tok.Encode(s);
    EXPECT_EQ(tok.Decode(ids), s);
  }
  // Whole words merge into single tokens.
  const auto ids = tok.Encode("the little", {.add_special = false});
  EXPECT_EQ(ids.size(), 2u);
}

TEST(Detokenizer, HoldsBackIncompleteCharacters) {
  auto tiny = testing::MakeTinyModel();
  const Tokenizer& tok = tiny.model->tokenizer();
  // "é" is two byte tokens in the built-in vocabulary.
  const auto ids = tok.Encode("é", {.add_special = false});
  ASSERT_EQ(ids.size(), 3u);  // "▁", <0xC3>, <0xA9>
  Detokenizer d(tok, /*strip_leading_space=*/true);
  EXPECT_EQ(d.Push(ids[0]), "");
  EXPECT_EQ(d.Push(ids[1]), "") << "emitted half a character";
  EXPECT_EQ(d.Push(ids[2]), "é");
  EXPECT_EQ(d.Finish(), "");
  // A lone continuation byte becomes U+FFFD, never raw invalid UTF-8.
  Detokenizer bad(tok);
  std::string s = bad.Push(*tok.Find("<0xBF>"));
  s += bad.Finish();
  EXPECT_EQ(s, "\xEF\xBF\xBD");
}

// ---- Byte-level BPE (tokenizer.ggml.model = gpt2) ----------------------------

TEST(BpeTokenizer, Llama3ControlTokensAreSplitOnlyWhenParsingSpecial) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-bpe.gguf");
  std::unique_ptr<format::GgufFile> g;
  auto tok = LoadVocab("ggml-vocab-llama-bpe.gguf", g);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), TokenizerKind::kBpe);
  const int32_t begin = *tok->Find("<|begin_of_text|>");
  const int32_t eot = *tok->Find("<|eot_id|>");
  EXPECT_EQ(begin, 128000);
  EXPECT_EQ(eot, 128009);
  const std::string text = "<|begin_of_text|>Hi<|eot_id|>";

  const auto plain = tok->Encode(text, {.add_special = false, .parse_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), begin), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_EQ(tok->Decode(plain), text) << "user text must come back as typed";

  const auto parsed = tok->Encode(text, {.add_special = false, .parse_special = true});
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed[0], begin);
  EXPECT_EQ(parsed[2], eot);
  EXPECT_EQ(tok->Decode(parsed), "Hi") << "control tokens render only when asked";
  EXPECT_EQ(tok->Decode(parsed, {.render_special = true}), text);

  EXPECT_TRUE(tok->IsEog(eot));
  EXPECT_TRUE(tok->IsEog(tok->eos()));  // <|end_of_text|>
  EXPECT_FALSE(tok->IsEog(begin));
  EXPECT_FALSE(tok->IsEog(*tok->Find("<|start_header_id|>")));
  EXPECT_FALSE(tok->IsEog(parsed[1]));
}

TEST(BpeTokenizer, AddsBosAsTheVocabularyAsks) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-bpe.gguf");
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-gpt-2.gguf");
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-qwen2.gguf");
  {
    // No tokenizer.ggml.add_bos_token: the Llama 3 pre-tokenizer defaults to BOS.
    std::unique_ptr<format::GgufFile> g;
    auto tok = LoadVocab("ggml-vocab-llama-bpe.gguf", g);
    EXPECT_TRUE(tok->add_bos());
    const auto ids = tok->Encode("Hello world", {.add_special = true});
    EXPECT_EQ(Ids(ids), "128000 9906 1917 ");
    EXPECT_EQ(Ids(tok->Encode("Hello world", {.add_special = false})), "9906 1917 ");
    EXPECT_EQ(tok->Decode(ids), "Hello world");
  }
  for (const char* vocab : {"ggml-vocab-gpt-2.gguf", "ggml-vocab-qwen2.gguf"}) {
    // Other BPE vocabularies: no BOS unless the key says so.
    std::unique_ptr<format::GgufFile> g;
    auto tok = LoadVocab(vocab, g);
    EXPECT_FALSE(tok->add_bos()) << vocab;
    const auto with = tok->Encode("Hello world", {.add_special = true});
    const auto without = tok->Encode("Hello world", {.add_special = false});
    EXPECT_EQ(Ids(with), Ids(without)) << vocab;
  }
}

// A GGUF file written in memory and parsed back.
struct LoadedBytes {
  std::string bytes;  // must outlive gguf
  std::unique_ptr<format::GgufFile> gguf;
};

util::StatusOr<std::unique_ptr<Tokenizer>> WriteAndLoad(const format::GgufWriter& w,
                                                        LoadedBytes& keep) {
  STRATA_ASSIGN_OR_RETURN(keep.bytes, w.ToBytes());
  const auto* data = reinterpret_cast<const uint8_t*>(keep.bytes.data());
  STRATA_ASSIGN_OR_RETURN(
      keep.gguf, format::GgufFile::ParseBytes(std::span(data, keep.bytes.size()), "in-memory"));
  return Tokenizer::FromGguf(*keep.gguf);
}

// The vocabulary file `name` rewritten in memory with one change.
util::StatusOr<std::unique_ptr<Tokenizer>> LoadModifiedVocab(
    const std::string& name, const std::function<void(format::GgufWriter&)>& change,
    LoadedBytes& keep) {
  std::unique_ptr<format::GgufFile> src;
  auto fs = util::NewPosixFileSystem();
  STRATA_ASSIGN_OR_RETURN(src,
                          format::GgufFile::Open(*fs, testing::SharedPath("models/vocab/" + name)));
  format::GgufWriter w;
  for (const auto& [k, v] : src->metadata()) w.CopyValue(k, v);
  change(w);
  return WriteAndLoad(w, keep);
}

TEST(BpeTokenizer, AddBosKeyOverridesThePreTokenizerDefault) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-gpt-2.gguf");
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-bpe.gguf");
  LoadedBytes keep;
  auto on = LoadModifiedVocab(
      "ggml-vocab-gpt-2.gguf",
      [](format::GgufWriter& w) { w.SetBool("tokenizer.ggml.add_bos_token", true); }, keep);
  ASSERT_TRUE(on.ok()) << on.status().ToString();
  EXPECT_TRUE((*on)->add_bos());
  EXPECT_EQ(Ids((*on)->Encode("Hello", {.add_special = true})), "50256 15496 ");

  LoadedBytes keep2;
  auto off = LoadModifiedVocab(
      "ggml-vocab-llama-bpe.gguf",
      [](format::GgufWriter& w) { w.SetBool("tokenizer.ggml.add_bos_token", false); }, keep2);
  ASSERT_TRUE(off.ok()) << off.status().ToString();
  EXPECT_FALSE((*off)->add_bos());
  EXPECT_EQ(Ids((*off)->Encode("Hello", {.add_special = true})), "9906 ");
}

TEST(BpeTokenizer, InvalidUtf8IsReadAsReplacementCharacters) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-gpt-2.gguf");
  std::unique_ptr<format::GgufFile> g;
  auto tok = LoadVocab("ggml-vocab-gpt-2.gguf", g);
  // As the reference: each invalid byte becomes U+FFFD before merging.
  EXPECT_EQ(Ids(tok->Encode("a\xFF\xC3", {.add_special = false})),
            Ids(tok->Encode("a\xEF\xBF\xBD\xEF\xBF\xBD", {.add_special = false})));
}

TEST(BpeTokenizer, RoundTripsArbitraryTextAndLongWords) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-qwen2.gguf");
  std::unique_ptr<format::GgufFile> g;
  auto tok = LoadVocab("ggml-vocab-qwen2.gguf", g);
  for (const std::string& s :
       {std::string("\x01\x7f control bytes\ttab\r\nnewline"),
        std::string("Zürich 東京 🙂 ½ ٣"),
        std::string("\xE3\x80\x80ideographic\xC2\xA0nbsp\xC2\x85nel  "), std::string(20000, 'a'),
        std::string(5000, ' ') + "x", std::string("1234567890 don'T WE'LL")}) {
    const auto ids = tok->Encode(s, {.add_special = false});
    EXPECT_EQ(tok->Decode(ids), s);
  }
}

TEST(BpeTokenizer, DetokenizerHoldsBackPartialCharactersAndKeepsSpaces) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-gpt-2.gguf");
  std::unique_ptr<format::GgufFile> g;
  auto tok = LoadVocab("ggml-vocab-gpt-2.gguf", g);
  // U+1D518 "𝔘": "Ġ", then its 4 bytes over 3 tokens.
  const auto ids = tok->Encode(" \xF0\x9D\x94\x98", {.add_special = false});
  ASSERT_EQ(ids.size(), 4u);
  // BPE vocabularies add no space prefix: strip_leading_space changes nothing.
  Detokenizer d(*tok, /*strip_leading_space=*/true);
  std::string streamed;
  for (size_t i = 0; i + 1 < ids.size(); ++i) {
    const std::string part = d.Push(ids[i]);
    EXPECT_TRUE(part.empty() || part == " ") << "emitted part of a character: " << part;
    streamed += part;
  }
  streamed += d.Push(ids.back());
  streamed += d.Finish();
  EXPECT_EQ(streamed, " \xF0\x9D\x94\x98");
}

// GPT-2's character for the space byte, U+0120 "Ġ".
const std::string kSpaceChar = "\xC4\xA0";

// A small byte-level vocabulary: the 256 byte characters, then "ab", "abc",
// "Ġa" and a control token, with merges "a b", "ab c", "Ġ a".
struct SmallVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges = {"a b", "ab c", kSpaceChar + " a"};
  SmallVocab() {
    for (int b = 0; b < 256; ++b) {
      std::string t;
      internal::AppendUtf8(internal::ByteToChar(static_cast<uint8_t>(b)), t);
      tokens.push_back(t);
    }
    for (const std::string& t : {std::string("ab"), std::string("abc"), kSpaceChar + "a"}) {
      tokens.push_back(t);
    }
    types.assign(tokens.size(), static_cast<int32_t>(TokenType::kNormal));
    tokens.push_back("<|endoftext|>");
    types.push_back(static_cast<int32_t>(TokenType::kControl));
  }
  int32_t Id(std::string_view t) const {
    return static_cast<int32_t>(std::find(tokens.begin(), tokens.end(), t) - tokens.begin());
  }
};

util::StatusOr<std::unique_ptr<Tokenizer>> LoadSmall(
    const std::function<void(format::GgufWriter&)>& change, LoadedBytes& keep,
    const SmallVocab& v = SmallVocab()) {
  format::GgufWriter w;
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", "gpt-2");
  w.SetStringArray("tokenizer.ggml.tokens", v.tokens);
  w.SetInt32Array("tokenizer.ggml.token_type", v.types);
  w.SetStringArray("tokenizer.ggml.merges", v.merges);
  w.SetUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.tokens.size() - 1));
  change(w);
  return WriteAndLoad(w, keep);
}

TEST(BpeTokenizer, MergesApplyLowestRankFirst) {
  SmallVocab v;
  LoadedBytes keep;
  auto tok = LoadSmall([](format::GgufWriter&) {}, keep, v);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->eos(), v.Id("<|endoftext|>"));
  EXPECT_EQ((*tok)->bos(), -1);
  EXPECT_FALSE((*tok)->add_bos());
  // "abc" -> "ab" "c" -> "abc". " ab": "a b" (rank 0) beats "Ġ a" (rank 2),
  // and nothing merges "Ġ" with "ab".
  EXPECT_EQ(Ids((*tok)->Encode("abc ab", {.add_special = true})),
            Ids({v.Id("abc"), v.Id(kSpaceChar), v.Id("ab")}));
  EXPECT_EQ((*tok)->Decode((*tok)->Encode("abc ab")), "abc ab");
  EXPECT_TRUE((*tok)->IsEog(v.Id("<|endoftext|>")));

  // With "Ġ a" first, " ab" becomes "Ġa" "b"; ties go to the leftmost pair.
  v.merges = {kSpaceChar + " a", "a b", "ab c"};
  LoadedBytes keep2;
  auto tok2 = LoadSmall([](format::GgufWriter&) {}, keep2, v);
  ASSERT_TRUE(tok2.ok()) << tok2.status().ToString();
  EXPECT_EQ(Ids((*tok2)->Encode(" ab", {.add_special = false})),
            Ids({v.Id(kSpaceChar + "a"), v.Id("b")}));
  EXPECT_EQ(Ids((*tok2)->Encode("ababab", {.add_special = false})),
            Ids({v.Id("ab"), v.Id("ab"), v.Id("ab")}));
}

TEST(BpeTokenizer, IncompleteVocabularyNeverCrashes) {
  // Drop the character of byte 'c' and the merge result "abc" from the
  // vocabulary: "abc" still merges (merges work on texts), and the symbol that
  // is no token comes out as its bytes' characters, unk for the missing one.
  SmallVocab v;
  v.tokens[v.Id("c")] = "<unused c>";
  v.tokens[v.Id("abc")] = "<unused abc>";
  LoadedBytes keep;
  auto tok = LoadSmall([](format::GgufWriter&) {}, keep, v);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(Ids((*tok)->Encode("abc", {.add_special = false})), Ids({v.Id("a"), v.Id("b")}));

  LoadedBytes keep_unk;
  auto with_unk =
      LoadSmall([&](format::GgufWriter& w) { w.SetUint32("tokenizer.ggml.unknown_token_id", 0); },
                keep_unk, v);
  ASSERT_TRUE(with_unk.ok()) << with_unk.status().ToString();
  EXPECT_EQ(Ids((*with_unk)->Encode("abc", {.add_special = false})),
            Ids({v.Id("a"), v.Id("b"), 0}));
}

TEST(BpeTokenizer, BadMergesMetadataIsAnError) {
  struct Case {
    std::function<void(format::GgufWriter&)> change;
    util::StatusCode code;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {[](format::GgufWriter& w) { w.Remove("tokenizer.ggml.merges"); },
       util::StatusCode::kInvalidArgument, "tokenizer.ggml.merges is missing"},
      {[](format::GgufWriter& w) {
         w.SetStringArray("tokenizer.ggml.merges", {"a b", "abc"});
       },
       util::StatusCode::kInvalidArgument, "tokenizer.ggml.merges[1] = 'abc'"},
      {[](format::GgufWriter& w) {
         w.SetStringArray("tokenizer.ggml.merges", {"a b", "ab "});
       },
       util::StatusCode::kInvalidArgument, "tokenizer.ggml.merges[1]"},
      {[](format::GgufWriter& w) { w.SetStringArray("tokenizer.ggml.merges", {""}); },
       util::StatusCode::kInvalidArgument, "tokenizer.ggml.merges[0]"},
      {[](format::GgufWriter& w) {
         w.SetInt32Array("tokenizer.ggml.merges", {1, 2});
       },
       util::StatusCode::kInvalidArgument, "tokenizer.ggml.merges must be an array of strings"},
      {[](format::GgufWriter& w) { w.SetString("tokenizer.ggml.merges", "a b"); },
       util::StatusCode::kInvalidArgument, "tokenizer.ggml.merges must be an array of strings"},
      {[](format::GgufWriter& w) { w.SetString("tokenizer.ggml.pre", "gpt-9"); },
       util::StatusCode::kUnimplemented, "'gpt-9' (tokenizer.ggml.pre) is not supported"},
      {[](format::GgufWriter& w) { w.SetUint32("tokenizer.ggml.padding_token_id", 1u << 20); },
       util::StatusCode::kInvalidArgument, "tokenizer.ggml.padding_token_id"},
  };
  for (const Case& c : cases) {
    LoadedBytes keep;
    auto tok = LoadSmall(c.change, keep);
    ASSERT_FALSE(tok.ok()) << "loaded; wanted: " << c.needle;
    EXPECT_EQ(tok.status().code(), c.code) << tok.status().ToString();
    EXPECT_NE(tok.status().message().find(c.needle), std::string::npos) << tok.status().message();
  }
  // The message lists what is supported.
  LoadedBytes keep;
  auto tok =
      LoadSmall([](format::GgufWriter& w) { w.SetString("tokenizer.ggml.pre", "gpt-9"); }, keep);
  ASSERT_FALSE(tok.ok());
  for (const char* name : {"gpt-2", "llama-bpe", "qwen2"}) {
    EXPECT_NE(tok.status().message().find(name), std::string::npos) << tok.status().message();
  }
}

TEST(BpeTokenizer, MergesNamingUnknownTokensAreIgnored) {
  SmallVocab v;
  v.merges = {"x\xC4\xB0 y", "a b", "q zz", "ab c"};  // "xİ" and "zz" are no symbols
  LoadedBytes keep;
  auto tok = LoadSmall([](format::GgufWriter&) {}, keep, v);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(Ids((*tok)->Encode("abc", {.add_special = false})), Ids({v.Id("abc")}));
}

TEST(BpeTokenizer, MissingPreTokenizerReadsAsDefault) {
  LoadedBytes keep;
  auto tok = LoadSmall([](format::GgufWriter& w) { w.Remove("tokenizer.ggml.pre"); }, keep);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ((*tok)->Decode((*tok)->Encode("it's 42")), "it's 42");
}

// ---- Pre-tokenizers and Unicode classes -------------------------------------

std::vector<std::string> Split(internal::PreTokenizerKind kind, std::string_view text) {
  const std::vector<char32_t> cps = internal::DecodeUtf8(text);
  std::vector<std::string> words;
  size_t begin = 0;
  for (size_t end : internal::PreTokenize(kind, cps)) {
    std::string w;
    for (size_t i = begin; i < end; ++i) internal::AppendUtf8(cps[i], w);
    words.push_back(w);
    begin = end;
  }
  return words;
}

TEST(BpePreTokenizer, SplitsLikeTheReferencePatterns) {
  using internal::PreTokenizerKind;
  using V = std::vector<std::string>;
  EXPECT_EQ(Split(PreTokenizerKind::kGpt2, "Hello world's   12345 !!x\n\n y  "),
            (V{"Hello", " world", "'s", "  ", " 12345", " !!", "x", "\n\n", " y", "  "}));
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "Hello WORLD'S   12345 !!x\n\n y  "),
            (V{"Hello", " WORLD", "'S", "  ", " ", "123", "45", " !!", "x", "\n\n", " y", "  "}));
  EXPECT_EQ(Split(PreTokenizerKind::kQwen2, "a 123 .\r\n\tb"),
            (V{"a", " ", "1", "2", "3", " .\r\n", "\tb"}));
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, "x  \n  \n  y"), (V{"x", "  \n  \n", " ", " y"}));
  EXPECT_TRUE(Split(PreTokenizerKind::kGpt2, "").empty());
  EXPECT_EQ(Split(PreTokenizerKind::kLlama3, " "), (V{" "}));
}

TEST(BpePreTokenizer, UnicodeClassesFollowTheReference) {
  using internal::CharClass;
  using internal::Classify;
  for (char32_t ws : {0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x200A,
                      0x2028, 0x2029, 0x202F, 0x205F, 0x3000}) {
    EXPECT_EQ(Classify(ws), CharClass::kWhitespace) << std::hex << static_cast<uint32_t>(ws);
  }
  // Not White_Space even though some regex engines think so.
  for (char32_t other : {0x1C, 0x1F, 0x180E, 0x200B, 0xFEFF}) {
    EXPECT_EQ(Classify(other), CharClass::kOther) << std::hex << static_cast<uint32_t>(other);
  }
  EXPECT_EQ(Classify(U'é'), CharClass::kLetter);
  EXPECT_EQ(Classify(U'東'), CharClass::kLetter);
  EXPECT_EQ(Classify(0x02B0), CharClass::kLetter);  // Lm
  EXPECT_EQ(Classify(U'½'), CharClass::kNumber);    // No
  EXPECT_EQ(Classify(U'Ⅻ'), CharClass::kNumber);    // Nl
  EXPECT_EQ(Classify(0x0663), CharClass::kNumber);  // Arabic-Indic three
  EXPECT_EQ(Classify(0x0301), CharClass::kOther);   // combining acute (Mn)
  EXPECT_EQ(Classify(U'🙂'), CharClass::kOther);
  EXPECT_EQ(Classify(0x110000), CharClass::kOther);
}

TEST(BpePreTokenizer, ByteMappingIsGpt2s) {
  EXPECT_EQ(internal::ByteToChar(' '), 0x120u);
  EXPECT_EQ(internal::ByteToChar('\n'), 0x10Au);
  EXPECT_EQ(internal::ByteToChar('A'), static_cast<char32_t>('A'));
  EXPECT_EQ(internal::ByteToChar(0xAD), 0x143u);
  for (int b = 0; b < 256; ++b) {
    EXPECT_EQ(internal::CharToByte(internal::ByteToChar(static_cast<uint8_t>(b))), b);
  }
  EXPECT_EQ(internal::CharToByte(0x144), std::nullopt);
  EXPECT_EQ(internal::DecodeByteLevel("\xC4\xA0hi\xC4\x8A"), " hi\n");
}

}  // namespace
}  // namespace strata::text

namespace strata::text {
namespace {

TEST(Tokenizer, SegmentsEncodeAsOneTextButOnlyTrustedOnesParseSpecials) {
  STRATA_REQUIRE_SHARED("models/vocab/ggml-vocab-llama-bpe.gguf");
  std::unique_ptr<format::GgufFile> g;
  auto tok = LoadVocab("ggml-vocab-llama-bpe.gguf", g);
  const TextSegment segs[] = {{"<|start_header_id|>user<|end_header_id|>\n\n", true},
                              {"Hello <|eot_id|> world", false},
                              {"<|eot_id|>", true}};
  const auto ids = tok->EncodeSegments(segs, /*add_special=*/true);
  const int32_t eot = *tok->Find("<|eot_id|>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eot), 1) << "user text injected a control token";
  EXPECT_EQ(ids.back(), eot);
  // Without special tokens in the user part, segments equal the joined text.
  const TextSegment plain[] = {{"Hello", false}, {" wor", false}, {"ld", true}};
  EXPECT_EQ(tok->EncodeSegments(plain, true), tok->Encode("Hello world", {.add_special = true}));
}

}  // namespace
}  // namespace strata::text
