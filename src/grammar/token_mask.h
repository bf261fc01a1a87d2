// grammar/token_mask.h — which tokens of a vocabulary a JSON constraint
// allows next.
//
// Promise: a JsonTokenMask is built once per vocabulary (a trie of every
// token's bytes; control, unknown and unused tokens are left out, as are
// end-of-generation tokens, which the caller allows itself when the
// document is complete). Allowed(machine) lists exactly the tokens whose
// bytes the machine accepts in full from its state, by one walk of the trie
// that stops at the first refused byte of a branch, so every prefix shared
// by several tokens is tried once. Ids ascend.
//
// Threading: immutable after construction; Allowed may run on any number
// of threads at once.
#pragma once

#include <cstdint>
#include <memory>
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
  int32_t n_vocab() const { return n_vocab_; }
  size_t trie_nodes() const;

 private:
  struct Trie;
  std::unique_ptr<Trie> trie_;
  int32_t n_vocab_ = 0;
};

}  // namespace strata::grammar
