#include "engine/block_eviction.h"

#include <vector>

namespace strata::engine {
namespace {

// An intrusive doubly linked list over block ids: O(1) for every operation.
class LruBlockEviction final : public BlockEvictionPolicy {
 public:
  explicit LruBlockEviction(int32_t n)
      : prev_(static_cast<size_t>(n), -1),
        next_(static_cast<size_t>(n), -1),
        in_(static_cast<size_t>(n), false) {}
  void Insert(int32_t b) override {
    if (in_[Idx(b)]) Unlink(b);
    PushBack(b);
  }
  void Erase(int32_t b) override {
    if (in_[Idx(b)]) Unlink(b);
  }
  void Touch(int32_t b) override {
    if (!in_[Idx(b)]) return;
    Unlink(b);
    PushBack(b);
  }
  std::optional<int32_t> Victim() override {
    if (head_ < 0) return std::nullopt;
    return head_;
  }

 private:
  static size_t Idx(int32_t b) { return static_cast<size_t>(b); }
  void PushBack(int32_t b) {
    prev_[Idx(b)] = tail_;
    next_[Idx(b)] = -1;
    if (tail_ >= 0) next_[Idx(tail_)] = b;
    tail_ = b;
    if (head_ < 0) head_ = b;
    in_[Idx(b)] = true;
  }
  void Unlink(int32_t b) {
    const int32_t p = prev_[Idx(b)], n = next_[Idx(b)];
    if (p >= 0)
      next_[Idx(p)] = n;
    else
      head_ = n;
    if (n >= 0)
      prev_[Idx(n)] = p;
    else
      tail_ = p;
    in_[Idx(b)] = false;
  }
  std::vector<int32_t> prev_, next_;
  std::vector<bool> in_;
  int32_t head_ = -1, tail_ = -1;
};

}  // namespace

std::unique_ptr<BlockEvictionPolicy> NewLruBlockEviction(int32_t n_blocks) {
  return std::make_unique<LruBlockEviction>(n_blocks);
}

}  // namespace strata::engine
