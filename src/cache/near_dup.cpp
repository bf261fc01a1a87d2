#include "cache/near_dup.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

#include "cache/internal/lexicon.h"
#include "cache/simhash.h"
#include "util/hash.h"

namespace strata::cache {

// ---------------------------------------------------------------------------
// Preparing and scoring texts.

size_t NearDupText::MemoryBytes() const {
  return sizeof(NearDupText) + tokens.capacity() * sizeof(uint64_t) +
         weights.capacity() * sizeof(float) + flags.capacity() * sizeof(uint8_t);
}

util::StatusOr<NearDupText> PrepareNearDupText(std::string_view text,
                                               const PrepareOptions& options) {
  STRATA_ASSIGN_OR_RETURN(NormalizedText norm, NormalizeText(text, options.normalize));
  if (norm.tokens.empty()) {
    return util::InvalidArgumentError("l3: the text has no words to compare");
  }
  if (norm.tokens.size() > options.max_words) {
    return util::OutOfRangeError(
        fmt::format("l3: the text has {} words, more than the {} L3 handles", norm.tokens.size(),
                    options.max_words));
  }
  NearDupText out;
  const std::vector<WeightedFeature> features = TokenFeatures(norm, options.flat_weights);
  out.tokens.reserve(features.size());
  out.weights.reserve(features.size());
  out.flags.reserve(features.size());
  for (size_t i = 0; i < features.size(); ++i) {
    const Token& t = norm.tokens[i];
    uint8_t f = 0;
    if (t.kind != TokenKind::kWord || t.has_digit) {
      f |= NearDupText::kSlot;
    } else if (internal::IsNegation(t.text)) {
      f |= NearDupText::kNegation;
    } else if (!internal::IsStopWord(t.text) && !internal::IsQuestionWord(t.text)) {
      f |= NearDupText::kContent;
    }
    if (t.entity_like) f |= NearDupText::kEntity;
    out.tokens.push_back(features[i].hash);
    out.weights.push_back(features[i].weight);
    out.flags.push_back(f);
    out.total_weight += features[i].weight;
  }
  out.fingerprint = SimHash(features);
  out.sequence_hash = util::Hash64(std::span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(out.tokens.data()), out.tokens.size() * sizeof(uint64_t)));
  return out;
}

std::string_view GuardName(Guard guard) {
  switch (guard) {
    case Guard::kNone:
      return "none";
    case Guard::kSlots:
      return "slots";
    case Guard::kNegation:
      return "negation";
    case Guard::kOrder:
      return "order";
    case Guard::kEntity:
      return "entity";
  }
  return "none";
}

