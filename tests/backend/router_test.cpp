#include "backend/router.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "testing/fake_clock.h"
#include "util/hash.h"
#include "util/random.h"

namespace strata::backend {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

std::vector<std::string> Urls(int n) {
  std::vector<std::string> urls;
  for (int i = 0; i < n; ++i) urls.push_back("http://10.0.0." + std::to_string(i + 1) + ":8000");
  return urls;
}

RouterOptions Fleet(int n, RoutePolicy policy = RoutePolicy::kAffinity) {
  return RouterOptions{.name = "llama", .replicas = Urls(n), .policy = policy};
}

std::unique_ptr<Router> Make(const RouterOptions& o, const util::Clock& clock, uint64_t seed = 7) {
  auto r = Router::Create(o, clock, util::Rng(seed));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(r).value();
}

RouteKey Prefix(int i) {
  return RouteKey{.prefix =
                      util::Hash64("You are a helpful assistant. Prompt #" + std::to_string(i))};
}

// Where `key` goes when nothing is outstanding (the request ends at once).
int32_t Home(Router& router, const RouteKey& key) {
  auto r = router.Acquire(key);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  router.Release(*r, Outcome::kSuccess);
  return *r;
}

// Acquires on exactly `replica`, by excluding every other one.
int32_t AcquireOn(Router& router, int32_t replica) {
  std::vector<int32_t> others;
  for (int32_t i = 0; i < router.size(); ++i)
    if (i != replica) others.push_back(i);
  auto r = router.Acquire({}, others);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, replica);
  return *r;
}

void Fail(Router& router, int32_t replica, int times) {
  for (int i = 0; i < times; ++i) router.Release(AcquireOn(router, replica), Outcome::kFailure);
}

std::string_view State(const Router& router, int32_t replica) {
  return router.Stats()[replica].state;
}

int64_t Outstanding(const Router& router, int32_t replica) {
  return router.Stats()[replica].outstanding;
}

TEST(RoutePolicy, NamesRoundTripAndUnknownNamesAreRefused) {
  for (RoutePolicy p :
       {RoutePolicy::kAffinity, RoutePolicy::kRoundRobin, RoutePolicy::kLeastOutstanding}) {
    EXPECT_EQ(ParseRoutePolicy(RoutePolicyName(p)), p);
  }
  EXPECT_EQ(RoutePolicyName(RoutePolicy::kAffinity), "affinity");
  EXPECT_EQ(RoutePolicyName(RoutePolicy::kRoundRobin), "round-robin");
  EXPECT_EQ(RoutePolicyName(RoutePolicy::kLeastOutstanding), "least-loaded");
  EXPECT_EQ(ParseRoutePolicy("least-outstanding"), std::nullopt);
  EXPECT_EQ(ParseRoutePolicy(""), std::nullopt);
  EXPECT_EQ(ParseRoutePolicy("Affinity"), std::nullopt);
}

TEST(RouterAffinity, SamePrefixGoesToTheSameReplicaEveryTime) {
  testing::FakeClock clock;
  auto router = Make(Fleet(4), clock);
  // The same fleet listed in another order: a ring point depends on the URL
  // only, so every key still lands on the same URL.
  RouterOptions reversed = Fleet(4);
  std::reverse(reversed.replicas.begin(), reversed.replicas.end());
  auto other = Make(reversed, clock);
  for (int k = 0; k < 200; ++k) {
    const int32_t home = Home(*router, Prefix(k));
    for (int i = 0; i < 10; ++i) ASSERT_EQ(Home(*router, Prefix(k)), home) << "prefix " << k;
    EXPECT_EQ(other->url(Home(*other, Prefix(k))), router->url(home)) << "prefix " << k;
  }
}

TEST(RouterAffinity, DistinctPrefixesSpreadOverEveryReplica) {
  testing::FakeClock clock;
  auto router = Make(Fleet(4), clock);
  constexpr int kKeys = 20000;
  std::vector<int> count(4);
  for (int k = 0; k < kKeys; ++k) ++count[Home(*router, Prefix(k))];
  // A replica's share of the ring is the sum of its V = 160 arcs, each about
  // exponential with mean 1/(4V): its relative standard deviation is about
  // 1/sqrt(V) = 7.9%; sampling 20000 keys adds 1.7%. ±25% of the fair share
  // is over 3 standard deviations, and the hash is fixed, so this is
  // deterministic and not flaky.
  for (int r = 0; r < 4; ++r) {
    EXPECT_GT(count[r], kKeys / 4 * 0.75) << "replica " << r;
    EXPECT_LT(count[r], kKeys / 4 * 1.25) << "replica " << r;
  }
}

