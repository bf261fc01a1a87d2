#include "grammar/grammar_mask.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>

#include "grammar/internal/vocab_trie.h"

namespace strata::grammar {

// The walk of one top frame by itself (see the header).
struct GrammarTokenMask::TopEntry {
  std::vector<int32_t> accepted;   // ids ascending
  std::vector<int32_t> uncertain;  // in byte order of their pieces
  std::vector<uint16_t> lcp;       // uncertain[i]'s common prefix with uncertain[i - 1]
};

namespace {

std::string FrameKey(const StackFrame& f) {
  std::string k(sizeof(StackFrame), '\0');
  std::memcpy(k.data(), &f, sizeof(StackFrame));
  return k;
}

std::span<const StackFrame> MaskStackAt(const StackSet& s, size_t i) {
  const uint32_t begin = i == 0 ? 0 : s.ends[i - 1];
  return {s.frames.data() + begin, s.ends[i] - begin};
}

// Drops the empty stacks of `s`; whether there were any.
bool DropEmpty(StackSet& s) {
  bool any = false;
  size_t w = 0;
  uint32_t begin = 0;
  for (size_t i = 0; i < s.ends.size(); ++i) {
    const uint32_t end = s.ends[i];
    if (end == begin) {
      any = true;
    } else {
      s.ends[w++] = end;
    }
    begin = end;
  }
  s.ends.resize(w);
  return any;
}

// The context-free walk of one top frame over the trie.
class TopWalk {
 public:
  TopWalk(const Grammar& g, const internal::VocabTrie& trie) : g_(g), trie_(trie) {}

  void Run(const StackFrame& top, std::vector<int32_t>& accepted, std::vector<int32_t>& uncertain) {
    accepted_ = &accepted;
    uncertain_ = &uncertain;
    states_.resize(1);
    states_[0] = GrammarMatcher::Single({&top, 1});
    Walk(0, 0, false);
  }

 private:
  // Every token at `node` and below is uncertain (their fate needs the stack).
  void MarkSubtree(int32_t node) {
    const auto& n = trie_.nodes[static_cast<size_t>(node)];
    uncertain_->insert(uncertain_->end(), n.tokens.begin(), n.tokens.end());
    for (const auto& [b, child] : n.children) MarkSubtree(child);
  }

  // states_[depth]: the stacks after `node`'s bytes, none empty; `inherited`:
  // some reading reached the top rule's end on the way, with bytes to go.
  void Walk(int32_t node, size_t depth, bool inherited) {
    if (states_.size() < depth + 2) states_.resize(depth + 2);
    const auto& n = trie_.nodes[static_cast<size_t>(node)];
    for (const auto& [b, child] : n.children) {
      StackSet& next = states_[depth + 1];
      bool bound = false;
      const bool alive = GrammarMatcher::Step(g_, states_[depth], b, next, scratch_, &bound);
      if (bound) {  // let the full simulation decide
        MarkSubtree(child);
        continue;
      }
      if (!alive) {
        if (inherited) MarkSubtree(child);
        continue;
      }
      const auto& c = trie_.nodes[static_cast<size_t>(child)];
      accepted_->insert(accepted_->end(), c.tokens.begin(), c.tokens.end());
      if (c.children.empty()) continue;
      const bool hit_end = DropEmpty(next);
      const bool below = inherited || hit_end;
      if (next.size() == 0) {
        if (below) {
          for (const auto& [b2, grandchild] : c.children) MarkSubtree(grandchild);
        }
        continue;
      }
      Walk(child, depth + 1, below);
    }
  }

  const Grammar& g_;
  const internal::VocabTrie& trie_;
  std::vector<int32_t>* accepted_ = nullptr;
  std::vector<int32_t>* uncertain_ = nullptr;
  std::vector<StackSet> states_;  // per depth, reused
  StepScratch scratch_;
};

}  // namespace

VocabIndex::VocabIndex(const text::Tokenizer& tokenizer)
    : tokenizer_(tokenizer),
      trie_(std::make_unique<internal::VocabTrie>()),
      n_vocab_(tokenizer.n_vocab()) {
  for (int32_t id = 0; id < n_vocab_; ++id) {
    if (tokenizer.IsEog(id)) continue;
    const std::string_view piece = tokenizer.Piece(id);  // empty for control tokens
    if (piece.empty() || piece.size() > std::numeric_limits<uint16_t>::max()) continue;
    trie_->Insert(piece, id);
  }
}

VocabIndex::~VocabIndex() = default;

size_t VocabIndex::trie_nodes() const { return trie_->nodes.size(); }

GrammarTokenMask::GrammarTokenMask(std::shared_ptr<const Grammar> grammar,
                                   std::shared_ptr<const VocabIndex> vocab,
                                   const GrammarMaskOptions& options)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  // Every class element's start frame: the tops a document meets most.
  size_t done = 0;
  const auto& elements = grammar_->elements();
  for (size_t p = 0; p < elements.size() && done < options.max_precompute; ++p) {
    if (elements[p].kind != compiled::Element::Kind::kClass) continue;
    const StackFrame f{.pos = static_cast<int32_t>(p)};
    auto e = ComputeTop(f);
    top_ids_ += e->accepted.size() + e->uncertain.size();
    tops_.emplace(FrameKey(f), std::move(e));
    ++done;
    if (top_ids_ > kTopIds / 2) break;  // the rest on first use
  }
}

