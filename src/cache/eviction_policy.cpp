#include "cache/eviction_policy.h"

#include <algorithm>
#include <cmath>
#include <list>
#include <set>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "util/status.h"

namespace strata::cache {
namespace {

// ---------------------------------------------------------------------------
class LruPolicy final : public EvictionPolicy {
 public:
  void Insert(uint64_t key, uint64_t, TimePoint) override {
    STRATA_CHECK_MSG(pos_.count(key) == 0, "LRU: key inserted twice");
    order_.push_back(key);
    pos_[key] = std::prev(order_.end());
  }
  void Access(uint64_t key, TimePoint) override {
    auto it = pos_.find(key);
    if (it == pos_.end()) return;
    order_.splice(order_.end(), order_, it->second);
  }
  void Erase(uint64_t key) override {
    auto it = pos_.find(key);
    if (it == pos_.end()) return;
    order_.erase(it->second);
    pos_.erase(it);
  }
  std::optional<uint64_t> Victim(TimePoint) override {
    if (order_.empty()) return std::nullopt;
    return order_.front();
  }
  std::optional<uint64_t> VictimAmong(TimePoint,
                                      const std::function<bool(uint64_t)>& allowed) override {
    for (uint64_t key : order_) {
      if (allowed(key)) return key;
    }
    return std::nullopt;
  }
  size_t size() const override { return pos_.size(); }
  std::string_view name() const override { return "lru"; }

 private:
  std::list<uint64_t> order_;  // least recent first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> pos_;
};

// ---------------------------------------------------------------------------
class DualFactorPolicy final : public EvictionPolicy {
 public:
  explicit DualFactorPolicy(const PolicyOptions& o)
      : lambda_(o.lambda_per_s), k_(o.k), mu_(std::log(2.0) / o.count_half_life_s) {}

  void Insert(uint64_t key, uint64_t, TimePoint now) override {
    STRATA_CHECK_MSG(entries_.count(key) == 0, "dual-factor: key inserted twice");
    Entry e{Seconds(now), 1.0, 0.0, ++seq_};
    e.order = Order(e);
    order_.insert({e.order, -e.seq, key});
    entries_.emplace(key, e);
  }
  void Access(uint64_t key, TimePoint now) override {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    order_.erase({e.order, -e.seq, key});
    const double t = Seconds(now);
    e.count = e.count * std::exp(-mu_ * std::max(0.0, t - e.last_s)) + 1.0;
    e.last_s = t;
    e.seq = ++seq_;
    e.order = Order(e);
    order_.insert({e.order, -e.seq, key});
  }
  void Erase(uint64_t key) override {
    auto it = entries_.find(key);
    if (it == entries_.end()) return;
    order_.erase({it->second.order, -it->second.seq, key});
    entries_.erase(it);
  }
  std::optional<uint64_t> Victim(TimePoint) override {
    if (order_.empty()) return std::nullopt;
    return std::get<2>(*order_.begin());
  }
  std::optional<uint64_t> VictimAmong(TimePoint,
                                      const std::function<bool(uint64_t)>& allowed) override {
    for (const auto& entry : order_) {
      if (allowed(std::get<2>(entry))) return std::get<2>(entry);
    }
    return std::nullopt;
  }
  size_t size() const override { return entries_.size(); }
  std::string_view name() const override { return "dual-factor"; }

 private:
  struct Entry {
    double last_s;  // time of the last access, seconds since the first call
    double count;   // decayed access count as of last_s
    double order;   // log score at time 0: λ·last + log(n/(n+k)); smaller = evict first
    int64_t seq;    // order of the last insert/access; among equal scores the latest goes
                    // first, so the later blocks of a prefix chain leave before the earlier
                    // ones every later block depends on
  };
  double Seconds(TimePoint now) {
    if (!origin_) origin_ = now;
    return std::chrono::duration<double>(now - *origin_).count();
  }
  double Order(const Entry& e) const {
    return lambda_ * e.last_s + std::log(e.count / (e.count + k_));
  }

  const double lambda_, k_, mu_;
  std::optional<TimePoint> origin_;
  std::unordered_map<uint64_t, Entry> entries_;
  int64_t seq_ = 0;
  std::set<std::tuple<double, int64_t, uint64_t>> order_;
};

// ---------------------------------------------------------------------------
// Count-min sketch with 4-bit-style saturating counters and periodic halving,
// estimating how often a key was accessed recently.
class FrequencySketch {
 public:
  explicit FrequencySketch(size_t capacity) {
    size_t width = 16;
    while (width < capacity * 2) width <<= 1;
    width_mask_ = width - 1;
    table_.assign(kDepth * width, 0);
    sample_limit_ = std::max<size_t>(capacity * 10, 64);
  }
  void Increment(uint64_t key) {
    for (size_t d = 0; d < kDepth; ++d) {
      uint8_t& c = table_[d * (width_mask_ + 1) + Index(key, d)];
      if (c < 15) ++c;
    }
    if (++samples_ >= sample_limit_) {
      for (uint8_t& c : table_) c >>= 1;  // age: recent history counts more
      samples_ /= 2;
    }
  }
  int Frequency(uint64_t key) const {
    int f = 15;
    for (size_t d = 0; d < kDepth; ++d) {
      f = std::min<int>(f, table_[d * (width_mask_ + 1) + Index(key, d)]);
    }
    return f;
  }