TEST(RouterAffinity, HotPrefixSpillsPastTheLoadBoundAndComesBack) {
  testing::FakeClock clock;
  auto router = Make(Fleet(4), clock);
  // Background: two requests without a key on each replica (least loaded,
  // ties rotate).
  std::vector<int32_t> background;
  for (int i = 0; i < 8; ++i) background.push_back(*router->Acquire({}));
  for (int r = 0; r < 4; ++r) ASSERT_EQ(Outstanding(*router, r), 2);

  const RouteKey hot = Prefix(42);
  auto first = router->Acquire(hot);
  ASSERT_TRUE(first.ok());
  const int32_t home = *first;
  // The next replica clockwise: where the key goes when home is excluded.
  auto second_choice = router->Acquire(hot, std::vector<int32_t>{home});
  ASSERT_TRUE(second_choice.ok());
  const int32_t next = *second_choice;
  ASSERT_NE(next, home);
  router->Release(next, Outcome::kSuccess);

  std::vector<int32_t> hot_requests{home};
  bool spilled = false;
  bool returned = false;
  for (int i = 0; i < 12; ++i) {
    int64_t total = 0;
    for (const auto& s : router->Stats()) total += s.outstanding;
    const auto bound = static_cast<int64_t>(std::ceil(1.25 * static_cast<double>(total + 1) / 4));
    const int64_t home_load = Outstanding(*router, home);
    const int64_t next_load = Outstanding(*router, next);
    auto got = router->Acquire(hot);
    ASSERT_TRUE(got.ok());
    hot_requests.push_back(*got);
    if (home_load < bound) {
      EXPECT_EQ(*got, home) << "step " << i << ": home has " << home_load << " < " << bound;
      if (spilled) returned = true;
    } else {
      EXPECT_NE(*got, home) << "step " << i << ": home has " << home_load << " >= " << bound;
      if (next_load < bound) {
        EXPECT_EQ(*got, next) << "step " << i;
      }
      spilled = true;
    }
  }
  EXPECT_TRUE(spilled);
  EXPECT_TRUE(returned);
  // Once the load drops, the key is home again.
  for (int32_t r : hot_requests) router->Release(r, Outcome::kSuccess);
  EXPECT_EQ(*router->Acquire(hot), home);
}

// With the floor at F a prompt's replica keeps its requests up to F in
// flight even on an idle fleet (the bound alone is 1 there: the second
// request would spill), then the bound spills as before.
TEST(RouterAffinity, TheFloorKeepsALightLoadHomeAndTheBoundStillSpillsPastIt) {
  testing::FakeClock clock;
  const RouteKey hot = Prefix(42);
  {
    auto plain = Make(Fleet(3), clock);
    const int32_t home = *plain->Acquire(hot);
    EXPECT_NE(*plain->Acquire(hot), home) << "without a floor the second request spills";
  }
  RouterOptions o = Fleet(3);
  o.affinity_floor = 4;
  auto router = Make(o, clock);
  const int32_t home = *router->Acquire(hot);
  for (int i = 1; i < 4; ++i) EXPECT_EQ(*router->Acquire(hot), home) << "request " << i + 1;
  EXPECT_EQ(Outstanding(*router, home), 4);
  // Five in flight: the bound is ceil(1.25 · 5 / 3) = 3 < 4, so the floor
  // decides and home is full.
  EXPECT_NE(*router->Acquire(hot), home);
  // Past the floor the bound rules: with 12 more elsewhere, ceil(1.25 · 18 / 3)
  // = 8 > 4, and home takes requests again.
  for (int i = 0; i < 12; ++i) {
    auto got = router->Acquire(Prefix(1000 + i), std::vector<int32_t>{home});
    ASSERT_TRUE(got.ok());
    ASSERT_NE(*got, home);
  }
  EXPECT_EQ(*router->Acquire(hot), home);
}

TEST(RouterAffinity, SessionWinsOverPrefix) {
  testing::FakeClock clock;
  auto router = Make(Fleet(4), clock);
  int checked = 0;
  for (int k = 0; k < 100; ++k) {
    const RouteKey prefix = Prefix(k);
    const RouteKey session{.session = util::Hash64("tenant-a/session-" + std::to_string(k))};
    const int32_t by_session = Home(*router, session);
    if (by_session == Home(*router, prefix)) continue;
    EXPECT_EQ(Home(*router, RouteKey{.session = session.session, .prefix = prefix.prefix}),
              by_session);
    ++checked;
  }
  EXPECT_GT(checked, 50);  // about 3 in 4 pairs land apart
}

