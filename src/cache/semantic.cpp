#include "cache/semantic.h"

#include <faiss/IndexFlat.h>
#include <faiss/IndexHNSW.h>
#include <faiss/IndexIVFFlat.h>
#include <faiss/IndexLSH.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <numbers>
#include <unordered_map>

#include <fmt/format.h>

namespace strata::cache {
namespace {

using util::InvalidArgumentError;
using TimePoint = std::chrono::steady_clock::time_point;
using FaissId = faiss::Index::idx_t;

double Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  double sum = 0.0;
  for (; i < n; ++i) sum += static_cast<double>(a[i]) * b[i];
  for (float x : acc) sum += x;
  return sum;
}

util::Status ValidateOptions(const SemanticOptions& o) {
  auto bad = [](std::string_view what, auto value, std::string_view range) {
    return InvalidArgumentError(fmt::format("semantic {} {} is outside {}", what, value, range));
  };
  if (o.dim < 1 || o.dim > 8192) return bad("dim", o.dim, "[1, 8192]");
  if (o.max_entries < 1 || o.max_entries > (size_t{1} << 26)) {
    return bad("max_entries", o.max_entries, "[1, 2^26]");
  }
  if (!(o.coarse_similarity >= 0 && o.coarse_similarity < 1)) {
    return bad("coarse_similarity", o.coarse_similarity, "[0, 1)");
  }
  if (o.top_k < 1 || o.top_k > 1024) return bad("top_k", o.top_k, "[1, 1024]");
  if (!(o.min_similarity > o.coarse_similarity && o.min_similarity <= 1)) {
    return bad("min_similarity", o.min_similarity, "(coarse_similarity, 1]");
  }
  if (o.ttl.count() < 0) return bad("ttl", o.ttl.count(), "[0, inf) s");
  if (!(o.ttl_jitter >= 0 && o.ttl_jitter <= 0.9))
    return bad("ttl_jitter", o.ttl_jitter, "[0, 0.9]");
  if (o.ann_min_entries < 1) return bad("ann_min_entries", o.ann_min_entries, "[1, inf)");
  if (o.hnsw_m < 4 || o.hnsw_m > 128) return bad("hnsw_m", o.hnsw_m, "[4, 128]");
  if (o.hnsw_ef_search < 1 || o.hnsw_ef_search > 4096) {
    return bad("hnsw_ef_search", o.hnsw_ef_search, "[1, 4096]");
  }
  if (o.hnsw_ef_construction < 1 || o.hnsw_ef_construction > 4096) {
    return bad("hnsw_ef_construction", o.hnsw_ef_construction, "[1, 4096]");
  }
  if (o.ivf_probe < 1 || o.ivf_probe > 65536) return bad("ivf_probe", o.ivf_probe, "[1, 65536]");
  if (o.lsh_bits < 64 || o.lsh_bits > 65536 || o.lsh_bits % 8 != 0) {
    return bad("lsh_bits", o.lsh_bits, "[64, 65536], a multiple of 8");
  }
  return util::OkStatus();
}

}  // namespace

std::optional<AnnKind> ParseAnnKind(std::string_view name) {
  if (name == "flat") return AnnKind::kFlat;
  if (name == "hnsw") return AnnKind::kHnsw;
  if (name == "ivf") return AnnKind::kIvf;
  if (name == "lsh") return AnnKind::kLsh;
  return std::nullopt;
}

std::string_view AnnKindName(AnnKind kind) {
  switch (kind) {
    case AnnKind::kFlat:
      return "flat";
    case AnnKind::kHnsw:
      return "hnsw";
    case AnnKind::kIvf:
      return "ivf";
    case AnnKind::kLsh:
      return "lsh";
  }
  return "?";
}

std::string SemanticNamespace(std::string_view tenant, std::string_view scope) {
  return fmt::format("{}:{}{}", tenant.size(), tenant, scope);
}

std::string_view SemanticNamespaceTenant(std::string_view ns) {
  const size_t colon = ns.find(':');
  if (colon == std::string_view::npos) return {};
  size_t n = 0;
  for (char c : ns.substr(0, colon)) {
    if (c < '0' || c > '9') return {};
    n = n * 10 + static_cast<size_t>(c - '0');
  }
  if (colon + 1 + n > ns.size()) return {};
  return ns.substr(colon + 1, n);
}

