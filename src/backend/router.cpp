#include "backend/router.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

#include "util/hash.h"

namespace strata::backend {

namespace {

constexpr int32_t kMaxReplicas = 1024;
constexpr int32_t kMaxVnodes = 1024;
constexpr int32_t kMaxConcurrency = 1 << 20;
constexpr int32_t kMaxEjectAfter = 1000;
constexpr std::chrono::milliseconds kMaxDuration = std::chrono::hours(1);

std::string BackendLabel(const std::string& name) {
  return name.empty() ? std::string("backend") : fmt::format("backend '{}'", name);
}

// Where a key sits on the ring. Callers' keys are hashes already, but of
// their own making; mixing them (a bijection) keeps a weak one from
// clustering on one arc.
uint64_t RingPosition(uint64_t key) {
  uint64_t x = key;
  return util::Rng::SplitMix64(x);
}

}  // namespace

// Named, not anonymous: Router::Replica (declared in the header) holds them.
namespace router_state {
enum class Breaker { kClosed, kOpen, kHalfOpen };
enum class Trial { kNone, kRequest, kProbe };  // what holds a half-open breaker's one slot
}  // namespace router_state
using router_state::Breaker;
using router_state::Trial;

struct Router::Replica {
  Breaker breaker = Breaker::kClosed;
  Trial trial = Trial::kNone;
  int32_t consecutive_failures = 0;
  int64_t outstanding = 0;
  // Of outstanding, the requests admitted before the breaker last opened:
  // Release counts against them first, and their outcomes move nothing.
  int64_t stale = 0;
  std::chrono::nanoseconds next_ejection{0};  // how long the next opening lasts
  TimePoint ejected_until;                    // kOpen: when it turns half-open
  bool probe_out = false;                     // ProbesDue named it, no report yet
  TimePoint next_probe;                       // the next periodic probe (closed)
  uint64_t requests = 0;
  uint64_t failures = 0;
  uint64_t probe_failures = 0;
  uint64_t ejections = 0;
};

std::string_view RoutePolicyName(RoutePolicy policy) {
  switch (policy) {
    case RoutePolicy::kAffinity:
      return "affinity";
    case RoutePolicy::kRoundRobin:
      return "round-robin";
    case RoutePolicy::kLeastOutstanding:
      return "least-loaded";
  }
  return "affinity";
}

std::optional<RoutePolicy> ParseRoutePolicy(std::string_view name) {
  for (RoutePolicy p :
       {RoutePolicy::kAffinity, RoutePolicy::kRoundRobin, RoutePolicy::kLeastOutstanding}) {
    if (name == RoutePolicyName(p)) return p;
  }
  return std::nullopt;
}

util::Status ValidateRouterOptions(const RouterOptions& o) {
  auto bad = [](std::string what) { return util::InvalidArgumentError("router: " + what); };
  auto in_ms = [](std::chrono::milliseconds d, std::chrono::milliseconds lo,
                  std::chrono::milliseconds hi) { return d >= lo && d <= hi; };
  if (o.replicas.empty()) return bad("replicas is empty: a backend needs at least one URL");
  if (o.replicas.size() > static_cast<size_t>(kMaxReplicas))
    return bad(fmt::format("replicas has {} URLs, at most {} are allowed", o.replicas.size(),
                           kMaxReplicas));
  std::unordered_set<std::string_view> seen;
  for (size_t i = 0; i < o.replicas.size(); ++i) {
    if (o.replicas[i].empty()) return bad(fmt::format("replicas[{}] is an empty URL", i));
    if (!seen.insert(o.replicas[i]).second)
      return bad(fmt::format("replicas[{}] '{}' is listed twice", i, o.replicas[i]));
  }
  if (!(o.load_bound >= 1 && o.load_bound <= 100))
    return bad(fmt::format("load_bound {} is outside [1, 100]", o.load_bound));
  if (o.affinity_floor < 1 || o.affinity_floor > kMaxConcurrency)
    return bad(
        fmt::format("affinity_floor {} is outside [1, {}]", o.affinity_floor, kMaxConcurrency));
  if (o.vnodes_per_replica < 1 || o.vnodes_per_replica > kMaxVnodes)
    return bad(
        fmt::format("vnodes_per_replica {} is outside [1, {}]", o.vnodes_per_replica, kMaxVnodes));
  if (o.max_concurrency_per_replica < 0 || o.max_concurrency_per_replica > kMaxConcurrency)
    return bad(fmt::format("max_concurrency_per_replica {} is outside [0, {}]",
                           o.max_concurrency_per_replica, kMaxConcurrency));
  if (o.eject_after_failures < 1 || o.eject_after_failures > kMaxEjectAfter)
    return bad(fmt::format("eject_after_failures {} is outside [1, {}]", o.eject_after_failures,
                           kMaxEjectAfter));
  const auto one_ms = std::chrono::milliseconds(1);
  if (!in_ms(o.eject_base, one_ms, kMaxDuration))
    return bad(fmt::format("eject_base {} ms is outside [1 ms, 1 h]", o.eject_base.count()));
  if (!in_ms(o.eject_max, o.eject_base, kMaxDuration))
    return bad(fmt::format("eject_max {} ms is outside [eject_base ({} ms), 1 h]",
                           o.eject_max.count(), o.eject_base.count()));
  if (!in_ms(o.probe_interval, std::chrono::milliseconds(0), kMaxDuration))
    return bad(fmt::format("probe_interval {} ms is outside [0, 1 h]", o.probe_interval.count()));
  if (!in_ms(o.backoff_base, one_ms, kMaxDuration))
    return bad(fmt::format("backoff_base {} ms is outside [1 ms, 1 h]", o.backoff_base.count()));
  if (!in_ms(o.backoff_max, o.backoff_base, kMaxDuration))
    return bad(fmt::format("backoff_max {} ms is outside [backoff_base ({} ms), 1 h]",
                           o.backoff_max.count(), o.backoff_base.count()));
  return util::OkStatus();
}

std::vector<Router::RingPoint> Router::BuildRing(const RouterOptions& o) {
  std::vector<RingPoint> ring;
  if (o.policy != RoutePolicy::kAffinity) return ring;
  ring.reserve(o.replicas.size() * static_cast<size_t>(o.vnodes_per_replica));
  for (size_t r = 0; r < o.replicas.size(); ++r) {
    // A point depends on the URL alone, never on the replica's place in the
    // list: the same fleet listed in another order routes the same.
    for (int32_t v = 0; v < o.vnodes_per_replica; ++v)
      ring.push_back(RingPoint{.position = util::Hash64(o.replicas[r], static_cast<uint64_t>(v)),
                               .replica = static_cast<int32_t>(r)});
  }
  // Ties (two points at one position: practically never) go by URL, again
  // independent of list order.
  std::sort(ring.begin(), ring.end(), [&](const RingPoint& a, const RingPoint& b) {
    if (a.position != b.position) return a.position < b.position;
    return o.replicas[a.replica] < o.replicas[b.replica];
  });
  return ring;
}

util::StatusOr<std::unique_ptr<Router>> Router::Create(const RouterOptions& options,
                                                       const util::Clock& clock, util::Rng rng) {
  STRATA_RETURN_IF_ERROR(ValidateRouterOptions(options));
  return std::unique_ptr<Router>(new Router(options, clock, rng));
}

Router::Router(const RouterOptions& options, const util::Clock& clock, util::Rng rng)
    : urls_(options.replicas),
      clock_(clock),
      ring_(BuildRing(options)),
      options_(options),
      rng_(rng),
      replicas_(options.replicas.size()) {
  const TimePoint now = clock_.Now();
  for (Replica& r : replicas_) {
    r.next_ejection = options_.eject_base;
    r.next_probe = now;  // the first round of probes is due at once
  }
}

Router::~Router() = default;

const std::string& Router::url(int32_t replica) const {
  STRATA_CHECK(replica >= 0 && replica < size());
  return urls_[static_cast<size_t>(replica)];
}

RouterOptions Router::options() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_;
}

