// grammar/token_mask.h — which tokens of a vocabulary a JSON constraint
// allows next.
//
// Promise: a JsonTokenMask is built once per vocabulary (a trie of every
// token's bytes; control, unknown and unused tokens are left out, as are
// end-of-generation tokens, which the caller allows itself when the
// document is complete). Allowed(machine) lists exactly the tokens whose
// bytes the machine accepts in full from its state, by one walk of the trie
// that stops at the first refused byte of a branch, so every prefix shared
// by several tokens is tried once; inside a string the tokens that cannot
// leave it (no quote, backslash or control byte: decided once, at
// construction) are allowed without a walk, and only the others are
// walked. Ids ascend. AllowedCached answers the
// same from a memo keyed by the machine's whole state (at most 1,024
// states and 4 Mi ids, 16 MiB, then it starts over): inside a
// long string, or at any state a document returns to, the walk is done
// once (on a 152k vocabulary it costs tens of milliseconds inside a
// string, where nearly every token is allowed).
//
// Threading: the trie is immutable after construction; Allowed and
// AllowedCached may run on any number of threads at once (the memo is
// guarded by its mutex).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "grammar/json_machine.h"
#include "text/tokenizer.h"

namespace strata::grammar {

class JsonTokenMask {
 public:
  explicit JsonTokenMask(const text::Tokenizer& tokenizer);
  ~JsonTokenMask();
  JsonTokenMask(const JsonTokenMask&) = delete;
  JsonTokenMask& operator=(const JsonTokenMask&) = delete;

  std::vector<int32_t> Allowed(const JsonMachine& machine) const;
  std::shared_ptr<const std::vector<int32_t>> AllowedCached(const JsonMachine& machine) const;
  int32_t n_vocab() const { return n_vocab_; }
  size_t trie_nodes() const;

 private:
  struct Trie;
  std::unique_ptr<Trie> trie_;         // every token
  std::unique_ptr<Trie> string_trie_;  // the tokens not in string_safe_
  std::vector<int32_t> string_safe_;   // taken whole inside any string body, sorted
  int32_t n_vocab_ = 0;
  // The memo starts over past either bound (ids in all: 16 MiB of them).
  static constexpr size_t kMemoEntries = 1024;
  static constexpr size_t kMemoIds = size_t{4} << 20;
  mutable std::mutex memo_mu_;
  mutable size_t memo_ids_ = 0;  // guarded by memo_mu_: the ids the memo holds
  mutable std::map<JsonMachine::Key, std::shared_ptr<const std::vector<int32_t>>>
      memo_;  // guarded by memo_mu_
};

}  // namespace strata::grammar
