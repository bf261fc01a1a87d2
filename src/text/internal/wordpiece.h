// text/internal/wordpiece.h — BERT's WordPiece tokenizer (`tokenizer.ggml.model
// = bert`), as llama.cpp converts and runs it (private to text/).
//
// Promise: Encode reproduces the reference exactly
// (../shared/golden/tokenizer/ggml-vocab-bert-bge.gguf.*):
// - Words: each character is replaced by the first code point of its
//   canonical decomposition (so accents fall away: "Ä" reads as "A") and
//   lower-cased; NUL, U+FFFD and format/control/private-use characters are
//   dropped; whitespace ends a word; punctuation, ASCII symbols and CJK
//   ideographs are words of their own.
// - Pieces: a GGUF BERT vocabulary spells a word-initial piece with a "▁"
//   prefix and a continuation piece bare (the converter removed BERT's "##").
//   Each word, prefixed with "▁", is cut greedily into the longest pieces the
//   vocabulary has; a word that cannot be cut completely is one unknown token.
//
// Threading: immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "text/internal/string_table.h"

namespace strata::text::internal {

// The words of `text` after normalisation (lower-cased, accents removed).
std::vector<std::string> WordPieceWords(std::string_view text);

class WordPieceModel {
 public:
  // `vocab` must be indexed (StringTable::BuildIndex) and outlive the model.
  WordPieceModel(const StringTable& vocab, int32_t unk);
  // Appends the tokens of raw text (no special tokens) to `out`.
  void Encode(std::string_view text, std::vector<int32_t>& out) const;

 private:
  const StringTable& vocab_;
  int32_t unk_;
  size_t max_piece_bytes_ = 0;
};

}  // namespace strata::text::internal
