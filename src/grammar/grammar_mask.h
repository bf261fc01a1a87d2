// grammar/grammar_mask.h — which tokens of a vocabulary a grammar allows
// next, fast enough to run at every decode step.
//
// Promise: a VocabIndex is built once per vocabulary (a trie of every
// token's bytes; control, unknown and unused tokens are left out, as are
// end-of-generation tokens: the caller allows those itself when the matcher
// is accepting()). A GrammarTokenMask pairs it with one grammar.
// Allowed(matcher) lists exactly the tokens whose bytes the matcher accepts
// in full from its state, ids ascending; AllowedCached answers the same from
// a memo keyed by the matcher's whole state (at most 1,024 states and 1 Mi
// ids, 4 MiB, then it starts over).
//
// How it is fast (the idea of XGrammar's adaptive token mask): a token's
// fate at a parse stack depends mostly on the stack's top frame alone. For
// each top frame the mask walks the trie once from that frame by itself,
// and sorts the vocabulary into tokens accepted whatever lies below the top
// (their bytes are taken without leaving the top's rule), tokens refused
// whatever lies below, and the few that run past the end of the top's rule
// ("uncertain"). At a step, a stack's answer is the accepted list of its top
// plus those uncertain tokens that a full simulation from the whole stack
// takes (walked in byte order, so a shared prefix is stepped once and a
// dead prefix skips every token that starts with it). The walks of every
// top frame at the start of a class element are done at construction (up to
// max_precompute of them and half the walks' budget; the rest, and frames
// inside a repetition count or a UTF-8 character, on first use, memoised:
// at most kTopEntries walks of kTopIds ids in all, 32 MiB, then they start
// over).
//
// Threading: the VocabIndex and the grammar are immutable; Allowed and
// AllowedCached may run on any number of threads at once (the memos are
// guarded by their mutex).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "text/tokenizer.h"

namespace strata::grammar {

namespace internal {
struct VocabTrie;
}

class VocabIndex {
 public:
  // `tokenizer` is borrowed and must outlive the index.
  explicit VocabIndex(const text::Tokenizer& tokenizer);
  ~VocabIndex();
  VocabIndex(const VocabIndex&) = delete;
  VocabIndex& operator=(const VocabIndex&) = delete;

  int32_t n_vocab() const { return n_vocab_; }
  size_t trie_nodes() const;
  std::string_view piece(int32_t id) const { return tokenizer_.Piece(id); }
  const internal::VocabTrie& trie() const { return *trie_; }

 private:
  const text::Tokenizer& tokenizer_;
  std::unique_ptr<internal::VocabTrie> trie_;
  int32_t n_vocab_ = 0;
};

struct GrammarMaskOptions {
  // [0, 1 Mi] class elements whose start frames are walked at construction.
  size_t max_precompute = 4096;
};

class GrammarTokenMask {
 public:
  GrammarTokenMask(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const VocabIndex> vocab,
                   const GrammarMaskOptions& options = {});
  ~GrammarTokenMask();
  GrammarTokenMask(const GrammarTokenMask&) = delete;
  GrammarTokenMask& operator=(const GrammarTokenMask&) = delete;

  // `matcher` must be a matcher of this mask's grammar.
  std::vector<int32_t> Allowed(const GrammarMatcher& matcher) const;
  std::shared_ptr<const std::vector<int32_t>> AllowedCached(const GrammarMatcher& matcher) const;

  const Grammar& grammar() const { return *grammar_; }
  const std::shared_ptr<const Grammar>& grammar_ptr() const { return grammar_; }
  int32_t n_vocab() const { return vocab_->n_vocab(); }
  // Top frames walked so far (construction and first uses).
  size_t top_entries() const;

 private:
  struct TopEntry;
  std::shared_ptr<const TopEntry> Top(const StackFrame& top) const;
  std::shared_ptr<const TopEntry> ComputeTop(const StackFrame& top) const;
  // Appends the uncertain tokens of `entry` that `stack` takes.
  void Uncertain(std::span<const StackFrame> stack, const TopEntry& entry,
                 std::vector<int32_t>& out) const;

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const VocabIndex> vocab_;
  // The walks of top frames start over past 16,384 of them or 8 Mi ids in
  // all (32 MiB); construction fills at most half of that.
  static constexpr size_t kTopEntries = 1 << 14;
  static constexpr size_t kTopIds = size_t{8} << 20;
  static constexpr size_t kMemoEntries = 1024;
  static constexpr size_t kMemoIds = size_t{1} << 20;
  mutable std::mutex mu_;
  // guarded by mu_: the walks of top frames, keyed by the frame's bytes
  mutable std::unordered_map<std::string, std::shared_ptr<const TopEntry>> tops_;
  mutable size_t top_ids_ = 0;   // guarded by mu_: the ids tops_ holds
  mutable size_t memo_ids_ = 0;  // guarded by mu_
  mutable std::unordered_map<std::string, std::shared_ptr<const std::vector<int32_t>>>
      memo_;  // guarded by mu_: whole states
};

}  // namespace strata::grammar