TEST(RouterAffinity, EjectingOneOfFourMovesOnlyTheKeysThatWereOnIt) {
  testing::FakeClock clock;
  auto router = Make(Fleet(4), clock);
  constexpr int kKeys = 4000;
  std::vector<int32_t> before(kKeys);
  for (int k = 0; k < kKeys; ++k) before[k] = Home(*router, Prefix(k));

  constexpr int32_t kEjected = 2;
  Fail(*router, kEjected, 3);
  ASSERT_EQ(State(*router, kEjected), "ejected");
  std::vector<int> moved_to(4);
  int moved = 0;
  for (int k = 0; k < kKeys; ++k) {
    const int32_t now = Home(*router, Prefix(k));
    if (before[k] == kEjected) {
      EXPECT_NE(now, kEjected);
      ++moved_to[now];
      ++moved;
    } else {
      EXPECT_EQ(now, before[k]) << "prefix " << k << " moved off a healthy replica";
    }
  }
  EXPECT_GT(moved, kKeys / 8);
  // Its keys spread over the others (each of its arcs falls to the next
  // point clockwise, which is any of them).
  for (int r = 0; r < 4; ++r) {
    if (r != kEjected) {
      EXPECT_GT(moved_to[r], moved / 10) << "replica " << r;
    }
  }

  // Readmitted, every key is where it was.
  clock.Advance(seconds(1));
  router->Release(AcquireOn(*router, kEjected), Outcome::kSuccess);
  ASSERT_EQ(State(*router, kEjected), "healthy");
  for (int k = 0; k < kKeys; ++k) ASSERT_EQ(Home(*router, Prefix(k)), before[k]);
}

TEST(RouterAffinity, NoKeyGoesToTheLeastLoadedWithTiesRotating) {
  testing::FakeClock clock;
  auto router = Make(Fleet(4), clock);
  std::vector<int> count(4);
  for (int i = 0; i < 8; ++i) ++count[*router->Acquire({})];
  EXPECT_EQ(count, (std::vector<int>{2, 2, 2, 2}));
  router->Release(3, Outcome::kSuccess);
  EXPECT_EQ(*router->Acquire({}), 3);
}

TEST(RouterBreaker, EjectsAfterConsecutiveFailuresAndSuccessResetsTheCount) {
  testing::FakeClock clock;
  auto router = Make(Fleet(2), clock);
  Fail(*router, 0, 2);
  router->Release(AcquireOn(*router, 0), Outcome::kSuccess);
  Fail(*router, 0, 2);
  router->Release(AcquireOn(*router, 0), Outcome::kNeutral);  // says nothing: no reset, no count
  EXPECT_EQ(State(*router, 0), "healthy");
  Fail(*router, 0, 1);
  EXPECT_EQ(State(*router, 0), "ejected");
  EXPECT_EQ(router->Stats()[0].ejections, 1u);
  EXPECT_EQ(router->Stats()[0].failures, 5u);
  EXPECT_EQ(router->Stats()[0].requests, 7u);

  // No request reaches it while open: keyed, unkeyed, and retries that
  // exclude the healthy one.
  for (int k = 0; k < 100; ++k) {
    EXPECT_EQ(Home(*router, Prefix(k)), 1);
    auto r = router->Acquire({}, std::vector<int32_t>{1});
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(*r, 1);
    router->Release(*r, Outcome::kSuccess);
  }
}

TEST(RouterBreaker, HalfOpenLetsExactlyOneRequestThroughAndItsSuccessReadmits) {
  testing::FakeClock clock;
  auto router = Make(Fleet(1), clock);
  Fail(*router, 0, 3);
  auto refused = router->Acquire(Prefix(1));
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().reason(), util::ErrorReason::kUpstreamUnavailable);

  clock.Advance(milliseconds(999));
  EXPECT_FALSE(router->Acquire(Prefix(1)).ok());
  EXPECT_EQ(State(*router, 0), "ejected");
  clock.Advance(milliseconds(1));
  EXPECT_EQ(State(*router, 0), "half-open");
  auto trial = router->Acquire(Prefix(1));
  ASSERT_TRUE(trial.ok());
  auto second = router->Acquire(Prefix(2));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().reason(), util::ErrorReason::kUpstreamUnavailable);
  EXPECT_NE(second.status().message().find("half-open"), std::string::npos)
      << second.status().message();

  router->Release(*trial, Outcome::kSuccess);
  EXPECT_EQ(State(*router, 0), "healthy");
  auto a = router->Acquire(Prefix(1));
  auto b = router->Acquire(Prefix(2));
  EXPECT_TRUE(a.ok() && b.ok());
}

TEST(RouterBreaker, FailedTrialsDoubleTheEjectionUpToTheMaximumAndSuccessResetsIt) {
  testing::FakeClock clock;
  auto router = Make(Fleet(1), clock);
  Fail(*router, 0, 3);
  const std::vector<int64_t> expected_ms{1000, 2000, 4000, 8000, 16000, 30000, 30000};
  for (size_t i = 0; i < expected_ms.size(); ++i) {
    clock.Advance(milliseconds(expected_ms[i] - 1));
    ASSERT_FALSE(router->Acquire({}).ok()) << "ejection " << i;
    clock.Advance(milliseconds(1));
    auto trial = router->Acquire({});
    ASSERT_TRUE(trial.ok()) << "ejection " << i << " should last " << expected_ms[i] << " ms";
    router->Release(*trial, Outcome::kFailure);  // re-opens at once: one failure is enough
    EXPECT_EQ(State(*router, 0), "ejected");
  }
  EXPECT_EQ(router->Stats()[0].ejections, 1 + expected_ms.size());

  clock.Advance(seconds(30));
  router->Release(*router->Acquire({}), Outcome::kSuccess);
  EXPECT_EQ(State(*router, 0), "healthy");
  // A fresh ejection starts again at eject_base.
  Fail(*router, 0, 3);
  clock.Advance(milliseconds(999));
  EXPECT_FALSE(router->Acquire({}).ok());
  clock.Advance(milliseconds(1));
  EXPECT_TRUE(router->Acquire({}).ok());
}