struct SemanticIndex::State {
  struct Entry {
    std::string ns;
    uint64_t payload = 0;
    std::optional<NearDupText> text;
    std::shared_ptr<const CachedValue> value;
    TimePoint expiry = TimePoint::max();
    size_t slot = 0;  // row of its namespace's vectors
  };
  // One namespace: its vectors row by row (a removed entry's row stays as a
  // tombstone until the namespace is compacted) and, once large, its ANN
  // index over the same rows (FAISS label = row).
  struct Namespace {
    std::vector<float> rows;      // [slots][dim]
    std::vector<uint64_t> slots;  // row -> entry id; 0 = tombstone
    size_t live = 0;
    std::unordered_map<uint64_t, uint64_t> by_payload;  // payload -> entry id
    std::unique_ptr<faiss::Index> ann;                  // null: scanned exactly
    size_t built_at = 0;      // live entries when `ann` was built (IVF retrains at 4x)
    uint64_t generation = 0;  // bumped by every Compact (rows renumbered)
  };

  State(const SemanticOptions& o, const util::Clock& c, util::Rng r, TierObserver* obs)
      : options(o),
        clock(c),
        rng(r),
        observer(obs),
        policy(NewEvictionPolicy(o.policy, o.policy_options)),
        min_similarity(o.min_similarity),
        ttl(o.ttl),
        ttl_jitter(o.ttl_jitter) {}

  const SemanticOptions options;
  const util::Clock& clock;
  mutable std::mutex mu;  // guards everything below
  util::Rng rng;
  TierObserver* observer;
  std::unique_ptr<EvictionPolicy> policy;  // over entry ids
  double min_similarity;
  std::chrono::seconds ttl;
  double ttl_jitter;
  std::unordered_map<uint64_t, Entry> entries;
  std::map<std::string, Namespace, std::less<>> namespaces;
  std::multimap<TimePoint, uint64_t> expiries;  // entries with a TTL
  uint64_t next_id = 1;
  SemanticStats stats;

  int64_t dim() const { return options.dim; }

  std::unique_ptr<faiss::Index> NewAnn(const Namespace& n) const {
    return NewAnn(n.rows.data(), n.slots.size());
  }
  // An index over `n_rows` rows (the caller's; they must stay while it builds).
  std::unique_ptr<faiss::Index> NewAnn(const float* rows, size_t n_rows) const {
    const auto d = static_cast<FaissId>(options.dim);
    const auto count = static_cast<FaissId>(n_rows);
    std::unique_ptr<faiss::Index> index;
    switch (options.ann) {
      case AnnKind::kFlat:
        return nullptr;
      case AnnKind::kHnsw: {
        auto h =
            std::make_unique<faiss::IndexHNSWFlat>(d, options.hnsw_m, faiss::METRIC_INNER_PRODUCT);
        h->hnsw.efConstruction = options.hnsw_ef_construction;
        h->hnsw.efSearch = options.hnsw_ef_search;
        index = std::move(h);
        break;
      }
      case AnnKind::kIvf: {
        const auto lists = std::max<size_t>(
            1, std::min<size_t>(static_cast<size_t>(std::sqrt(static_cast<double>(count))),
                                static_cast<size_t>(count) / 39));
        auto quantizer = new faiss::IndexFlatIP(d);
        auto ivf =
            std::make_unique<faiss::IndexIVFFlat>(quantizer, d, lists, faiss::METRIC_INNER_PRODUCT);
        ivf->own_fields = true;
        ivf->nprobe = static_cast<size_t>(options.ivf_probe);
        index = std::move(ivf);
        break;
      }
      case AnnKind::kLsh:
        index = std::make_unique<faiss::IndexLSH>(d, options.lsh_bits, /*rotate_data=*/true);
        break;
    }
    if (!index->is_trained) index->train(count, rows);
    index->add(count, rows);
    return index;
  }

  // The coarse similarity an ANN index reports for a candidate.
  double CoarseSimilarity(float distance) const {
    if (options.ann != AnnKind::kLsh) return distance;  // inner product of unit vectors
    // Hamming distance h of random-hyperplane bits estimates the angle π·h/bits.
    return std::cos(std::numbers::pi * distance / options.lsh_bits);
  }