namespace {

std::vector<uint64_t> TokensWith(const NearDupText& t, uint8_t flag) {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < t.tokens.size(); ++i) {
    if (t.flags[i] & flag) out.push_back(t.tokens[i]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint64_t> SortedTokens(const NearDupText& t) {
  std::vector<uint64_t> out = t.tokens;
  std::sort(out.begin(), out.end());
  return out;
}

// Content words occurring exactly once: (hash, position), sorted by hash.
std::vector<std::pair<uint64_t, size_t>> UniqueContent(const NearDupText& t) {
  std::vector<std::pair<uint64_t, size_t>> all;
  for (size_t i = 0; i < t.tokens.size(); ++i) {
    if (t.flags[i] & NearDupText::kContent) all.emplace_back(t.tokens[i], i);
  }
  std::sort(all.begin(), all.end());
  std::vector<std::pair<uint64_t, size_t>> out;
  for (size_t i = 0; i < all.size(); ++i) {
    const bool dup = (i > 0 && all[i - 1].first == all[i].first) ||
                     (i + 1 < all.size() && all[i + 1].first == all[i].first);
    if (!dup) out.push_back(all[i]);
  }
  return out;
}

// Do the content words that occur once in each text appear in the same order?
bool SameOrder(const NearDupText& a, const NearDupText& b) {
  const auto ua = UniqueContent(a);
  const auto ub = UniqueContent(b);
  std::vector<std::pair<size_t, size_t>> shared;  // (position in a, position in b)
  size_t j = 0;
  for (const auto& [h, pos] : ua) {
    while (j < ub.size() && ub[j].first < h) ++j;
    if (j < ub.size() && ub[j].first == h) shared.emplace_back(pos, ub[j].second);
  }
  std::sort(shared.begin(), shared.end());
  for (size_t i = 1; i < shared.size(); ++i) {
    if (shared[i].second < shared[i - 1].second) return false;
  }
  return true;
}

bool EntitiesIn(const NearDupText& from, const std::vector<uint64_t>& other_sorted) {
  for (size_t i = 0; i < from.tokens.size(); ++i) {
    if ((from.flags[i] & NearDupText::kEntity) &&
        !std::binary_search(other_sorted.begin(), other_sorted.end(), from.tokens[i])) {
      return false;
    }
  }
  return true;
}

Guard CheckGuards(const NearDupText& a, const NearDupText& b, const SimilarityOptions& o) {
  if (o.slot_guard && TokensWith(a, NearDupText::kSlot) != TokensWith(b, NearDupText::kSlot)) {
    return Guard::kSlots;
  }
  if (o.negation_guard && TokensWith(a, NearDupText::kNegation).size() !=
                              TokensWith(b, NearDupText::kNegation).size()) {
    return Guard::kNegation;
  }
  if (o.order_guard && !SameOrder(a, b)) return Guard::kOrder;
  if (o.entity_guard && (!EntitiesIn(a, SortedTokens(b)) || !EntitiesIn(b, SortedTokens(a)))) {
    return Guard::kEntity;
  }
  return Guard::kNone;
}

// Weight of the multiset intersection of the tokens: an upper bound of W(LCS).
double BagOverlap(const NearDupText& a, const NearDupText& b) {
  auto sorted = [](const NearDupText& t) {
    std::vector<std::pair<uint64_t, float>> v;
    v.reserve(t.tokens.size());
    for (size_t i = 0; i < t.tokens.size(); ++i) v.emplace_back(t.tokens[i], t.weights[i]);
    std::sort(v.begin(), v.end());
    return v;
  };
  const auto va = sorted(a), vb = sorted(b);
  double overlap = 0;
  size_t i = 0, j = 0;
  while (i < va.size() && j < vb.size()) {
    if (va[i].first < vb[j].first) {
      ++i;
    } else if (vb[j].first < va[i].first) {
      ++j;
    } else {
      overlap += std::min(va[i].second, vb[j].second);
      ++i;
      ++j;
    }
  }
  return overlap;
}

double WeightedLcs(const NearDupText& a, const NearDupText& b) {
  const size_t m = b.tokens.size();
  std::vector<double> prev(m + 1, 0.0), cur(m + 1, 0.0);
  for (size_t i = 0; i < a.tokens.size(); ++i) {
    const uint64_t x = a.tokens[i];
    const double w = a.weights[i];
    cur[0] = 0;
    for (size_t j = 0; j < m; ++j) {
      cur[j + 1] = x == b.tokens[j] ? prev[j] + std::min<double>(w, b.weights[j])
                                    : std::max(prev[j + 1], cur[j]);
    }
    std::swap(prev, cur);
  }
  return prev[m];
}

// Weighted 1-, 2- and 3-gram shingles: hash → weight (geometric mean of the
// tokens' weights), sorted by hash, one per distinct shingle.
std::vector<std::pair<uint64_t, double>> Shingles(const NearDupText& t) {
  std::vector<std::pair<uint64_t, double>> v;
  const size_t n = t.tokens.size();
  for (size_t len = 1; len <= 3; ++len) {
    for (size_t i = 0; i + len <= n; ++i) {
      const uint64_t h =
          util::Hash64(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&t.tokens[i]),
                                                len * sizeof(uint64_t)),
                       len);
      double logw = 0;
      for (size_t k = i; k < i + len; ++k) logw += std::log(static_cast<double>(t.weights[k]));
      v.emplace_back(h, std::exp(logw / static_cast<double>(len)));
    }
  }
  std::sort(v.begin(), v.end());
  std::vector<std::pair<uint64_t, double>> out;
  for (const auto& e : v) {
    if (!out.empty() && out.back().first == e.first) {
      out.back().second = std::max(out.back().second, e.second);
    } else {
      out.push_back(e);
    }
  }
  return out;
}

double ShingleJaccard(const NearDupText& a, const NearDupText& b) {
  const auto sa = Shingles(a), sb = Shingles(b);
  double num = 0, den = 0;
  size_t i = 0, j = 0;
  while (i < sa.size() || j < sb.size()) {
    if (j == sb.size() || (i < sa.size() && sa[i].first < sb[j].first)) {
      den += sa[i++].second;
    } else if (i == sa.size() || sb[j].first < sa[i].first) {
      den += sb[j++].second;
    } else {
      num += std::min(sa[i].second, sb[j].second);
      den += std::max(sa[i].second, sb[j].second);
      ++i;
      ++j;
    }
  }
  return den > 0 ? num / den : 0.0;
}

}  // namespace