TEST(RouterBreaker, NeutralTrialFreesTheSlotForAnother) {
  testing::FakeClock clock;
  auto router = Make(Fleet(1), clock);
  Fail(*router, 0, 3);
  clock.Advance(seconds(1));
  auto trial = router->Acquire({});
  ASSERT_TRUE(trial.ok());
  EXPECT_FALSE(router->Acquire({}).ok());
  router->Release(*trial, Outcome::kNeutral);  // the client cancelled: nothing learned
  EXPECT_EQ(State(*router, 0), "half-open");
  auto again = router->Acquire({});
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(router->Acquire({}).ok());
  router->Release(*again, Outcome::kSuccess);
  EXPECT_EQ(State(*router, 0), "healthy");
}

TEST(RouterBreaker, RequestsAdmittedBeforeTheEjectionDoNotDecideIt) {
  testing::FakeClock clock;
  auto router = Make(Fleet(1), clock);
  const int32_t old_a = *router->Acquire({});
  const int32_t old_b = *router->Acquire({});
  Fail(*router, 0, 3);
  ASSERT_EQ(State(*router, 0), "ejected");
  router->Release(old_a, Outcome::kSuccess);  // a long stream that started before
  EXPECT_EQ(State(*router, 0), "ejected");

  clock.Advance(seconds(1));
  const int32_t trial = *router->Acquire({});
  EXPECT_EQ(Outstanding(*router, 0), 2);
  // The old request ends first (releases are counted against old requests
  // first): the breaker stays half-open and lets nobody else in.
  router->Release(old_b, Outcome::kFailure);
  EXPECT_EQ(State(*router, 0), "half-open");
  EXPECT_FALSE(router->Acquire({}).ok());
  router->Release(trial, Outcome::kSuccess);
  EXPECT_EQ(State(*router, 0), "healthy");
  EXPECT_EQ(Outstanding(*router, 0), 0);
}

