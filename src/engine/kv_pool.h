// engine/kv_pool.h — the KV cache as a pool of fixed-size blocks, with the
// shared-prefix cache (L2) over it.
//
// Promise: KV memory is one allocation cut into blocks of `block_size` token
// positions (16 by default). A sequence owns a BlockTable: the physical blocks
// holding its positions in order. Every block has a reference count, so one
// physical block can back the same prefix of many sequences. Three parts, kept
// apart:
//  - allocation: free blocks, reference counts;
//  - the prefix index: a full block can be published under the hash of its
//    content's whole chain (namespace, every earlier token, its own tokens);
//    Lookup finds it again, so a new sequence with the same prefix shares the
//    physical block instead of recomputing it. Full blocks are never written
//    again, so sharing never changes what anyone reads. A block published
//    with its parent's hash and its tokens can also be found by a prompt that
//    matches only its first positions (LongestPartialMatch): the new sequence
//    copies those positions into a block of its own (CopyPositions);
//  - eviction: a published block whose last reference drops stays cached
//    (evictable) until Allocate needs room; the eviction policy picks which.
//    A referenced block is never evicted.
// Allocation is O(1) and never fails silently: it reports exhaustion so the
// scheduler can queue or preempt.
//
// Threading: owned by the engine's scheduler thread; not thread-safe.
//
// Usage:
//   KvBlockPool pool(config, /*n_blocks=*/1024, /*block_size=*/16);
//   BlockTable seq;
//   STRATA_RETURN_IF_ERROR(seq.Reserve(pool, n_tokens));
//   ... forward pass writes positions [0, n_tokens) ...
//   seq.Release(pool);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/block_eviction.h"
#include "model/kv_layout.h"
#include "model/transformer.h"
#include "util/status.h"

namespace strata::engine {

struct PrefixCacheStats {
  int64_t lookups = 0;         // blocks looked up
  int64_t hits = 0;            // ... and found cached
  int64_t partial_hits = 0;    // partly matching blocks whose first positions were reused
  int64_t partial_tokens = 0;  // ... the positions reused
  int64_t published = 0;       // full blocks added to the index
  int64_t deduplicated = 0;    // full blocks dropped because an equal one was already cached
  int64_t evictions = 0;       // cached blocks reclaimed for new data
  int64_t forgotten = 0;       // blocks unpublished by an invalidation (ForgetChains)
};

// What ForgetChains does with a block, given its chain's tokens.
enum class ChainVisit {
  kForget,   // forget it and every block after it in its chain
  kDescend,  // keep it; look at the blocks after it
  kSkip,     // keep it and every block after it
};

class KvBlockPool {
 public:
  // Memory is reserved but not touched until blocks are written. `eviction`
  // defaults to LRU; `kv_type` is the element type (kernels::IsKvType, for
  // Q8_0 a model whose head dimension is a multiple of 32).
  KvBlockPool(const model::ModelConfig& config, int32_t n_blocks, int32_t block_size,
              std::unique_ptr<BlockEvictionPolicy> eviction = nullptr,
              kernels::TensorType kv_type = kernels::TensorType::kF32);

  int32_t n_blocks() const { return n_blocks_; }
  int32_t block_size() const { return block_size_; }
  // Blocks an Allocate can still return: never used, or cached and unreferenced.
  int32_t n_free() const { return static_cast<int32_t>(free_.size()) + n_cached_; }
  // Unreferenced blocks kept for their content.
  int32_t n_cached() const { return n_cached_; }
  // Blocks some sequence references.
  int32_t n_used() const { return n_blocks_ - n_free(); }
  // Blocks more than one sequence references (a shared prefix).
  int32_t n_shared() const { return n_shared_; }
  // Published blocks, referenced or not: what the prefix cache holds.
  int32_t n_published() const { return static_cast<int32_t>(index_.size()); }
  size_t bytes() const { return bytes_; }
  size_t bytes_per_block() const { return layout_.block_bytes(); }
  kernels::TensorType kv_type() const { return layout_.type(); }
  const model::KvLayout& layout() const { return layout_; }

  // A block with reference count 1: a never-used one if any, else the cached
  // block the eviction policy picks (its content forgotten); nullopt if every
  // block is referenced.
  std::optional<int32_t> Allocate();
  void Ref(int32_t block);
  // Drops one reference. Without references a published block stays cached;
  // any other block is free again.
  void Unref(int32_t block);
  int32_t ref_count(int32_t block) const { return refs_[static_cast<size_t>(block)]; }