PairScore ScorePair(const NearDupText& a, const NearDupText& b, const SimilarityOptions& options,
                    double at_least) {
  PairScore s;
  s.rejected_by = CheckGuards(a, b, options);
  if (s.rejected_by != Guard::kNone) return s;
  const double total = a.total_weight + b.total_weight;
  if (total <= 0) return s;
  if (options.measure == SimilarityOptions::Measure::kShingleJaccard) {
    s.similarity = ShingleJaccard(a, b);
    return s;
  }
  const double bound = std::min(1.0, 2.0 * BagOverlap(a, b) / total);
  if (bound < at_least - 1e-9) {  // the bound sums in another order: allow rounding
    s.similarity = bound;
    return s;
  }
  s.similarity = std::min(1.0, 2.0 * WeightedLcs(a, b) / total);
  return s;
}

std::string NearDupNamespace(std::string_view tenant, std::string_view model) {
  return fmt::format("{}:{}|{}:{}", tenant.size(), tenant, model.size(), model);
}

// ---------------------------------------------------------------------------
// The index.

namespace {

constexpr uint32_t kMaxNamespaceId = (uint32_t{1} << 27) - 1;

// A bucket holds the entries whose block `band` has these bits; the key packs
// namespace id (27 bits), band (4 bits) and block bits (at most 32) exactly,
// so two namespaces never share a bucket.
uint64_t BucketKey(uint32_t ns, int band, uint64_t bits) {
  return (uint64_t{ns} << 37) | (static_cast<uint64_t>(band) << 33) | bits;
}

struct BucketItem {
  uint64_t id;
  uint64_t fingerprint;
};

struct Entry {
  uint32_t ns = 0;
  uint64_t payload = 0;
  std::shared_ptr<const NearDupText> text;
  std::shared_ptr<const CachedValue> value;  // may be null
  TimePoint expires = TimePoint::max();      // never matches from then on
  size_t bytes = 0;
};

struct PairHash {
  size_t operator()(const std::pair<uint32_t, uint64_t>& p) const {
    return static_cast<size_t>(p.second * 0x9E3779B97F4A7C15ULL ^
                               (uint64_t{p.first} << 17 | p.first));
  }
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Per entry: the bucket items and roughly what the maps spend on it.
constexpr size_t kIndexEntryOverheadBytes = sizeof(Entry) + 3 * 64;

}  // namespace

struct NearDupIndex::State {
  State(const NearDupOptions& o, const util::Clock& c, util::Rng r, TierObserver* obs)
      : options(o),
        clock(c),
        observer(obs),
        policy(NewEvictionPolicy(o.policy, o.policy_options)),
        admission(o.admission),
        rng(std::move(r)) {
    int start = 0;
    for (int b = 0; b < o.bands; ++b) {
      const int width = 64 / o.bands + (b < 64 % o.bands ? 1 : 0);
      block_shift.push_back(start);
      block_width.push_back(width);
      start += width;
    }
  }

