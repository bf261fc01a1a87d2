// engine/block_eviction.h — which unreferenced cached KV block to reclaim.
//
// Promise: the pool tells the policy when a cached block becomes evictable
// (its last reference dropped), when it stops being evictable (referenced
// again), when it is hit (a new request reuses it), and when it is reclaimed
// (its content forgotten: the block id then stands for new content); Victim()
// names the evictable block to reclaim. A referenced block is never a victim: the pool
// only ever offers unreferenced ones. The engine declares this interface; the
// cache module's policies (LRU, dual-factor, W-TinyLFU) implement it through
// an adapter (gateway/block_eviction_adapter.h), and NewLruBlockEviction is
// the built-in default.
//
// Threading: owned by the KV pool, on the scheduler thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

namespace strata::engine {

class BlockEvictionPolicy {
 public:
  virtual ~BlockEvictionPolicy() = default;
  virtual void Insert(int32_t block) = 0;  // became evictable
  virtual void Erase(int32_t block) = 0;   // no longer evictable: referenced again
  virtual void Touch(int32_t block) = 0;   // a request reused it (it may or may not be evictable)
  // An evictable block to reclaim, or nullopt if none; does not Erase it.
  virtual std::optional<int32_t> Victim() = 0;
  // The evictable `block` was reclaimed for new data: no longer evictable, and
  // whatever the policy remembers of its accesses belongs to content that is
  // gone. By default the same as Erase.
  virtual void Evict(int32_t block) { Erase(block); }
};

// Least recently inserted-or-touched first.
std::unique_ptr<BlockEvictionPolicy> NewLruBlockEviction(int32_t n_blocks);

}  // namespace strata::engine
