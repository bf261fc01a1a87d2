// backend/router.h — which replica of a remote backend a request goes to,
// and each replica's health.
//
// Promise: a Router holds the replicas of one upstream fleet (several URLs
// serving the same model) and, for each request, picks one:
//  - kAffinity (default): the request's RouteKey (a session hash, else a
//    prompt-prefix hash; the caller computes both) is placed on a consistent-
//    hash ring (vnodes_per_replica points per replica, at Hash64(url, i)) and
//    walks clockwise to the first replica that is eligible (healthy, under
//    max_concurrency_per_replica) and under the bounded load
//        outstanding < max(ceil(load_bound · (S + 1) / n), affinity_floor),
//    S the outstanding requests of the n eligible replicas (consistent
//    hashing with bounded loads; Mirrokni, Thorup, Zadimoghaddam, SODA
//    2018). So a key stays on its replica (whose upstream then holds its KV
//    prefix warm) until that replica carries more than load_bound times the
//    average, then spills to the next replica on the ring, and comes back
//    when the load drops. The floor keeps a light load from spilling: with
//    few requests in flight the bound alone is a handful (ceil(1.25 · 2 / 3)
//    = 1), and a second request of a prompt would leave its warm replica to
//    prefill the whole prompt elsewhere. Removing a replica from the ring (ejection) moves
//    only the keys that were on it. A request with no key goes to the least
//    loaded replica, ties broken by rotation.
//  - kRoundRobin: the next eligible replica in turn.
//  - kLeastOutstanding: the eligible replica with the fewest outstanding
//    requests, ties broken by rotation.
// Acquire counts the request as outstanding on its replica until Release
// reports its outcome. A retry passes the replicas it already tried as
// `exclude`: another eligible replica is preferred, an excluded one is
// reused only when nothing else is eligible.
//
// Health: each replica has a circuit breaker. Closed ("healthy"): after
// eject_after_failures consecutive failures (a request's kFailure, or a
// failed probe) it opens ("ejected") for an ejection time that starts at
// eject_base and doubles with each consecutive ejection up to eject_max.
// When that time has passed it is half-open: exactly one trial (a request,
// or a probe) is let through; its success closes the breaker and resets the
// ejection time, its failure opens it again for the doubled time, a neutral
// outcome frees the trial slot. While closed, a request's success resets
// the consecutive-failure count; a neutral outcome neither resets nor
// counts. Requests admitted before an ejection still finish; their
// outcomes do not move the breaker (Release cannot tell requests apart, so
// it counts them first: a trial's outcome decides once they are all in).
// Active checks: ProbesDue names the replicas to probe now (each closed one
// every probe_interval; an ejected one once its ejection time has passed, as
// its half-open trial), and the caller reports each result with
// ReportProbe. A failed probe of a closed replica counts as a failure; a
// successful one does not reset the count (a health endpoint that answers
// says less than a request that was served).
//
// Pure logic: no I/O and no threads; time comes from the injected Clock,
// retry jitter from the injected Rng.
//
// Threading: thread-safe. One mutex guards all state, held only for the
// short, allocation-light bookkeeping of each call (request threads call
// Acquire, HTTP client I/O threads Release, a health thread ProbesDue and
// ReportProbe, /metrics Stats).
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(auto router,
//       Router::Create({.name = "llama", .replicas = urls}, clock, util::Rng(seed)));
//   std::vector<int32_t> tried;
//   for (int attempt = 1;; ++attempt) {
//     STRATA_ASSIGN_OR_RETURN(int32_t r, router->Acquire({.prefix = PrefixHash(prompt)}, tried));
//     Outcome o = Send(router->url(r), request);   // asynchronously, in practice
//     router->Release(r, o);
//     if (o != Outcome::kFailure || attempt == max_attempts) break;
//     tried.push_back(r);
//     Sleep(router->Backoff(attempt));
//   }
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/clock.h"
#include "util/random.h"
#include "util/status.h"

namespace strata::backend {

enum class RoutePolicy { kAffinity, kRoundRobin, kLeastOutstanding };

// "affinity", "round-robin", "least-loaded".
std::string_view RoutePolicyName(RoutePolicy policy);
// The policy of that name; nullopt for any other text.
std::optional<RoutePolicy> ParseRoutePolicy(std::string_view name);

// What a request is routed by under kAffinity; 0 = none. The caller hashes
// (util::Hash64) the tenant-scoped session id and the prompt's leading
// bytes. A session wins over a prefix: every turn of a conversation goes to
// one replica.
struct RouteKey {
  uint64_t session = 0;
  uint64_t prefix = 0;
};

// How a request ended, as the router's health sees it.
enum class Outcome {
  kSuccess,  // the upstream answered
  kFailure,  // connect error, 5xx, 429/503/529, timeout, a broken stream
  kNeutral,  // says nothing of the replica: the client cancelled, a 4xx of the request's own
};

struct RouterOptions {
  std::string name;                   // the backend's name, for messages ("" = unnamed)
  std::vector<std::string> replicas;  // [1, 1024] URLs, non-empty and distinct
  RoutePolicy policy = RoutePolicy::kAffinity;
  double load_bound = 1.25;                        // [1, 100] kAffinity: max load / average load
  int32_t affinity_floor = 1;                      // [1, 2^20] kAffinity: no spill below this load
  int32_t vnodes_per_replica = 160;                // [1, 1024] kAffinity: ring points per replica
  int32_t max_concurrency_per_replica = 0;         // [0, 2^20] outstanding requests; 0 = unlimited
  int32_t eject_after_failures = 3;                // [1, 1000] consecutive failures that eject
  std::chrono::milliseconds eject_base{1000};      // [1 ms, 1 h] the first ejection
  std::chrono::milliseconds eject_max{30'000};     // [eject_base, 1 h] the longest ejection
  std::chrono::milliseconds probe_interval{2000};  // [0, 1 h] 0 = no periodic probes
  std::chrono::milliseconds backoff_base{50};      // [1 ms, 1 h] the first retry's cap
  std::chrono::milliseconds backoff_max{2000};     // [backoff_base, 1 h] the cap's cap
};

// InvalidArgument naming the first option out of range.
util::Status ValidateRouterOptions(const RouterOptions& options);

struct ReplicaStats {
  std::string url;
  std::string_view state;       // "healthy", "ejected", "half-open"
  int64_t outstanding = 0;      // acquired, not yet released
  uint64_t requests = 0;        // acquired, in all
  uint64_t failures = 0;        // requests released with kFailure
  uint64_t probe_failures = 0;  // probes reported failed
  uint64_t ejections = 0;       // times the breaker opened
};

class Router {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // InvalidArgument naming the option when one is out of range. `clock`
  // must outlive the router; `rng` draws the retry backoffs.
  static util::StatusOr<std::unique_ptr<Router>> Create(const RouterOptions& options,
                                                        const util::Clock& clock, util::Rng rng);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // The replica for a request, now counted outstanding on it until Release.
  // `exclude`: replicas this request already tried (out-of-range entries are
  // ignored). Unavailable (kUpstreamUnavailable) when no replica is healthy;
  // ResourceExhausted (kUpstreamBusy) when every healthy one is at
  // max_concurrency_per_replica.
  util::StatusOr<int32_t> Acquire(const RouteKey& key, std::span<const int32_t> exclude = {});
  // Ends a request Acquire counted on `replica` (exactly once per Acquire).
  void Release(int32_t replica, Outcome outcome);

  // The replicas to probe now (`now` from the router's clock); each must get
  // exactly one ReportProbe, and is not named again until it has. A report
  // for a replica with no probe out is ignored.
  std::vector<int32_t> ProbesDue(TimePoint now);
  void ReportProbe(int32_t replica, bool ok);
  // When ProbesDue will next name a replica (or `now` is past it); the
  // health thread sleeps until then. time_point::max() when nothing is due
  // while probes are out (a report may make one due).
  TimePoint NextProbeAt() const;

  // The delay before retry number `attempt` (1-based; < 1 counts as 1):
  // uniform in [0, min(backoff_max, backoff_base · 2^(attempt − 1))] (full
  // jitter), drawn from the router's Rng.
  std::chrono::nanoseconds Backoff(int32_t attempt);

  // New routing options (a reload): the policy, load bound, affinity floor,
  // concurrency limit, breaker and backoff. The name, the replicas and the
  // ring's points stay; a replica ejected now stays ejected for the time it
  // was given. Requests already routed keep their replica. InvalidArgument,
  // changing nothing, when an option is out of range or would change what
  // stays.
  util::Status Reconfigure(const RouterOptions& options);

  std::vector<ReplicaStats> Stats() const;
  int32_t size() const { return static_cast<int32_t>(urls_.size()); }
  // The URL of `replica`, in [0, size()).
  const std::string& url(int32_t replica) const;
  // The options in force (a copy: Reconfigure may change them).
  RouterOptions options() const;

 private:
  struct Replica;  // one replica's breaker, probe schedule and counters (router.cpp)
  struct RingPoint {
    uint64_t position;
    int32_t replica;
  };

  Router(const RouterOptions& options, const util::Clock& clock, util::Rng rng);
  static std::vector<RingPoint> BuildRing(const RouterOptions& options);
  // All below: mu_ held.
  void RefreshLocked(TimePoint now);
  bool EligibleLocked(int32_t replica) const;
  int32_t PickAffinityLocked(uint64_t key, const std::vector<char>& candidate);
  int32_t PickLeastLocked(const std::vector<char>& candidate);
  int32_t PickRoundRobinLocked(const std::vector<char>& candidate);
  util::Status NoReplicaLocked() const;
  void FailureLocked(Replica& r, TimePoint now);
  void OpenLocked(Replica& r, TimePoint now);
  void CloseLocked(Replica& r);

  const std::vector<std::string> urls_;  // options.replicas; immutable
  const util::Clock& clock_;
  const std::vector<RingPoint> ring_;  // sorted by position; immutable

  mutable std::mutex mu_;  // guards everything below
  RouterOptions options_;  // Reconfigure may change all but name, replicas and vnodes
  util::Rng rng_;
  std::vector<Replica> replicas_;
  int32_t cursor_ = 0;  // rotation: where the next tie-break or round starts
};

}  // namespace strata::backend