  uint64_t Block(uint64_t fp, int band) const {
    const int w = block_width[static_cast<size_t>(band)];
    return (fp >> block_shift[static_cast<size_t>(band)]) & ((uint64_t{1} << w) - 1);
  }

  // Every value within probe_radius bits of `bits` (a `width`-bit block).
  template <typename F>
  void ForNeighbours(uint64_t bits, int width, F&& f) const {
    f(bits);
    const int r = options.probe_radius;
    for (int i = 0; i < width && r >= 1; ++i) {
      const uint64_t b1 = bits ^ (uint64_t{1} << i);
      f(b1);
      for (int j = i + 1; j < width && r >= 2; ++j) {
        const uint64_t b2 = b1 ^ (uint64_t{1} << j);
        f(b2);
        for (int k = j + 1; k < width && r >= 3; ++k) f(b2 ^ (uint64_t{1} << k));
      }
    }
  }

  std::optional<uint32_t> FindNamespace(std::string_view ns) const {
    auto it = namespaces.find(ns);
    if (it == namespaces.end()) return std::nullopt;
    return it->second.id;
  }

  uint32_t NamespaceId(std::string_view ns) {  // creates it
    auto it = namespaces.find(ns);
    if (it != namespaces.end()) return it->second.id;
    uint32_t id;
    if (!free_ns_ids.empty()) {
      id = free_ns_ids.back();
      free_ns_ids.pop_back();
    } else {
      id = next_ns_id++;
    }
    STRATA_CHECK_MSG(id <= kMaxNamespaceId, "l3: namespace ids exhausted");
    namespaces.emplace(std::string(ns), NsInfo{id, 0});
    ns_names.emplace(id, std::string(ns));
    return id;
  }

  void AddEntry(uint64_t id, Entry e) {
    for (int band = 0; band < options.bands; ++band) {
      buckets[BucketKey(e.ns, band, Block(e.text->fingerprint, band))].push_back(
          {id, e.text->fingerprint});
    }
    by_payload[{e.ns, e.payload}] = id;
    by_sequence[{e.ns, e.text->sequence_hash}] = id;
    ++namespaces.find(ns_names.at(e.ns))->second.entries;
    bytes += e.bytes;
    policy->Insert(id, e.bytes, clock.Now());
    by_expiry.emplace(e.expires, id);
    if (observer) observer->OnStore(e.bytes);
    entries.emplace(id, std::move(e));
  }

  // Removes an entry everywhere; returns what the caller should be told.
  NearDupDropped RemoveEntry(uint64_t id, RemoveReason reason) {
    auto it = entries.find(id);
    STRATA_CHECK(it != entries.end());
    Entry& e = it->second;
    for (int band = 0; band < options.bands; ++band) {
      auto b = buckets.find(BucketKey(e.ns, band, Block(e.text->fingerprint, band)));
      STRATA_CHECK(b != buckets.end());
      auto& items = b->second;
      for (size_t i = 0; i < items.size(); ++i) {
        if (items[i].id == id) {
          items[i] = items.back();
          items.pop_back();
          break;
        }
      }
      if (items.empty()) buckets.erase(b);
    }
    by_payload.erase({e.ns, e.payload});
    auto seq = by_sequence.find({e.ns, e.text->sequence_hash});
    if (seq != by_sequence.end() && seq->second == id) by_sequence.erase(seq);
    policy->Erase(id);
    by_expiry.erase({e.expires, id});
    bytes -= e.bytes;
    if (reason == RemoveReason::kEvicted) ++stats.evictions;
    if (reason == RemoveReason::kExpired) ++stats.expired;
    if (observer) observer->OnRemove(e.bytes, reason);
    const std::string& name = ns_names.at(e.ns);
    NearDupDropped dropped{name, e.payload};
    auto ns_it = namespaces.find(name);
    if (--ns_it->second.entries == 0) {
      free_ns_ids.push_back(ns_it->second.id);
      ns_names.erase(ns_it->second.id);
      namespaces.erase(ns_it);
    }
    entries.erase(it);
    return dropped;
  }

