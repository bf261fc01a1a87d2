#include "text/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <deque>
#include <map>
#include <queue>

#include <fmt/format.h>

#include "text/internal/bpe.h"
#include "text/internal/string_table.h"
#include "text/internal/wordpiece.h"
#include "util/utf8.h"

namespace strata::text {
namespace {

using util::InvalidArgumentError;
using util::StatusOr;

constexpr std::string_view kSpaceMarker = "\xE2\x96\x81";  // U+2581 "▁"

// Texts of control tokens that end a turn in common chat formats.
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",
    "<|endoftext|>", "<|eom_id|>", "</s>",    "<|end_of_text|>",
};

std::string ReplaceAll(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  while (i < s.size()) {
    if (s.compare(i, from.size(), from) == 0) {
      out.append(to);
      i += from.size();
    } else {
      out.push_back(s[i]);
      ++i;
    }
  }
  return out;
}

// "<0x0A>" -> 10; nullopt for any other text.
std::optional<uint8_t> ParseByteToken(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<uint8_t>(hi * 16 + lo);
}

bool IsSpecialType(TokenType t) {
  return t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown;
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromGguf(const format::GgufFile& gguf) {
  STRATA_ASSIGN_OR_RETURN(std::string_view model_kind, gguf.GetString("tokenizer.ggml.model"));
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  if (model_kind == "llama") {
    t->kind_ = TokenizerKind::kSpm;
  } else if (model_kind == "gpt2") {
    t->kind_ = TokenizerKind::kBpe;
  } else if (model_kind == "bert") {
    t->kind_ = TokenizerKind::kWpm;
  } else {
    return util::UnimplementedError(
        fmt::format("tokenizer '{}' (tokenizer.ggml.model) is not supported; supported: llama "
                    "(SentencePiece), gpt2 (byte-level BPE), bert (WordPiece)",
                    model_kind));
  }
  const bool bpe = t->kind_ == TokenizerKind::kBpe;
  const bool wpm = t->kind_ == TokenizerKind::kWpm;
  internal::PreTokenizerSpec pre;
  if (bpe) {
    // Absent in files converted before pre-tokenizers were recorded: "default".
    STRATA_ASSIGN_OR_RETURN(std::string_view pre_name, gguf.GetStringOr("tokenizer.ggml.pre", ""));
    STRATA_ASSIGN_OR_RETURN(pre, internal::FindPreTokenizer(pre_name));
  }

  STRATA_ASSIGN_OR_RETURN(const format::GgufValue* tokens, gguf.GetArray("tokenizer.ggml.tokens"));
  if (tokens->element_type() != format::GgufValueType::kString || tokens->size() == 0) {
    return InvalidArgumentError("tokenizer.ggml.tokens must be a non-empty array of strings");
  }
  if (tokens->size() > static_cast<uint64_t>(INT32_MAX)) {
    return InvalidArgumentError("tokenizer.ggml.tokens has more than 2^31 entries");
  }
  const size_t n = tokens->size();
  t->n_vocab_ = static_cast<int32_t>(n);
  t->texts_ = std::make_unique<internal::StringTable>();
  for (std::string_view text : tokens->strings()) {
    if (!t->texts_->Append(text)) {
      return InvalidArgumentError("tokenizer.ggml.tokens holds more than 4 GiB of text");
    }
  }
  t->texts_->BuildIndex();  // the first of duplicate texts wins, as in the reference
  t->types_.assign(n, static_cast<uint8_t>(TokenType::kNormal));
  t->strip_.assign(n, 0);

  if (const format::GgufValue* scores = gguf.Find("tokenizer.ggml.scores")) {
    if (!scores->is_array() || scores->size() != n ||
        (scores->element_type() != format::GgufValueType::kFloat32 &&
         scores->element_type() != format::GgufValueType::kFloat64)) {
      return InvalidArgumentError(
          fmt::format("tokenizer.ggml.scores must be an array of {} floats, got {}", n,
                      scores->DebugString(2)));
    }
    t->scores_.resize(n);
    for (size_t i = 0; i < n; ++i) t->scores_[i] = static_cast<float>(*scores->FloatAt(i));
  }
  if (const format::GgufValue* types = gguf.Find("tokenizer.ggml.token_type")) {
    if (!types->is_array() || types->size() != n) {
      return InvalidArgumentError(
          fmt::format("tokenizer.ggml.token_type must be an array of {} integers, got {}", n,
                      types->DebugString(2)));
    }
    for (size_t i = 0; i < n; ++i) {
      auto v = types->IntAt(i);
      if (!v || *v < 0 || *v > 6) {
        return InvalidArgumentError(fmt::format("tokenizer.ggml.token_type[{}] is invalid", i));
      }
      t->types_[i] = static_cast<uint8_t>(*v);
    }
  }

  auto special_id = [&](std::string_view key, int32_t fallback) -> StatusOr<int32_t> {
    STRATA_ASSIGN_OR_RETURN(
        uint64_t id,
        gguf.GetUintOr(key, static_cast<uint64_t>(fallback < 0 ? UINT32_MAX : fallback)));
    if (id == UINT32_MAX || id == UINT64_MAX) return -1;
    if (id >= n) {
      return InvalidArgumentError(
          fmt::format("{} = {} is outside the vocabulary of {}", key, id, n));
    }
    return static_cast<int32_t>(id);
  };
  // SentencePiece vocabularies have conventional ids when the keys are absent;
  // BPE vocabularies have none.
  if (wpm) {
    // BERT: [CLS] text [SEP]. The converter writes cls_token_id and
    // seperator_token_id (sic); BERT's own ids are the fallback.
    STRATA_ASSIGN_OR_RETURN(int32_t bos, special_id("tokenizer.ggml.bos_token_id", 101));
    STRATA_ASSIGN_OR_RETURN(t->bos_, special_id("tokenizer.ggml.cls_token_id", bos));
    STRATA_ASSIGN_OR_RETURN(t->eos_, special_id("tokenizer.ggml.seperator_token_id", 102));
    STRATA_ASSIGN_OR_RETURN(t->unk_, special_id("tokenizer.ggml.unknown_token_id", 100));
  } else {
    STRATA_ASSIGN_OR_RETURN(t->bos_, special_id("tokenizer.ggml.bos_token_id", bpe ? -1 : 1));
    STRATA_ASSIGN_OR_RETURN(t->eos_, special_id("tokenizer.ggml.eos_token_id", bpe ? -1 : 2));
    STRATA_ASSIGN_OR_RETURN(t->unk_, special_id("tokenizer.ggml.unknown_token_id", bpe ? -1 : 0));
  }
  STRATA_ASSIGN_OR_RETURN(int32_t eot, special_id("tokenizer.ggml.eot_token_id", -1));
  STRATA_ASSIGN_OR_RETURN(int32_t eom, special_id("tokenizer.ggml.eom_token_id", -1));
  // Only validated: nothing here pads.
  STRATA_RETURN_IF_ERROR(special_id("tokenizer.ggml.padding_token_id", -1).status());
  // BPE: no BOS unless the key asks for it, except that the Llama 3 family of
  // pre-tokenizers defaults to BOS as the reference does.
  STRATA_ASSIGN_OR_RETURN(t->add_bos_,
                          gguf.GetBoolOr("tokenizer.ggml.add_bos_token", bpe ? pre.add_bos : true));
  STRATA_ASSIGN_OR_RETURN(
      t->add_eos_,
      gguf.GetBoolOr(wpm ? "tokenizer.ggml.add_sep_token" : "tokenizer.ggml.add_eos_token", wpm));
  STRATA_ASSIGN_OR_RETURN(t->add_space_prefix_,
                          gguf.GetBoolOr("tokenizer.ggml.add_space_prefix", true));
  if (bpe) t->add_space_prefix_ = false;  // byte-level BPE encodes spaces as they are
  if (wpm) t->add_space_prefix_ = true;   // every word starts with "▁", decoded as a space
  if (t->add_bos_ && t->bos_ < 0) {
    return InvalidArgumentError("tokenizer asks for a BOS token but has no bos_token_id");
  }

  if (bpe) {
    const format::GgufValue* merges = gguf.Find("tokenizer.ggml.merges");
    if (merges == nullptr) {
      return InvalidArgumentError(
          "tokenizer.ggml.merges is missing; a gpt2 (BPE) tokenizer needs its merges");
    }
    if (!merges->is_array() ||
        (merges->element_type() != format::GgufValueType::kString && merges->size() != 0)) {
      return InvalidArgumentError(fmt::format(
          "tokenizer.ggml.merges must be an array of strings, got {}", merges->DebugString(2)));
    }
    STRATA_ASSIGN_OR_RETURN(t->bpe_, internal::BpeModel::Build(*t->texts_, static_cast<int32_t>(n),
                                                               merges->strings(), pre, t->unk_));
  }
  if (wpm) t->wpm_ = std::make_unique<const internal::WordPieceModel>(*t->texts_, t->unk_);
  t->byte_tokens_.assign(256, -1);
  for (int32_t i = 0; i < t->n_vocab_; ++i) {
    if (t->Type(i) != TokenType::kByte) continue;
    if (auto b = ParseByteToken(t->TokenText(i))) t->byte_tokens_[*b] = i;
  }
  for (int32_t i = 0; i < t->n_vocab_; ++i) {
    if (IsSpecialType(t->Type(i)) && !t->TokenText(i).empty()) t->special_.push_back(i);
  }
  std::stable_sort(t->special_.begin(), t->special_.end(), [&](int32_t a, int32_t b) {
    return t->TokenText(a).size() > t->TokenText(b).size();
  });

  // Phi-3 vocabularies strip whitespace after their special tokens (their
  // tokenizer.json marks them rstrip), except the classic SentencePiece ones.
  std::string name(gguf.GetStringOr("general.name", "").value());
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (int32_t id : t->special_) t->strip_[static_cast<size_t>(id)] |= kRstrip;
    for (std::string_view s : {"<unk>", "<s>", "<|endoftext|>"}) {
      if (auto id = t->Find(s)) t->strip_[static_cast<size_t>(*id)] &= ~kRstrip;
    }
    if (auto id = t->Find("</s>")) t->strip_[static_cast<size_t>(*id)] |= kRstrip;
  }

  t->pieces_ = std::make_unique<internal::StringTable>();
  for (int32_t i = 0; i < t->n_vocab_; ++i) {
    const std::string_view text = t->TokenText(i);
    std::string piece;
    switch (t->Type(i)) {
      case TokenType::kNormal:
        piece = bpe ? internal::DecodeByteLevel(text) : ReplaceAll(text, kSpaceMarker, " ");
        break;
      case TokenType::kUserDefined:
        piece = text;
        break;
      case TokenType::kByte:
        if (auto b = ParseByteToken(text)) piece = std::string(1, static_cast<char>(*b));
        break;
      default:
        break;  // control, unknown, unused: no text unless rendered explicitly
    }
    if (!t->pieces_->Append(piece)) {
      return InvalidArgumentError("tokenizer.ggml.tokens decode to more than 4 GiB of text");
    }
  }

  t->eog_.assign(n, false);
  for (int32_t id : {t->eos_, eot, eom}) {
    if (id >= 0) t->eog_[static_cast<size_t>(id)] = true;
  }
  for (std::string_view s : kEogTexts) {
    if (auto id = t->Find(s); id && t->Type(*id) == TokenType::kControl) {
      t->eog_[static_cast<size_t>(*id)] = true;
    }
  }
  return t;
}

bool Tokenizer::IsEog(int32_t id) const { return IsValid(id) && eog_[static_cast<size_t>(id)]; }

std::optional<int32_t> Tokenizer::Find(std::string_view text) const {
  const int32_t id = texts_->Find(text);
  if (id < 0) return std::nullopt;
  return id;
}

std::string_view Tokenizer::TokenText(int32_t id) const { return (*texts_)[id]; }

int32_t Tokenizer::ByteToken(uint8_t byte) const {
  const int32_t id = byte_tokens_[byte];
  return id >= 0 ? id : unk_;
}

std::string_view Tokenizer::Piece(int32_t id, bool render_special) const {
  if (!IsValid(id)) return {};
  const TokenType type = Type(id);
  if (render_special && (type == TokenType::kControl || type == TokenType::kUnknown)) {
    return TokenText(id);
  }
  return (*pieces_)[id];
}

// Splits text around special tokens, longest first. Control and unknown tokens
// are recognised only with parse_special; user-defined ones always.
std::vector<Tokenizer::Fragment> Tokenizer::SplitSpecial(std::string_view text,
                                                         bool parse_special) const {
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back(Fragment{-1, text});
  for (int32_t id : special_) {
    const std::string_view sp_text = TokenText(id);
    const TokenType sp_type = Type(id);
    const uint8_t sp_strip = strip_[static_cast<size_t>(id)];
    if (!parse_special && (sp_type == TokenType::kControl || sp_type == TokenType::kUnknown)) {
      continue;
    }
    std::vector<Fragment> next;
    next.reserve(frags.size());
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      std::string_view rest = f.text;
      while (true) {
        const size_t at = rest.find(sp_text);
        if (at == std::string_view::npos) {
          if (!rest.empty()) next.push_back(Fragment{-1, rest});
          break;
        }
        std::string_view left = rest.substr(0, at);
        if (sp_strip & kLstrip) {
          while (!left.empty() && std::isspace(static_cast<unsigned char>(left.back()))) {
            left.remove_suffix(1);
          }
        }
        if (!left.empty()) next.push_back(Fragment{-1, left});
        next.push_back(Fragment{id, {}});
        rest = rest.substr(at + sp_text.size());
        if (sp_strip & kRstrip) {
          while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front()))) {
            rest.remove_prefix(1);
          }
        }
      }
    }
    frags = std::move(next);
  }
  return frags;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, const EncodeOptions& options) const {
  const TextSegment one{text, options.parse_special};
  return EncodeSegments(std::span(&one, 1), options.add_special);
}

