// grammar/grammar.h — a context-free grammar over text (GBNF, the format
// llama.cpp reads), compiled once, and the per-choice matcher that decides
// byte by byte which continuations it allows.
//
// Promise: Grammar::Parse turns GBNF text into an immutable compiled
// grammar or an InvalidArgument whose message names the line and column
// ("grammar: line 3, column 9: rule 'valu' is not defined"). The format
// (docs/api.md has the reference):
//
//   root   ::= "{" ws pair ("," ws pair)* "}"   # rules: name ::= alternatives
//   pair   ::= key ":" ws [0-9]+                # sequences, character classes
//   key    ::= "\"" [^"\\]{1,16} "\""           # escapes, negated classes, {m,n}
//   ws     ::= (" " | "\n")?                    # grouping, | * + ? and comments
//
// A rule runs to the next `name ::=`. Literals and classes stand for Unicode
// code points (UTF-8 in the grammar's text and in what it matches; \xHH,
// \uHHHH and \UHHHHHHHH name code points); `.` is any code point. `root` is
// the start rule; rules nothing reaches are fine; a reference to a rule that
// is not defined is an error. Left recursion (a rule that can reach itself
// before consuming anything) is rejected with the cycle named, as is a
// repetition of something that can match nothing (`("a"?)*`). Bounds
// (GrammarLimits): the text's length, the number of rules (with the ones
// groups and quantifiers make), elements, nesting of parentheses and the
// counts of {m,n}.
//
// A GrammarMatcher is one choice's position in the grammar: the set of parse
// stacks (every way the bytes so far can be read; ambiguous grammars keep
// several). Feed(byte) takes a byte that keeps the text a prefix of some
// sentence of the grammar, or refuses it and leaves the state as it was.
// accepting(): the bytes so far are a whole sentence; can_continue(): some
// byte may still follow. Only valid UTF-8 is ever accepted. The state is
// bounded: at most kMaxStacks stacks of at most kMaxDepth frames, and a
// bounded amount of work per byte; a byte that would go past a bound is
// refused and bound_exceeded() says so (a caller whose every continuation is
// refused that way reports it as an error, never as a silent stop).
//
// Threading: a Grammar is immutable and may be shared by any number of
// threads. A GrammarMatcher is a value (copy it to try bytes), borrowing its
// Grammar, which must outlive it; thread-compatible.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto g, Grammar::Parse("root ::= \"yes\" | \"no\""));
//   GrammarMatcher m(*g);
//   m.FeedAll("ye");   // true: a prefix
//   m.accepting();     // false; after Feed('s'): true, can_continue() false
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/status.h"

namespace strata::grammar {

struct GrammarLimits {
  size_t max_text_bytes = size_t{1} << 20;  // [1, 64 Mi] bytes of GBNF text
  int32_t max_rules = 1 << 16;              // [1, 1 Mi] rules, the anonymous ones included
  int32_t max_elements = 1 << 20;           // [1, 16 Mi] elements of all alternatives
  int32_t max_nesting = 64;                 // [1, 1024] parentheses inside each other
  uint32_t max_repeat = 100000;             // [1, 1e7] m and n of {m,n}
};

// The compiled form, read by the matcher and the token mask.
namespace compiled {

// A set of code points: a bitmap for ASCII, sorted disjoint ranges above.
struct CharClass {
  std::array<uint64_t, 2> ascii{};
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // [lo, hi] >= 0x80, sorted, disjoint
  bool Contains(uint32_t cp) const;
  // Whether any code point in [lo, hi] is in the set.
  bool Intersects(uint32_t lo, uint32_t hi) const;
};

inline constexpr uint32_t kUnbounded = 0xFFFFFFFFu;

// One element of an alternative: `min` to `max` code points of a class, or
// `min` to `max` matches of a rule, or the alternative's end.
struct Element {
  enum class Kind : uint8_t { kClass, kRule, kEnd };
  Kind kind = Kind::kEnd;
  int32_t arg = 0;  // kClass: index into classes; kRule: rule id
  uint32_t min = 1;
  uint32_t max = 1;  // kUnbounded: no limit
};

struct Rule {
  std::string name;           // as written; "name#N" for those groups made
  std::vector<int32_t> alts;  // each alternative's first element (an index into elements)
};

}  // namespace compiled

class Grammar {
 public:
  static util::StatusOr<std::shared_ptr<const Grammar>> Parse(std::string_view text,
                                                              const GrammarLimits& limits = {});

  const std::vector<compiled::Element>& elements() const { return elements_; }
  const std::vector<compiled::CharClass>& classes() const { return classes_; }
  const std::vector<compiled::Rule>& rules() const { return rules_; }
  int32_t root() const { return root_; }

 private:
  friend class GrammarBuilder;
  Grammar() = default;

  std::vector<compiled::Element> elements_;  // every alternative, each ending with kEnd
  std::vector<compiled::CharClass> classes_;
  std::vector<compiled::Rule> rules_;
  int32_t root_ = 0;
};

// A parse stack's frame: a position in an alternative and how many matches
// of its element are behind it; for a class, the code point being read
// (UTF-8 bytes still to come, the bits so far, the next byte's range).
struct StackFrame {
  int32_t pos = 0;
  uint32_t count = 0;
  uint32_t cp = 0;
  uint8_t left = 0;
  uint8_t lo = 0;
  uint8_t hi = 0;
  uint8_t pad = 0;  // always 0: frames compare as bytes
  bool operator==(const StackFrame&) const = default;
};

// Every parse stack of a position (bottom first; an empty stack is a
// finished sentence), canonical: sorted and without duplicates.
struct StackSet {
  std::vector<StackFrame> frames;
  std::vector<uint32_t> ends;  // stack i is frames[ends[i-1], ends[i]) (ends[-1] = 0)
  size_t size() const { return ends.size(); }
  bool operator==(const StackSet&) const = default;
};

// Buffers one Step reuses (a trie walk keeps one and steps millions of times).
struct StepScratch {
  std::vector<StackFrame> work;
  StackSet sorted;
  std::vector<uint32_t> order;
};

class GrammarMatcher {
 public:
  static constexpr size_t kMaxStacks = 256;
  static constexpr size_t kMaxDepth = 1024;

  explicit GrammarMatcher(const Grammar& grammar);

  bool Feed(uint8_t byte);
  // Every byte, or none: on a refusal the state is as before the call.
  bool FeedAll(std::string_view bytes);
  bool accepting() const;
  bool can_continue() const;
  // A refusal since construction was for a bound, not for the grammar.
  bool bound_exceeded() const { return bound_exceeded_; }
  // The whole state as bytes: equal keys accept the same continuations.
  std::string key() const;

  const StackSet& stacks() const { return stacks_; }
  const Grammar& grammar() const { return *grammar_; }

  // The step itself, for the token mask: `to` = `from` after `byte` (its
  // buffers reused). False when no stack survives; `*bound` is set when one
  // was dropped for a bound.
  static bool Step(const Grammar& g, const StackSet& from, uint8_t byte, StackSet& to,
                   StepScratch& scratch, bool* bound);
  // A set of the one stack `stack` (the mask walks from one stack, or from
  // one stack's top frame alone).
  static StackSet Single(std::span<const StackFrame> stack);

 private:
  const Grammar* grammar_;
  StackSet stacks_;
  bool bound_exceeded_ = false;
};

}  // namespace strata::grammar