  bool Expired(const Entry& e, TimePoint now) const { return now >= e.expires; }

  // Expired entries, soonest first, until one is live.
  void DropExpired(TimePoint now, std::vector<NearDupDropped>& dropped) {
    while (!by_expiry.empty() && by_expiry.begin()->first <= now) {
      dropped.push_back(RemoveEntry(by_expiry.begin()->second, RemoveReason::kExpired));
    }
  }

  bool OverBudget(size_t extra_entries, size_t extra_bytes) const {
    return entries.size() + extra_entries > options.max_entries ||
           bytes + extra_bytes > options.max_bytes;
  }

  TimePoint ExpiryFor(TimePoint now) {  // mu held
    if (ttl.count() <= 0) return TimePoint::max();
    const double jitter = ttl_jitter * (2.0 * rng.Uniform() - 1.0);
    return now + std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::duration<double>(ttl) * (1.0 + jitter));
  }

  struct NsInfo {
    uint32_t id;
    size_t entries;
  };

  const NearDupOptions options;
  const util::Clock& clock;
  TierObserver* const observer;
  std::vector<int> block_shift, block_width;  // per band, fixed at construction

  mutable std::mutex mu;  // guards everything below
  // Reconfigure's values, else the options'.
  double min_similarity = options.min_similarity;
  std::chrono::seconds ttl = options.ttl;
  double ttl_jitter = options.ttl_jitter;
  bool admission_enabled = options.admission.enabled;
  std::unique_ptr<EvictionPolicy> policy;
  AdmissionGate admission;
  util::Rng rng;                                                  // TTL jitter and admission draws
  std::set<std::pair<TimePoint, uint64_t>> by_expiry;             // (expires, id), soonest first
  std::unordered_map<uint64_t, Entry> entries;                    // id → entry
  std::unordered_map<uint64_t, std::vector<BucketItem>> buckets;  // BucketKey → items
  std::unordered_map<std::pair<uint32_t, uint64_t>, uint64_t, PairHash>
      by_payload;  // (ns, payload) → id
  std::unordered_map<std::pair<uint32_t, uint64_t>, uint64_t, PairHash>
      by_sequence;  // (ns, sequence_hash) → id
  std::unordered_map<std::string, NsInfo, StringHash, std::equal_to<>> namespaces;
  std::unordered_map<uint32_t, std::string> ns_names;
  std::vector<uint32_t> free_ns_ids;
  uint32_t next_ns_id = 0;
  uint64_t next_id = 1;
  size_t bytes = 0;
  NearDupStats stats;
};

NearDupIndex::NearDupIndex(const NearDupOptions& options, const util::Clock& clock, util::Rng rng,
                           TierObserver* observer)
    : state_(std::make_unique<State>(options, clock, std::move(rng), observer)) {}
NearDupIndex::~NearDupIndex() = default;

