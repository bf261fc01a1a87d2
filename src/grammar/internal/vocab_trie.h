// grammar/internal/vocab_trie.h — the tokens of a vocabulary as a trie of
// their bytes, which the token masks walk (a prefix several tokens share is
// tried once).
//
// Threading: immutable once built.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::grammar::internal {

// Nodes in one array; a node's children are a sorted run of (byte, node).
struct VocabTrie {
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    std::vector<int32_t> tokens;                        // tokens whose bytes end here
  };
  std::vector<Node> nodes{Node{}};  // nodes[0]: the root

  void Insert(std::string_view bytes, int32_t id) {
    int32_t at = 0;
    for (const char ch : bytes) {
      const auto b = static_cast<uint8_t>(ch);
      auto& kids = nodes[static_cast<size_t>(at)].children;
      auto it = std::lower_bound(kids.begin(), kids.end(), b,
                                 [](const auto& kid, uint8_t v) { return kid.first < v; });
      if (it != kids.end() && it->first == b) {
        at = it->second;
        continue;
      }
      const auto next = static_cast<int32_t>(nodes.size());
      kids.insert(it, {b, next});  // `kids` stays valid: nodes grows after
      nodes.emplace_back();
      at = next;
    }
    nodes[static_cast<size_t>(at)].tokens.push_back(id);
  }
};

}  // namespace strata::grammar::internal