GrammarTokenMask::~GrammarTokenMask() = default;

size_t GrammarTokenMask::top_entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tops_.size();
}

std::shared_ptr<const GrammarTokenMask::TopEntry> GrammarTokenMask::ComputeTop(
    const StackFrame& top) const {
  auto e = std::make_shared<TopEntry>();
  TopWalk walk(*grammar_, vocab_->trie());
  walk.Run(top, e->accepted, e->uncertain);
  std::sort(e->accepted.begin(), e->accepted.end());
  e->lcp.resize(e->uncertain.size());
  std::string_view prev;
  for (size_t i = 0; i < e->uncertain.size(); ++i) {
    const std::string_view p = vocab_->piece(e->uncertain[i]);
    size_t l = 0;
    while (l < p.size() && l < prev.size() && p[l] == prev[l]) ++l;
    e->lcp[i] = static_cast<uint16_t>(l);
    prev = p;
  }
  return e;
}

std::shared_ptr<const GrammarTokenMask::TopEntry> GrammarTokenMask::Top(
    const StackFrame& top) const {
  const std::string key = FrameKey(top);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = tops_.find(key); it != tops_.end()) return it->second;
  }
  // Computed outside the lock: two threads may both walk one frame, and get
  // equal answers.
  auto e = ComputeTop(top);
  const size_t ids = e->accepted.size() + e->uncertain.size();
  std::lock_guard<std::mutex> lock(mu_);
  if (tops_.size() >= kTopEntries || top_ids_ + ids > kTopIds) {
    tops_.clear();
    top_ids_ = 0;
  }
  if (tops_.emplace(key, e).second) top_ids_ += ids;
  return e;
}

void GrammarTokenMask::Uncertain(std::span<const StackFrame> stack, const TopEntry& entry,
                                 std::vector<int32_t>& out) const {
  if (entry.uncertain.empty()) return;
  const Grammar& g = *grammar_;
  std::vector<StackSet> states(1);
  states[0] = GrammarMatcher::Single(stack);
  StepScratch scratch;
  size_t have = 0;  // states[0..have] hold the current token's prefix
  size_t dead =
      std::numeric_limits<size_t>::max();  // the previous token died after this many bytes
  for (size_t i = 0; i < entry.uncertain.size(); ++i) {
    const int32_t id = entry.uncertain[i];
    const std::string_view p = vocab_->piece(id);
    const size_t l = entry.lcp[i];
    if (dead <= l) continue;  // it starts with the prefix that died
    size_t d = std::min(have, l);
    dead = std::numeric_limits<size_t>::max();
    if (states.size() < p.size() + 1) states.resize(p.size() + 1);
    bool ok = true;
    for (; d < p.size(); ++d) {
      bool bound = false;
      if (!GrammarMatcher::Step(g, states[d], static_cast<uint8_t>(p[d]), states[d + 1], scratch,
                                &bound)) {
        ok = false;
        have = d;
        dead = d + 1;
        break;
      }
    }
    if (ok) {
      have = p.size();
      out.push_back(id);
    }
  }
}

std::vector<int32_t> GrammarTokenMask::Allowed(const GrammarMatcher& matcher) const {
  const StackSet& s = matcher.stacks();
  std::vector<std::span<const StackFrame>> live;
  for (size_t i = 0; i < s.size(); ++i) {
    if (auto st = MaskStackAt(s, i); !st.empty()) live.push_back(st);
  }
  std::vector<int32_t> out;
  if (live.empty()) return out;
  if (live.size() == 1) {
    const auto entry = Top(live[0].back());
    std::vector<int32_t> extra;
    Uncertain(live[0], *entry, extra);
    std::sort(extra.begin(), extra.end());
    out.reserve(entry->accepted.size() + extra.size());
    std::merge(entry->accepted.begin(), entry->accepted.end(), extra.begin(), extra.end(),
               std::back_inserter(out));
    return out;
  }
  // Several readings: the union, through a bitmap of the vocabulary.
  const auto n = static_cast<size_t>(vocab_->n_vocab());
  std::vector<uint64_t> bits((n + 63) / 64, 0);
  std::vector<int32_t> extra;
  for (const auto& st : live) {
    const auto entry = Top(st.back());
    for (const int32_t id : entry->accepted) {
      bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    }
    extra.clear();
    Uncertain(st, *entry, extra);
    for (const int32_t id : extra) bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
  }
  for (size_t w = 0; w < bits.size(); ++w) {
    for (uint64_t x = bits[w]; x != 0; x &= x - 1) {
      out.push_back(static_cast<int32_t>(w * 64 + static_cast<size_t>(__builtin_ctzll(x))));
    }
  }
  return out;
}

std::shared_ptr<const std::vector<int32_t>> GrammarTokenMask::AllowedCached(
    const GrammarMatcher& matcher) const {
  const std::string key = matcher.key();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  }
  auto allowed = std::make_shared<const std::vector<int32_t>>(Allowed(matcher));
  std::lock_guard<std::mutex> lock(mu_);
  if (memo_.size() >= kMemoEntries || memo_ids_ + allowed->size() > kMemoIds) {
    memo_.clear();
    memo_ids_ = 0;
  }
  if (memo_.emplace(key, allowed).second) memo_ids_ += allowed->size();
  return allowed;
}

}  // namespace strata::grammar