util::Status Router::Reconfigure(const RouterOptions& o) {
  STRATA_RETURN_IF_ERROR(ValidateRouterOptions(o));
  std::lock_guard<std::mutex> lock(mu_);
  if (o.name != options_.name || o.replicas != options_.replicas ||
      o.vnodes_per_replica != options_.vnodes_per_replica) {
    return util::InvalidArgumentError(fmt::format(
        "router '{}': a reload cannot change the name, the replicas or the ring", options_.name));
  }
  options_ = o;
  return util::OkStatus();
}

void Router::RefreshLocked(TimePoint now) {
  for (Replica& r : replicas_) {
    if (r.breaker == Breaker::kOpen && now >= r.ejected_until) {
      r.breaker = Breaker::kHalfOpen;
      r.trial = Trial::kNone;
    }
  }
}

bool Router::EligibleLocked(int32_t replica) const {
  const Replica& r = replicas_[replica];
  const bool healthy =
      r.breaker == Breaker::kClosed || (r.breaker == Breaker::kHalfOpen && r.trial == Trial::kNone);
  const int32_t limit = options_.max_concurrency_per_replica;
  return healthy && (limit == 0 || r.outstanding < limit);
}

util::StatusOr<int32_t> Router::Acquire(const RouteKey& key, std::span<const int32_t> exclude) {
  std::lock_guard<std::mutex> lock(mu_);
  RefreshLocked(clock_.Now());
  const int32_t n = size();
  std::vector<char> pool(n);
  int32_t eligible = 0;
  for (int32_t i = 0; i < n; ++i) {
    pool[i] = EligibleLocked(i);
    eligible += pool[i];
  }
  if (eligible == 0) return NoReplicaLocked();
  // A retry prefers a replica it has not tried; only when every eligible one
  // is excluded does it go back to them (the pool is then all eligible ones).
  constexpr char kExcluded = 2;
  int32_t fresh = eligible;
  for (int32_t x : exclude) {
    if (x >= 0 && x < n && pool[x] == 1) {
      pool[x] = kExcluded;
      --fresh;
    }
  }
  for (char& c : pool)
    if (c == kExcluded) c = fresh > 0 ? 0 : 1;

  int32_t chosen = -1;
  switch (options_.policy) {
    case RoutePolicy::kAffinity: {
      const uint64_t k = key.session != 0 ? key.session : key.prefix;
      chosen = k != 0 ? PickAffinityLocked(k, pool) : PickLeastLocked(pool);
      break;
    }
    case RoutePolicy::kRoundRobin:
      chosen = PickRoundRobinLocked(pool);
      break;
    case RoutePolicy::kLeastOutstanding:
      chosen = PickLeastLocked(pool);
      break;
  }
  STRATA_CHECK(chosen >= 0 && chosen < n && pool[chosen]);
  Replica& r = replicas_[chosen];
  ++r.outstanding;
  ++r.requests;
  if (r.breaker == Breaker::kHalfOpen) r.trial = Trial::kRequest;
  return chosen;
}