TEST(RouterProbes, EveryReplicaIsProbedEachIntervalAndOnlyOnceAtATime) {
  testing::FakeClock clock;
  auto router = Make(Fleet(3), clock);
  EXPECT_EQ(router->NextProbeAt(), clock.Now());
  EXPECT_EQ(router->ProbesDue(clock.Now()), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_TRUE(router->ProbesDue(clock.Now()).empty());  // all out
  clock.Advance(seconds(5));
  EXPECT_TRUE(router->ProbesDue(clock.Now()).empty());  // still out: never two at once
  EXPECT_EQ(router->NextProbeAt(), Router::TimePoint::max());
  for (int32_t r = 0; r < 3; ++r) router->ReportProbe(r, true);
  // Due an interval after each was sent, which is already past.
  EXPECT_EQ(router->ProbesDue(clock.Now()), (std::vector<int32_t>{0, 1, 2}));
  for (int32_t r = 0; r < 3; ++r) router->ReportProbe(r, true);
  EXPECT_EQ(router->NextProbeAt(), clock.Now() + seconds(2));
  clock.Advance(milliseconds(1999));
  EXPECT_TRUE(router->ProbesDue(clock.Now()).empty());
  clock.Advance(milliseconds(1));
  EXPECT_EQ(router->ProbesDue(clock.Now()).size(), 3u);
  router->ReportProbe(1, true);
  router->ReportProbe(1, true);  // not asked for: ignored
  EXPECT_TRUE(router->ProbesDue(clock.Now()).empty());
}

TEST(RouterProbes, FailedProbesEjectAndASuccessfulProbeReadmits) {
  testing::FakeClock clock;
  auto router = Make(Fleet(3, RoutePolicy::kLeastOutstanding), clock);
  auto round = [&](bool replica1_ok) {
    auto due = router->ProbesDue(clock.Now());
    for (int32_t r : due) router->ReportProbe(r, r != 1 || replica1_ok);
    return due;
  };
  for (int i = 0; i < 3; ++i) {
    if (i > 0) clock.Advance(seconds(2));
    EXPECT_EQ(round(false).size(), 3u);
  }
  EXPECT_EQ(State(*router, 1), "ejected");
  EXPECT_EQ(router->Stats()[1].probe_failures, 3u);
  EXPECT_EQ(router->Stats()[1].ejections, 1u);
  EXPECT_EQ(router->NextProbeAt(), clock.Now() + seconds(1));  // when its ejection ends

  // Half-open: the probe is its trial, so no client request is risked on it.
  clock.Advance(seconds(1));
  const auto due = router->ProbesDue(clock.Now());
  EXPECT_EQ(due, (std::vector<int32_t>{1}));  // the others' next round is a second away
  for (int i = 0; i < 50; ++i) {
    auto r = router->Acquire({}, std::vector<int32_t>{0, 2});  // even a retry that wants it
    ASSERT_TRUE(r.ok());
    EXPECT_NE(*r, 1);
    router->Release(*r, Outcome::kSuccess);
  }
  for (int32_t r : due) router->ReportProbe(r, true);
  EXPECT_EQ(State(*router, 1), "healthy");
  EXPECT_EQ(AcquireOn(*router, 1), 1);
  router->Release(1, Outcome::kSuccess);
}

TEST(RouterProbes, ProbesOfAnEjectedReplicaWaitForItsEjectionAndFailureDoublesIt) {
  testing::FakeClock clock;
  auto router = Make(Fleet(2), clock);
  for (int32_t r : router->ProbesDue(clock.Now())) router->ReportProbe(r, true);
  Fail(*router, 0, 3);
  clock.Advance(milliseconds(900));
  EXPECT_TRUE(router->ProbesDue(clock.Now()).empty());  // ejected: no probe before its time
  clock.Advance(milliseconds(100));
  EXPECT_EQ(router->ProbesDue(clock.Now()), (std::vector<int32_t>{0}));
  router->ReportProbe(0, false);
  EXPECT_EQ(State(*router, 0), "ejected");
  EXPECT_EQ(router->NextProbeAt(), clock.Now() + seconds(1));  // replica 1's periodic probe
  clock.Advance(seconds(1));
  EXPECT_EQ(router->ProbesDue(clock.Now()), (std::vector<int32_t>{1}));
  router->ReportProbe(1, true);
  clock.Advance(seconds(1));  // the doubled ejection (2 s) has passed
  EXPECT_EQ(router->ProbesDue(clock.Now()), (std::vector<int32_t>{0}));
  router->ReportProbe(0, true);
  EXPECT_EQ(State(*router, 0), "healthy");
}

TEST(RouterProbes, AProbeSentBeforeTheEjectionDecidesNothing) {
  testing::FakeClock clock;
  auto router = Make(Fleet(2), clock);
  ASSERT_EQ(router->ProbesDue(clock.Now()).size(), 2u);
  Fail(*router, 0, 3);
  clock.Advance(seconds(1));
  // The old probe is still out: no trial probe until it reports.
  EXPECT_TRUE(router->ProbesDue(clock.Now()).empty());
  router->ReportProbe(0, true);
  EXPECT_EQ(State(*router, 0), "half-open");
  EXPECT_EQ(router->ProbesDue(clock.Now()), (std::vector<int32_t>{0}));
}

TEST(RouterErrors, AllEjectedIsUpstreamUnavailable) {
  testing::FakeClock clock;
  auto router = Make(Fleet(3), clock);
  for (int32_t r = 0; r < 3; ++r) Fail(*router, r, 3);
  auto s = router->Acquire(Prefix(1));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), util::StatusCode::kUnavailable);
  EXPECT_EQ(s.status().reason(), util::ErrorReason::kUpstreamUnavailable);
  EXPECT_NE(s.status().message().find("all 3 replicas of backend 'llama' are ejected"),
            std::string::npos)
      << s.status().message();

  auto one = Make(Fleet(1), clock);
  Fail(*one, 0, 3);
  EXPECT_NE(one->Acquire({}).status().message().find("the only replica of backend 'llama'"),
            std::string::npos);
}

TEST(RouterErrors, AllAtTheirLimitIsUpstreamBusy) {
  testing::FakeClock clock;
  RouterOptions o = Fleet(3);
  o.max_concurrency_per_replica = 2;
  auto router = Make(o, clock);
  std::vector<int> count(3);
  for (int i = 0; i < 6; ++i) {
    auto r = router->Acquire(Prefix(7));  // one hot key: the limit spreads it
    ASSERT_TRUE(r.ok()) << i << ": " << r.status().ToString();
    ++count[*r];
  }
  EXPECT_EQ(count, (std::vector<int>{2, 2, 2}));
  auto s = router->Acquire(Prefix(8));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), util::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.status().reason(), util::ErrorReason::kUpstreamBusy);
  EXPECT_NE(s.status().message().find(
                "all 3 healthy replicas of backend 'llama' are at their concurrency limit (2)"),
            std::string::npos)
      << s.status().message();
  router->Release(1, Outcome::kSuccess);
  EXPECT_EQ(*router->Acquire(Prefix(8)), 1);

  // Ejected replicas do not make it "unavailable" while a healthy one is busy.
  router->Release(2, Outcome::kFailure);
  router->Release(2, Outcome::kFailure);
  router->Release(AcquireOn(*router, 2), Outcome::kFailure);
  ASSERT_EQ(State(*router, 2), "ejected");
  auto busy = router->Acquire({});
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.status().reason(), util::ErrorReason::kUpstreamBusy);
  EXPECT_NE(busy.status().message().find("1 more ejected"), std::string::npos)
      << busy.status().message();
}