namespace {

util::Status ValidateNearDupOptions(const NearDupOptions& o) {
  auto bad = [](std::string what) { return util::InvalidArgumentError("l3 options: " + what); };
  if (o.max_entries < 1 || o.max_entries > (size_t{1} << 26)) {
    return bad(fmt::format("max_entries {} is outside [1, 2^26]", o.max_entries));
  }
  if (o.max_bytes < 4096) return bad(fmt::format("max_bytes {} is under 4096", o.max_bytes));
  if (!(o.min_similarity > 0 && o.min_similarity <= 1)) {
    return bad(fmt::format("min_similarity {} is outside (0, 1]", o.min_similarity));
  }
  if (o.bands < 2 || o.bands > 16) return bad(fmt::format("bands {} is outside [2, 16]", o.bands));
  if (o.probe_radius < 0 || o.probe_radius > 3) {
    return bad(fmt::format("probe_radius {} is outside [0, 3]", o.probe_radius));
  }
  if (o.max_candidates < 1) return bad("max_candidates must be >= 1");
  if (o.ttl.count() < 0) return bad(fmt::format("ttl {}s is negative", o.ttl.count()));
  if (!(o.ttl_jitter >= 0 && o.ttl_jitter <= 0.9)) {
    return bad(fmt::format("ttl_jitter {} is outside [0, 0.9]", o.ttl_jitter));
  }
  if (o.admission.enabled) STRATA_RETURN_IF_ERROR(ValidateAdmission(o.admission));
  if (o.prepare.max_words < 1 || o.prepare.max_words > 65536) {
    return bad(fmt::format("prepare.max_words {} is outside [1, 65536]", o.prepare.max_words));
  }
  if (!(o.policy_options.k > 0) || !(o.policy_options.lambda_per_s >= 0) ||
      !(o.policy_options.count_half_life_s > 0)) {
    return bad("policy_options: k and count_half_life_s must be > 0, lambda_per_s >= 0");
  }
  return util::OkStatus();
}

}  // namespace

util::StatusOr<std::unique_ptr<NearDupIndex>> NearDupIndex::Create(const NearDupOptions& o,
                                                                   const util::Clock& clock,
                                                                   util::Rng rng,
                                                                   TierObserver* observer) {
  STRATA_RETURN_IF_ERROR(ValidateNearDupOptions(o));
  return std::unique_ptr<NearDupIndex>(new NearDupIndex(o, clock, std::move(rng), observer));
}

util::Status NearDupIndex::Reconfigure(double min_similarity, std::chrono::seconds ttl,
                                       double ttl_jitter, bool admission) {
  NearDupOptions check = state_->options;
  check.min_similarity = min_similarity;
  check.ttl = ttl;
  check.ttl_jitter = ttl_jitter;
  check.admission.enabled = admission;
  STRATA_RETURN_IF_ERROR(ValidateNearDupOptions(check));
  State& s = *state_;
  std::lock_guard lock(s.mu);
  s.min_similarity = min_similarity;
  s.ttl = ttl;
  s.ttl_jitter = ttl_jitter;
  s.admission_enabled = admission;
  return util::OkStatus();
}

const NearDupOptions& NearDupIndex::options() const { return state_->options; }
int NearDupIndex::max_distance() const {
  return state_->options.bands * (state_->options.probe_radius + 1) - 1;
}

