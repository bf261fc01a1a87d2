#include "text/internal/bpe.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <climits>
#include <queue>

#include "text/internal/unicode.h"

namespace strata::text::internal {
namespace {

using util::InvalidArgumentError;
using util::StatusOr;

// ---- Pre-tokenizer names --------------------------------------------------

struct NamedPreTokenizer {
  std::string_view name;
  PreTokenizerSpec spec;
};

// The names llama.cpp maps to these three patterns without any other change
// to tokenization. The Llama 3 family also skips merges for whole-vocabulary
// pre-tokens and adds BOS unless the file says otherwise; smaug-bpe and dbrx
// share only the pattern.
constexpr NamedPreTokenizer kPreTokenizers[] = {
    {"default", {PreTokenizerKind::kGpt2, false, false}},
    {"gpt-2", {PreTokenizerKind::kGpt2, false, false}},
    {"phi-2", {PreTokenizerKind::kGpt2, false, false}},
    {"mpt", {PreTokenizerKind::kGpt2, false, false}},
    {"olmo", {PreTokenizerKind::kGpt2, false, false}},
    {"llama-bpe", {PreTokenizerKind::kLlama3, true, true}},
    {"llama3", {PreTokenizerKind::kLlama3, true, true}},
    {"llama-v3", {PreTokenizerKind::kLlama3, true, true}},
    {"falcon3", {PreTokenizerKind::kLlama3, true, true}},
    {"smaug-bpe", {PreTokenizerKind::kLlama3, false, false}},
    {"dbrx", {PreTokenizerKind::kLlama3, false, false}},
    {"qwen2", {PreTokenizerKind::kQwen2, false, false}},
    {"deepseek-r1-qwen", {PreTokenizerKind::kQwen2, false, false}},
    {"megrez", {PreTokenizerKind::kQwen2, false, false}},
    {"stablelm2", {PreTokenizerKind::kQwen2, false, false}},
};

// ---- Pre-tokenizers ---------------------------------------------------------
//
// Each matcher walks the code points once, at every position taking the first
// alternative of the pattern that matches there (leftmost-first, as a
// backtracking regex engine does). Lookahead never goes past the end of the
// text, which reads as kEnd (no class at all).

enum class Cls : unsigned char { kLetter, kNumber, kSpace, kOther, kEnd };

class Cursor {
 public:
  explicit Cursor(std::span<const char32_t> cps) : cps_(cps), cls_(cps.size()) {
    for (size_t i = 0; i < cps.size(); ++i) {
      switch (Classify(cps[i])) {
        case CharClass::kLetter:
          cls_[i] = Cls::kLetter;
          break;
        case CharClass::kNumber:
          cls_[i] = Cls::kNumber;
          break;
        case CharClass::kWhitespace:
          cls_[i] = Cls::kSpace;
          break;
        case CharClass::kOther:
          cls_[i] = Cls::kOther;
          break;
      }
    }
  }
  size_t size() const { return cps_.size(); }
  // The code point at i, or 0xFFFFFFFF past the end (no real character).
  char32_t cp(size_t i) const { return i < cps_.size() ? cps_[i] : 0xFFFFFFFF; }
  Cls cls(size_t i) const { return i < cls_.size() ? cls_[i] : Cls::kEnd; }
  // The first position at or after i whose class is not c.
  size_t Skip(size_t i, Cls c) const {
    while (cls(i) == c) ++i;
    return i;
  }

