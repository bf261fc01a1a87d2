#include "gateway/rt_switcher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>

#include "util/random.h"

namespace strata::gateway {

using sampling::SamplingParams;
using sampling::SamplingTier;
namespace {

using std::chrono::milliseconds;
using std::chrono::nanoseconds;
using std::chrono::seconds;
using TimePoint = std::chrono::steady_clock::time_point;

const TimePoint kStart = TimePoint(seconds(1000));

// Small windows so the switch points can be derived by hand.
RtSwitcherOptions TestOptions() {
  RtSwitcherOptions o;
  o.interval = seconds(1);
  o.min_interval_samples = 5;
  o.window_intervals = 20;
  o.min_window_intervals = 10;
  o.threshold_sigmas = 1.5;
  o.calm_fraction = 0.7;
  o.breach_intervals = 3;
  o.calm_intervals = 5;
  o.min_dwell = seconds(10);
  return o;
}

struct Switch {
  double t_s;  // seconds after kStart
  int32_t from, to;
  bool operator==(const Switch&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Switch& s) {
  return os << "{" << s.t_s << " s: " << s.from << " -> " << s.to << "}";
}

// Replays a TPOT series: interval k (seconds [k, k+1) after kStart) gets
// `per_interval` samples of tpot_ms[k] milliseconds (so its P95 is exactly
// that), then a final Tick closes the last interval. Returns the switches.
std::vector<Switch> Replay(RtSwitcher& sw, const std::vector<double>& tpot_ms,
                           int per_interval = 10, std::vector<Decision>* all = nullptr) {
  std::vector<Switch> out;
  auto take = [&](const std::vector<Decision>& ds) {
    for (const Decision& d : ds) {
      if (all) all->push_back(d);
      if (d.action != SwitchAction::kHold) {
        out.push_back({std::chrono::duration<double>(d.interval_end - kStart).count(), d.from_level,
                       d.to_level});
      }
    }
  };
  for (size_t k = 0; k < tpot_ms.size(); ++k) {
    for (int j = 0; j < per_interval; ++j) {
      const TimePoint t = kStart + seconds(k) + milliseconds(1000 * j / per_interval);
      take(sw.Observe(LatencySignal::kTpot,
                      std::chrono::duration_cast<nanoseconds>(
                          std::chrono::duration<double, std::milli>(tpot_ms[k])),
                      t));
    }
  }
  take(sw.Tick(kStart + seconds(tpot_ms.size())));
  return out;
}

// 30 s at 20 ms, 30 s of overload at 60 ms, 30 s back at 20 ms.
std::vector<double> Overload() {
  std::vector<double> v(90, 20.0);
  for (size_t k = 30; k < 60; ++k) v[k] = 60.0;
  return v;
}

TEST(RtSwitcher, StepsDownOnASustainedBreachAndUpOnSustainedCalm) {
  // Interval 30 (closing at 30+1 s) breaches: window of twenty 20 ms P95s,
  // threshold 20 ms. Interval 31: window 19 x 20 + 60, mean 22, sigma 8.72,
  // threshold 35.1 ms: breach. Interval 32: mean 24, sigma 12, threshold 42:
  // third breach -> step down at 33 s. Intervals 33-36 breach again
  // (thresholds 47.4, 52, 56.0, 59.5) but the dwell holds until 43 s, and by
  // interval 37 the window has absorbed the overload (threshold 62.6 > 60):
  // neutral, no second step. Back at 20 ms, interval 60 sees threshold 60
  // (window all 60), so calm (< 42); five calm intervals -> step up at 65 s.
  auto sw = *RtSwitcher::Create(TestOptions(), kStart);
  std::vector<Decision> all;
  const std::vector<Switch> got = Replay(*sw, Overload(), 10, &all);
  EXPECT_EQ(got, (std::vector<Switch>{{33, 0, 1}, {65, 1, 0}}));
  ASSERT_EQ(all.size(), 90u);
  EXPECT_TRUE(all[35].dwell_blocked);  // interval 35: three breaches, but 36 - 33 < 10 s
  EXPECT_NEAR(all[31].tpot.threshold_s, 0.022 + 1.5 * std::sqrt(76e-6), 1e-9);
  EXPECT_FALSE(all[37].breach);
  EXPECT_EQ(sw->level(), 0);
}

TEST(RtSwitcher, ACeilingKeepsSteppingDownWhileLatencyStaysAboveIt) {
  // With a 50 ms TPOT ceiling the overload breaches every interval: steps down
  // at 33 s and, after the 10 s dwell, at 43 s. Recovery: calm from interval 60,
  // step up at 65 s; calm continues but the dwell holds the next step to 75 s.
  RtSwitcherOptions o = TestOptions();
  o.tpot.ceiling_s = 0.050;
  auto sw = *RtSwitcher::Create(o, kStart);
  EXPECT_EQ(Replay(*sw, Overload()),
            (std::vector<Switch>{{33, 0, 1}, {43, 1, 2}, {65, 2, 1}, {75, 1, 0}}));
}

TEST(RtSwitcher, OscillationNearTheThresholdNeverSwitchesFasterThanTheDwell) {
  // Bursts of random length above and below the threshold, for an hour.
  RtSwitcherOptions o = TestOptions();
  o.breach_intervals = 1;
  o.calm_intervals = 1;
  o.tpot.ceiling_s = 0.030;
  util::Rng rng(4);
  std::vector<double> v;
  while (v.size() < 3600) {
    const double level_ms = rng.Below(2) ? 35.0 : 15.0;  // above the ceiling / below 0.7 x it
    for (uint64_t n = 1 + rng.Below(4); n > 0; --n) v.push_back(level_ms + rng.Normal());
  }
  auto sw = *RtSwitcher::Create(o, kStart);
  const std::vector<Switch> got = Replay(*sw, v);
  ASSERT_GT(got.size(), 20u);  // it does react
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_GE(got[i].t_s - got[i - 1].t_s, 10.0) << got[i - 1] << " then " << got[i];
  }
  EXPECT_LE(got.size(), 3600u / 10 + 1);
}

TEST(RtSwitcher, SteadyRightSkewedLatencyDoesNotSwitch) {
  // Exponentially distributed TPOT (P95 = 3 x mean, well above mean + 1.5
  // sigma of the raw samples): per-interval P95s vary little, so no breach is
  // sustained for the default five intervals.
  RtSwitcherOptions o = TestOptions();
  o.window_intervals = 60;
  o.breach_intervals = 5;
  auto sw = *RtSwitcher::Create(o, kStart);
  util::Rng rng(8);
  int switches = 0;
  for (int k = 0; k < 1800; ++k) {
    for (int j = 0; j < 50; ++j) {
      const double ms = -20.0 * std::log(1.0 - rng.Uniform());
      for (const Decision& d :
           sw->Observe(LatencySignal::kTpot, nanoseconds(static_cast<int64_t>(ms * 1e6)),
                       kStart + seconds(k) + milliseconds(20 * j))) {
        switches += d.action != SwitchAction::kHold;
      }
    }
  }
  EXPECT_EQ(switches, 0);
}

TEST(RtSwitcher, IdleIntervalsCountAsCalm) {
  // Overload until 33 s (step down), then no traffic at all: idle intervals
  // are calm, and the dwell decides the step up: 43 s.
  auto sw = *RtSwitcher::Create(TestOptions(), kStart);
  std::vector<double> v(33, 20.0);
  for (size_t k = 30; k < 33; ++k) v[k] = 60.0;
  EXPECT_EQ(Replay(*sw, v), (std::vector<Switch>{{33, 0, 1}}));
  std::vector<Switch> later;
  for (int s = 34; s <= 50; ++s) {
    for (const Decision& d : sw->Tick(kStart + seconds(s))) {
      EXPECT_TRUE(d.tpot.idle && d.ttft.idle);
      if (d.action != SwitchAction::kHold)
        later.push_back({static_cast<double>(s), d.from_level, d.to_level});
    }
  }
  EXPECT_EQ(later, (std::vector<Switch>{{43, 1, 0}}));
}

TEST(RtSwitcher, InFlightRequestsKeepThePolicyTheyStartedWith) {
  auto sw = *RtSwitcher::Create(TestOptions(), kStart);
  const std::shared_ptr<const Policy> before = sw->current();
  std::vector<double> v(33, 20.0);
  for (size_t k = 30; k < 33; ++k) v[k] = 60.0;
  Replay(*sw, v);
  const std::shared_ptr<const Policy> after = sw->current();
  EXPECT_EQ(before->level, 0);
  EXPECT_EQ(before->trace_sample_rate, 1.0);
  EXPECT_EQ(before->sampling_tier, SamplingTier::kEntropyTargeted);
  EXPECT_EQ(after->level, 1);
  EXPECT_EQ(after->trace_sample_rate, 0.5);
  EXPECT_EQ(after->sampling_tier, SamplingTier::kTopK);
  EXPECT_EQ(after->max_tokens_cap, 1024);
}

TEST(RtSwitcher, EveryDecisionCarriesItsReason) {
  auto sw = *RtSwitcher::Create(TestOptions(), kStart);
  std::vector<Decision> all;
  Replay(*sw, Overload(), 10, &all);
  const Decision& down = all[32];
  ASSERT_EQ(down.action, SwitchAction::kStepDown);
  EXPECT_EQ(down.breach_streak, 3);
  EXPECT_NEAR(down.tpot.p95_s, 0.060, 1e-12);
  EXPECT_NEAR(down.tpot.threshold_s, 0.042, 1e-9);
  EXPECT_EQ(down.tpot.n_window, 20);
  const std::string r = down.Reason();
  EXPECT_NE(r.find("step down 0 -> 1"), std::string::npos) << r;
  EXPECT_NE(r.find("breach for 3 intervals"), std::string::npos) << r;
  EXPECT_NE(r.find("tpot p95 0.0600 s > threshold 0.0420 s"), std::string::npos) << r;
  EXPECT_NE(r.find("window mean 0.0240 s + 1.5 sigma 0.0120 s over 20 intervals"),
            std::string::npos)
      << r;
  EXPECT_NE(r.find("ttft idle"), std::string::npos) << r;
}

TEST(RtSwitcher, AHeldStepUpWaitsUntilReleased) {
  // The overload series steps down at 33 s and, back at 20 ms, would step up
  // at 65 s (five calm intervals from 60). Held from the start of the calm,
  // it stays down; released just before interval 69 closes (at 70 s), the
  // calm streak already suffices: up at that evaluation.
  auto sw = *RtSwitcher::Create(TestOptions(), kStart);
  const std::vector<double> v = Overload();
  std::vector<Switch> got;
  std::vector<Decision> held;
  for (size_t k = 0; k < v.size(); ++k) {
    if (k == 60) sw->HoldStepUp("the level above served 10/s; demand is 16/s");
    if (k == 70) sw->HoldStepUp("");
    for (int j = 0; j < 10; ++j) {
      const TimePoint t = kStart + seconds(k) + milliseconds(100 * j);
      for (const Decision& d : sw->Observe(LatencySignal::kTpot,
                                           std::chrono::duration_cast<nanoseconds>(
                                               std::chrono::duration<double, std::milli>(v[k])),
                                           t)) {
        if (!d.step_up_held.empty()) held.push_back(d);
        if (d.action != SwitchAction::kHold) {
          got.push_back({std::chrono::duration<double>(d.interval_end - kStart).count(),
                         d.from_level, d.to_level});
        }
      }
    }
  }
  EXPECT_EQ(got, (std::vector<Switch>{{33, 0, 1}, {70, 1, 0}}));
  ASSERT_EQ(held.size(), 5u);  // intervals 64-68, closing at 65-69 s
  EXPECT_NE(held[0].Reason().find("calm for 5 intervals (step up held: the level above served "
                                  "10/s; demand is 16/s)"),
            std::string::npos)
      << held[0].Reason();
}

TEST(RtSwitcher, UsesTheNearestRankP95AndNeedsEnoughSamples) {
  RtSwitcherOptions o = TestOptions();
  auto sw = *RtSwitcher::Create(o, kStart);
  for (int i = 1; i <= 20; ++i) {
    sw->Observe(LatencySignal::kTtft, milliseconds(i), kStart + milliseconds(10 * i));
  }
  for (int i = 1; i <= 4; ++i) sw->Observe(LatencySignal::kTpot, milliseconds(i), kStart);
  const std::vector<Decision> d = sw->Tick(kStart + seconds(1));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_TRUE(d[0].ttft.p95_known);
  EXPECT_NEAR(d[0].ttft.p95_s, 0.019, 1e-12);  // 19th of 20
  EXPECT_FALSE(d[0].tpot.p95_known);           // 4 < min_interval_samples
  EXPECT_FALSE(d[0].tpot.idle);
  // A late call closes every elapsed interval, one decision each.
  EXPECT_EQ(sw->Tick(kStart + seconds(6)).size(), 5u);
  EXPECT_TRUE(sw->Tick(kStart + seconds(6)).empty());
  // A sample stamped before the open interval goes into it.
  EXPECT_TRUE(sw->Observe(LatencySignal::kTpot, milliseconds(1), kStart).empty());
}

TEST(RtSwitcher, InvalidOptionsNameTheField) {
  RtSwitcherOptions o = TestOptions();
  o.min_window_intervals = 30;
  EXPECT_NE(RtSwitcher::Create(o, kStart).status().message().find("min_window_intervals"),
            std::string::npos);
  o = TestOptions();
  o.levels[1].level = 5;
  EXPECT_NE(RtSwitcher::Create(o, kStart).status().message().find("levels[1].level"),
            std::string::npos);
  o = TestOptions();
  o.calm_fraction = 1.0;
  EXPECT_NE(RtSwitcher::Create(o, kStart).status().message().find("calm_fraction"),
            std::string::npos);
  o = TestOptions();
  o.ttft.ceiling_s = 0.1;
  o.ttft.floor_s = 0.2;
  EXPECT_NE(RtSwitcher::Create(o, kStart).status().message().find("ttft.ceiling_s"),
            std::string::npos);
  o = TestOptions();
  o.interval = nanoseconds(0);
  EXPECT_FALSE(RtSwitcher::Create(o, kStart).ok());
  EXPECT_TRUE(RtSwitcher::Create(TestOptions(), kStart).ok());
}

TEST(RtSwitcher, LevelsRoundTripThroughTheirTextForm) {
  const std::string text = FormatLevels(DefaultLevels());
  EXPECT_EQ(text, "1:entropy:0:0:0,0.5:topk:32:1024:1,0.1:topk:8:256:0.5");
  auto parsed = ParseLevels(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->size(), 3u);
  const std::vector<Policy> defaults = DefaultLevels();
  for (size_t i = 0; i < 3; ++i) {
    const Policy& a = (*parsed)[i];
    const Policy& b = defaults[i];
    EXPECT_EQ(a.level, static_cast<int32_t>(i));
    EXPECT_EQ(a.trace_sample_rate, b.trace_sample_rate);
    EXPECT_EQ(a.sampling_tier, b.sampling_tier);
    EXPECT_EQ(a.max_batch_size, b.max_batch_size);
    EXPECT_EQ(a.max_tokens_cap, b.max_tokens_cap);
    EXPECT_EQ(a.max_queue_wait_s, b.max_queue_wait_s);
  }
  // The queue wait may be left out (no limit).
  auto four = ParseLevels("1:entropy:0:0,0.5:topk:32:1024");
  ASSERT_TRUE(four.ok()) << four.status().ToString();
  EXPECT_EQ((*four)[1].max_queue_wait_s, 0.0);
  // A sixth field marks a level that sends requests to the fallback model.
  auto six = ParseLevels("1:entropy:0:0:0,0.1:topk:8:256:0.5:1");
  ASSERT_TRUE(six.ok()) << six.status().ToString();
  EXPECT_FALSE((*six)[0].use_fallback);
  EXPECT_TRUE((*six)[1].use_fallback);
  EXPECT_EQ(FormatLevels(*six), "1:entropy:0:0:0,0.1:topk:8:256:0.5:1");
  RtSwitcherOptions o = TestOptions();
  o.levels = *parsed;
  EXPECT_TRUE(RtSwitcher::Create(o, kStart).ok());
}

TEST(RtSwitcher, BadLevelTextNamesTheItemAndField) {
  auto why = [](std::string_view spec) { return ParseLevels(spec).status().message(); };
  EXPECT_NE(why("").find("item 0"), std::string::npos);
  EXPECT_NE(why("1:entropy:0:0,0.5:fast:1:1").find("item 1 '0.5:fast:1:1': tier 'fast'"),
            std::string::npos);
  EXPECT_NE(why("1.5:entropy:0:0").find("trace rate '1.5'"), std::string::npos);
  EXPECT_NE(why("1:entropy:-1:0").find("max batch '-1'"), std::string::npos);
  EXPECT_NE(why("1:entropy:0:x").find("max_tokens cap 'x'"), std::string::npos);
  EXPECT_NE(why("1:entropy:0").find("expected TRACE_RATE:TIER"), std::string::npos);
  EXPECT_NE(why("1:entropy:0:0:-1").find("max queue wait '-1'"), std::string::npos);
  EXPECT_NE(why("1:entropy:0:0:0:2").find("fallback '2'"), std::string::npos);
}

TEST(RtSwitcher, RefusalsAreABreachWhateverTheLatency) {
  // Latency stays at 20 ms (no threshold could be breached), but from interval
  // 30 on the server refuses requests: three breaching intervals step down at
  // 33 s, the next after the dwell at 43 s. No interval with refusals is calm,
  // so nothing steps back up while they continue.
  auto sw = *RtSwitcher::Create(TestOptions(), kStart);
  std::vector<Switch> got;
  std::vector<Decision> all;
  for (int k = 0; k < 90; ++k) {
    for (int j = 0; j < 10; ++j) {
      const TimePoint t = kStart + seconds(k) + milliseconds(100 * j);
      for (const Decision& d : sw->Observe(LatencySignal::kTpot, milliseconds(20), t)) {
        all.push_back(d);
        if (d.action != SwitchAction::kHold) {
          got.push_back({std::chrono::duration<double>(d.interval_end - kStart).count(),
                         d.from_level, d.to_level});
        }
      }
      if (k >= 30) sw->ObserveRefusals(2, t);
    }
  }
  EXPECT_EQ(got, (std::vector<Switch>{{33, 0, 1}, {43, 1, 2}}));
  ASSERT_GE(all.size(), 40u);
  EXPECT_EQ(all[31].n_refused, 20);
  EXPECT_TRUE(all[31].breach);
  EXPECT_FALSE(all[31].tpot.breach) << "the latency itself is fine";
  EXPECT_NE(all[32].Reason().find("(20 requests refused for load)"), std::string::npos)
      << all[32].Reason();
}

TEST(RtSwitcher, AnIdleIntervalWithRefusalsIsNotCalm) {
  RtSwitcherOptions o = TestOptions();
  o.breach_intervals = 1;
  o.min_dwell = seconds(0);
  auto sw = *RtSwitcher::Create(o, kStart);
  sw->ObserveRefusals(1, kStart + milliseconds(500));
  const std::vector<Decision> ds = sw->Tick(kStart + seconds(1));
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_TRUE(ds[0].ttft.idle && ds[0].tpot.idle);
  EXPECT_TRUE(ds[0].breach);
  EXPECT_FALSE(ds[0].calm);
  EXPECT_EQ(ds[0].action, SwitchAction::kStepDown);
}

TEST(RtSwitcher, ReconfigureKeepsTheLevelAndTakesTheNewLevels) {
  auto sw = *RtSwitcher::Create(TestOptions(), kStart);
  const std::vector<double> overload = Overload();
  Replay(*sw, std::vector<double>(overload.begin(), overload.begin() + 40), 10, nullptr);
  ASSERT_EQ(sw->level(), 1);
  RtSwitcherOptions o = TestOptions();
  o.levels = *ParseLevels("1:entropy:0:0,0.5:topk:4:77");
  ASSERT_TRUE(sw->Reconfigure(o).ok());
  EXPECT_EQ(sw->level(), 1);
  EXPECT_EQ(sw->current()->max_tokens_cap, 77);
  // Fewer levels: the level comes down to the last one.
  o.levels = *ParseLevels("1:entropy:0:5");
  ASSERT_TRUE(sw->Reconfigure(o).ok());
  EXPECT_EQ(sw->level(), 0);
  EXPECT_EQ(sw->current()->max_tokens_cap, 5);
  RtSwitcherOptions bad = o;
  bad.window_intervals = 1;
  EXPECT_FALSE(sw->Reconfigure(bad).ok());
  EXPECT_EQ(sw->options().window_intervals, o.window_intervals);
}

}  // namespace
}  // namespace strata::gateway
