#include "cache/text_normalize.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "cache/internal/lexicon.h"

namespace strata::cache {
namespace {

struct CodePoint {
  utf8proc_int32_t cp;
  utf8proc_category_t cat;
};

struct FreeDeleter {
  void operator()(utf8proc_uint8_t* p) const { std::free(p); }
};

// utf8proc_map with the given options; `what` names the step in errors.
util::StatusOr<std::string> Map(std::string_view s, int options, const char* what) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, FreeDeleter> owned(out);
  if (n < 0) {
    if (n == UTF8PROC_ERROR_NOMEM) {
      return util::ResourceExhaustedError(fmt::format("normalize: out of memory in {}", what));
    }
    return util::InvalidArgumentError(
        fmt::format("normalize: {} failed: {}", what, utf8proc_errmsg(n)));
  }
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

bool IsLetter(utf8proc_category_t c) {
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}
bool IsUpper(utf8proc_category_t c) {
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT;
}
bool IsDigit(utf8proc_category_t c) { return c == UTF8PROC_CATEGORY_ND; }

// Letters, marks, numbers, '_' and code points without a category (private
// use, unassigned) build words.
bool IsWordChar(utf8proc_category_t c) {
  switch (c) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
      return true;
    default:
      return false;
  }
}

// Scripts written without spaces between words: every character is a token.
bool IsCjk(utf8proc_int32_t cp) {
  return (cp >= 0x3040 && cp <= 0x30FF) || (cp >= 0x31F0 && cp <= 0x31FF) ||
         (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x4E00 && cp <= 0x9FFF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x20000 && cp <= 0x323AF);
}

bool IsApostrophe(utf8proc_int32_t cp) { return cp == '\'' || cp == 0x2019 || cp == 0x02BC; }

bool IsSymbol(const CodePoint& c) {
  if (c.cat == UTF8PROC_CATEGORY_SM || c.cat == UTF8PROC_CATEGORY_SC ||
      c.cat == UTF8PROC_CATEGORY_SO) {
    return true;
  }
  switch (c.cp) {
    case '%':
    case '*':
    case '/':
    case '^':
    case '&':
    case '|':
    case '#':
    case '@':
    case '\\':
      return true;
    default:
      return false;
  }
}

bool EndsSentence(utf8proc_int32_t cp) {
  return cp == '.' || cp == '!' || cp == '?' || cp == '\n' || cp == '\r' || cp == 0x2029 ||
         cp == 0x3002 || cp == 0xFF01 || cp == 0xFF1F;
}

void AppendUtf8(std::string& out, utf8proc_int32_t cp) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

// "63,121" and "1,234,567.5" lose their thousands separators; "1,5" keeps its comma.
std::string CanonicalNumber(std::string s) {
  const size_t dot = s.find('.');
  const std::string_view whole = std::string_view(s).substr(0, dot);
  if (whole.find(',') == std::string_view::npos) return s;
  const size_t first = whole.find(',');
  if (first == 0 || first > 3) return s;
  for (size_t i = first; i < whole.size(); i += 4) {
    if (whole[i] != ',' || i + 4 > whole.size()) return s;
    for (size_t k = 1; k <= 3; ++k) {
      if (whole[i + k] < '0' || whole[i + k] > '9') return s;
    }
    if (i + 4 < whole.size() && whole[i + 4] != ',') return s;
  }
  std::string out;
  for (char ch : whole) {
    if (ch != ',') out.push_back(ch);
  }
  if (dot != std::string::npos) out += s.substr(dot);
  return out;
}

class Tokenizer {
 public:
  explicit Tokenizer(std::vector<Token>& out) : out_(out) {}

  util::Status Run(const std::vector<CodePoint>& cps) {
    for (size_t i = 0; i < cps.size(); ++i) {
      const CodePoint& c = cps[i];
      const CodePoint* next = i + 1 < cps.size() ? &cps[i + 1] : nullptr;
      const CodePoint* prev = i > 0 ? &cps[i - 1] : nullptr;
      if (IsCjk(c.cp)) {
        STRATA_RETURN_IF_ERROR(Flush());
        AddCodePoint(c);
        STRATA_RETURN_IF_ERROR(Flush());
      } else if (IsWordChar(c.cat)) {
        AddCodePoint(c);
      } else if ((c.cp == '.' || c.cp == ',') && all_digits_ && !cur_.empty() && next &&
                 IsDigit(next->cat)) {
        cur_.push_back(static_cast<char>(c.cp));  // 3.14, 63,121
      } else if (IsApostrophe(c.cp) && letters_ > 0 && next && IsLetter(next->cat)) {
        cur_.push_back('\'');  // split after case folding: isn't, john's
        all_digits_ = false;
      } else if (IsSymbol(c) ||
                 (c.cp == '-' && next && IsDigit(next->cat) && !(prev && IsLetter(prev->cat)))) {
        STRATA_RETURN_IF_ERROR(Flush());
        Token t;
        AppendUtf8(t.text, c.cp);
        t.kind = TokenKind::kSymbol;
        out_.push_back(std::move(t));
      } else {
        STRATA_RETURN_IF_ERROR(Flush());
        if (EndsSentence(c.cp)) sentence_start_ = true;
      }
    }
    return Flush();
  }

 private:
  void AddCodePoint(const CodePoint& c) {
    if (IsUpper(c.cat)) {
      if (cur_.empty()) {
        first_upper_ = true;
      } else {
        inner_upper_ = true;
      }
    }
    if (IsLetter(c.cat)) ++letters_;
    if (!IsDigit(c.cat)) all_digits_ = false;
    has_digit_ |= IsDigit(c.cat) || c.cat == UTF8PROC_CATEGORY_NL || c.cat == UTF8PROC_CATEGORY_NO;
    AppendUtf8(cur_, c.cp);
  }

