// GBNF text → the compiled grammar (grammar/grammar.h): a recursive-descent
// parser that builds rules of element sequences, then the checks that keep
// the matcher's closure finite (no left recursion, no repetition of what can
// match nothing).
#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "grammar/grammar.h"
#include "grammar/internal/code_point_ranges.h"

namespace strata::grammar {

using compiled::CharClass;
using compiled::Element;
using compiled::kUnbounded;

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// Ranges of code points, [lo, hi], in any order; Normalize sorts and merges.
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

Ranges Normalize(Ranges r) { return internal::NormalizeRanges(std::move(r)); }

// Every code point not in `r` (normalized), surrogates excluded.
Ranges Complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : r) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodePoint) out.emplace_back(next, kMaxCodePoint);
  return out;
}

CharClass MakeClass(const Ranges& normalized) {
  CharClass c;
  for (auto [lo, hi] : normalized) {
    if (lo >= 0xD800 && hi <= 0xDFFF) continue;
    for (; lo <= hi && lo < 0x80; ++lo) c.ascii[lo >> 6] |= uint64_t{1} << (lo & 63);
    if (lo > hi) continue;
    // UTF-8 cannot encode surrogates: cut them out.
    if (lo < 0xD800 && hi >= 0xD800) {
      c.ranges.emplace_back(lo, 0xD7FF);
      if (hi > 0xDFFF) c.ranges.emplace_back(0xE000, hi);
    } else if (lo >= 0xD800 && lo <= 0xDFFF) {
      c.ranges.emplace_back(0xE000, hi);
    } else {
      c.ranges.emplace_back(lo, hi);
    }
  }
  return c;
}

}  // namespace

bool CharClass::Contains(uint32_t cp) const {
  if (cp < 0x80) return (ascii[cp >> 6] >> (cp & 63)) & 1u;
  auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                             [](uint32_t v, const auto& r) { return v < r.first; });
  return it != ranges.begin() && std::prev(it)->second >= cp;
}

bool CharClass::Intersects(uint32_t lo, uint32_t hi) const {
  if (lo < 0x80) {
    for (uint32_t c = lo; c <= std::min<uint32_t>(hi, 0x7F); ++c) {
      if (Contains(c)) return true;
    }
    if (hi < 0x80) return false;
    lo = 0x80;
  }
  // The first range ending at or after lo.
  auto it = std::lower_bound(ranges.begin(), ranges.end(), lo,
                             [](const auto& r, uint32_t v) { return r.second < v; });
  return it != ranges.end() && it->first <= hi;
}

// Builds a Grammar from GBNF text; one use.
class GrammarBuilder {
 public:
  GrammarBuilder(std::string_view text, const GrammarLimits& limits)
      : text_(text), limits_(limits) {}

  util::StatusOr<std::shared_ptr<const Grammar>> Build() {
    if (text_.size() > limits_.max_text_bytes) {
      return util::InvalidArgumentError(
          fmt::format("grammar: the text is {} bytes; at most {} are allowed", text_.size(),
                      limits_.max_text_bytes));
    }
    SkipSpace();
    if (at_ >= text_.size()) return util::InvalidArgumentError("grammar: the text has no rules");
    while (at_ < text_.size()) {
      STRATA_RETURN_IF_ERROR(ParseRule());
      SkipSpace();
    }
    for (size_t i = 0; i < rules_.size(); ++i) {
      if (!rules_[i].defined) {
        return Error(rules_[i].first_use, fmt::format("rule '{}' is not defined", rules_[i].name));
      }
    }
    auto root = ids_.find("root");
    if (root == ids_.end()) return util::InvalidArgumentError("grammar: there is no rule 'root'");
    STRATA_RETURN_IF_ERROR(CheckLoops());
    return Flatten(root->second);
  }

 private:
  struct PendingRule {
    std::string name;
    bool defined = false;
    size_t first_use = 0;  // offset of the first reference, for "not defined"
    std::vector<std::vector<Element>> alts;
  };

  util::Status Error(size_t offset, std::string_view what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < offset && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return util::InvalidArgumentError(
        fmt::format("grammar: line {}, column {}: {}", line, col, what));
  }

