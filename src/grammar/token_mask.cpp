#include "grammar/token_mask.h"

#include <algorithm>
#include <iterator>
#include <string_view>

#include "grammar/internal/vocab_trie.h"

namespace strata::grammar {

// The vocabulary's trie, walked with a JSON machine.
struct JsonTokenMask::Trie : internal::VocabTrie {
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