int32_t Router::PickAffinityLocked(uint64_t key, const std::vector<char>& candidate) {
  int64_t total = 0;
  int64_t count = 0;
  for (size_t i = 0; i < candidate.size(); ++i) {
    if (!candidate[i]) continue;
    total += replicas_[i].outstanding;
    ++count;
  }
  // The bounded-load capacity ceil(c · (m + 1) / n), m counting the
  // candidates' outstanding requests and this one its own, or the floor if
  // that is more. Some candidate is always under it (the least loaded holds
  // at most m / n < capacity), so the walk ends within one turn of the ring.
  const double exact =
      options_.load_bound * static_cast<double>(total + 1) / static_cast<double>(count);
  // (The epsilon keeps a product that should be an integer, say 1.25 · 8 / 2,
  // from rounding up past it.)
  const auto capacity =
      std::max<int64_t>(static_cast<int64_t>(std::ceil(exact - 1e-9)), options_.affinity_floor);
  const uint64_t position = RingPosition(key);
  auto start = std::lower_bound(ring_.begin(), ring_.end(), position,
                                [](const RingPoint& p, uint64_t v) { return p.position < v; });
  const size_t first = static_cast<size_t>(start - ring_.begin());
  for (size_t step = 0; step < ring_.size(); ++step) {
    const RingPoint& p = ring_[(first + step) % ring_.size()];
    if (candidate[p.replica] && replicas_[p.replica].outstanding < capacity) return p.replica;
  }
  return PickLeastLocked(candidate);  // not reached (see above); a safe answer all the same
}

