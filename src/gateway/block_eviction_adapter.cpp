#include "gateway/block_eviction_adapter.h"

#include <algorithm>
#include <vector>

#include "util/status.h"

namespace strata::gateway {
namespace {

class BlockEvictionAdapter final : public engine::BlockEvictionPolicy {
 public:
  BlockEvictionAdapter(std::unique_ptr<cache::EvictionPolicy> policy, const util::Clock& clock,
                       int32_t n_blocks, const BlockEvictionAdapterOptions& options)
      : policy_(std::move(policy)),
        clock_(clock),
        options_(options),
        blocks_(static_cast<size_t>(std::max(n_blocks, 0))) {}

  void Insert(int32_t b) override {
    State& s = At(b);
    if (s.in_policy) return;
    const cache::TimePoint now = Tick();
    const uint64_t key = Key(b);
    policy_->Insert(key, 1, now);
    s.in_policy = true;
    uint32_t replay = 0;
    switch (options_.history) {
      case BlockHistory::kNone:
        break;
      case BlockHistory::kReplayAll:
        replay = s.hits;
        break;
      case BlockHistory::kReplayMissed:
        replay = s.missed;
        break;
    }
    replay = std::min(replay, static_cast<uint32_t>(options_.max_replay));
    for (uint32_t i = 0; i < replay; ++i) policy_->Access(key, now);
    s.missed = 0;
  }

  void Erase(int32_t b) override {
    State& s = At(b);
    if (!s.in_policy) return;
    policy_->Erase(Key(b));
    s.in_policy = false;
  }

  void Evict(int32_t b) override {
    Erase(b);
    // New content from now on: a new key and no history.
    State& s = At(b);
    ++s.generation;
    s.hits = 0;
    s.missed = 0;
  }

  void Touch(int32_t b) override {
    State& s = At(b);
    if (s.hits < kMaxCount) ++s.hits;
    if (s.in_policy) {
      policy_->Access(Key(b), Tick());
    } else if (s.missed < kMaxCount) {
      ++s.missed;  // referenced now: the policy hears of it on re-insertion
    }
  }

  std::optional<int32_t> Victim() override {
    const std::optional<uint64_t> key = policy_->Victim(Tick());
    if (!key) return std::nullopt;
    const int32_t b = static_cast<int32_t>(*key & 0xffffffffu);
    // The policy holds exactly the evictable blocks, under their current key.
    STRATA_CHECK_MSG(
        b >= 0 && static_cast<size_t>(b) < blocks_.size() && At(b).in_policy && Key(b) == *key,
        "block eviction: the policy named a block that is not evictable");
    return b;
  }

 private:
  static constexpr uint32_t kMaxCount = 1u << 20;
  struct State {
    uint32_t generation = 0;  // bumped when the block is reclaimed (new content)
    uint32_t hits = 0;        // Touches since its content appeared
    uint32_t missed = 0;      // Touches while not in the policy, since the last Insert
    bool in_policy = false;   // evictable, i.e. in the policy
  };
  State& At(int32_t b) {
    STRATA_CHECK(b >= 0 && static_cast<size_t>(b) < blocks_.size());
    return blocks_[static_cast<size_t>(b)];
  }
  // The clock's time, but at least 1 µs after the last event's: the pool
  // releases a sequence's blocks leaf first within one instant, and the
  // policies must see that order (the leaf is the older: it goes first, so
  // no cached block outlives its parent, without which it is useless).
  // Dual-factor, for one, breaks ties between equal scores the other way.
  cache::TimePoint Tick() {
    last_ = std::max(clock_.Now(), last_ + std::chrono::microseconds(1));
    return last_;
  }
  // Block id in the low half, generation in the high half.
  uint64_t Key(int32_t b) {
    return (static_cast<uint64_t>(At(b).generation) << 32) | static_cast<uint32_t>(b);
  }

  const std::unique_ptr<cache::EvictionPolicy> policy_;
  const util::Clock& clock_;
  const BlockEvictionAdapterOptions options_;
  std::vector<State> blocks_;  // per block id
  cache::TimePoint last_{};    // time of the last event passed to the policy
};

}  // namespace

std::unique_ptr<engine::BlockEvictionPolicy> NewBlockEvictionAdapter(
    std::unique_ptr<cache::EvictionPolicy> policy, const util::Clock& clock, int32_t n_blocks,
    const BlockEvictionAdapterOptions& options) {
  return std::make_unique<BlockEvictionAdapter>(std::move(policy), clock, n_blocks, options);
}

std::function<std::unique_ptr<engine::BlockEvictionPolicy>(int32_t n_blocks)> BlockEvictionFactory(
    cache::PolicyKind kind, const util::Clock& clock, const cache::PolicyOptions& base) {
  return [kind, &clock, base](int32_t n_blocks) {
    cache::PolicyOptions o = base;
    o.capacity = static_cast<size_t>(std::max(n_blocks, 1));
    BlockEvictionAdapterOptions a;
    switch (kind) {
      case cache::PolicyKind::kLru:
        a.history = BlockHistory::kNone;
        break;
      case cache::PolicyKind::kDualFactor:
        a.history = BlockHistory::kReplayAll;
        break;
      case cache::PolicyKind::kWTinyLfu:
        a.history = BlockHistory::kReplayMissed;
        break;
    }
    return NewBlockEvictionAdapter(cache::NewEvictionPolicy(kind, o), clock, n_blocks, a);
  };
}

}  // namespace strata::gateway
