// The matcher of grammar/grammar.h: a set of parse stacks advanced byte by
// byte. Every stack's top is a class frame ready for a code point (or the
// stack is empty: a finished sentence); after a code point completes, the
// closure expands rule references (pushing), skips what may be skipped and
// pops finished alternatives until every stack is ready again.
#include <algorithm>
#include <cstring>

#include "grammar/grammar.h"

namespace strata::grammar {

using compiled::Element;
using compiled::kUnbounded;

namespace {

// Closure work allowed per byte: past it the byte is refused for a bound.
constexpr int32_t kCloseBudget = 1 << 16;
constexpr int32_t kCloseRecursion = 4096;

// The count after one more match: past the minimum an unbounded element
// only needs to know it reached the minimum (so a long run is one state).
uint32_t NextCount(const Element& e, uint32_t count) {
  const uint32_t c = count + 1;
  return e.max == kUnbounded ? std::min(c, e.min) : c;
}

class Closer {
 public:
  Closer(const Grammar& g, StackSet& out, bool* bound) : g_(g), out_(out), bound_(bound) {}

  void Close(std::vector<StackFrame>& w, int32_t depth) {
    if (--budget_ < 0 || depth > kCloseRecursion) {
      *bound_ = true;
      return;
    }
    const StackFrame f = w.back();
    const Element& e = g_.elements()[static_cast<size_t>(f.pos)];
    switch (e.kind) {
      case Element::Kind::kEnd:
        w.pop_back();
        if (w.empty()) {
          Emit(w);
        } else {
          Close(w, depth + 1);
        }
        w.push_back(f);
        return;
      case Element::Kind::kClass:
        if (f.count < e.max) Emit(w);
        if (f.count >= e.min) {
          w.back() = StackFrame{.pos = f.pos + 1};
          Close(w, depth + 1);
          w.back() = f;
        }
        return;
      case Element::Kind::kRule: {
        if (f.count < e.max) {
          const uint32_t c1 = NextCount(e, f.count);
          // A last call before the alternative's end leaves no frame to
          // return to (the stack does not grow with right recursion).
          const bool tail =
              e.max != kUnbounded && c1 == e.max &&
              g_.elements()[static_cast<size_t>(f.pos) + 1].kind == Element::Kind::kEnd;
          if (tail) {
            w.pop_back();
          } else {
            w.back().count = c1;
          }
          for (const int32_t alt : g_.rules()[static_cast<size_t>(e.arg)].alts) {
            if (w.size() >= GrammarMatcher::kMaxDepth) {
              *bound_ = true;
              continue;
            }
            w.push_back(StackFrame{.pos = alt});
            Close(w, depth + 1);
            w.pop_back();
          }
          if (tail) {
            w.push_back(f);
          } else {
            w.back() = f;
          }
        }
        if (f.count >= e.min) {
          w.back() = StackFrame{.pos = f.pos + 1};
          Close(w, depth + 1);
          w.back() = f;
        }
        return;
      }
    }
  }

  void Emit(const std::vector<StackFrame>& w) {
    if (out_.ends.size() >= 4 * GrammarMatcher::kMaxStacks) {
      *bound_ = true;
      return;
    }
    out_.frames.insert(out_.frames.end(), w.begin(), w.end());
    out_.ends.push_back(static_cast<uint32_t>(out_.frames.size()));
  }

 private:
  const Grammar& g_;
  StackSet& out_;
  bool* bound_;
  int32_t budget_ = kCloseBudget;
};

std::span<const StackFrame> StackAt(const StackSet& s, size_t i) {
  const uint32_t begin = i == 0 ? 0 : s.ends[i - 1];
  return {s.frames.data() + begin, s.ends[i] - begin};
}

// Sorts the stacks and drops duplicates (two readings that reached the same
// stack are one from here on).
void Canonicalize(StackSet& s, StepScratch& scratch) {
  const size_t n = s.size();
  if (n <= 1) return;
  auto less = [&](uint32_t a, uint32_t b) {
    const auto x = StackAt(s, a), y = StackAt(s, b);
    if (x.size() != y.size()) return x.size() < y.size();
    // Empty stacks (finished sentences) may have no storage at all.
    return !x.empty() && std::memcmp(x.data(), y.data(), x.size() * sizeof(StackFrame)) < 0;
  };
  auto equal = [&](uint32_t a, uint32_t b) {
    const auto x = StackAt(s, a), y = StackAt(s, b);
    return x.size() == y.size() &&
           (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(StackFrame)) == 0);
  };
  scratch.order.resize(n);
  for (uint32_t i = 0; i < n; ++i) scratch.order[i] = i;
  std::sort(scratch.order.begin(), scratch.order.end(), less);
  StackSet& out = scratch.sorted;
  out.frames.clear();
  out.ends.clear();
  for (size_t k = 0; k < n; ++k) {
    if (k > 0 && equal(scratch.order[k], scratch.order[k - 1])) continue;
    const auto st = StackAt(s, scratch.order[k]);
    out.frames.insert(out.frames.end(), st.begin(), st.end());
    out.ends.push_back(static_cast<uint32_t>(out.frames.size()));
  }
  std::swap(s, out);
}

}  // namespace

