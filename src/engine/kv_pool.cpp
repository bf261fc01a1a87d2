#include "engine/kv_pool.h"

#include <algorithm>

#include <fmt/format.h>

namespace strata::engine {

KvBlockPool::KvBlockPool(const model::ModelConfig& config, int32_t n_blocks, int32_t block_size,
                         std::unique_ptr<BlockEvictionPolicy> eviction, kernels::TensorType kv_type)
    : n_blocks_(n_blocks),
      block_size_(block_size),
      layout_(config.kv_layout(block_size, kv_type)),
      bytes_(layout_.block_bytes() * static_cast<size_t>(n_blocks)),
      // new uint8_t[] without () leaves the memory untouched: pages are
      // faulted in only when a block is first written.
      data_(new uint8_t[bytes_]),
      refs_(static_cast<size_t>(n_blocks), 0),
      hashes_(static_cast<size_t>(n_blocks), 0),
      parents_(static_cast<size_t>(n_blocks), 0),
      block_tokens_(static_cast<size_t>(n_blocks) * static_cast<size_t>(block_size), 0),
      child_slot_(static_cast<size_t>(n_blocks), 0),
      eviction_(eviction ? std::move(eviction) : NewLruBlockEviction(n_blocks)) {
  STRATA_CHECK(n_blocks > 0 && block_size > 0);
  STRATA_CHECK(kernels::IsKvType(kv_type) &&
               (kv_type != kernels::TensorType::kQ8_0 || config.head_dim % 32 == 0));
  free_.reserve(static_cast<size_t>(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> KvBlockPool::Allocate() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    const std::optional<int32_t> victim = eviction_->Victim();
    if (!victim) return std::nullopt;
    b = *victim;
    const size_t i = static_cast<size_t>(b);
    STRATA_CHECK_MSG(refs_[i] == 0 && hashes_[i] != 0, "eviction picked a block in use");
    eviction_->Evict(b);
    index_.erase(hashes_[i]);
    hashes_[i] = 0;
    ForgetChild(b);
    --n_cached_;
    ++stats_.evictions;
  }
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void KvBlockPool::Ref(int32_t block) {
  STRATA_CHECK(block >= 0 && block < n_blocks_);
  const size_t i = static_cast<size_t>(block);
  if (refs_[i] == 0) {
    // Only a cached block can be picked up again without an Allocate.
    STRATA_CHECK_MSG(hashes_[i] != 0, "Ref of a free block");
    eviction_->Erase(block);
    --n_cached_;
  }
  if (++refs_[i] == 2) ++n_shared_;
}

void KvBlockPool::Unref(int32_t block) {
  STRATA_CHECK(block >= 0 && block < n_blocks_ && refs_[static_cast<size_t>(block)] > 0);
  const size_t i = static_cast<size_t>(block);
  if (--refs_[i] == 1) --n_shared_;
  if (refs_[i] > 0) return;
  if (hashes_[i] != 0) {
    eviction_->Insert(block);
    ++n_cached_;
  } else {
    free_.push_back(block);
  }
}

std::optional<int32_t> KvBlockPool::Lookup(uint64_t hash) {
  ++stats_.lookups;
  auto it = index_.find(hash);
  if (it == index_.end()) return std::nullopt;
  ++stats_.hits;
  eviction_->Touch(it->second);
  return it->second;
}

void KvBlockPool::ForgetChild(int32_t block) {
  const size_t i = static_cast<size_t>(block);
  if (parents_[i] == 0) return;
  auto it = children_.find(parents_[i]);
  std::vector<int32_t>& kids = it->second;
  const uint32_t slot = child_slot_[i];
  kids[slot] = kids.back();
  child_slot_[static_cast<size_t>(kids[slot])] = slot;
  kids.pop_back();
  if (kids.empty()) children_.erase(it);
  parents_[i] = 0;
}

int32_t KvBlockPool::Publish(int32_t block, uint64_t hash, uint64_t parent,
                             std::span<const int32_t> tokens) {
  STRATA_CHECK(hash != 0 && refs_[static_cast<size_t>(block)] > 0);
  auto it = index_.find(hash);
  if (it != index_.end()) {
    if (it->second == block) return block;
    // The same content exists already: share it and let ours go.
    Ref(it->second);
    ++stats_.deduplicated;
    return it->second;
  }
  STRATA_CHECK_MSG(hashes_[static_cast<size_t>(block)] == 0, "block published twice");
  index_.emplace(hash, block);
  const size_t i = static_cast<size_t>(block);
  hashes_[i] = hash;
  ++stats_.published;
  if (parent != 0 && tokens.size() == static_cast<size_t>(block_size_)) {
    std::copy(tokens.begin(), tokens.end(),
              block_tokens_.begin() + static_cast<ptrdiff_t>(i * tokens.size()));
    std::vector<int32_t>& kids = children_[parent];
    parents_[i] = parent;
    child_slot_[i] = static_cast<uint32_t>(kids.size());
    kids.push_back(block);
  }
  return block;
}

int32_t KvBlockPool::ForgetSubtree(int32_t block) {
  // Collect first: unpublishing edits children_.
  std::vector<int32_t> doomed{block};
  for (size_t k = 0; k < doomed.size(); ++k) {
    auto it = children_.find(hashes_[static_cast<size_t>(doomed[k])]);
    if (it != children_.end()) doomed.insert(doomed.end(), it->second.begin(), it->second.end());
  }
  for (int32_t b : doomed) {
    const size_t i = static_cast<size_t>(b);
    index_.erase(hashes_[i]);
    hashes_[i] = 0;
    ForgetChild(b);
    if (refs_[i] == 0) {  // cached: evictable until now, free from now on
      eviction_->Evict(b);
      --n_cached_;
      free_.push_back(b);
    }
  }
  stats_.forgotten += static_cast<int64_t>(doomed.size());
  return static_cast<int32_t>(doomed.size());
}

int32_t KvBlockPool::ForgetChains(
    std::optional<uint64_t> root,
    const std::function<ChainVisit(std::span<const int32_t>)>& visit) {
  std::vector<uint64_t> roots;
  if (root) {
    roots.push_back(*root);
  } else {
    // Chain starts: parents that are not themselves published blocks (the
    // namespaces, and the parents of blocks whose parent was evicted).
    for (const auto& [parent, kids] : children_) {
      if (!index_.contains(parent)) roots.push_back(parent);
    }
  }
  const size_t bs = static_cast<size_t>(block_size_);
  int32_t forgotten = 0;
  std::vector<int32_t> chain;  // the tokens from the chain's start
  for (uint64_t r : roots) {
    // Depth first; each frame is (block, depth). A forgotten block's
    // subtree goes with it, so the walk never visits it.
    std::vector<std::pair<int32_t, size_t>> stack;
    auto push_children = [&](uint64_t parent, size_t depth) {
      auto it = children_.find(parent);
      if (it == children_.end()) return;
      for (int32_t b : it->second) stack.emplace_back(b, depth);
    };
    push_children(r, 0);
    while (!stack.empty()) {
      const auto [b, depth] = stack.back();
      stack.pop_back();
      const size_t i = static_cast<size_t>(b);
      if (hashes_[i] == 0) continue;  // forgotten meanwhile (a sibling's subtree cannot hold it)
      chain.resize(depth * bs);
      chain.insert(chain.end(), block_tokens_.begin() + static_cast<ptrdiff_t>(i * bs),
                   block_tokens_.begin() + static_cast<ptrdiff_t>((i + 1) * bs));
      switch (visit(chain)) {
        case ChainVisit::kForget:
          forgotten += ForgetSubtree(b);
          break;
        case ChainVisit::kDescend:
          push_children(hashes_[i], depth + 1);
          break;
        case ChainVisit::kSkip:
          break;
      }
    }
  }
  return forgotten;
}

void KvBlockPool::ForEachSharedChain(
    size_t max, const std::function<void(uint64_t, std::span<const int32_t>)>& fn) const {
  const size_t bs = static_cast<size_t>(block_size_);
  size_t given = 0;
  std::vector<int32_t> chain;
  // Depth first; true when the subtree of `block` holds a shared block (one
  // with two or more continuations), which was then given (the deepest).
  std::function<bool(uint64_t, int32_t, size_t)> visit = [&](uint64_t root, int32_t block,
                                                             size_t depth) {
    const size_t i = static_cast<size_t>(block);
    chain.resize(depth * bs);
    chain.insert(chain.end(), block_tokens_.begin() + static_cast<ptrdiff_t>(i * bs),
                 block_tokens_.begin() + static_cast<ptrdiff_t>((i + 1) * bs));
    auto kids = children_.find(hashes_[i]);
    if (kids == children_.end()) return false;
    bool below = false;
    for (int32_t k : kids->second) below = visit(root, k, depth + 1) || below;
    if (below || kids->second.size() < 2) return below;
    if (given < max) {
      fn(root, std::span<const int32_t>(chain.data(), (depth + 1) * bs));
      ++given;
    }
    return true;
  };
  for (const auto& [root, first] : children_) {
    if (index_.contains(root)) continue;  // not a chain's start
    for (int32_t b : first) visit(root, b, 0);
  }
}

std::optional<KvBlockPool::PartialMatch> KvBlockPool::LongestPartialMatch(
    uint64_t parent, std::span<const int32_t> tokens) {
  auto it = children_.find(parent);
  if (it == children_.end() || tokens.empty()) return std::nullopt;
  const size_t want = std::min(tokens.size(), static_cast<size_t>(block_size_) - 1);
  const std::vector<int32_t>& kids = it->second;
  const size_t first =
      kids.size() > kMaxPartialCandidates ? kids.size() - kMaxPartialCandidates : 0;
  PartialMatch best;
  for (size_t k = kids.size(); k-- > first && static_cast<size_t>(best.n_tokens) < want;) {
    const int32_t* t =
        block_tokens_.data() + static_cast<size_t>(kids[k]) * static_cast<size_t>(block_size_);
    size_t n = 0;
    while (n < want && t[n] == tokens[n]) ++n;
    if (static_cast<int32_t>(n) > best.n_tokens) best = {kids[k], static_cast<int32_t>(n)};
  }
  if (best.n_tokens == 0) return std::nullopt;
  eviction_->Touch(best.block);
  return best;
}

void KvBlockPool::CopyPositions(int32_t from, int32_t to, int32_t n) {
  STRATA_CHECK(from >= 0 && from < n_blocks_ && to >= 0 && to < n_blocks_ && n >= 0 &&
               n <= block_size_);
  // The first n rows of every (layer, K|V) part.
  const size_t rows = static_cast<size_t>(n) * layout_.row_bytes();
  const uint8_t* src = data_.get() + layout_.Bytes(layout_.SlotOffset(from, 0));
  uint8_t* dst = data_.get() + layout_.Bytes(layout_.SlotOffset(to, 0));
  for (int32_t l = 0; l < layout_.n_layers(); ++l) {
    for (const model::KvPart part : {model::KvPart::kKey, model::KvPart::kValue}) {
      const size_t at = layout_.Bytes(layout_.PartOffset(l, part));
      std::copy_n(src + at, rows, dst + at);
    }
  }
}

util::Status BlockTable::Reserve(KvBlockPool& pool, int32_t n_tokens) {
  const size_t need = static_cast<size_t>((n_tokens + pool.block_size() - 1) / pool.block_size());
  if (need <= blocks_.size()) return util::OkStatus();
  const size_t missing = need - blocks_.size();
  if (missing > static_cast<size_t>(pool.n_free())) {
    return util::ResourceExhaustedError(fmt::format(
        "KV cache: {} more blocks needed, {} free of {}", missing, pool.n_free(), pool.n_blocks()));
  }
  for (size_t i = 0; i < missing; ++i) blocks_.push_back(*pool.Allocate());
  return util::OkStatus();
}

void BlockTable::Truncate(KvBlockPool& pool, int32_t n_tokens) {
  const size_t keep = static_cast<size_t>((n_tokens + pool.block_size() - 1) / pool.block_size());
  while (blocks_.size() > keep) {
    pool.Unref(blocks_.back());
    blocks_.pop_back();
  }
}

void BlockTable::Release(KvBlockPool& pool) { Truncate(pool, 0); }

}  // namespace strata::engine