std::vector<int32_t> Tokenizer::EncodeSegments(std::span<const TextSegment> segments,
                                               bool add_special) const {
  return EncodeFrom(segments, add_special, /*after_special=*/true);
}

std::vector<int32_t> Tokenizer::EncodeContinuation(std::span<const TextSegment> segments,
                                                   bool after_special) const {
  return EncodeFrom(segments, /*add_special=*/false, after_special);
}

std::vector<int32_t> Tokenizer::EncodeFrom(std::span<const TextSegment> segments, bool add_special,
                                           bool after_special) const {
  // Split each segment by its own rule, then join raw text that meets across a
  // segment boundary so it is tokenized as one piece.
  std::vector<Fragment> frags;
  std::deque<std::string> joined;  // storage of merged raw fragments (stable addresses)
  size_t total = 0;
  for (const TextSegment& seg : segments) {
    total += seg.text.size();
    for (const Fragment& f : SplitSpecial(seg.text, seg.parse_special)) {
      if (f.token < 0 && !frags.empty() && frags.back().token < 0) {
        joined.push_back(std::string(frags.back().text) + std::string(f.text));
        frags.back().text = joined.back();
      } else {
        frags.push_back(f);
      }
    }
  }
  std::vector<int32_t> out;
  out.reserve(total / 3 + 4);
  if (add_special && add_bos_) out.push_back(bos_);
  bool prev_special = after_special;  // the first fragment of a text gets the space prefix
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    if (kind_ == TokenizerKind::kBpe) {
      bpe_->Encode(f.text, *texts_, out);
      continue;
    }
    if (kind_ == TokenizerKind::kWpm) {
      wpm_->Encode(f.text, out);
      continue;
    }
    std::string raw;
    if (add_space_prefix_ && prev_special) raw.push_back(' ');
    raw.append(f.text);
    EncodeSpm(ReplaceAll(raw, " ", kSpaceMarker), out);
    prev_special = false;
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

// SentencePiece BPE: start from single UTF-8 characters and repeatedly merge
// the adjacent pair whose concatenation is the highest-scoring vocabulary
// entry (leftmost first on ties). Symbols that never became a token are
// emitted as their bytes' <0xXX> tokens.
void Tokenizer::EncodeSpm(std::string_view text, std::vector<int32_t>& out) const {
  struct Symbol {
    size_t start = 0, len = 0;
    int prev = -1, next = -1;
  };
  struct Pair {
    int left, right;
    float score;
    size_t len;
  };
  struct PairOrder {  // max-heap: higher score first, then the leftmost pair
    bool operator()(const Pair& a, const Pair& b) const {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    }
  };

  std::vector<Symbol> syms;
  for (size_t i = 0; i < text.size();) {
    const size_t len =
        std::min(util::Utf8SequenceLength(static_cast<unsigned char>(text[i])), text.size() - i);
    Symbol s;
    s.start = i;
    s.len = len;
    s.prev = static_cast<int>(syms.size()) - 1;
    i += len;
    s.next = i == text.size() ? -1 : static_cast<int>(syms.size()) + 1;
    syms.push_back(s);
  }
  if (syms.empty()) return;

  std::priority_queue<Pair, std::vector<Pair>, PairOrder> queue;
  std::map<std::string_view, std::pair<int, int>> merged_from;
  auto try_pair = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const std::string_view s =
        text.substr(syms[static_cast<size_t>(left)].start,
                    syms[static_cast<size_t>(left)].len + syms[static_cast<size_t>(right)].len);
    auto id = Find(s);
    if (!id) return;
    const float score = scores_.empty() ? 0.0f : scores_[static_cast<size_t>(*id)];
    queue.push(Pair{left, right, score, s.size()});
    merged_from[s] = {left, right};
  };
  for (size_t i = 1; i < syms.size(); ++i) try_pair(static_cast<int>(i) - 1, static_cast<int>(i));

  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    Symbol& l = syms[static_cast<size_t>(p.left)];
    Symbol& r = syms[static_cast<size_t>(p.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != p.len) continue;  // stale pair
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) syms[static_cast<size_t>(r.next)].prev = p.left;
    try_pair(l.prev, p.left);
    try_pair(p.left, l.next);
  }

  // Emit each final symbol: as a token, via the pair it was merged from, or as bytes.
  auto emit = [&](auto&& self, int idx) -> void {
    const Symbol& s = syms[static_cast<size_t>(idx)];
    const std::string_view piece = text.substr(s.start, s.len);
    if (auto id = Find(piece)) {
      out.push_back(*id);
      return;
    }
    auto it = merged_from.find(piece);
    if (it == merged_from.end()) {
      for (char c : piece) out.push_back(ByteToken(static_cast<uint8_t>(c)));
      return;
    }
    self(self, it->second.first);
    self(self, it->second.second);
  };
  for (int i = 0; i != -1; i = syms[static_cast<size_t>(i)].next) emit(emit, i);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, const DecodeOptions& options) const {
  std::string out;
  bool first_text = true;
  for (int32_t id : ids) {
    std::string_view piece = Piece(id, options.render_special);
    if (piece.empty()) continue;
    if (first_text && options.strip_leading_space && add_space_prefix_ &&
        Type(id) == TokenType::kNormal && piece.front() == ' ') {
      piece.remove_prefix(1);
    }
    first_text = false;
    out.append(piece);
  }
  return out;
}

std::string Detokenizer::Push(int32_t id) {
  std::string_view piece = tok_.Piece(id);
  if (strip_leading_space_ && !piece.empty()) {
    if (tok_.add_space_prefix_ && piece.front() == ' ' && tok_.Type(id) == TokenType::kNormal) {
      piece.remove_prefix(1);
    }
    strip_leading_space_ = false;
  }
  pending_.append(piece);
  util::Utf8Split split = util::SplitCompleteUtf8(pending_);
  pending_ = std::move(split.tail);
  return std::move(split.complete);
}

std::string Detokenizer::Finish() {
  std::string out = util::SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace strata::text