  // Forgets entry `id`. Its namespace is compacted when its tombstones pass
  // a quarter of it, unless `compact` is false (the caller compacts after a batch).
  void Remove(uint64_t id, RemoveReason reason, bool compact = true) {
    auto it = entries.find(id);
    if (it == entries.end()) return;
    Entry& e = it->second;
    auto ns_it = namespaces.find(e.ns);
    if (ns_it != namespaces.end()) {
      Namespace& n = ns_it->second;
      n.slots[e.slot] = 0;
      --n.live;
      n.by_payload.erase(e.payload);
      if (n.live == 0) {
        namespaces.erase(ns_it);
      } else if (compact && NeedsCompaction(n)) {
        Compact(n);
      }
    }
    if (e.expiry != TimePoint::max()) {
      auto [b, end] = expiries.equal_range(e.expiry);
      for (auto x = b; x != end; ++x) {
        if (x->second == id) {
          expiries.erase(x);
          break;
        }
      }
    }
    policy->Erase(id);
    if (observer) observer->OnRemove(EntryBytes(e), reason);
    if (reason == RemoveReason::kEvicted) ++stats.evictions;
    if (reason == RemoveReason::kExpired) ++stats.expired;
    if (reason == RemoveReason::kErased) ++stats.erased;
    entries.erase(it);
  }

  static bool NeedsCompaction(const Namespace& n) {
    return n.slots.size() - n.live > std::max<size_t>(64, n.slots.size() / 4);
  }

  // Drops the tombstones: rows are packed and the ANN index rebuilt.
  void Compact(Namespace& n) {
    std::vector<float> rows;
    std::vector<uint64_t> slots;
    rows.reserve(n.live * static_cast<size_t>(dim()));
    slots.reserve(n.live);
    for (size_t s = 0; s < n.slots.size(); ++s) {
      if (n.slots[s] == 0) continue;
      entries[n.slots[s]].slot = slots.size();
      slots.push_back(n.slots[s]);
      rows.insert(rows.end(), n.rows.begin() + static_cast<ptrdiff_t>(s * dim()),
                  n.rows.begin() + static_cast<ptrdiff_t>((s + 1) * dim()));
    }
    n.rows = std::move(rows);
    n.slots = std::move(slots);
    ++n.generation;
    n.ann.reset();
    if (n.live >= options.ann_min_entries && options.ann != AnnKind::kFlat) {
      n.ann = NewAnn(n);
      n.built_at = n.live;
    }
    ++stats.rebuilds;
  }

  size_t EntryBytes(const Entry& e) const {
    return static_cast<size_t>(dim()) * sizeof(float) + sizeof(Entry) + e.ns.size() +
           (e.text ? e.text->MemoryBytes() : 0) + (e.value ? e.value->ByteSize() : 0);
  }

  void DropExpired(TimePoint now) {
    while (!expiries.empty() && expiries.begin()->first <= now) {
      Remove(expiries.begin()->second, RemoveReason::kExpired);
    }
  }
};

SemanticIndex::SemanticIndex(const SemanticOptions& options, const util::Clock& clock,
                             util::Rng rng, TierObserver* observer)
    : state_(std::make_unique<State>(options, clock, rng, observer)) {}
SemanticIndex::~SemanticIndex() = default;

util::StatusOr<std::unique_ptr<SemanticIndex>> SemanticIndex::Create(const SemanticOptions& options,
                                                                     const util::Clock& clock,
                                                                     util::Rng rng,
                                                                     TierObserver* observer) {
  STRATA_RETURN_IF_ERROR(ValidateOptions(options));
  return std::unique_ptr<SemanticIndex>(new SemanticIndex(options, clock, rng, observer));
}

const SemanticOptions& SemanticIndex::options() const { return state_->options; }