TEST(RouterExclude, ARetryPrefersAnotherReplicaAndReusesOneOnlyWhenNothingElseIsLeft) {
  testing::FakeClock clock;
  auto router = Make(Fleet(3), clock);
  const RouteKey key = Prefix(3);
  const int32_t home = Home(*router, key);
  auto retry = router->Acquire(key, std::vector<int32_t>{home});
  ASSERT_TRUE(retry.ok());
  EXPECT_NE(*retry, home);
  router->Release(*retry, Outcome::kSuccess);
  // Every replica tried: one of them is used again.
  auto again = router->Acquire(key, std::vector<int32_t>{0, 1, 2, 99, -1});
  ASSERT_TRUE(again.ok());
  router->Release(*again, Outcome::kSuccess);

  // The only healthy replica was tried: it is reused rather than refused.
  auto pair = Make(Fleet(2), clock);
  Fail(*pair, 0, 3);
  auto reuse = pair->Acquire(key, std::vector<int32_t>{1});
  ASSERT_TRUE(reuse.ok());
  EXPECT_EQ(*reuse, 1);

  for (RoutePolicy p : {RoutePolicy::kRoundRobin, RoutePolicy::kLeastOutstanding}) {
    auto other = Make(Fleet(3, p), clock);
    for (int i = 0; i < 9; ++i) {
      auto r = other->Acquire({}, std::vector<int32_t>{i % 3});
      ASSERT_TRUE(r.ok());
      EXPECT_NE(*r, i % 3) << RoutePolicyName(p);
      other->Release(*r, Outcome::kSuccess);
    }
  }
}

TEST(RouterRoundRobin, CyclesThroughEligibleReplicas) {
  testing::FakeClock clock;
  auto router = Make(Fleet(3, RoutePolicy::kRoundRobin), clock);
  std::vector<int32_t> order;
  for (int i = 0; i < 6; ++i) {
    const int32_t r = *router->Acquire(Prefix(1));  // keys do not matter here
    order.push_back(r);
    router->Release(r, Outcome::kSuccess);
  }
  EXPECT_EQ(order, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  // Replica 1 fails three times in a row (the rotation reaches it every third
  // request, and success on the others does not reset its count).
  for (int i = 0; i < 9; ++i) {
    const int32_t r = *router->Acquire({});
    router->Release(r, r == 1 ? Outcome::kFailure : Outcome::kSuccess);
  }
  ASSERT_EQ(State(*router, 1), "ejected");
  order.clear();
  for (int i = 0; i < 4; ++i) {
    const int32_t r = *router->Acquire({});
    order.push_back(r);
    router->Release(r, Outcome::kSuccess);
  }
  EXPECT_EQ(order, (std::vector<int32_t>{0, 2, 0, 2}));
}

TEST(RouterLeastLoaded, PicksTheReplicaWithTheFewestOutstanding) {
  testing::FakeClock clock;
  auto router = Make(Fleet(3, RoutePolicy::kLeastOutstanding), clock);
  // Loads 3, 1, 2.
  for (int i = 0; i < 3; ++i) AcquireOn(*router, 0);
  AcquireOn(*router, 1);
  for (int i = 0; i < 2; ++i) AcquireOn(*router, 2);
  EXPECT_EQ(*router->Acquire(Prefix(5)), 1);  // now 3, 2, 2: a tie
  const int32_t tie_a = *router->Acquire({});
  const int32_t tie_b = *router->Acquire({});
  EXPECT_EQ(std::set<int32_t>({tie_a, tie_b}), (std::set<int32_t>{1, 2}));  // rotation splits it
  router->Release(0, Outcome::kSuccess);
  router->Release(0, Outcome::kSuccess);
  EXPECT_EQ(*router->Acquire({}), 0);  // 1, 3, 3
}

TEST(RouterBackoff, FullJitterWithinTheCappedExponentialAndDeterministic) {
  testing::FakeClock clock;
  auto router = Make(Fleet(1), clock, 11);
  auto same = Make(Fleet(1), clock, 11);
  auto other = Make(Fleet(1), clock, 12);
  bool differs = false;
  for (int32_t attempt = 1; attempt <= 10; ++attempt) {
    const auto cap = std::min<std::chrono::nanoseconds>(milliseconds(2000),
                                                        milliseconds(50) * (1 << (attempt - 1)));
    std::chrono::nanoseconds max_seen{0};
    double sum = 0;
    constexpr int kDraws = 2000;
    for (int i = 0; i < kDraws; ++i) {
      const auto d = router->Backoff(attempt);
      ASSERT_GE(d.count(), 0);
      ASSERT_LE(d, cap) << "attempt " << attempt;
      EXPECT_EQ(same->Backoff(attempt), d);
      differs |= other->Backoff(attempt) != d;
      max_seen = std::max(max_seen, d);
      sum += static_cast<double>(d.count());
    }
    // Uniform over [0, cap]: the largest of 2000 draws is near the cap and
    // the mean near its half (standard error 0.65% of the cap).
    EXPECT_GT(max_seen, cap * 0.99) << "attempt " << attempt;
    EXPECT_NEAR(sum / kDraws / static_cast<double>(cap.count()), 0.5, 0.03);
  }
  EXPECT_TRUE(differs);
  for (int32_t attempt : {0, -3}) EXPECT_LE(router->Backoff(attempt), milliseconds(50));
  for (int32_t attempt : {11, 64, 1000, INT_MAX}) EXPECT_LE(router->Backoff(attempt), seconds(2));
}

TEST(RouterStats, CountRequestsFailuresAndOutstanding) {
  testing::FakeClock clock;
  auto router = Make(Fleet(2), clock);
  const int32_t held = AcquireOn(*router, 1);
  router->Release(AcquireOn(*router, 1), Outcome::kFailure);
  router->Release(AcquireOn(*router, 1), Outcome::kNeutral);
  const auto stats = router->Stats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[1].url, "http://10.0.0.2:8000");
  EXPECT_EQ(stats[1].state, "healthy");
  EXPECT_EQ(stats[1].outstanding, 1);
  EXPECT_EQ(stats[1].requests, 3u);
  EXPECT_EQ(stats[1].failures, 1u);
  EXPECT_EQ(stats[1].ejections, 0u);
  EXPECT_EQ(stats[0].requests, 0u);
  router->Release(held, Outcome::kSuccess);
  EXPECT_EQ(router->Stats()[1].outstanding, 0);
}