  util::Status Flush() {
    if (cur_.empty()) return util::OkStatus();
    std::string folded;
    bool ascii = true;
    for (char ch : cur_) ascii &= static_cast<unsigned char>(ch) < 0x80;
    if (ascii) {
      folded = cur_;
      for (char& ch : folded) {
        if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
      }
    } else {
      STRATA_ASSIGN_OR_RETURN(folded, Map(cur_,
                                          UTF8PROC_STABLE | UTF8PROC_COMPAT | UTF8PROC_COMPOSE |
                                              UTF8PROC_CASEFOLD | UTF8PROC_IGNORE,
                                          "case folding"));
    }
    const bool capital = inner_upper_ || (first_upper_ && !sentence_start_);
    if (all_digits_) {
      Emit(CanonicalNumber(std::move(folded)), TokenKind::kNumber, true, false);
    } else {
      EmitWordParts(folded, capital);
    }
    cur_.clear();
    letters_ = 0;
    all_digits_ = true;
    has_digit_ = first_upper_ = inner_upper_ = sentence_start_ = false;
    return util::OkStatus();
  }

  // A word may hold apostrophes between letters: "isn't" → is not, "can't" →
  // can not, "won't" → will not, "john's" → john s.
  void EmitWordParts(const std::string& word, bool capital) {
    std::vector<std::string> parts;
    size_t start = 0;
    while (true) {
      const size_t q = word.find('\'', start);
      parts.push_back(word.substr(start, q == std::string::npos ? std::string::npos : q - start));
      if (q == std::string::npos) break;
      start = q + 1;
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      std::string& p = parts[i];
      if (i + 1 < parts.size() && parts[i + 1] == "t" && p.size() > 1 && p.back() == 'n') {
        p.pop_back();
        if (p == "ca") p = "can";
        if (p == "wo") p = "will";
        if (p == "sha") p = "shall";
        if (p == "ai") p = "is";
        parts[i + 1] = "not";
      }
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].empty()) continue;
      if (parts[i] == "cannot") {
        Emit("can", TokenKind::kWord, false, false);
        Emit("not", TokenKind::kWord, false, false);
        continue;
      }
      bool digit = false;
      for (char ch : parts[i]) digit |= ch >= '0' && ch <= '9';
      Emit(std::move(parts[i]), TokenKind::kWord, digit || (i == 0 && has_digit_),
           i == 0 && capital);
    }
  }

  void Emit(std::string text, TokenKind kind, bool has_digit, bool capital) {
    Token t;
    t.kind = kind;
    t.has_digit = has_digit;
    t.entity_like = capital && kind == TokenKind::kWord && !internal::IsStopWord(text) &&
                    !internal::IsNegation(text) && !internal::IsQuestionWord(text);
    t.text = std::move(text);
    out_.push_back(std::move(t));
  }

  std::vector<Token>& out_;
  std::string cur_;         // the token being built, NFKC, not yet case folded
  size_t letters_ = 0;      // letters in cur_
  bool all_digits_ = true;  // cur_ holds only digits (and '.'/',' between digits)
  bool has_digit_ = false;
  bool first_upper_ = false;    // cur_ starts with an upper-case letter
  bool inner_upper_ = false;    // an upper-case letter after the first code point
  bool sentence_start_ = true;  // no token since the start or a sentence end
};

}  // namespace

std::string NormalizedText::Joined() const {
  std::string s;
  for (const Token& t : tokens) {
    if (!s.empty()) s.push_back(' ');
    s += t.text;
  }
  return s;
}

util::StatusOr<NormalizedText> NormalizeText(std::string_view utf8,
                                             const NormalizeOptions& options) {
  if (utf8.size() > options.max_input_bytes) {
    return util::InvalidArgumentError(
        fmt::format("normalize: text of {} bytes is over the limit of {}", utf8.size(),
                    options.max_input_bytes));
  }
  // Validate first so the error can name the offset (utf8proc_map only says "invalid").
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(utf8.data());
  for (size_t pos = 0; pos < utf8.size();) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n =
        utf8proc_iterate(bytes + pos, static_cast<utf8proc_ssize_t>(utf8.size() - pos), &cp);
    if (n <= 0 || cp < 0) {
      return util::InvalidArgumentError(
          fmt::format("normalize: invalid UTF-8 at byte {} (0x{:02x})", pos,
                      static_cast<unsigned>(bytes[pos])));
    }
    pos += static_cast<size_t>(n);
  }
  STRATA_ASSIGN_OR_RETURN(
      std::string nfkc,
      Map(utf8, UTF8PROC_STABLE | UTF8PROC_COMPAT | UTF8PROC_COMPOSE | UTF8PROC_IGNORE, "NFKC"));
  std::vector<CodePoint> cps;
  cps.reserve(nfkc.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(nfkc.data());
  for (size_t pos = 0; pos < nfkc.size();) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n =
        utf8proc_iterate(p + pos, static_cast<utf8proc_ssize_t>(nfkc.size() - pos), &cp);
    if (n <= 0 || cp < 0) {
      return util::InternalError(fmt::format("normalize: NFKC output invalid at byte {}", pos));
    }
    cps.push_back({cp, utf8proc_category(cp)});
    pos += static_cast<size_t>(n);
  }
  NormalizedText out;
  Tokenizer tokenizer(out.tokens);
  STRATA_RETURN_IF_ERROR(tokenizer.Run(cps));
  return out;
}

}  // namespace strata::cache