util::StatusOr<SemanticLookup> SemanticIndex::Lookup(std::string_view ns,
                                                     std::span<const float> vector,
                                                     const NearDupText* text,
                                                     std::optional<double> min_similarity) {
  State& s = *state_;
  if (static_cast<int64_t>(vector.size()) != s.dim()) {
    return InvalidArgumentError(
        fmt::format("a vector of {} floats; the semantic tier holds {}", vector.size(), s.dim()));
  }
  std::lock_guard lock(s.mu);
  const TimePoint now = s.clock.Now();
  s.DropExpired(now);
  ++s.stats.lookups;
  SemanticLookup out;
  const double tau5 = min_similarity.value_or(s.min_similarity);
  auto ns_it = s.namespaces.find(ns);
  if (ns_it == s.namespaces.end()) {
    if (s.observer) s.observer->OnMiss();
    return out;
  }
  State::Namespace& n = ns_it->second;
  // L4: candidates at or above τ4, from the exact scan or the ANN index.
  std::vector<std::pair<double, size_t>> candidates;  // (coarse similarity, row)
  const double tau4 = s.options.coarse_similarity;
  if (n.ann == nullptr) {
    for (size_t r = 0; r < n.slots.size(); ++r) {
      if (n.slots[r] == 0) continue;
      const double c = Dot(vector.data(), n.rows.data() + r * s.dim(), s.dim());
      if (c >= tau4) candidates.emplace_back(c, r);
    }
    std::sort(candidates.begin(), candidates.end(), std::greater<>());
    if (candidates.size() > s.options.top_k) candidates.resize(s.options.top_k);
  } else {
    const size_t tombstones = n.slots.size() - n.live;
    const auto k = static_cast<FaissId>(std::min(n.slots.size(), s.options.top_k + tombstones));
    std::vector<float> distances(static_cast<size_t>(k));
    std::vector<FaissId> labels(static_cast<size_t>(k));
    n.ann->search(1, vector.data(), k, distances.data(), labels.data());
    for (FaissId i = 0; i < k && candidates.size() < s.options.top_k; ++i) {
      const FaissId row = labels[static_cast<size_t>(i)];
      if (row < 0 || static_cast<size_t>(row) >= n.slots.size()) continue;
      if (n.slots[static_cast<size_t>(row)] == 0) continue;
      const double c = s.CoarseSimilarity(distances[static_cast<size_t>(i)]);
      if (c >= tau4) candidates.emplace_back(c, static_cast<size_t>(row));
    }
  }
  out.screened = candidates.size();
  s.stats.screened += candidates.size();
  // L5: exact cosine of every survivor, best first.
  std::vector<std::pair<double, uint64_t>> ranked;  // (cosine, entry id)
  ranked.reserve(candidates.size());
  for (const auto& [coarse, row] : candidates) {
    ranked.emplace_back(Dot(vector.data(), n.rows.data() + row * s.dim(), s.dim()), n.slots[row]);
  }
  out.compared = ranked.size();
  std::sort(ranked.begin(), ranked.end(), std::greater<>());
  if (!ranked.empty()) out.best_similarity = ranked.front().first;
  for (const auto& [cosine, id] : ranked) {
    if (cosine < tau5) break;
    State::Entry& e = s.entries[id];
    if (text != nullptr && e.text) {
      const PairScore score = ScorePair(*text, *e.text, s.options.guards, 0);
      if (score.rejected_by != Guard::kNone) {
        if (out.rejected_by == Guard::kNone) out.rejected_by = score.rejected_by;
        continue;
      }
    }
    out.match = SemanticMatch{.payload = e.payload,
                              .value = e.value,
                              .similarity = cosine,
                              .screened = out.screened,
                              .compared = out.compared};
    s.policy->Access(id, now);
    break;
  }
  if (out.match) {
    ++s.stats.hits;
    if (s.observer) s.observer->OnHit();
  } else if (s.observer) {
    s.observer->OnMiss();
  }
  return out;
}

