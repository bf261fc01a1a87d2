#include "grammar/internal/schema_regex.h"

#include <algorithm>
#include <cctype>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "grammar/internal/code_point_ranges.h"

namespace strata::grammar::internal {
namespace {

using CpRanges = CodePointRanges;

// What a JSON string cannot hold raw: the quote, the backslash, controls.
const CpRanges& Unsafe() {
  static const CpRanges kUnsafe = {{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}};
  return kUnsafe;
}

// Unicode whitespace as ECMA-262's \s has it (besides the ASCII controls).
const CpRanges& Space() {
  static const CpRanges kSpace = {{' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680},
                                  {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                  {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  return kSpace;
}

CpRanges Sorted(CpRanges r) { return NormalizeRanges(std::move(r)); }

CpRanges Minus(const CpRanges& a, const CpRanges& b) {
  CpRanges out;
  const CpRanges bs = Sorted(b);
  for (auto [lo, hi] : Sorted(a)) {
    for (const auto& [blo, bhi] : bs) {
      if (bhi < lo || blo > hi) continue;
      if (blo > lo) out.emplace_back(lo, blo - 1);
      if (bhi >= hi) {
        lo = 1;
        hi = 0;
        break;
      }
      lo = bhi + 1;
    }
    if (lo <= hi) out.emplace_back(lo, hi);
  }
  return out;
}

std::string Hex(uint32_t cp) { return fmt::format("\\U{:08X}", cp); }

std::string ClassText(const CpRanges& r, bool negated) {
  std::string s = negated ? "[^" : "[";
  for (const auto& [lo, hi] : Sorted(r)) {
    s += Hex(lo);
    if (hi != lo) {
      s += '-';
      s += Hex(hi);
    }
  }
  return s + "]";
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// The JSON text of one code point inside a string.
std::string JsonChar(uint32_t cp) {
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\t':
      return "\\t";
    case '\r':
      return "\\r";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default:
      break;
  }
  if (cp < 0x20) return fmt::format("\\u{:04x}", cp);
  std::string s;
  AppendUtf8(cp, s);
  return s;
}

class RegexParser {
 public:
  RegexParser(std::string_view p, uint32_t max_repeat) : p_(p), max_repeat_(max_repeat) {}

  util::StatusOr<std::string> Run() {
    size_t end = p_.size();
    if (!p_.empty() && p_[0] == '^') at_ = 1;
    if (end > at_ && p_[end - 1] == '$' && (end < 2 || p_[end - 2] != '\\')) --end;
    end_ = end;
    STRATA_ASSIGN_OR_RETURN(std::string e, Alternatives(0));
    if (at_ != end_) return Error(at_, "an unmatched ')'");
    return "(" + e + ")";
  }

 private:
  util::Status Error(size_t at, std::string_view what) const {
    return util::InvalidArgumentError(fmt::format("json schema: 'pattern' {} at offset {}: {}",
                                                  std::string(p_).substr(0, 80), at, what));
  }

  bool More() const { return at_ < end_; }

  util::StatusOr<std::string> Alternatives(int depth) {
    if (depth > 32) return Error(at_, "groups nest deeper than 32");
    std::string out;
    while (true) {
      STRATA_ASSIGN_OR_RETURN(std::string seq, Sequence(depth));
      out += seq.empty() ? "\"\"" : seq;
      if (More() && p_[at_] == '|') {
        ++at_;
        out += " | ";
        continue;
      }
      return out;
    }
  }

  util::StatusOr<std::string> Sequence(int depth) {
    std::string out;
    while (More() && p_[at_] != '|' && p_[at_] != ')') {
      const size_t start = at_;
      STRATA_ASSIGN_OR_RETURN(std::string atom, Atom(depth));
      STRATA_ASSIGN_OR_RETURN(std::string quant, Quantifier(start));
      if (!out.empty()) out += " ";
      out += atom + quant;
    }
    return out;
  }

  util::StatusOr<uint32_t> Number() {
    const size_t start = at_;
    uint64_t v = 0;
    while (More() && p_[at_] >= '0' && p_[at_] <= '9') {
      v = v * 10 + static_cast<uint64_t>(p_[at_++] - '0');
      if (v > max_repeat_) return Error(start, fmt::format("a count above {}", max_repeat_));
    }
    if (at_ == start) return Error(at_, "expected a count");
    return static_cast<uint32_t>(v);
  }

  util::StatusOr<std::string> Quantifier(size_t atom_at) {
    if (!More()) return std::string();
    std::string q;
    const char c = p_[at_];
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++at_;
    } else if (c == '{') {
      ++at_;
      STRATA_ASSIGN_OR_RETURN(const uint32_t lo, Number());
      uint32_t hi = lo;
      bool open = false;
      if (More() && p_[at_] == ',') {
        ++at_;
        if (More() && p_[at_] == '}') {
          open = true;
        } else {
          STRATA_ASSIGN_OR_RETURN(hi, Number());
        }
      }
      if (!More() || p_[at_] != '}') return Error(at_, "expected '}'");
      ++at_;
      if (!open && hi < lo)
        return Error(atom_at, "a count range whose maximum is below its minimum");
      q = open ? fmt::format("{{{},}}", lo) : fmt::format("{{{},{}}}", lo, hi);
    } else {
      return std::string();
    }
    if (More() && p_[at_] == '?') ++at_;  // lazy: the same strings
    if (More() && (p_[at_] == '*' || p_[at_] == '+' || p_[at_] == '?' || p_[at_] == '{')) {
      return Error(at_, fmt::format("unsupported regex syntax '{}' after a quantifier", p_[at_]));
    }
    return q;
  }

  util::StatusOr<uint32_t> Utf8At() {
    const auto c = static_cast<uint8_t>(p_[at_]);
    if (c < 0x80) {
      ++at_;
      return static_cast<uint32_t>(c);
    }
    const int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
    if (n < 0 || at_ + static_cast<size_t>(n) >= p_.size()) return Error(at_, "invalid UTF-8");
    uint32_t cp = c & (0x3F >> n);
    for (int i = 1; i <= n; ++i) {
      const auto b = static_cast<uint8_t>(p_[at_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) return Error(at_, "invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    at_ += static_cast<size_t>(n) + 1;
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return Error(at_, "invalid UTF-8");
    return cp;
  }

  // A shorthand class (\d \w \s and their negations): its ranges, negated.
  static bool Shorthand(char e, CpRanges& r, bool& negated) {
    negated = e == 'D' || e == 'W' || e == 'S';
    switch (e) {
      case 'd':
      case 'D':
        r = {{'0', '9'}};
        return true;
      case 'w':
      case 'W':
        r = {{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}};
        return true;
      case 's':
      case 'S':
        r = Space();
        r.emplace_back(0x09, 0x0D);
        return true;
      default:
        return false;
    }
  }

  // An escape's code point (after the backslash), for a literal or a class.
  util::StatusOr<uint32_t> EscapedChar(size_t at) {
    if (!More()) return Error(at, "an escape at the end");
    const char e = p_[at_++];
    switch (e) {
      case 'n':
        return uint32_t{'\n'};
      case 't':
        return uint32_t{'\t'};
      case 'r':
        return uint32_t{'\r'};
      case 'f':
        return uint32_t{'\f'};
      case 'v':
        return uint32_t{'\v'};
      case 'u': {
        uint32_t v = 0;
        for (int i = 0; i < 4; ++i) {
          if (!More() || !std::isxdigit(static_cast<unsigned char>(p_[at_]))) {
            return Error(at, "a short \\u escape");
          }
          const char h = p_[at_++];
          v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
        }
        if (v >= 0xD800 && v <= 0xDFFF) return Error(at, "a surrogate \\u escape");
        return v;
      }
      default:
        break;
    }
    if (std::string_view(".*+?()[]{}|\\/^$-,:=!<>#&~'\"@% ").find(e) != std::string_view::npos) {
      return static_cast<uint32_t>(e);
    }
    return Error(at, fmt::format("unsupported regex syntax '\\{}'", e));
  }

  util::StatusOr<std::string> Class() {
    const size_t start = at_;
    ++at_;  // [
    bool negated = false;
    if (More() && p_[at_] == '^') {
      negated = true;
      ++at_;
    }
    CpRanges r;
    bool first = true;
    while (true) {
      if (!More()) return Error(start, "a class without its closing ']'");
      if (p_[at_] == ']' && !first) {
        ++at_;
        break;
      }
      first = false;
      uint32_t lo = 0;
      if (p_[at_] == '\\') {
        const size_t esc = at_++;
        if (More()) {
          CpRanges sh;
          bool neg = false;
          if (Shorthand(p_[at_], sh, neg)) {
            if (neg) return Error(esc, "a negated shorthand (\\D \\W \\S) inside a class");
            ++at_;
            r.insert(r.end(), sh.begin(), sh.end());
            continue;
          }
        }
        STRATA_ASSIGN_OR_RETURN(lo, EscapedChar(esc));
      } else {
        STRATA_ASSIGN_OR_RETURN(lo, Utf8At());
      }
      uint32_t hi = lo;
      if (at_ + 1 < end_ && p_[at_] == '-' && p_[at_ + 1] != ']') {
        ++at_;
        if (p_[at_] == '\\') {
          const size_t esc = at_++;
          STRATA_ASSIGN_OR_RETURN(hi, EscapedChar(esc));
        } else {
          STRATA_ASSIGN_OR_RETURN(hi, Utf8At());
        }
        if (hi < lo) return Error(start, "a class range whose end is below its start");
      }
      r.emplace_back(lo, hi);
    }
    if (negated) {
      CpRanges all = r;
      all.insert(all.end(), Unsafe().begin(), Unsafe().end());
      return ClassText(all, true);
    }
    const CpRanges safe = Minus(r, Unsafe());
    if (safe.empty()) {
      return Error(start, "a class of only characters a JSON string must escape");
    }
    return ClassText(safe, false);
  }

  util::StatusOr<std::string> Atom(int depth) {
    const size_t start = at_;
    const char c = p_[at_];
    switch (c) {
      case '(': {
        ++at_;
        if (More() && p_[at_] == '?') {
          if (at_ + 1 < end_ && p_[at_ + 1] == ':') {
            at_ += 2;
          } else {
            return Error(start, "unsupported regex syntax '(?' (lookaround, named groups)");
          }
        }
        STRATA_ASSIGN_OR_RETURN(std::string inner, Alternatives(depth + 1));
        if (!More() || p_[at_] != ')') return Error(start, "a group without its ')'");
        ++at_;
        return "(" + inner + ")";
      }
      case '[':
        return Class();
      case '.': {
        ++at_;
        CpRanges not_dot = Unsafe();
        not_dot.emplace_back(0x2028, 0x2029);
        return ClassText(not_dot, true);
      }
      case '\\': {
        ++at_;
        if (!More()) return Error(start, "an escape at the end");
        CpRanges sh;
        bool neg = false;
        if (Shorthand(p_[at_], sh, neg)) {
          ++at_;
          if (neg) {
            sh.insert(sh.end(), Unsafe().begin(), Unsafe().end());
            return ClassText(sh, true);
          }
          return ClassText(Minus(sh, Unsafe()), false);
        }
        STRATA_ASSIGN_OR_RETURN(const uint32_t cp, EscapedChar(start));
        return GbnfLiteral(JsonChar(cp));
      }
      case '^':
      case '$':
        return Error(start, fmt::format("the anchor '{}' is supported only at the pattern's {}", c,
                                        c == '^' ? "start" : "end"));
      case '*':
      case '+':
      case '?':
      case '{':
        return Error(start, fmt::format("a quantifier '{}' with nothing to repeat", c));
      default: {
        STRATA_ASSIGN_OR_RETURN(const uint32_t cp, Utf8At());
        return GbnfLiteral(JsonChar(cp));
      }
    }
  }

  std::string_view p_;
  const uint32_t max_repeat_;
  size_t at_ = 0;
  size_t end_ = 0;
};

}  // namespace

std::string GbnfLiteral(std::string_view text) {
  std::string s = "\"";
  for (const char ch : text) {
    const auto c = static_cast<uint8_t>(ch);
    if (c == '"' || c == '\\') {
      s += '\\';
      s += ch;
    } else if (c < 0x20 || c == 0x7F) {
      s += fmt::format("\\x{:02X}", c);
    } else {
      s += ch;
    }
  }
  return s + "\"";
}

util::StatusOr<std::string> PatternToGbnf(std::string_view pattern, uint32_t max_repeat) {
  RegexParser p(pattern, max_repeat);
  return p.Run();
}

}  // namespace strata::grammar::internal