TEST(RouterOptions, CreateRefusesEachOptionOutOfRangeNamingIt) {
  testing::FakeClock clock;
  struct Case {
    std::function<void(RouterOptions&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](RouterOptions& o) { o.replicas.clear(); }, "replicas is empty"},
      {[](RouterOptions& o) { o.replicas = Urls(1025); }, "replicas has 1025 URLs, at most 1024"},
      {[](RouterOptions& o) { o.replicas[1] = ""; }, "replicas[1] is an empty URL"},
      {[](RouterOptions& o) { o.replicas[2] = o.replicas[0]; },
       "replicas[2] 'http://10.0.0.1:8000' is listed twice"},
      {[](RouterOptions& o) { o.load_bound = 0.99; }, "load_bound 0.99 is outside [1, 100]"},
      {[](RouterOptions& o) { o.load_bound = 101; }, "load_bound"},
      {[](RouterOptions& o) { o.load_bound = std::nan(""); }, "load_bound"},
      {[](RouterOptions& o) { o.affinity_floor = 0; }, "affinity_floor 0 is outside"},
      {[](RouterOptions& o) { o.affinity_floor = (1 << 20) + 1; }, "affinity_floor"},
      {[](RouterOptions& o) { o.vnodes_per_replica = 0; }, "vnodes_per_replica 0"},
      {[](RouterOptions& o) { o.vnodes_per_replica = 1025; }, "vnodes_per_replica 1025"},
      {[](RouterOptions& o) { o.max_concurrency_per_replica = -1; },
       "max_concurrency_per_replica -1"},
      {[](RouterOptions& o) { o.eject_after_failures = 0; }, "eject_after_failures 0"},
      {[](RouterOptions& o) { o.eject_base = milliseconds(0); }, "eject_base 0 ms"},
      {[](RouterOptions& o) { o.eject_max = milliseconds(999); },
       "eject_max 999 ms is outside [eject_base (1000 ms), 1 h]"},
      {[](RouterOptions& o) { o.probe_interval = milliseconds(-1); }, "probe_interval -1 ms"},
      {[](RouterOptions& o) { o.backoff_base = std::chrono::hours(2); }, "backoff_base"},
      {[](RouterOptions& o) { o.backoff_max = milliseconds(10); }, "backoff_max 10 ms"},
  };
  for (const Case& c : cases) {
    RouterOptions o = Fleet(3);
    c.change(o);
    auto r = Router::Create(o, clock, util::Rng(1));
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_EQ(r.status().code(), util::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << r.status().message() << " lacks " << c.message;
  }
  RouterOptions edges = Fleet(1024);
  edges.load_bound = 1;
  edges.vnodes_per_replica = 1;
  edges.probe_interval = milliseconds(0);
  edges.eject_max = edges.eject_base;
  EXPECT_TRUE(Router::Create(edges, clock, util::Rng(1)).ok());
}