util::StatusOr<std::vector<std::pair<std::string, uint64_t>>> SemanticIndex::Insert(
    std::string_view ns, std::span<const float> vector, const NearDupText* text, uint64_t payload,
    std::shared_ptr<const CachedValue> value, std::optional<std::chrono::milliseconds> ttl) {
  State& s = *state_;
  if (static_cast<int64_t>(vector.size()) != s.dim()) {
    return InvalidArgumentError(
        fmt::format("a vector of {} floats; the semantic tier holds {}", vector.size(), s.dim()));
  }
  double norm = 0.0;
  for (float x : vector) norm += static_cast<double>(x) * x;
  norm = std::sqrt(norm);
  if (!(norm > 0.0) || !std::isfinite(norm)) {
    return InvalidArgumentError("a semantic vector must be finite and not zero");
  }
  std::vector<std::pair<std::string, uint64_t>> dropped;
  std::lock_guard lock(s.mu);
  const TimePoint now = s.clock.Now();
  s.DropExpired(now);
  if (auto ns_it = s.namespaces.find(ns); ns_it != s.namespaces.end()) {
    if (auto p = ns_it->second.by_payload.find(payload); p != ns_it->second.by_payload.end()) {
      dropped.emplace_back(std::string(ns), payload);
      s.Remove(p->second, RemoveReason::kReplaced);
    }
  }
  while (s.entries.size() >= s.options.max_entries) {
    const auto victim = s.policy->Victim(now);
    if (!victim) break;
    const State::Entry& v = s.entries[*victim];
    dropped.emplace_back(v.ns, v.payload);
    s.Remove(*victim, RemoveReason::kEvicted);
  }
  const uint64_t id = s.next_id++;
  State::Namespace& n = s.namespaces[std::string(ns)];
  State::Entry e;
  e.ns = std::string(ns);
  e.payload = payload;
  if (text != nullptr) e.text = *text;
  e.value = std::move(value);
  e.slot = n.slots.size();
  if (ttl) {
    e.expiry = now + *ttl;
    s.expiries.emplace(e.expiry, id);
  } else if (s.ttl.count() > 0) {
    const double f = 1.0 + s.ttl_jitter * (2.0 * s.rng.Uniform() - 1.0);
    e.expiry = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(static_cast<double>(s.ttl.count()) * f));
    s.expiries.emplace(e.expiry, id);
  }
  const size_t first = n.rows.size();
  n.rows.resize(first + static_cast<size_t>(s.dim()));
  for (int64_t i = 0; i < s.dim(); ++i) {
    n.rows[first + static_cast<size_t>(i)] =
        static_cast<float>(vector[static_cast<size_t>(i)] / norm);
  }
  n.slots.push_back(id);
  ++n.live;
  n.by_payload[payload] = id;
  // In the map before the index changes: a rebuild renumbers every entry's row.
  const size_t bytes = s.EntryBytes(e);
  s.entries.emplace(id, std::move(e));
  if (n.ann != nullptr && s.options.ann == AnnKind::kIvf && n.live >= 4 * n.built_at) {
    // IVF's lists were sized for the namespace it was trained on: retrain as
    // it grows (amortised: every 4x).
    s.Compact(n);
  } else if (n.ann != nullptr) {
    n.ann->add(1, n.rows.data() + first);
  } else if (s.options.ann != AnnKind::kFlat && n.live >= s.options.ann_min_entries) {
    n.ann = s.NewAnn(n);
    n.built_at = n.live;
  }
  s.policy->Insert(id, bytes, now);
  ++s.stats.inserts;
  if (s.observer) s.observer->OnStore(bytes);
  return dropped;
}

size_t SemanticIndex::EraseIf(
    const std::function<bool(std::string_view, uint64_t, const CachedValue*)>& match) {
  State& s = *state_;
  std::lock_guard lock(s.mu);
  std::vector<uint64_t> ids;
  for (const auto& [id, e] : s.entries) {
    if (match(e.ns, e.payload, e.value.get())) ids.push_back(id);
  }
  for (uint64_t id : ids) s.Remove(id, RemoveReason::kErased, /*compact=*/false);
  for (auto& [name, n] : s.namespaces) {
    if (State::NeedsCompaction(n)) s.Compact(n);
  }
  return ids.size();
}

size_t SemanticIndex::Retrain() {
  State& s = *state_;
  std::vector<std::string> names;
  {
    std::lock_guard lock(s.mu);
    for (const auto& [name, ns] : s.namespaces) {
      if (ns.ann != nullptr) names.push_back(name);
    }
  }
  size_t rebuilt = 0;
  for (const std::string& name : names) {
    // Trained on a copy, outside the lock, so lookups go on meanwhile.
    std::vector<float> rows;
    uint64_t generation = 0;
    {
      std::lock_guard lock(s.mu);
      auto it = s.namespaces.find(name);
      if (it == s.namespaces.end() || it->second.ann == nullptr) continue;
      rows = it->second.rows;
      generation = it->second.generation;
    }
    const size_t n_rows = rows.size() / static_cast<size_t>(s.dim());
    std::unique_ptr<faiss::Index> fresh = s.NewAnn(rows.data(), n_rows);
    std::lock_guard lock(s.mu);
    auto it = s.namespaces.find(name);
    // Compacted meanwhile (rows renumbered, and an index built with them).
    if (it == s.namespaces.end() || it->second.generation != generation) continue;
    State::Namespace& ns = it->second;
    // Rows appended meanwhile go in as they would have; removed ones are
    // tombstones in both.
    const size_t now_rows = ns.slots.size();
    if (now_rows > n_rows) {
      fresh->add(static_cast<FaissId>(now_rows - n_rows),
                 ns.rows.data() + n_rows * static_cast<size_t>(s.dim()));
    }
    ns.ann = std::move(fresh);
    ns.built_at = ns.live;
    ++s.stats.rebuilds;
    ++rebuilt;
  }
  return rebuilt;
}

