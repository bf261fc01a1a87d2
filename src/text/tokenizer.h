// text/tokenizer.h — text <-> token ids, as the model's GGUF vocabulary defines.
//
// Promise: Encode reproduces the reference tokenizers of the supported
// vocabularies exactly (tests compare against ../shared/golden/tokenizer/):
// - `tokenizer.ggml.model = llama` (kSpm, SentencePiece): score-driven merges,
//   byte fallback, "▁" for spaces, optional space prefix.
// - `tokenizer.ggml.model = gpt2` (kBpe, byte-level BPE): text is split by the
//   pre-tokenizer `tokenizer.ggml.pre` names (GPT-2, Llama 3 and Qwen2
//   patterns), each piece's bytes become GPT-2 byte characters, and
//   `tokenizer.ggml.merges` apply by rank. Every byte sequence is representable.
// - `tokenizer.ggml.model = bert` (kWpm, WordPiece): text is lower-cased,
//   stripped of accents and split into words and punctuation, and each word
//   cut greedily into the longest vocabulary pieces (internal/wordpiece.h);
//   add_special wraps the tokens in [CLS] ... [SEP]. Lossy: Decode gives the
//   normalised words back, not the text.
// Special tokens in the text are split out first, for both kinds: user-defined
// ones always, control ones only when `parse_special` is set, so user text can
// never smuggle in a control token.
// Round trip (kSpm, kBpe): Decode(Encode(s)) == s for valid UTF-8 text s; for kSpm s must
// not itself contain the space marker "▁" (U+2581). Invalid UTF-8 is tokenized
// as the reference does: kSpm groups bytes by their lead byte's length, kBpe
// reads each invalid byte as U+FFFD. Detokenizer streams text while holding
// back incomplete UTF-8 so partial characters never reach a client.
//
// Threading: a Tokenizer is immutable and thread-safe; a Detokenizer is
// thread-compatible (one per stream).
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto tok, Tokenizer::FromGguf(gguf));
//   std::vector<int32_t> ids = tok->Encode("Once upon a time", {.add_special = true});
//   std::string text = tok->Decode(ids);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.h"
#include "util/status.h"

namespace strata::text {

// GGUF tokenizer.ggml.token_type values.
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class TokenizerKind {
  kSpm,  // tokenizer.ggml.model = llama
  kBpe,  // tokenizer.ggml.model = gpt2
  kWpm,  // tokenizer.ggml.model = bert
};

namespace internal {
class BpeModel;
class StringTable;
class WordPieceModel;
}  // namespace internal

struct EncodeOptions {
  bool add_special = true;     // BOS/EOS as the vocabulary asks (tokenizer.ggml.add_*_token)
  bool parse_special = false;  // control tokens written in the text become tokens
};

// A piece of text to encode with its own special-token rule (chat prompts:
// template scaffolding parses special tokens, message content does not).
struct TextSegment {
  std::string_view text;
  bool parse_special = false;
};

struct DecodeOptions {
  bool render_special = false;      // emit the text of control/unknown tokens
  bool strip_leading_space = true;  // undo the space prefix Encode added (kSpm only;
                                    // kBpe adds none, so nothing is stripped)
};

class Tokenizer {
 public:
  // Reads the tokenizer.ggml.* keys (docs/formats/gguf.md). InvalidArgument,
  // naming the key (and index), for malformed metadata; Unimplemented for a
  // tokenizer model or pre-tokenizer that is not supported. The result does
  // not refer to gguf.
  static util::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const format::GgufFile& gguf);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  TokenizerKind kind() const { return kind_; }
  int32_t n_vocab() const { return n_vocab_; }
  int32_t bos() const { return bos_; }  // -1 when the vocabulary has none
  int32_t eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // End of generation: EOS, EOT, EOM and control tokens that end a turn.
  bool IsEog(int32_t id) const;
  bool IsValid(int32_t id) const { return id >= 0 && id < n_vocab(); }

  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Encodes the concatenation of `segments` as one text, except that special
  // tokens are recognised only inside segments that allow it. Without special
  // tokens this equals Encode of the joined text.
  std::vector<int32_t> EncodeSegments(std::span<const TextSegment> segments,
                                      bool add_special) const;
  // Encodes text that continues an earlier encoding (a conversation's
  // stored tokens, then the rest of its text): no BOS or EOS, and
  // SentencePiece's space prefix before the first piece only when the
  // earlier tokens ended with a special token (`after_special`), as one
  // EncodeSegments of the whole text would have put it.
  std::vector<int32_t> EncodeContinuation(std::span<const TextSegment> segments,
                                          bool after_special) const;
  std::string Decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;
  // The bytes one token contributes to the text (may be part of a UTF-8 character).
  std::string_view Piece(int32_t id, bool render_special = false) const;