int32_t Router::PickLeastLocked(const std::vector<char>& candidate) {
  const int32_t n = size();
  int32_t best = -1;
  for (int32_t step = 0; step < n; ++step) {
    const int32_t i = (cursor_ + step) % n;
    if (!candidate[i]) continue;
    if (best < 0 || replicas_[i].outstanding < replicas_[best].outstanding) best = i;
  }
  if (best >= 0) cursor_ = (best + 1) % n;
  return best;
}

int32_t Router::PickRoundRobinLocked(const std::vector<char>& candidate) {
  const int32_t n = size();
  for (int32_t step = 0; step < n; ++step) {
    const int32_t i = (cursor_ + step) % n;
    if (!candidate[i]) continue;
    cursor_ = (i + 1) % n;
    return i;
  }
  return -1;
}

util::Status Router::NoReplicaLocked() const {
  int32_t open = 0;
  int32_t trial_out = 0;
  for (const Replica& r : replicas_) {
    if (r.breaker == Breaker::kOpen) ++open;
    if (r.breaker == Breaker::kHalfOpen && r.trial != Trial::kNone) ++trial_out;
  }
  const int32_t n = size();
  const std::string label = BackendLabel(options_.name);
  const int32_t healthy = n - open - trial_out;
  if (healthy == 0) {
    std::string why = n == 1 ? fmt::format("the only replica of {} is ejected", label)
                             : fmt::format("all {} replicas of {} are ejected", n, label);
    if (trial_out > 0) {
      why += fmt::format(" ({} half-open with a trial in flight)", trial_out);
    }
    why += fmt::format(" after {} consecutive failures", options_.eject_after_failures);
    return util::UnavailableError(std::move(why))
        .WithReason(util::ErrorReason::kUpstreamUnavailable);
  }
  std::string why =
      healthy == 1
          ? fmt::format("the only healthy replica of {} is at its concurrency limit ({})", label,
                        options_.max_concurrency_per_replica)
          : fmt::format("all {} healthy replicas of {} are at their concurrency limit ({})",
                        healthy, label, options_.max_concurrency_per_replica);
  if (healthy < n) why += fmt::format("; {} more ejected", n - healthy);
  return util::ResourceExhaustedError(std::move(why)).WithReason(util::ErrorReason::kUpstreamBusy);
}

void Router::Release(int32_t replica, Outcome outcome) {
  STRATA_CHECK(replica >= 0 && replica < size());
  std::lock_guard<std::mutex> lock(mu_);
  Replica& r = replicas_[replica];
  STRATA_CHECK(r.outstanding > 0);
  --r.outstanding;
  if (outcome == Outcome::kFailure) ++r.failures;
  if (r.stale > 0) {
    // Admitted before the breaker opened: what it says is mixed with the
    // failures that opened it, and only the trial decides a half-open one.
    // Requests are not told apart, so such releases are counted first; the
    // outstanding count stays exact either way.
    --r.stale;
    return;
  }
  switch (r.breaker) {
    case Breaker::kClosed:
      if (outcome == Outcome::kSuccess) r.consecutive_failures = 0;
      if (outcome == Outcome::kFailure) FailureLocked(r, clock_.Now());
      break;
    case Breaker::kOpen:
      break;  // outstanding == stale while open: not reached
    case Breaker::kHalfOpen:
      if (r.trial != Trial::kRequest) break;  // not reached: the trial is this request
      if (outcome == Outcome::kSuccess) CloseLocked(r);
      if (outcome == Outcome::kFailure) OpenLocked(r, clock_.Now());
      if (outcome == Outcome::kNeutral) r.trial = Trial::kNone;  // the slot is free again
      break;
  }
}

void Router::FailureLocked(Replica& r, TimePoint now) {
  if (++r.consecutive_failures >= options_.eject_after_failures) OpenLocked(r, now);
}