TEST(RouterOptions, NoPeriodicProbesWhenTheIntervalIsZero) {
  testing::FakeClock clock;
  RouterOptions o = Fleet(2);
  o.probe_interval = milliseconds(0);
  auto router = Make(o, clock);
  EXPECT_TRUE(router->ProbesDue(clock.Now()).empty());
  EXPECT_EQ(router->NextProbeAt(), Router::TimePoint::max());
  Fail(*router, 0, 3);
  clock.Advance(seconds(1));
  EXPECT_EQ(router->ProbesDue(clock.Now()), (std::vector<int32_t>{0}));  // the trial still is
}

TEST(RouterConcurrency, ManyThreadsAcquireAndReleaseAndOutstandingReturnsToZero) {
  testing::FakeClock clock;
  RouterOptions o = Fleet(5);
  o.max_concurrency_per_replica = 6;
  auto router = Make(o, clock);
  constexpr int kThreads = 6;
  constexpr int kOps = 3000;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> served{0};
  std::atomic<int64_t> odd_errors{0};
  std::thread health([&] {
    while (!stop.load()) {
      clock.Advance(milliseconds(50));
      for (int32_t r : router->ProbesDue(clock.Now())) router->ReportProbe(r, r % 2 == 0);
      (void)router->Stats();
      (void)router->NextProbeAt();
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      util::Rng rng(100 + t);
      std::vector<int32_t> held;
      for (int i = 0; i < kOps; ++i) {
        const RouteKey key{.session = rng.Below(4) == 0 ? rng.Below(50) + 1 : 0,
                           .prefix = rng.Below(200)};
        auto r = router->Acquire(key, held);
        if (r.ok()) {
          held.push_back(*r);
          served.fetch_add(1);
        } else if (r.status().reason() != util::ErrorReason::kUpstreamUnavailable &&
                   r.status().reason() != util::ErrorReason::kUpstreamBusy) {
          odd_errors.fetch_add(1);
        }
        if (held.size() > 2 || (!held.empty() && rng.Below(2) == 0)) {
          const uint64_t draw = rng.Below(20);
          router->Release(held.back(), draw < 17   ? Outcome::kSuccess
                                       : draw < 18 ? Outcome::kFailure
                                                   : Outcome::kNeutral);
          held.pop_back();
        }
        if (i % 100 == 0) (void)router->Backoff(static_cast<int32_t>(rng.Below(8)) + 1);
      }
      for (int32_t r : held) router->Release(r, Outcome::kSuccess);
    });
  }
  for (auto& w : workers) w.join();
  stop.store(true);
  health.join();
  // How many got through depends on the interleaving (breakers open and
  // close as it goes); that some did, and every refusal said why, does not.
  EXPECT_GT(served.load(), 0);
  EXPECT_EQ(odd_errors.load(), 0);
  uint64_t requests = 0;
  for (const auto& s : router->Stats()) {
    EXPECT_EQ(s.outstanding, 0) << s.url;
    requests += s.requests;
  }
  EXPECT_EQ(requests, static_cast<uint64_t>(served.load()));
}

TEST(RouterReconfigure, NewOptionsHoldFromThenOnAndTheRingStays) {
  testing::FakeClock clock;
  auto router = Make(Fleet(3), clock);
  const int32_t home = Home(*router, Prefix(1));
  RouterOptions o = router->options();
  o.policy = RoutePolicy::kRoundRobin;
  o.max_concurrency_per_replica = 1;
  o.eject_after_failures = 1;
  ASSERT_TRUE(router->Reconfigure(o).ok());
  EXPECT_EQ(router->options().policy, RoutePolicy::kRoundRobin);
  // One failure now ejects.
  Fail(*router, home, 1);
  EXPECT_EQ(State(*router, home), "ejected");
  // One outstanding request fills a replica.
  for (int i = 0; i < 2; ++i) ASSERT_TRUE(router->Acquire({}).ok());
  auto busy = router->Acquire({});
  EXPECT_FALSE(busy.ok());
  // Back to affinity: the prefix finds its old home once it is readmitted.
  o.policy = RoutePolicy::kAffinity;
  ASSERT_TRUE(router->Reconfigure(o).ok());
}

TEST(RouterReconfigure, TheReplicasAndOutOfRangeValuesAreRefused) {
  testing::FakeClock clock;
  auto router = Make(Fleet(3), clock);
  RouterOptions o = router->options();
  o.replicas.pop_back();
  EXPECT_FALSE(router->Reconfigure(o).ok());
  o = router->options();
  o.load_bound = 0.5;
  EXPECT_FALSE(router->Reconfigure(o).ok());
  EXPECT_DOUBLE_EQ(router->options().load_bound, Fleet(3).load_bound);
  EXPECT_EQ(router->size(), 3);
}

}  // namespace
}  // namespace strata::backend
