// gateway/block_eviction_adapter.h — the L2 tier's eviction through the one
// eviction framework (cache/eviction_policy.h).
//
// Promise: BlockEvictionAdapter implements engine::BlockEvictionPolicy (which
// cached KV block to reclaim) on top of any cache::EvictionPolicy (LRU,
// dual-factor, W-TinyLFU): each evictable block is one key of cost 1, time
// comes from an injected Clock. The policy's key set is always exactly the
// pool's evictable set, so Victim() never names a referenced block.
// Access history survives a block being referenced and released again (a hit
// on a block in use is remembered and replayed when it becomes evictable, see
// BlockHistory), and is dropped when the block is reclaimed: the reclaimed
// block id gets a new key, so a frequency sketch never credits new content
// with the old content's hits.
//
// Why here: the engine declares BlockEvictionPolicy and may not include the
// cache module; the cache module may not include the engine. The gateway may
// include both (docs/architecture.md), and `strata serve` and
// `strata bench cache` (cli) wire the adapter into the engine through
// EngineOptions::block_eviction.
//
// Threading: like the KV pool that owns it, used on the scheduler thread only.
//
// Usage:
//   engine::EngineOptions eo;
//   eo.block_eviction = gateway::BlockEvictionFactory(cache::PolicyKind::kWTinyLfu, clock);
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "cache/eviction_policy.h"
#include "engine/block_eviction.h"
#include "util/clock.h"

namespace strata::gateway {

// What the adapter tells a policy about hits it could not see (the block was
// referenced, hence not in the policy) or forgot (Erase drops an entry).
enum class BlockHistory {
  kNone,          // nothing (LRU: the release itself is the most recent use)
  kReplayAll,     // on re-insertion, replay every hit since the block's content
                  // appeared (the policy forgets erased keys: dual-factor)
  kReplayMissed,  // replay only the hits made while it was not in the policy
                  // (the policy's frequency sketch outlives Erase: W-TinyLFU)
};

struct BlockEvictionAdapterOptions {
  BlockHistory history = BlockHistory::kNone;
  // Hits replayed at most per re-insertion, [0, 1000]: enough to saturate
  // dual-factor's n/(n+k) and TinyLFU's 4-bit counters. Replayed hits are
  // stamped with the insertion time (the decay between them is not known).
  int32_t max_replay = 15;
};

// `policy` starts empty; `clock` must outlive the adapter; `n_blocks` is the
// pool's size.
std::unique_ptr<engine::BlockEvictionPolicy> NewBlockEvictionAdapter(
    std::unique_ptr<cache::EvictionPolicy> policy, const util::Clock& clock, int32_t n_blocks,
    const BlockEvictionAdapterOptions& options = {});

// The EngineOptions::block_eviction factory for a policy kind: the policy sized
// to the pool (W-TinyLFU's capacity = n_blocks), `base` for the rest of its
// options, and the BlockHistory that suits the kind. `clock` must outlive
// every policy made.
std::function<std::unique_ptr<engine::BlockEvictionPolicy>(int32_t n_blocks)> BlockEvictionFactory(
    cache::PolicyKind kind, const util::Clock& clock, const cache::PolicyOptions& base = {});

}  // namespace strata::gateway