 private:
  static constexpr size_t kDepth = 4;
  size_t Index(uint64_t key, size_t d) const {
    uint64_t x = key + 0x9E3779B97F4A7C15ULL * (d + 1);
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return static_cast<size_t>(x ^ (x >> 31)) & width_mask_;
  }
  std::vector<uint8_t> table_;
  size_t width_mask_ = 0;
  size_t samples_ = 0, sample_limit_ = 0;
};

class WTinyLfuPolicy final : public EvictionPolicy {
 public:
  explicit WTinyLfuPolicy(const PolicyOptions& o)
      : sketch_(std::max<size_t>(o.capacity, 16)),
        window_max_(std::max<size_t>(
            1, static_cast<size_t>(static_cast<double>(o.capacity) * o.window_fraction))),
        protected_max_(
            std::max<size_t>(1, (o.capacity - std::min(o.capacity, window_max_)) * 8 / 10)) {}

  void Insert(uint64_t key, uint64_t, TimePoint) override {
    STRATA_CHECK_MSG(where_.count(key) == 0, "W-TinyLFU: key inserted twice");
    sketch_.Increment(key);
    Push(kWindow, key);
    // The window's overflow becomes the main area's newest probationary entry:
    // the candidate the next eviction weighs against the main area's oldest.
    while (lists_[kWindow].size() > window_max_) {
      const uint64_t moved = lists_[kWindow].front();
      Remove(moved);
      Push(kProbation, moved);
    }
  }
  void Access(uint64_t key, TimePoint) override {
    auto it = where_.find(key);
    if (it == where_.end()) return;
    sketch_.Increment(key);
    const Segment s = it->second.first;
    if (s == kProbation) {
      Remove(key);
      Push(kProtected, key);
      if (lists_[kProtected].size() > protected_max_) {
        const uint64_t demoted = lists_[kProtected].front();
        Remove(demoted);
        Push(kProbation, demoted);
      }
    } else {
      Remove(key);
      Push(s, key);
    }
  }
  void Erase(uint64_t key) override {
    if (where_.count(key)) Remove(key);
  }
  std::optional<uint64_t> Victim(TimePoint) override {
    if (where_.empty()) return std::nullopt;
    const auto& probation = lists_[kProbation];
    const auto& prot = lists_[kProtected];
    if (auto v = Decide(probation.empty() ? std::nullopt : std::optional(probation.front()),
                        probation.empty() ? std::nullopt : std::optional(probation.back()),
                        prot.empty() ? std::nullopt : std::optional(prot.front()))) {
      return v;
    }
    return lists_[kWindow].front();
  }
  // Victim's rule over the allowed entries only.
  std::optional<uint64_t> VictimAmong(TimePoint,
                                      const std::function<bool(uint64_t)>& allowed) override {
    auto first = [&](const std::list<uint64_t>& list) -> std::optional<uint64_t> {
      for (uint64_t key : list) {
        if (allowed(key)) return key;
      }
      return std::nullopt;
    };
    const auto& probation = lists_[kProbation];
    std::optional<uint64_t> newest;
    for (auto it = probation.rbegin(); it != probation.rend() && !newest; ++it) {
      if (allowed(*it)) newest = *it;
    }
    if (auto v = Decide(first(probation), newest, first(lists_[kProtected]))) return v;
    return first(lists_[kWindow]);
  }
  size_t size() const override { return where_.size(); }
  std::string_view name() const override { return "w-tinylfu"; }

 private:
  enum Segment { kWindow = 0, kProbation = 1, kProtected = 2 };
  // The main area's victim among the entries that may go, given the oldest
  // and newest probationary ones and the oldest protected one (nullopt:
  // none): the newest probationary entry (the candidate from the window)
  // stays only if it is accessed more often than the one it would displace.
  // Nullopt when the main area has none (the window's oldest goes then).
  std::optional<uint64_t> Decide(std::optional<uint64_t> probation_oldest,
                                 std::optional<uint64_t> probation_newest,
                                 std::optional<uint64_t> protected_oldest) const {
    if (probation_newest) {
      const uint64_t candidate = *probation_newest;
      const uint64_t victim = *probation_oldest != candidate ? *probation_oldest
                              : protected_oldest             ? *protected_oldest
                                                             : candidate;
      if (victim == candidate) return candidate;
      return sketch_.Frequency(candidate) > sketch_.Frequency(victim) ? victim : candidate;
    }
    return protected_oldest;
  }
  void Push(Segment s, uint64_t key) {
    lists_[s].push_back(key);
    where_[key] = {s, std::prev(lists_[s].end())};
  }
  void Remove(uint64_t key) {
    auto it = where_.find(key);
    lists_[it->second.first].erase(it->second.second);
    where_.erase(it);
  }

  FrequencySketch sketch_;
  const size_t window_max_;
  const size_t protected_max_;
  std::list<uint64_t> lists_[3];  // each least recent first
  std::unordered_map<uint64_t, std::pair<Segment, std::list<uint64_t>::iterator>> where_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> NewEvictionPolicy(PolicyKind kind, const PolicyOptions& o) {
  switch (kind) {
    case PolicyKind::kLru:
      return std::make_unique<LruPolicy>();
    case PolicyKind::kDualFactor:
      return std::make_unique<DualFactorPolicy>(o);
    case PolicyKind::kWTinyLfu:
      return std::make_unique<WTinyLfuPolicy>(o);
  }
  return std::make_unique<LruPolicy>();
}

std::optional<PolicyKind> ParsePolicyKind(std::string_view name) {
  for (PolicyKind k : {PolicyKind::kLru, PolicyKind::kDualFactor, PolicyKind::kWTinyLfu}) {
    if (name == PolicyKindName(k)) return k;
  }
  return std::nullopt;
}

std::string_view PolicyKindName(PolicyKind kind) {
  switch (kind) {
    case PolicyKind::kLru:
      return "lru";
    case PolicyKind::kDualFactor:
      return "dual-factor";
    case PolicyKind::kWTinyLfu:
      return "w-tinylfu";
  }
  return "lru";
}

}  // namespace strata::cache