util::Status SemanticIndex::Reconfigure(double min_similarity, std::chrono::seconds ttl,
                                        double ttl_jitter) {
  SemanticOptions o = state_->options;
  o.min_similarity = min_similarity;
  o.ttl = ttl;
  o.ttl_jitter = ttl_jitter;
  STRATA_RETURN_IF_ERROR(ValidateOptions(o));
  std::lock_guard lock(state_->mu);
  state_->min_similarity = min_similarity;
  state_->ttl = ttl;
  state_->ttl_jitter = ttl_jitter;
  return util::OkStatus();
}

SemanticStats SemanticIndex::stats() const {
  std::lock_guard lock(state_->mu);
  SemanticStats st = state_->stats;
  st.entries = state_->entries.size();
  st.namespaces = state_->namespaces.size();
  return st;
}

namespace {

constexpr std::string_view kFileMagic = "STRATA-SEMANTIC\n";
constexpr uint32_t kFileVersion = 1;

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}
void PutBytes(std::string& out, std::string_view b) {
  Put<uint32_t>(out, static_cast<uint32_t>(b.size()));
  out.append(b);
}

// Reads what Save wrote, checking every length against what is left.
class SemanticFileReader {
 public:
  explicit SemanticFileReader(std::string_view data) : d_(data) {}
  template <typename T>
  util::StatusOr<T> Get(std::string_view what) {
    if (d_.size() - at_ < sizeof(T)) return Damaged(what);
    T v;
    std::memcpy(&v, d_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  util::StatusOr<std::string_view> Bytes(std::string_view what) {
    STRATA_ASSIGN_OR_RETURN(uint32_t n, Get<uint32_t>(what));
    if (d_.size() - at_ < n) return Damaged(what);
    std::string_view v = d_.substr(at_, n);
    at_ += n;
    return v;
  }
  bool done() const { return at_ == d_.size(); }
  util::Status Damaged(std::string_view what) const {
    return util::DataLossError(
        fmt::format("semantic tier file: {} is cut short or damaged at byte {}", what, at_));
  }

 private:
  std::string_view d_;
  size_t at_ = 0;
};

}  // namespace

util::Status SemanticIndex::Save(util::FileSystem& fs, const std::string& path,
                                 const ValueCodec& codec, uint64_t encoder) const {
  const std::string out = Encode(codec, encoder);
  const std::string tmp = path + ".tmp";
  STRATA_ASSIGN_OR_RETURN(auto file, fs.NewWritableFile(tmp));
  STRATA_RETURN_IF_ERROR(file->Append(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(out.data()), out.size())));
  STRATA_RETURN_IF_ERROR(file->Sync());
  STRATA_RETURN_IF_ERROR(file->Close());
  return fs.Rename(tmp, path);
}

std::string SemanticIndex::Encode(const ValueCodec& codec, uint64_t encoder) const {
  std::string out(kFileMagic);
  Put<uint32_t>(out, kFileVersion);
  Put<uint32_t>(out, static_cast<uint32_t>(state_->options.dim));
  Put<uint64_t>(out, encoder);
  size_t count = 0;
  std::string body;
  {
    std::lock_guard lock(state_->mu);
    const TimePoint now = state_->clock.Now();
    for (const auto& [id, e] : state_->entries) {
      if (!e.value || e.expiry <= now) continue;
      const auto& n = state_->namespaces.at(e.ns);
      PutBytes(body, e.ns);
      Put<uint64_t>(body, e.payload);
      const int64_t ttl_ms =
          e.expiry == TimePoint::max()
              ? -1
              : std::chrono::duration_cast<std::chrono::milliseconds>(e.expiry - now).count();
      Put<int64_t>(body, ttl_ms);
      body.append(reinterpret_cast<const char*>(n.rows.data() + e.slot * state_->dim()),
                  static_cast<size_t>(state_->dim()) * sizeof(float));
      PutBytes(body, e.text ? EncodeNearDupText(*e.text) : std::string());
      PutBytes(body, codec.Encode(*e.value));
      ++count;
    }
  }
  Put<uint64_t>(out, count);
  out += body;
  return out;
}