  std::string_view TokenText(int32_t id) const;
  TokenType Type(int32_t id) const {
    return static_cast<TokenType>(types_[static_cast<size_t>(id)]);
  }
  std::optional<int32_t> Find(std::string_view text) const;

 private:
  // Bits of strip_: whether a special token swallows the whitespace after
  // (rstrip) or before (lstrip) it when text is split around it.
  static constexpr uint8_t kRstrip = 1, kLstrip = 2;
  struct Fragment {
    int32_t token = -1;     // >= 0: an already-resolved special token
    std::string_view text;  // raw text otherwise
  };

  friend class Detokenizer;  // reads add_space_prefix_

  Tokenizer();
  std::vector<Fragment> SplitSpecial(std::string_view text, bool parse_special) const;
  void EncodeSpm(std::string_view text, std::vector<int32_t>& out) const;
  // EncodeSegments and EncodeContinuation: `after_special` is whether the
  // text starts after a special token (or at the start).
  std::vector<int32_t> EncodeFrom(std::span<const TextSegment> segments, bool add_special,
                                  bool after_special) const;
  int32_t ByteToken(uint8_t byte) const;

  // Per-token data is kept as flat arrays (large vocabularies have 150k+
  // tokens: a std::string per token and a node-based map cost ~20 MB).
  TokenizerKind kind_ = TokenizerKind::kSpm;
  int32_t n_vocab_ = 0;
  std::unique_ptr<internal::StringTable> texts_;   // token texts; Find looks them up
  std::unique_ptr<internal::StringTable> pieces_;  // decoded bytes of every token
  std::vector<float> scores_;                      // empty when the vocabulary has none
  std::vector<uint8_t> types_;                     // TokenType
  std::vector<uint8_t> strip_;                     // kRstrip | kLstrip
  std::vector<int32_t> special_;                   // ids split out of text, longest text first
  std::vector<int32_t> byte_tokens_;               // byte -> id of "<0xXX>", -1 when absent
  std::vector<bool> eog_;
  int32_t bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = true, add_eos_ = false, add_space_prefix_ = true;
  std::unique_ptr<const internal::BpeModel> bpe_;        // kBpe only: pre-tokenizer and merges
  std::unique_ptr<const internal::WordPieceModel> wpm_;  // kWpm only
};

// Streams decoded text: Push returns the text that became complete, holding
// back an unfinished UTF-8 sequence at the end; invalid bytes become U+FFFD, so
// everything returned is valid UTF-8. Finish flushes what is left.
// strip_leading_space drops the space prefix of the first text token, and only
// for vocabularies that add one (as DecodeOptions::strip_leading_space).
// Borrows the tokenizer, which must outlive it.
class Detokenizer {
 public:
  explicit Detokenizer(const Tokenizer& tokenizer, bool strip_leading_space = false)
      : tok_(tokenizer), strip_leading_space_(strip_leading_space) {}
  std::string Push(int32_t id);
  std::string Finish();

 private:
  const Tokenizer& tok_;
  bool strip_leading_space_;
  std::string pending_;  // bytes not yet returned
};

}  // namespace strata::text