std::optional<NearDupMatch> NearDupIndex::Lookup(std::string_view ns, const NearDupText& text,
                                                 std::optional<double> min_similarity) {
  State& s = *state_;
  double threshold = min_similarity.value_or(0);
  const int max_d = max_distance();
  struct Candidate {
    uint64_t id;
    int distance;
    uint64_t payload;
    std::shared_ptr<const NearDupText> text;
    std::shared_ptr<const CachedValue> value;
  };
  auto miss = [&s, &text]() -> std::optional<NearDupMatch> {  // s.mu held
    s.admission.RecordLookup(text.sequence_hash, false);
    if (s.observer) s.observer->OnMiss();
    return std::nullopt;
  };
  std::vector<Candidate> candidates;
  std::vector<uint64_t> expired;
  uint32_t ns_id = 0;
  {
    std::lock_guard lock(s.mu);
    if (!min_similarity) threshold = s.min_similarity;
    ++s.stats.lookups;
    const std::optional<uint32_t> found_ns = s.FindNamespace(ns);
    if (!found_ns) return miss();
    ns_id = *found_ns;
    std::vector<std::pair<int, uint64_t>> found;  // (distance, id)
    for (int band = 0; band < s.options.bands; ++band) {
      s.ForNeighbours(s.Block(text.fingerprint, band), s.block_width[static_cast<size_t>(band)],
                      [&](uint64_t bits) {
                        auto b = s.buckets.find(BucketKey(ns_id, band, bits));
                        if (b == s.buckets.end()) return;
                        for (const BucketItem& item : b->second) {
                          const int d = HammingDistance(item.fingerprint, text.fingerprint);
                          if (d <= max_d) found.emplace_back(d, item.id);
                        }
                      });
    }
    // Closest first; among equals the newest (larger id) first.
    std::sort(found.begin(), found.end(), [](const auto& x, const auto& y) {
      return x.first != y.first ? x.first < y.first : x.second > y.second;
    });
    found.erase(std::unique(found.begin(), found.end()), found.end());
    const TimePoint now = s.clock.Now();
    for (const auto& [d, id] : found) {
      if (candidates.size() >= s.options.max_candidates) break;
      const Entry& e = s.entries.at(id);
      STRATA_CHECK_MSG(e.ns == ns_id, "l3: a bucket holds another namespace's entry");
      if (s.Expired(e, now)) {
        expired.push_back(id);
        continue;
      }
      candidates.push_back({id, d, e.payload, e.text, e.value});
    }
    for (uint64_t id : expired) s.RemoveEntry(id, RemoveReason::kExpired);
    s.stats.candidates += candidates.size();
    if (candidates.empty()) return miss();
  }

  // Score outside the lock: the texts are immutable and shared.
  std::optional<NearDupMatch> best;
  uint64_t best_id = 0;
  for (const Candidate& c : candidates) {
    const PairScore score = ScorePair(text, *c.text, s.options.similarity, threshold);
    if (score.rejected_by != Guard::kNone || score.similarity < threshold) continue;
    if (!best || score.similarity > best->similarity) {
      best = NearDupMatch{c.payload, c.value, score.similarity, c.distance};
      best_id = c.id;
    }
  }
  std::lock_guard lock(s.mu);
  if (!best) return miss();
  auto it = s.entries.find(best_id);
  if (it == s.entries.end()) return miss();  // erased meanwhile
  STRATA_CHECK_MSG(it->second.ns == ns_id, "l3: a match from another namespace");
  s.policy->Access(best_id, s.clock.Now());
  ++s.stats.hits;
  s.admission.RecordLookup(text.sequence_hash, true);
  if (s.observer) s.observer->OnHit();
  return best;
}

util::StatusOr<std::optional<NearDupMatch>> NearDupIndex::Lookup(std::string_view ns,
                                                                 std::string_view text) {
  STRATA_ASSIGN_OR_RETURN(NearDupText t, PrepareNearDupText(text, state_->options.prepare));
  return Lookup(ns, t);
}