util::StatusOr<size_t> SemanticIndex::Load(util::FileSystem& fs, const std::string& path,
                                           const ValueCodec& codec, uint64_t encoder) {
  STRATA_ASSIGN_OR_RETURN(const std::string data, fs.ReadFile(path));
  return Decode(data, codec, encoder, path);
}

util::StatusOr<size_t> SemanticIndex::Decode(std::string_view data, const ValueCodec& codec,
                                             uint64_t encoder, std::string_view path) {
  if (!std::string_view(data).starts_with(kFileMagic)) {
    return util::DataLossError(fmt::format("{} is not a semantic tier file", path));
  }
  SemanticFileReader r(std::string_view(data).substr(kFileMagic.size()));
  STRATA_ASSIGN_OR_RETURN(uint32_t version, r.Get<uint32_t>("the version"));
  if (version != kFileVersion) {
    return util::DataLossError(
        fmt::format("{}: version {} is not {}", path, version, kFileVersion));
  }
  STRATA_ASSIGN_OR_RETURN(uint32_t dim, r.Get<uint32_t>("the width"));
  if (static_cast<int32_t>(dim) != state_->options.dim) {
    return util::InvalidArgumentError(
        fmt::format("{} holds vectors of {} floats; the semantic tier holds {} (another encoder)",
                    path, dim, state_->options.dim));
  }
  STRATA_ASSIGN_OR_RETURN(uint64_t made_by, r.Get<uint64_t>("the encoder"));
  if (made_by != encoder) {
    return util::InvalidArgumentError(fmt::format(
        "{} was written with another encoder ({:016x}, not {:016x})", path, made_by, encoder));
  }
  STRATA_ASSIGN_OR_RETURN(uint64_t count, r.Get<uint64_t>("the entry count"));
  struct Loaded {
    std::string ns;
    uint64_t payload = 0;
    int64_t ttl_ms = -1;
    std::vector<float> vector;
    std::optional<NearDupText> text;
    std::shared_ptr<const CachedValue> value;
  };
  std::vector<Loaded> entries;
  for (uint64_t i = 0; i < count; ++i) {
    Loaded l;
    STRATA_ASSIGN_OR_RETURN(std::string_view ns, r.Bytes("a namespace"));
    l.ns = std::string(ns);
    STRATA_ASSIGN_OR_RETURN(l.payload, r.Get<uint64_t>("a payload"));
    STRATA_ASSIGN_OR_RETURN(l.ttl_ms, r.Get<int64_t>("a TTL"));
    l.vector.resize(dim);
    for (uint32_t k = 0; k < dim; ++k) {
      STRATA_ASSIGN_OR_RETURN(l.vector[k], r.Get<float>("a vector"));
    }
    STRATA_ASSIGN_OR_RETURN(std::string_view text, r.Bytes("a text"));
    if (!text.empty()) {
      auto t = DecodeNearDupText(text);
      if (!t.ok()) return util::DataLossError(fmt::format("{}: {}", path, t.status().message()));
      l.text = std::move(t).value();
    }
    STRATA_ASSIGN_OR_RETURN(std::string_view value, r.Bytes("a value"));
    auto v = codec.Decode(value);
    if (!v.ok()) return util::DataLossError(fmt::format("{}: {}", path, v.status().message()));
    l.value = std::move(v).value();
    entries.push_back(std::move(l));
  }
  if (!r.done()) return r.Damaged("the end");
  size_t added = 0;
  for (Loaded& l : entries) {
    if (l.ttl_ms == 0) continue;
    // Keeps what was left of its TTL (-1: none).
    auto st =
        Insert(l.ns, l.vector, l.text ? &*l.text : nullptr, l.payload, l.value,
               l.ttl_ms > 0 ? std::optional(std::chrono::milliseconds(l.ttl_ms)) : std::nullopt);
    if (!st.ok()) continue;  // a zero vector: nothing to find it by
    ++added;
  }
  return added;
}

}  // namespace strata::cache
