#include "text/internal/wordpiece.h"

#include <algorithm>

#include "text/internal/unicode.h"

namespace strata::text::internal {
namespace {

constexpr std::string_view kWordMarker = "\xE2\x96\x81";  // U+2581 "▁"

// CJK ideograph blocks BERT splits into single-character words (the reference
// keeps the Hugging Face tokenizer's range 0x2B920.. for Extension E, a
// historical slip, and so do we).
bool IsCjkIdeograph(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

}  // namespace

std::vector<std::string> WordPieceWords(std::string_view text) {
  std::vector<std::string> words(1);
  for (const char32_t raw : DecodeUtf8(text)) {
    const char32_t cp = FirstOfDecomposition(raw);
    if (Classify(cp) == CharClass::kWhitespace) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const Category cat = CategoryOf(cp);
    if (cp == 0 || cp == kReplacementChar || cat == Category::kControl) continue;
    std::string s;
    AppendUtf8(SimpleLowercase(cp), s);
    if (cat == Category::kPunctuation || (cp < 0x7F && cat == Category::kSymbol) ||
        IsCjkIdeograph(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = std::move(s);
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

WordPieceModel::WordPieceModel(const StringTable& vocab, int32_t unk) : vocab_(vocab), unk_(unk) {
  for (int32_t i = 0; i < vocab.size(); ++i) {
    max_piece_bytes_ = std::max(max_piece_bytes_, vocab[i].size());
  }
}

void WordPieceModel::Encode(std::string_view text, std::vector<int32_t>& out) const {
  std::string word;
  for (const std::string& w : WordPieceWords(text)) {
    word.assign(kWordMarker);
    word += w;
    const size_t first = out.size();
    // Greedy longest match over bytes, as the reference walks them.
    for (size_t i = 0; i < word.size();) {
      int32_t id = -1;
      size_t end = std::min(word.size(), i + max_piece_bytes_ + 1);
      for (; end > i; --end) {
        id = vocab_.Find(std::string_view(word).substr(i, end - i));
        if (id >= 0) break;
      }
      if (id < 0) {
        out.resize(first);
        break;
      }
      out.push_back(id);
      i = end;
    }
    if (out.size() == first && unk_ >= 0) out.push_back(unk_);
  }
}

}  // namespace strata::text::internal
