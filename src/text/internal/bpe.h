// text/internal/bpe.h — GPT-2 style byte-level BPE (private to text/):
// pre-tokenizers, the byte <-> character mapping, and merging by rank.
//
// Promise: BpeModel::Encode reproduces the reference tokenizer (llama.cpp's
// llm_tokenizer_bpe for `tokenizer.ggml.model = gpt2`) exactly for the
// pre-tokenizers listed in FindPreTokenizer. Text is read as code points the
// way the reference reads it (invalid UTF-8 bytes become U+FFFD), split into
// pre-tokens by a hand-written matcher equivalent to the pre-tokenizer's
// regex, each pre-token's bytes become GPT-2 "bytes to unicode" characters,
// and adjacent symbols merge lowest rank first (leftmost on ties). Encode is
// O(n log n) in the length of each pre-token and keeps no state between calls.
//
// Threading: a BpeModel is immutable and thread-safe; the free functions are
// pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "format/gguf.h"
#include "text/internal/string_table.h"
#include "util/status.h"

namespace strata::text::internal {

// The regex a vocabulary splits text with before merging.
enum class PreTokenizerKind {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
  //   ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // As kLlama3, with \p{N} (one digit per pre-token) for \p{N}{1,3}.
  kQwen2,
};

struct PreTokenizerSpec {
  PreTokenizerKind kind = PreTokenizerKind::kGpt2;
  // A pre-token that is itself a vocabulary entry is emitted whole, without
  // merging (tiktoken-derived vocabularies hold entries no merge sequence reaches).
  bool ignore_merges = false;
  // The default of tokenizer.ggml.add_bos_token when the key is absent.
  bool add_bos = false;
};

// The pre-tokenizer named by tokenizer.ggml.pre ("" when the key is absent,
// read like "default"). Unimplemented, naming the value and listing the
// supported names, for any other.
util::StatusOr<PreTokenizerSpec> FindPreTokenizer(std::string_view name);

// Splits code points into pre-tokens. Returns the end (exclusive) of each
// pre-token in order; the last one is cps.size(). Empty input gives none.
std::vector<size_t> PreTokenize(PreTokenizerKind kind, std::span<const char32_t> cps);

// GPT-2's reversible byte -> character mapping: printable Latin-1 bytes map to
// themselves, the other 68 bytes to U+0100.. in byte order (space -> U+0120 "Ġ").
char32_t ByteToChar(uint8_t byte);
// The inverse; nullopt for characters outside the 256 of the mapping.
std::optional<uint8_t> CharToByte(char32_t c);
// The bytes a byte-level token text stands for. Characters outside the
// mapping (and invalid UTF-8) are copied through unchanged.
std::string DecodeByteLevel(std::string_view text);

// Token text -> id (StringTable::Find).
using TokenIndex = StringTable;

class BpeModel {
 public:
  // n_vocab: the number of tokens; index: their texts. merges: the strings of
  // tokenizer.ggml.merges, "left right", rank = position (the first of a
  // repeated pair wins). A merge whose parts can never be symbols (texts that
  // are neither a byte character nor the result of a merge) is ignored, as the
  // reference in effect does. unk: the unknown token, -1 if none. Returns
  // InvalidArgument naming tokenizer.ggml.merges[i] for a string that is not
  // two non-empty parts separated by a space.
  static util::StatusOr<std::unique_ptr<BpeModel>> Build(const TokenIndex& index, int32_t n_vocab,
                                                         const format::GgufStrings& merges,
                                                         PreTokenizerSpec pre, int32_t unk);

  // Appends the ids of text (raw text between special tokens) to out. index
  // must be the one Build saw. Symbols that are not vocabulary entries (an
  // incomplete vocabulary) come out as the tokens of their bytes' characters,
  // or unk where even those are missing (nothing when there is no unk).
  void Encode(std::string_view text, const TokenIndex& index, std::vector<int32_t>& out) const;

  const PreTokenizerSpec& pre_tokenizer() const { return pre_; }

 private:
  // One slot of the open-addressing merge table (load <= 0.75).
  struct MergeSlot {
    uint64_t key = kNoPair;  // PairKey(left, right)
    int32_t rank = 0;
    int32_t result = 0;  // symbol id of left + right
  };
  static constexpr uint64_t kNoPair = UINT64_MAX;  // ids are >= 0: never a real key
  static size_t PairHash(uint64_t key);
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }

  BpeModel() = default;
  void EncodeWord(std::string_view bytes, const TokenIndex& index, std::vector<int32_t>& out) const;
  void Emit(int32_t symbol, std::vector<int32_t>& out) const;
  // Inserts unless the pair is present (the first merge of a pair wins).
  void AddMerge(uint64_t key, int32_t rank, int32_t result);
  const MergeSlot* FindMerge(uint64_t key) const;

  // Symbol ids: [0, n_vocab_) are vocabulary ids; n_vocab_ + i is extra_bytes_[i],
  // a byte character or merge result the vocabulary lacks.
  int32_t n_vocab_ = 0;
  int32_t unk_ = -1;
  PreTokenizerSpec pre_;
  int32_t byte_symbol_[256] = {};         // byte -> symbol id of its character
  std::vector<std::string> extra_bytes_;  // raw bytes of each extra symbol
  std::vector<MergeSlot> merges_;         // power-of-two size
};

}  // namespace strata::text::internal