  // The cached block published under `hash`, if any (counted as a lookup and,
  // when found, a hit; the caller Refs it to use it).
  std::optional<int32_t> Lookup(uint64_t hash);
  // Publishes a full block the caller holds under `hash`. Returns the block the
  // caller should keep: `block` itself, or an equal block already published
  // (referenced for the caller, who then drops `block`). With `parent` (the
  // hash of the block before it in its chain, != 0) and its block_size()
  // `tokens`, the block is also a candidate for LongestPartialMatch.
  int32_t Publish(int32_t block, uint64_t hash, uint64_t parent = 0,
                  std::span<const int32_t> tokens = {});
  struct PartialMatch {
    int32_t block = -1;
    int32_t n_tokens = 0;  // leading positions of `block` that match, in [1, block_size)
  };
  // Of the cached blocks published after `parent`, the one whose tokens start
  // with the longest run of `tokens` (up to block_size − 1 of them), if any starts
  // with at least one (the caller that copies its positions records that
  // with CountPartialReuse). Looks at kMaxPartialCandidates of them at most,
  // newest first (roughly: a reclaimed one's place goes to the newest), so a
  // prefix followed by thousands of different continuations costs the same.
  static constexpr size_t kMaxPartialCandidates = 64;
  std::optional<PartialMatch> LongestPartialMatch(uint64_t parent, std::span<const int32_t> tokens);
  void CountPartialReuse(int32_t n_tokens) {
    ++stats_.partial_hits;
    stats_.partial_tokens += n_tokens;
  }
  bool published(int32_t block) const { return hashes_[static_cast<size_t>(block)] != 0; }

  // Invalidation: walks the chains of published blocks that start after
  // `root` (a sequence's cache namespace; nullopt = every chain), calling
  // `visit` with each block's chain tokens (every position from the chain's
  // start to the block's end), parents before children. A forgotten block
  // is no longer found by Lookup or LongestPartialMatch: an unreferenced
  // one is free at once, a referenced one stays with its sequences (whose
  // content is still right) and is freed when the last lets it go. Returns
  // how many blocks were forgotten.
  int32_t ForgetChains(std::optional<uint64_t> root,
                       const std::function<ChainVisit(std::span<const int32_t>)>& visit);
  // Calls `fn` with each shared prefix: a chain of published blocks that
  // two or more chains continue (a system prompt several conversations
  // follow), the deepest only (a shorter one is its prefix), with its
  // start's root (a cache namespace) and all its tokens; at most `max` of
  // them. What a warm-up of another engine prefills: the blocks that were
  // reused, not every conversation's own tail.
  void ForEachSharedChain(
      size_t max, const std::function<void(uint64_t root, std::span<const int32_t>)>& fn) const;
  const PrefixCacheStats& prefix_stats() const { return stats_; }

  model::KvBuffer buffer() { return {data_.get(), n_blocks_, block_size_, layout_.type()}; }
  // Copies every position of block `from` into block `to`.
  void CopyBlock(int32_t from, int32_t to) { CopyPositions(from, to, block_size_); }
  // Copies positions [0, n) of block `from` into block `to`, every layer.
  void CopyPositions(int32_t from, int32_t to, int32_t n);

 private:
  // Drops a block whose content is forgotten from its parent's candidates.
  void ForgetChild(int32_t block);
  // Unpublishes `block` and every block published after it; how many.
  int32_t ForgetSubtree(int32_t block);

  const int32_t n_blocks_;
  const int32_t block_size_;
  const model::KvLayout layout_;
  const size_t bytes_;
  std::unique_ptr<uint8_t[]> data_;  // [n_blocks][layout_.block_bytes()], see model::KvLayout
  std::vector<int32_t> refs_;        // per block
  std::vector<int32_t> free_;        // stack of never-used or forgotten block ids
  std::vector<uint64_t> hashes_;     // per block: published hash, 0 if none
  std::unordered_map<uint64_t, int32_t> index_;  // published hash -> block
  // Partial matches: per block, the parent it was published after (0: not a
  // candidate), its tokens ([n_blocks][block_size]) and its place in
  // children_[parent], the candidates in publication order (swap-removed when
  // their content is forgotten).
  std::vector<uint64_t> parents_;
  std::vector<int32_t> block_tokens_;
  std::vector<uint32_t> child_slot_;
  std::unordered_map<uint64_t, std::vector<int32_t>> children_;
  std::unique_ptr<BlockEvictionPolicy> eviction_;
  int32_t n_cached_ = 0;  // published blocks without references
  int32_t n_shared_ = 0;  // blocks with more than one reference
  PrefixCacheStats stats_;
};

// The physical blocks of one sequence, in position order.
class BlockTable {
 public:
  // Appends a block the caller has already referenced for this table.
  void Append(int32_t block) { blocks_.push_back(block); }
  // Replaces block i (the caller moved its reference).
  void Replace(size_t i, int32_t block) { blocks_[i] = block; }
  // Makes room for positions [0, n_tokens): allocates what is missing, all or
  // nothing (ResourceExhausted, table unchanged, when the pool runs dry).
  util::Status Reserve(KvBlockPool& pool, int32_t n_tokens);
  // Drops the blocks past those needed for n_tokens positions.
  void Truncate(KvBlockPool& pool, int32_t n_tokens);
  // Drops every reference this table holds.
  void Release(KvBlockPool& pool);

  std::span<const int32_t> blocks() const { return blocks_; }
  int32_t capacity(int32_t block_size) const {
    return static_cast<int32_t>(blocks_.size()) * block_size;
  }

 private:
  std::vector<int32_t> blocks_;
};

}  // namespace strata::engine