 private:
  std::span<const char32_t> cps_;
  std::vector<Cls> cls_;
};

constexpr char32_t AsciiLower(char32_t c) { return (c >= 'A' && c <= 'Z') ? c + ('a' - 'A') : c; }

// 's|'t|'re|'ve|'m|'ll|'d at pos (case-insensitively when fold_case): the end
// of the match, or 0 when there is none. Non-ASCII characters never lower-case
// to these ASCII letters, so folding ASCII only is exact.
size_t MatchContraction(const Cursor& c, size_t pos, bool fold_case) {
  if (c.cp(pos) != '\'' || pos + 1 >= c.size()) return 0;
  const auto at = [&](size_t i) { return fold_case ? AsciiLower(c.cp(i)) : c.cp(i); };
  const char32_t a = at(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 2;
  if (pos + 2 >= c.size()) return 0;
  const char32_t b = at(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
  return 0;
}

// \s+(?!\S)|\s+ at pos, where the whitespace run ends at run_end: the whole run
// at the end of the text, else all but its last character (which then starts
// the next pre-token) unless the run is a single character.
size_t MatchTrailingSpace(const Cursor& c, size_t pos, size_t run_end) {
  const size_t n = run_end - pos;
  if (n > 1 && run_end < c.size()) return run_end - 1;
  return run_end;
}

// The end of the GPT-2 pre-token that starts at pos (pos < c.size()).
size_t NextGpt2(const Cursor& c, size_t pos) {
  if (size_t end = MatchContraction(c, pos, /*fold_case=*/false)) return end;
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': the run of one class after an
  // optional space.
  const size_t start = c.cp(pos) == ' ' ? pos + 1 : pos;
  const Cls k = c.cls(start);
  if (k == Cls::kLetter || k == Cls::kNumber || k == Cls::kOther) return c.Skip(start, k);
  const size_t run_end = c.Skip(pos, Cls::kSpace);
  if (run_end > pos) return MatchTrailingSpace(c, pos, run_end);
  return pos + 1;  // unreachable: every class is covered above
}

// The end of the Llama 3 (max_digits = 3) or Qwen2 (max_digits = 1) pre-token
// that starts at pos (pos < c.size()).
size_t NextLlama3(const Cursor& c, size_t pos, size_t max_digits) {
  if (size_t end = MatchContraction(c, pos, /*fold_case=*/true)) return end;
  const char32_t cp = c.cp(pos);
  const Cls k = c.cls(pos);
  const bool is_newline = cp == '\r' || cp == '\n';
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!is_newline && k != Cls::kNumber) {
    if (k == Cls::kLetter || c.cls(pos + 1) == Cls::kLetter) return c.Skip(pos + 1, Cls::kLetter);
  }
  // \p{N}{1,3} (or \p{N})
  if (k == Cls::kNumber) return std::min(c.Skip(pos, Cls::kNumber), pos + max_digits);
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'. After an optional space the end of the text
  // also "matches" here: the lone space comes out as its own pre-token, as
  // \s+ would produce it.
  const size_t start = cp == ' ' ? pos + 1 : pos;
  const Cls k2 = c.cls(start);
  if (k2 == Cls::kOther || k2 == Cls::kEnd) {
    size_t end = c.Skip(start, Cls::kOther);
    while (c.cp(end) == '\r' || c.cp(end) == '\n') ++end;
    return end;
  }
  // \s*[\r\n]+: up to the last newline of the whitespace run.
  size_t run_end = pos;
  size_t after_newline = 0;
  for (; c.cls(run_end) == Cls::kSpace; ++run_end) {
    if (c.cp(run_end) == '\r' || c.cp(run_end) == '\n') after_newline = run_end + 1;
  }
  if (after_newline > 0) return after_newline;
  if (run_end > pos) return MatchTrailingSpace(c, pos, run_end);
  return pos + 1;  // unreachable: every class is covered above
}

// ---- Byte-level mapping -----------------------------------------------------

constexpr bool MapsToItself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<char32_t, 256> MakeByteToChar() {
  std::array<char32_t, 256> t{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) t[b] = MapsToItself(b) ? static_cast<char32_t>(b) : next++;
  return t;
}
constexpr std::array<char32_t, 256> kByteToChar = MakeByteToChar();
constexpr char32_t kLastMappedChar = 0x100 + 68 - 1;  // 68 bytes are not printable

constexpr std::array<int16_t, kLastMappedChar + 1> MakeCharToByte() {
  std::array<int16_t, kLastMappedChar + 1> t{};
  for (auto& v : t) v = -1;
  for (int b = 0; b < 256; ++b) t[kByteToChar[b]] = static_cast<int16_t>(b);
  return t;
}
constexpr std::array<int16_t, kLastMappedChar + 1> kCharToByte = MakeCharToByte();
static_assert(kByteToChar[' '] == 0x120 && kByteToChar[0xFF] == 0xFF && kByteToChar[0xAD] == 0x143);

// UTF-8 of each byte's character (all below U+0800: one or two bytes).
struct ByteCharUtf8 {
  char bytes[2] = {};
  unsigned char len = 0;
  std::string_view view() const { return {bytes, len}; }
};
constexpr std::array<ByteCharUtf8, 256> MakeByteCharUtf8() {
  std::array<ByteCharUtf8, 256> t{};
  for (int b = 0; b < 256; ++b) {
    const char32_t c = kByteToChar[b];
    if (c < 0x80) {
      t[b].bytes[0] = static_cast<char>(c);
      t[b].len = 1;
    } else {
      t[b].bytes[0] = static_cast<char>(0xC0 | (c >> 6));
      t[b].bytes[1] = static_cast<char>(0x80 | (c & 0x3F));
      t[b].len = 2;
    }
  }
  return t;
}
constexpr std::array<ByteCharUtf8, 256> kByteCharUtf8 = MakeByteCharUtf8();

}  // namespace

StatusOr<PreTokenizerSpec> FindPreTokenizer(std::string_view name) {
  const std::string_view key = name.empty() ? "default" : name;
  for (const NamedPreTokenizer& p : kPreTokenizers) {
    if (p.name == key) return p.spec;
  }
  std::string supported;
  for (const NamedPreTokenizer& p : kPreTokenizers) {
    if (!supported.empty()) supported += ", ";
    supported += p.name;
  }
  return util::UnimplementedError(fmt::format(
      "pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported; supported: {}", name, supported));
}

std::vector<size_t> PreTokenize(PreTokenizerKind kind, std::span<const char32_t> cps) {
  std::vector<size_t> ends;
  if (cps.empty()) return ends;
  const Cursor c(cps);
  ends.reserve(cps.size() / 3 + 1);
  for (size_t pos = 0; pos < cps.size();) {
    switch (kind) {
      case PreTokenizerKind::kGpt2:
        pos = NextGpt2(c, pos);
        break;
      case PreTokenizerKind::kLlama3:
        pos = NextLlama3(c, pos, 3);
        break;
      case PreTokenizerKind::kQwen2:
        pos = NextLlama3(c, pos, 1);
        break;
    }
    ends.push_back(pos);
  }
  return ends;
}

char32_t ByteToChar(uint8_t byte) { return kByteToChar[byte]; }

std::optional<uint8_t> CharToByte(char32_t c) {
  if (c > kLastMappedChar || kCharToByte[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(kCharToByte[c]);
}

std::string DecodeByteLevel(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = DecodeUtf8Char(text, i);
    std::optional<uint8_t> b = c.valid ? CharToByte(c.cp) : std::nullopt;
    if (b) {
      out.push_back(static_cast<char>(*b));
    } else {
      out.append(text.substr(i, c.len));
    }
    i += c.len;
  }
  return out;
}

// ---- BpeModel ---------------------------------------------------------------

size_t BpeModel::PairHash(uint64_t key) {
  // A 64-bit finalizer: the identity hash of std::hash would put every pair
  // with the same right id mod the bucket count in one bucket.
  key ^= key >> 33;
  key *= 0xFF51AFD7ED558CCDull;
  key ^= key >> 33;
  return static_cast<size_t>(key);
}

StatusOr<std::unique_ptr<BpeModel>> BpeModel::Build(const TokenIndex& index, int32_t n_vocab,
                                                    const format::GgufStrings& merges,
                                                    PreTokenizerSpec pre, int32_t unk) {
  if (merges.size() > static_cast<size_t>(INT32_MAX)) {
    return InvalidArgumentError("tokenizer.ggml.merges has more than 2^31 entries");
  }
  std::unique_ptr<BpeModel> m(new BpeModel());
  m->n_vocab_ = n_vocab;
  m->unk_ = unk;
  m->pre_ = pre;

  // Every text that can ever be a symbol gets an id: the 256 byte characters
  // and every merge result. Vocabulary texts keep their token id; the others
  // (only in an incomplete vocabulary) get ids from n_vocab up. Merging by id
  // is then exactly merging by text, as the reference does.
  std::unordered_map<std::string, int32_t> extra_index;
  auto find = [&](std::string_view text) -> int32_t {
    if (const int32_t id = index.Find(text); id >= 0) return id;
    if (extra_index.empty()) return -1;
    auto it = extra_index.find(std::string(text));
    return it == extra_index.end() ? -1 : it->second;
  };
  auto intern = [&](std::string_view text) -> StatusOr<int32_t> {
    if (int32_t id = find(text); id >= 0) return id;
    if (static_cast<int64_t>(n_vocab) + static_cast<int64_t>(m->extra_bytes_.size()) >= INT32_MAX) {
      return InvalidArgumentError("tokenizer.ggml.merges produce more than 2^31 distinct symbols");
    }
    const int32_t id = n_vocab + static_cast<int32_t>(m->extra_bytes_.size());
    m->extra_bytes_.push_back(DecodeByteLevel(text));
    extra_index.emplace(std::string(text), id);
    return id;
  };
  for (int b = 0; b < 256; ++b) {
    STRATA_ASSIGN_OR_RETURN(m->byte_symbol_[b], intern(kByteCharUtf8[b].view()));
  }

  struct Parsed {
    std::string_view left, right;
    int32_t result;
  };
  std::vector<Parsed> parsed(merges.size());
  std::string joined;
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string_view s = merges[i];
    // Split at the first space after the first character, as the reference does.
    const size_t space = s.size() > 1 ? s.find(' ', 1) : std::string_view::npos;
    if (space == std::string_view::npos || space + 1 == s.size()) {
      return InvalidArgumentError(fmt::format(
          "tokenizer.ggml.merges[{}] = '{}' is not two tokens separated by a space", i, s));
    }
    parsed[i].left = s.substr(0, space);
    parsed[i].right = s.substr(space + 1);
    joined.assign(parsed[i].left);
    joined.append(parsed[i].right);
    STRATA_ASSIGN_OR_RETURN(parsed[i].result, intern(joined));
  }
  m->merges_.assign(std::bit_ceil(merges.size() + merges.size() / 3 + 1), MergeSlot{});
  for (size_t i = 0; i < merges.size(); ++i) {
    const int32_t left = find(parsed[i].left);
    const int32_t right = find(parsed[i].right);
    if (left < 0 || right < 0) continue;  // can never apply
    m->AddMerge(PairKey(left, right), static_cast<int32_t>(i), parsed[i].result);
  }
  return m;
}

void BpeModel::AddMerge(uint64_t key, int32_t rank, int32_t result) {
  const size_t mask = merges_.size() - 1;
  for (size_t at = PairHash(key) & mask;; at = (at + 1) & mask) {
    MergeSlot& slot = merges_[at];
    if (slot.key == key) return;
    if (slot.key == kNoPair) {
      slot = MergeSlot{key, rank, result};
      return;
    }
  }
}

const BpeModel::MergeSlot* BpeModel::FindMerge(uint64_t key) const {
  const size_t mask = merges_.size() - 1;
  for (size_t at = PairHash(key) & mask;; at = (at + 1) & mask) {
    const MergeSlot& slot = merges_[at];
    if (slot.key == key) return &slot;
    if (slot.key == kNoPair) return nullptr;
  }
}

void BpeModel::Encode(std::string_view text, const TokenIndex& index,
                      std::vector<int32_t>& out) const {
  if (text.empty()) return;
  // The reference splits code points and re-encodes them, so invalid bytes
  // reach the merges as U+FFFD.
  const std::vector<char32_t> cps = DecodeUtf8(text);
  std::string word;
  size_t begin = 0;
  for (size_t end : PreTokenize(pre_.kind, cps)) {
    word.clear();
    for (size_t i = begin; i < end; ++i) AppendUtf8(cps[i], word);
    EncodeWord(word, index, out);
    begin = end;
  }
}

void BpeModel::EncodeWord(std::string_view bytes, const TokenIndex& index,
                          std::vector<int32_t>& out) const {
  if (bytes.empty()) return;
  if (pre_.ignore_merges) {
    std::string chars;
    chars.reserve(bytes.size() * 2);
    for (char b : bytes) chars.append(kByteCharUtf8[static_cast<uint8_t>(b)].view());
    if (const int32_t id = index.Find(chars); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  if (bytes.size() == 1) {
    Emit(byte_symbol_[static_cast<uint8_t>(bytes[0])], out);
    return;
  }

  struct Symbol {
    int32_t id;    // symbol id; -1 once merged into its left neighbour
    int32_t prev;  // index of the previous live symbol, -1 at the start
    int32_t next;  // index of the next live symbol, -1 at the end
  };
  struct Pair {
    int32_t rank;
    int32_t left, right;        // symbol indices
    int32_t left_id, right_id;  // their ids when the pair was queued
    int32_t result;
  };
  struct LaterFirst {  // min-heap: lowest rank, then leftmost
    bool operator()(const Pair& a, const Pair& b) const {
      return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
  };

  const int32_t n = static_cast<int32_t>(bytes.size());
  std::vector<Symbol> syms(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    syms[static_cast<size_t>(i)] =
        Symbol{byte_symbol_[static_cast<uint8_t>(bytes[static_cast<size_t>(i)])], i - 1,
               i + 1 < n ? i + 1 : -1};
  }
  std::vector<Pair> heap_storage;
  heap_storage.reserve(static_cast<size_t>(n));
  std::priority_queue<Pair, std::vector<Pair>, LaterFirst> queue(LaterFirst{},
                                                                 std::move(heap_storage));
  auto try_pair = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const int32_t left_id = syms[static_cast<size_t>(left)].id;
    const int32_t right_id = syms[static_cast<size_t>(right)].id;
    const MergeSlot* merge = FindMerge(PairKey(left_id, right_id));
    if (merge == nullptr) return;
    queue.push(Pair{merge->rank, left, right, left_id, right_id, merge->result});
  };
  for (int32_t i = 1; i < n; ++i) try_pair(i - 1, i);

  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol& l = syms[static_cast<size_t>(p.left)];
    Symbol& r = syms[static_cast<size_t>(p.right)];
    // Stale: a side has merged since (a symbol's id changes whenever it grows).
    if (l.id != p.left_id || r.id != p.right_id || l.next != p.right) continue;
    l.id = p.result;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = p.left;
    r.id = -1;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }
  for (int32_t i = 0; i >= 0; i = syms[static_cast<size_t>(i)].next) {
    Emit(syms[static_cast<size_t>(i)].id, out);
  }
}

void BpeModel::Emit(int32_t symbol, std::vector<int32_t>& out) const {
  if (symbol < n_vocab_) {
    out.push_back(symbol);
    return;
  }
  // Not a vocabulary entry: fall back to the tokens of its bytes' characters.
  for (char b : extra_bytes_[static_cast<size_t>(symbol - n_vocab_)]) {
    const int32_t id = byte_symbol_[static_cast<uint8_t>(b)];
    if (id < n_vocab_) {
      out.push_back(id);
    } else if (unk_ >= 0) {
      out.push_back(unk_);
    }
  }
}

}  // namespace strata::text::internal