GrammarMatcher::GrammarMatcher(const Grammar& grammar) : grammar_(&grammar) {
  Closer closer(grammar, stacks_, &bound_exceeded_);
  std::vector<StackFrame> w;
  for (const int32_t alt : grammar.rules()[static_cast<size_t>(grammar.root())].alts) {
    w.assign(1, StackFrame{.pos = alt});
    closer.Close(w, 0);
  }
  StepScratch scratch;
  Canonicalize(stacks_, scratch);
}

StackSet GrammarMatcher::Single(std::span<const StackFrame> stack) {
  StackSet s;
  s.frames.assign(stack.begin(), stack.end());
  s.ends.push_back(static_cast<uint32_t>(s.frames.size()));
  return s;
}

bool GrammarMatcher::Step(const Grammar& g, const StackSet& from, uint8_t b, StackSet& to,
                          StepScratch& scratch, bool* bound) {
  to.frames.clear();
  to.ends.clear();
  Closer closer(g, to, bound);
  for (size_t i = 0; i < from.size(); ++i) {
    const auto st = StackAt(from, i);
    if (st.empty()) continue;  // a finished sentence takes nothing more
    const StackFrame& top = st.back();
    const Element& e = g.elements()[static_cast<size_t>(top.pos)];
    const compiled::CharClass& cls = g.classes()[static_cast<size_t>(e.arg)];
    StackFrame nt = top;
    uint32_t cp = 0;
    if (top.left == 0) {
      if (b < 0x80) {
        cp = b;
      } else {
        // A lead byte: the length, the first continuation's range (no
        // overlong forms, no surrogates, nothing past U+10FFFF).
        nt.lo = 0x80;
        nt.hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) {
          nt.left = 1;
          nt.cp = b & 0x1Fu;
        } else if (b >= 0xE0 && b <= 0xEF) {
          nt.left = 2;
          nt.cp = b & 0x0Fu;
          if (b == 0xE0) nt.lo = 0xA0;
          if (b == 0xED) nt.hi = 0x9F;
        } else if (b >= 0xF0 && b <= 0xF4) {
          nt.left = 3;
          nt.cp = b & 0x07u;
          if (b == 0xF0) nt.lo = 0x90;
          if (b == 0xF4) nt.hi = 0x8F;
        } else {
          continue;
        }
        // The code points this lead can start (the shortest form's floor:
        // E0 and F0 leads carry no bits of their own).
        const uint32_t shift = 6u * nt.left;
        const uint32_t floor = nt.left == 1 ? 0x80 : nt.left == 2 ? 0x800 : 0x10000;
        const uint32_t lo = nt.cp << shift;
        if (!cls.Intersects(std::max(lo, floor), lo | ((1u << shift) - 1u))) continue;
        scratch.work.assign(st.begin(), st.end());
        scratch.work.back() = nt;
        closer.Emit(scratch.work);
        continue;
      }
    } else {
      if (b < top.lo || b > top.hi) continue;
      nt.cp = (top.cp << 6) | (b & 0x3Fu);
      nt.lo = 0x80;
      nt.hi = 0xBF;
      if (--nt.left > 0) {
        const uint32_t shift = 6u * nt.left;
        const uint32_t lo = nt.cp << shift;
        if (!cls.Intersects(lo, lo | ((1u << shift) - 1u))) continue;
        scratch.work.assign(st.begin(), st.end());
        scratch.work.back() = nt;
        closer.Emit(scratch.work);
        continue;
      }
      cp = nt.cp;
    }
    if (!cls.Contains(cp)) continue;
    nt = StackFrame{.pos = top.pos, .count = NextCount(e, top.count)};
    scratch.work.assign(st.begin(), st.end());
    scratch.work.back() = nt;
    closer.Close(scratch.work, 0);
  }
  Canonicalize(to, scratch);
  if (to.size() > kMaxStacks) {
    *bound = true;
    to.frames.clear();
    to.ends.clear();
  }
  return to.size() > 0;
}

bool GrammarMatcher::Feed(uint8_t byte) {
  StackSet next;
  StepScratch scratch;
  if (!Step(*grammar_, stacks_, byte, next, scratch, &bound_exceeded_)) return false;
  stacks_ = std::move(next);
  return true;
}

bool GrammarMatcher::FeedAll(std::string_view bytes) {
  StackSet cur = stacks_, next;
  StepScratch scratch;
  for (const char c : bytes) {
    if (!Step(*grammar_, cur, static_cast<uint8_t>(c), next, scratch, &bound_exceeded_)) {
      return false;
    }
    std::swap(cur, next);
  }
  stacks_ = std::move(cur);
  return true;
}

bool GrammarMatcher::accepting() const {
  for (size_t i = 0; i < stacks_.size(); ++i) {
    if (StackAt(stacks_, i).empty()) return true;
  }
  return false;
}

bool GrammarMatcher::can_continue() const {
  for (size_t i = 0; i < stacks_.size(); ++i) {
    if (!StackAt(stacks_, i).empty()) return true;
  }
  return false;
}

std::string GrammarMatcher::key() const {
  std::string k;
  k.resize(stacks_.ends.size() * sizeof(uint32_t) + stacks_.frames.size() * sizeof(StackFrame));
  if (!stacks_.ends.empty()) {
    std::memcpy(k.data(), stacks_.ends.data(), stacks_.ends.size() * sizeof(uint32_t));
  }
  if (!stacks_.frames.empty()) {
    std::memcpy(k.data() + stacks_.ends.size() * sizeof(uint32_t), stacks_.frames.data(),
                stacks_.frames.size() * sizeof(StackFrame));
  }
  return k;
}

}  // namespace strata::grammar