  static bool IsNameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }

  void SkipSpace() {
    while (at_ < text_.size()) {
      const char c = text_[at_];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++at_;
      } else if (c == '#') {
        while (at_ < text_.size() && text_[at_] != '\n') ++at_;
      } else {
        break;
      }
    }
  }

  std::string_view PeekName(size_t from) const {
    size_t end = from;
    while (end < text_.size() && IsNameChar(text_[end])) ++end;
    return text_.substr(from, end - from);
  }

  // Whether a rule definition (`name ::=`) starts at the cursor.
  bool AtRuleStart() const {
    const std::string_view name = PeekName(at_);
    if (name.empty()) return false;
    size_t p = at_ + name.size();
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  util::StatusOr<int32_t> RuleId(std::string_view name, size_t use) {
    auto it = ids_.find(std::string(name));
    if (it != ids_.end()) return it->second;
    return NewRule(std::string(name), use);
  }

  util::StatusOr<int32_t> NewRule(std::string name, size_t use) {
    if (rules_.size() >= static_cast<size_t>(limits_.max_rules)) {
      return Error(use, fmt::format("more than {} rules (counting those groups and "
                                    "repetitions make)",
                                    limits_.max_rules));
    }
    const auto id = static_cast<int32_t>(rules_.size());
    rules_.push_back({.name = name, .defined = false, .first_use = use, .alts = {}});
    if (name.find('#') == std::string::npos) ids_.emplace(std::move(name), id);
    return id;
  }

  util::Status ParseRule() {
    const size_t start = at_;
    const std::string_view name = PeekName(at_);
    if (name.empty()) return Error(at_, "expected a rule name");
    at_ += name.size();
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t')) ++at_;
    if (text_.substr(at_, 3) != "::=") {
      return Error(at_, fmt::format("expected '::=' after the rule name '{}'", name));
    }
    at_ += 3;
    STRATA_ASSIGN_OR_RETURN(const int32_t id, RuleId(name, start));
    if (rules_[static_cast<size_t>(id)].defined) {
      return Error(start, fmt::format("rule '{}' is defined twice", name));
    }
    rules_[static_cast<size_t>(id)].defined = true;
    current_ = std::string(name);
    STRATA_ASSIGN_OR_RETURN(auto alts, ParseAlternatives(0));
    rules_[static_cast<size_t>(id)].alts = std::move(alts);
    if (at_ < text_.size() && !AtRuleStart()) {
      return Error(at_, fmt::format("unexpected '{}'", text_[at_]));
    }
    return util::OkStatus();
  }

  util::StatusOr<std::vector<std::vector<Element>>> ParseAlternatives(int32_t nesting) {
    std::vector<std::vector<Element>> alts;
    while (true) {
      STRATA_ASSIGN_OR_RETURN(auto seq, ParseSequence(nesting));
      alts.push_back(std::move(seq));
      SkipSpace();
      if (at_ < text_.size() && text_[at_] == '|') {
        ++at_;
        continue;
      }
      return alts;
    }
  }

  util::Status CountElements(size_t n) {
    elements_ += n;
    if (elements_ > static_cast<size_t>(limits_.max_elements)) {
      return Error(at_, fmt::format("more than {} elements", limits_.max_elements));
    }
    return util::OkStatus();
  }

  util::StatusOr<std::vector<Element>> ParseSequence(int32_t nesting) {
    std::vector<Element> seq;
    while (true) {
      SkipSpace();
      if (at_ >= text_.size()) return seq;
      const char c = text_[at_];
      if (c == '|' || c == ')') return seq;
      if (AtRuleStart()) return seq;
      const size_t item_at = at_;
      std::vector<Element> item;
      if (c == '"') {
        STRATA_ASSIGN_OR_RETURN(item, ParseLiteral());
      } else if (c == '[') {
        STRATA_ASSIGN_OR_RETURN(Element e, ParseClass());
        item.push_back(e);
      } else if (c == '.') {
        ++at_;
        item.push_back(ClassElement(Normalize({{0, kMaxCodePoint}})));
      } else if (c == '(') {
        if (nesting + 1 > limits_.max_nesting) {
          return Error(at_, fmt::format("parentheses nest deeper than {}", limits_.max_nesting));
        }
        ++at_;
        STRATA_ASSIGN_OR_RETURN(auto alts, ParseAlternatives(nesting + 1));
        SkipSpace();
        if (at_ >= text_.size() || text_[at_] != ')') return Error(at_, "expected ')'");
        ++at_;
        if (alts.size() == 1) {
          item = std::move(alts[0]);
        } else {
          STRATA_ASSIGN_OR_RETURN(const int32_t g, Anonymous(std::move(alts), item_at));
          item.push_back({.kind = Element::Kind::kRule, .arg = g, .min = 1, .max = 1});
        }
      } else if (IsNameChar(c)) {
        const std::string_view name = PeekName(at_);
        STRATA_ASSIGN_OR_RETURN(const int32_t id, RuleId(name, at_));
        at_ += name.size();
        item.push_back({.kind = Element::Kind::kRule, .arg = id, .min = 1, .max = 1});
      } else {
        return Error(at_, fmt::format("unexpected '{}'", c));
      }
      STRATA_RETURN_IF_ERROR(ParseQuantifier(item, item_at));
      STRATA_RETURN_IF_ERROR(CountElements(item.size()));
      seq.insert(seq.end(), item.begin(), item.end());
    }
  }

  util::StatusOr<int32_t> Anonymous(std::vector<std::vector<Element>> alts, size_t at) {
    STRATA_ASSIGN_OR_RETURN(const int32_t id,
                            NewRule(fmt::format("{}#{}", current_, rules_.size()), at));
    rules_[static_cast<size_t>(id)].defined = true;
    rules_[static_cast<size_t>(id)].alts = std::move(alts);
    return id;
  }

  // A quantifier after `item` (elements of one primary) applies to it whole.
  util::Status ParseQuantifier(std::vector<Element>& item, size_t item_at) {
    if (at_ >= text_.size()) return util::OkStatus();
    uint32_t lo = 1, hi = 1;
    const char c = text_[at_];
    if (c == '*') {
      lo = 0;
      hi = kUnbounded;
      ++at_;
    } else if (c == '+') {
      lo = 1;
      hi = kUnbounded;
      ++at_;
    } else if (c == '?') {
      lo = 0;
      hi = 1;
      ++at_;
    } else if (c == '{') {
      ++at_;
      STRATA_ASSIGN_OR_RETURN(lo, ParseCount());
      hi = lo;
      if (at_ < text_.size() && text_[at_] == ',') {
        ++at_;
        SkipSpace();
        if (at_ < text_.size() && text_[at_] == '}') {
          hi = kUnbounded;
        } else {
          STRATA_ASSIGN_OR_RETURN(hi, ParseCount());
        }
      }
      SkipSpace();
      if (at_ >= text_.size() || text_[at_] != '}') return Error(at_, "expected '}'");
      ++at_;
      if (hi < lo)
        return Error(item_at, fmt::format("{{{},{}}}: the maximum is below the minimum", lo, hi));
      if (hi == 0) {
        item.clear();  // x{0}: nothing
        return util::OkStatus();
      }
    } else {
      return util::OkStatus();
    }
    if (item.size() == 1 && item[0].min == 1 && item[0].max == 1 &&
        item[0].kind != Element::Kind::kEnd) {
      item[0].min = lo;
      item[0].max = hi;
      return util::OkStatus();
    }
    std::vector<std::vector<Element>> alts;
    alts.push_back(std::move(item));
    STRATA_ASSIGN_OR_RETURN(const int32_t g, Anonymous(std::move(alts), item_at));
    item.assign(1, {.kind = Element::Kind::kRule, .arg = g, .min = lo, .max = hi});
    return util::OkStatus();
  }

  util::StatusOr<uint32_t> ParseCount() {
    SkipSpace();
    const size_t start = at_;
    uint64_t v = 0;
    while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
      v = v * 10 + static_cast<uint64_t>(text_[at_] - '0');
      if (v > limits_.max_repeat) {
        return Error(start, fmt::format("a repetition count above {}", limits_.max_repeat));
      }
      ++at_;
    }
    if (at_ == start) return Error(at_, "expected a repetition count");
    SkipSpace();
    return static_cast<uint32_t>(v);
  }

  // One code point of a literal or a class (escapes included).
  util::StatusOr<uint32_t> ParseChar() {
    if (at_ >= text_.size()) return Error(at_, "unexpected end of the text");
    const auto c = static_cast<uint8_t>(text_[at_]);
    if (c == '\\') {
      if (at_ + 1 >= text_.size()) return Error(at_, "an escape at the end of the text");
      const char e = text_[at_ + 1];
      at_ += 2;
      switch (e) {
        case 'n':
          return uint32_t{'\n'};
        case 't':
          return uint32_t{'\t'};
        case 'r':
          return uint32_t{'\r'};
        case 'x':
          return ParseHex(2);
        case 'u':
          return ParseHex(4);
        case 'U':
          return ParseHex(8);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
          return static_cast<uint32_t>(e);
        default:
          return Error(at_ - 2, fmt::format("unknown escape '\\{}'", e));
      }
    }
    if (c < 0x80) {
      if (c < 0x20 && c != '\t') return Error(at_, "a control character inside a literal or class");
      ++at_;
      return static_cast<uint32_t>(c);
    }
    // UTF-8 of the grammar's own text.
    int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 ? 1 : -1;
    if (c > 0xF4) n = -1;
    if (n < 0 || at_ + static_cast<size_t>(n) >= text_.size()) return Error(at_, "invalid UTF-8");
    uint32_t cp = c & (0x3F >> n);
    for (int i = 1; i <= n; ++i) {
      const auto b = static_cast<uint8_t>(text_[at_ + static_cast<size_t>(i)]);
      if ((b & 0xC0) != 0x80) return Error(at_, "invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    const uint32_t min = n == 1 ? 0x80 : n == 2 ? 0x800 : 0x10000;
    if (cp < min || cp > kMaxCodePoint || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return Error(at_, "invalid UTF-8");
    }
    at_ += static_cast<size_t>(n) + 1;
    return cp;
  }

  util::StatusOr<uint32_t> ParseHex(int digits) {
    const size_t start = at_ - 2;
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (at_ >= text_.size()) return Error(start, "a short hex escape");
      const char h = text_[at_];
      uint32_t d = 0;
      if (h >= '0' && h <= '9') {
        d = static_cast<uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        d = static_cast<uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        d = static_cast<uint32_t>(h - 'A' + 10);
      } else {
        return Error(start, "a short hex escape");
      }
      v = v * 16 + d;
      ++at_;
    }
    if (v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) {
      return Error(start, fmt::format("U+{:X} is not a code point UTF-8 can encode", v));
    }
    return v;
  }

  Element ClassElement(const Ranges& normalized) {
    classes_.push_back(MakeClass(normalized));
    return {.kind = Element::Kind::kClass,
            .arg = static_cast<int32_t>(classes_.size() - 1),
            .min = 1,
            .max = 1};
  }

  util::StatusOr<std::vector<Element>> ParseLiteral() {
    const size_t start = at_;
    ++at_;  // the quote
    std::vector<Element> out;
    while (true) {
      if (at_ >= text_.size()) return Error(start, "a literal without its closing quote");
      if (text_[at_] == '"') {
        ++at_;
        return out;
      }
      if (text_[at_] == '\n') return Error(start, "a literal without its closing quote");
      STRATA_ASSIGN_OR_RETURN(const uint32_t cp, ParseChar());
      if (auto it = literal_classes_.find(cp); it != literal_classes_.end()) {
        out.push_back({.kind = Element::Kind::kClass, .arg = it->second, .min = 1, .max = 1});
      } else {
        out.push_back(ClassElement({{cp, cp}}));
        literal_classes_.emplace(cp, out.back().arg);
      }
    }
  }

  util::StatusOr<Element> ParseClass() {
    const size_t start = at_;
    ++at_;  // [
    bool negated = false;
    if (at_ < text_.size() && text_[at_] == '^') {
      negated = true;
      ++at_;
    }
    Ranges r;
    while (true) {
      if (at_ >= text_.size()) return Error(start, "a class without its closing ']'");
      if (text_[at_] == ']') {
        ++at_;
        break;
      }
      STRATA_ASSIGN_OR_RETURN(const uint32_t lo, ParseChar());
      uint32_t hi = lo;
      if (at_ + 1 < text_.size() && text_[at_] == '-' && text_[at_ + 1] != ']') {
        ++at_;
        STRATA_ASSIGN_OR_RETURN(hi, ParseChar());
        if (hi < lo) return Error(start, "a class range whose end is below its start");
      }
      r.emplace_back(lo, hi);
    }
    Ranges n = Normalize(std::move(r));
    if (negated) n = Complement(n);
    const CharClass c = MakeClass(n);
    if (c.ranges.empty() && c.ascii[0] == 0 && c.ascii[1] == 0) {
      return Error(start, "a class that matches no character");
    }
    return ClassElement(n);
  }

  bool ElementNullable(const Element& e, const std::vector<bool>& nullable) const {
    if (e.min == 0) return true;
    return e.kind == Element::Kind::kRule && nullable[static_cast<size_t>(e.arg)];
  }

  std::string OriginName(size_t rule) const {
    const std::string& n = rules_[rule].name;
    const size_t hash = n.find('#');
    return hash == std::string::npos ? n : n.substr(0, hash);
  }

  // Left recursion and repetitions of the empty string would make the
  // matcher's closure loop; both are refused here, naming the rule.
  util::Status CheckLoops() const {
    const size_t n = rules_.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const auto& alt : rules_[r].alts) {
          bool all = true;
          for (const Element& e : alt) all = all && ElementNullable(e, nullable);
          if (all) {
            nullable[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    // Edges r -> s: s is called before anything in r's alternative consumed.
    std::vector<std::vector<int32_t>> first(n);
    for (size_t r = 0; r < n; ++r) {
      for (const auto& alt : rules_[r].alts) {
        for (const Element& e : alt) {
          if (e.kind == Element::Kind::kRule) {
            first[r].push_back(e.arg);
            if (e.max > 1 && nullable[static_cast<size_t>(e.arg)]) {
              return util::InvalidArgumentError(
                  fmt::format("grammar: rule '{}' repeats a group that can match nothing (as in "
                              "(\"a\"?)*), which never ends",
                              OriginName(r)));
            }
          }
          if (!ElementNullable(e, nullable)) break;
        }
      }
    }
    // Depth-first search for a cycle (iterative: rules may be many).
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
    std::vector<int32_t> parent(n, -1);
    for (size_t s = 0; s < n; ++s) {
      if (color[s] != 0) continue;
      std::vector<std::pair<int32_t, size_t>> todo{{static_cast<int32_t>(s), 0}};
      color[s] = 1;
      while (!todo.empty()) {
        auto& [r, i] = todo.back();
        const auto ru = static_cast<size_t>(r);
        if (i == first[ru].size()) {
          color[ru] = 2;
          todo.pop_back();
          continue;
        }
        const int32_t t = first[ru][i++];
        const auto tu = static_cast<size_t>(t);
        if (color[tu] == 1) {
          std::vector<std::string> cycle{OriginName(tu)};
          for (int32_t at = r; at != t && at >= 0; at = parent[static_cast<size_t>(at)]) {
            if (OriginName(static_cast<size_t>(at)) != cycle.back()) {
              cycle.push_back(OriginName(static_cast<size_t>(at)));
            }
          }
          std::reverse(cycle.begin() + 1, cycle.end());
          std::string path;
          for (const auto& c : cycle) path += c + " -> ";
          path += cycle.front();
          return util::InvalidArgumentError(fmt::format(
              "grammar: rule '{}' is left-recursive ({}: it can reach itself before consuming "
              "anything), which is not supported; write the repetition with * or +",
              cycle.front(), path));
        }
        if (color[tu] == 0) {
          color[tu] = 1;
          parent[tu] = r;
          todo.emplace_back(t, 0);
        }
      }
    }
    return util::OkStatus();
  }

  std::shared_ptr<const Grammar> Flatten(int32_t root) {
    std::shared_ptr<Grammar> g(new Grammar());
    g->root_ = root;
    g->classes_ = std::move(classes_);
    for (auto& r : rules_) {
      compiled::Rule out;
      out.name = r.name;
      for (auto& alt : r.alts) {
        out.alts.push_back(static_cast<int32_t>(g->elements_.size()));
        g->elements_.insert(g->elements_.end(), alt.begin(), alt.end());
        g->elements_.push_back({.kind = Element::Kind::kEnd, .arg = 0, .min = 1, .max = 1});
      }
      g->rules_.push_back(std::move(out));
    }
    return g;
  }

  std::string_view text_;
  const GrammarLimits limits_;
  size_t at_ = 0;
  size_t elements_ = 0;
  std::string current_;  // the rule being parsed (names its groups)
  std::vector<PendingRule> rules_;
  std::map<std::string, int32_t> ids_;           // rule names as written
  std::map<uint32_t, int32_t> literal_classes_;  // one class per literal code point
  std::vector<CharClass> classes_;
};

util::StatusOr<std::shared_ptr<const Grammar>> Grammar::Parse(std::string_view text,
                                                              const GrammarLimits& limits) {
  GrammarBuilder b(text, limits);
  return b.Build();
}

}  // namespace strata::grammar