util::StatusOr<std::vector<NearDupDropped>> NearDupIndex::Insert(
    std::string_view ns, const NearDupText& text, uint64_t payload,
    std::shared_ptr<const CachedValue> value, std::optional<std::chrono::nanoseconds> ttl) {
  State& s = *state_;
  auto shared = std::make_shared<const NearDupText>(text);
  const size_t entry_bytes = shared->MemoryBytes() + kIndexEntryOverheadBytes +
                             static_cast<size_t>(s.options.bands) * (sizeof(BucketItem) + 16) +
                             ns.size() + (value ? value->ByteSize() : 0);
  if (entry_bytes > s.options.max_bytes) {
    return util::ResourceExhaustedError(fmt::format(
        "l3: an entry of {} bytes does not fit max_bytes {}", entry_bytes, s.options.max_bytes));
  }
  std::vector<NearDupDropped> dropped;
  const TimePoint now = s.clock.Now();
  std::lock_guard lock(s.mu);
  auto same_payload = [&]() -> std::optional<uint64_t> {
    const auto ns_id = s.FindNamespace(ns);
    if (!ns_id) return std::nullopt;
    auto it = s.by_payload.find({*ns_id, payload});
    return it == s.by_payload.end() ? std::nullopt : std::optional<uint64_t>(it->second);
  };
  auto same_sequence = [&]() -> std::optional<uint64_t> {
    const auto ns_id = s.FindNamespace(ns);
    if (!ns_id) return std::nullopt;
    auto it = s.by_sequence.find({*ns_id, shared->sequence_hash});
    return it == s.by_sequence.end() ? std::nullopt : std::optional<uint64_t>(it->second);
  };
  // Expired entries make room first; then a new entry (not a replacement)
  // that still needs room asks the admission gate.
  if (s.OverBudget(1, entry_bytes)) s.DropExpired(now, dropped);
  const bool replacing = same_payload() || same_sequence();
  if (!replacing && s.admission_enabled && s.OverBudget(1, entry_bytes) &&
      !s.admission.Admit(shared->sequence_hash, s.entries.size(), s.rng.Uniform())) {
    ++s.stats.not_admitted;
    return dropped;
  }
  // Replace an entry with the same payload or the same token sequence. (The
  // namespace is looked up again each time: removing its last entry frees it.)
  if (auto id = same_payload()) dropped.push_back(s.RemoveEntry(*id, RemoveReason::kReplaced));
  if (auto id = same_sequence()) dropped.push_back(s.RemoveEntry(*id, RemoveReason::kReplaced));
  const uint32_t final_ns = s.NamespaceId(ns);
  const uint64_t id = s.next_id++;
  const TimePoint expires =
      ttl ? now + std::chrono::duration_cast<TimePoint::duration>(*ttl) : s.ExpiryFor(now);
  s.AddEntry(id,
             Entry{final_ns, payload, std::move(shared), std::move(value), expires, entry_bytes});
  ++s.stats.inserts;
  while (s.entries.size() > s.options.max_entries || s.bytes > s.options.max_bytes) {
    const std::optional<uint64_t> victim = s.policy->Victim(now);
    STRATA_CHECK_MSG(victim.has_value(), "l3: over budget with nothing to evict");
    dropped.push_back(s.RemoveEntry(*victim, RemoveReason::kEvicted));
  }
  return dropped;
}

util::StatusOr<std::vector<NearDupDropped>> NearDupIndex::Insert(std::string_view ns,
                                                                 std::string_view text,
                                                                 uint64_t payload) {
  STRATA_ASSIGN_OR_RETURN(NearDupText t, PrepareNearDupText(text, state_->options.prepare));
  return Insert(ns, t, payload);
}

bool NearDupIndex::Erase(std::string_view ns, uint64_t payload) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  const std::optional<uint32_t> ns_id = s.FindNamespace(ns);
  if (!ns_id) return false;
  auto it = s.by_payload.find({*ns_id, payload});
  if (it == s.by_payload.end()) return false;
  s.RemoveEntry(it->second, RemoveReason::kErased);
  return true;
}

void NearDupIndex::ForEach(
    const std::function<void(std::string_view, const NearDupText&, uint64_t, const CachedValue*,
                             std::optional<std::chrono::nanoseconds>)>& fn) const {
  const State& s = *state_;
  std::lock_guard lock(s.mu);
  const TimePoint now = s.clock.Now();
  for (const auto& [id, e] : s.entries) {
    if (s.Expired(e, now)) continue;
    const std::optional<std::chrono::nanoseconds> left =
        e.expires == TimePoint::max() ? std::nullopt
                                      : std::optional<std::chrono::nanoseconds>(e.expires - now);
    fn(s.ns_names.at(e.ns), *e.text, e.payload, e.value.get(), left);
  }
}

size_t NearDupIndex::EraseIf(
    const std::function<bool(std::string_view, uint64_t, const CachedValue*)>& match) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  std::vector<uint64_t> ids;
  for (const auto& [id, e] : s.entries) {
    if (match(s.ns_names.at(e.ns), e.payload, e.value.get())) ids.push_back(id);
  }
  for (uint64_t id : ids) s.RemoveEntry(id, RemoveReason::kErased);
  return ids.size();
}

NearDupStats NearDupIndex::stats() const {
  const State& s = *state_;
  std::lock_guard lock(s.mu);
  NearDupStats out = s.stats;
  out.entries = s.entries.size();
  out.bytes = s.bytes;
  out.namespaces = s.namespaces.size();
  return out;
}

}  // namespace strata::cache
