#include "grammar/token_mask.h"

#include <algorithm>
#include <iterator>
#include <string_view>

namespace strata::grammar {

// Nodes in one array; a node's children are a sorted run of (byte, node).
struct JsonTokenMask::Trie {
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

  void Walk(int32_t at, const JsonMachine& m, std::vector<int32_t>& out) const {
    for (const auto& [b, child] : nodes[static_cast<size_t>(at)].children) {
      JsonMachine next = m;
      if (!next.FeedOrSpoil(b)) continue;
      const Node& c = nodes[static_cast<size_t>(child)];
      out.insert(out.end(), c.tokens.begin(), c.tokens.end());
      Walk(child, next, out);
    }
  }
};

JsonTokenMask::JsonTokenMask(const text::Tokenizer& tokenizer)
    : trie_(std::make_unique<Trie>()),
      string_trie_(std::make_unique<Trie>()),
      n_vocab_(tokenizer.n_vocab()) {
  // A string body (inside a key: any string body takes the same bytes).
  JsonMachine in_string;
  in_string.FeedAll("{\"");
  for (int32_t id = 0; id < n_vocab_; ++id) {
    if (tokenizer.IsEog(id)) continue;
    const std::string_view piece = tokenizer.Piece(id);  // empty for control tokens
    if (piece.empty()) continue;
    trie_->Insert(piece, id);
    JsonMachine m = in_string;
    const bool safe = piece.find_first_of("\"\\") == std::string_view::npos && m.FeedAll(piece);
    if (safe) {
      string_safe_.push_back(id);
    } else {
      string_trie_->Insert(piece, id);
    }
  }
}

JsonTokenMask::~JsonTokenMask() = default;

std::vector<int32_t> JsonTokenMask::Allowed(const JsonMachine& machine) const {
  std::vector<int32_t> out;
  if (!machine.in_string_body()) {
    trie_->Walk(0, machine, out);
    std::sort(out.begin(), out.end());
    return out;
  }
  std::vector<int32_t> rest;
  string_trie_->Walk(0, machine, rest);
  std::sort(rest.begin(), rest.end());
  out.reserve(string_safe_.size() + rest.size());
  std::merge(string_safe_.begin(), string_safe_.end(), rest.begin(), rest.end(),
             std::back_inserter(out));
  return out;
}

std::shared_ptr<const std::vector<int32_t>> JsonTokenMask::AllowedCached(
    const JsonMachine& machine) const {
  const JsonMachine::Key key = machine.key();
  {
    std::lock_guard<std::mutex> lock(memo_mu_);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  }
  // Computed outside the lock: two threads may both compute one state, and
  // get equal answers.
  auto allowed = std::make_shared<const std::vector<int32_t>>(Allowed(machine));
  std::lock_guard<std::mutex> lock(memo_mu_);
  if (memo_.size() >= kMemoEntries || memo_ids_ + allowed->size() > kMemoIds) {
    memo_.clear();
    memo_ids_ = 0;
  }
  if (memo_.emplace(key, allowed).second) memo_ids_ += allowed->size();
  return allowed;
}

size_t JsonTokenMask::trie_nodes() const { return trie_->nodes.size(); }

}  // namespace strata::grammar