void Router::OpenLocked(Replica& r, TimePoint now) {
  r.breaker = Breaker::kOpen;
  r.trial = Trial::kNone;
  r.consecutive_failures = 0;
  r.stale = r.outstanding;
  r.ejected_until = now + r.next_ejection;
  r.next_ejection = std::min<std::chrono::nanoseconds>(2 * r.next_ejection, options_.eject_max);
  ++r.ejections;
}

void Router::CloseLocked(Replica& r) {
  r.breaker = Breaker::kClosed;
  r.trial = Trial::kNone;
  r.consecutive_failures = 0;
  r.stale = 0;  // what is still out counts as the closed breaker's own
  r.next_ejection = options_.eject_base;
}

std::vector<int32_t> Router::ProbesDue(TimePoint now) {
  std::lock_guard<std::mutex> lock(mu_);
  RefreshLocked(now);
  std::vector<int32_t> due;
  for (int32_t i = 0; i < size(); ++i) {
    Replica& r = replicas_[i];
    if (r.probe_out) continue;
    if (r.breaker == Breaker::kClosed) {
      if (options_.probe_interval.count() == 0 || now < r.next_probe) continue;
      r.next_probe = now + options_.probe_interval;
    } else if (r.breaker == Breaker::kHalfOpen && r.trial == Trial::kNone) {
      r.trial = Trial::kProbe;  // readmission without risking a client's request
    } else {
      continue;  // ejected, or its trial is out
    }
    r.probe_out = true;
    due.push_back(i);
  }
  return due;
}

void Router::ReportProbe(int32_t replica, bool ok) {
  STRATA_CHECK(replica >= 0 && replica < size());
  std::lock_guard<std::mutex> lock(mu_);
  Replica& r = replicas_[replica];
  if (!r.probe_out) return;  // not asked for: nothing to count
  r.probe_out = false;
  if (!ok) ++r.probe_failures;
  const TimePoint now = clock_.Now();
  if (r.breaker == Breaker::kHalfOpen && r.trial == Trial::kProbe) {
    if (ok) {
      CloseLocked(r);
    } else {
      OpenLocked(r, now);
    }
  } else if (r.breaker == Breaker::kClosed && !ok) {
    FailureLocked(r, now);
  }
  // Otherwise the probe left before the breaker opened: it moves nothing.
}

Router::TimePoint Router::NextProbeAt() const {
  std::lock_guard<std::mutex> lock(mu_);
  TimePoint next = TimePoint::max();
  for (const Replica& r : replicas_) {
    if (r.probe_out) continue;
    if (r.breaker == Breaker::kClosed) {
      if (options_.probe_interval.count() > 0) next = std::min(next, r.next_probe);
    } else if (r.breaker == Breaker::kOpen ||
               (r.breaker == Breaker::kHalfOpen && r.trial == Trial::kNone)) {
      next = std::min(next, r.ejected_until);
    }
  }
  return next;
}

std::chrono::nanoseconds Router::Backoff(int32_t attempt) {
  const std::chrono::nanoseconds max = options_.backoff_max;
  std::chrono::nanoseconds cap = options_.backoff_base;
  for (int32_t i = 1; i < attempt && cap < max; ++i) cap *= 2;  // at most ~22 doublings
  cap = std::min(cap, max);
  std::lock_guard<std::mutex> lock(mu_);
  return std::chrono::nanoseconds(
      static_cast<int64_t>(rng_.Below(static_cast<uint64_t>(cap.count()) + 1)));
}

std::vector<ReplicaStats> Router::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  const TimePoint now = clock_.Now();
  std::vector<ReplicaStats> out;
  out.reserve(replicas_.size());
  for (size_t i = 0; i < replicas_.size(); ++i) {
    const Replica& r = replicas_[i];
    std::string_view state = "healthy";
    if (r.breaker == Breaker::kHalfOpen ||
        (r.breaker == Breaker::kOpen && now >= r.ejected_until)) {
      state = "half-open";
    } else if (r.breaker == Breaker::kOpen) {
      state = "ejected";
    }
    out.push_back(ReplicaStats{.url = options_.replicas[i],
                               .state = state,
                               .outstanding = r.outstanding,
                               .requests = r.requests,
                               .failures = r.failures,
                               .probe_failures = r.probe_failures,
                               .ejections = r.ejections});
  }
  return out;
}

}  // namespace strata::backend
