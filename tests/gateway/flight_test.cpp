// A flight holds its backend's run only while a choice is still running: a
// run may hold the flight back (a remote run holds its sink, the sink its
// flight), so a finished run kept by the flight would keep both alive.
#include "gateway/internal/flight.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace strata::gateway {
namespace {

// A run that, like a remote backend's, holds the flight it reports into.
class HoldingRun final : public backend::Run {
 public:
  explicit HoldingRun(std::shared_ptr<Flight> flight) : flight_(std::move(flight)) {}
  void Cancel() override { ++cancels; }
  std::atomic<int> cancels{0};

 private:
  std::shared_ptr<Flight> flight_;
};

Event Finish(int32_t index) {
  Event e;
  e.kind = Event::Kind::kFinish;
  e.index = index;
  e.finish = FinishReason::kLength;
  return e;
}

std::shared_ptr<Flight> NewFlight(int32_t n_choices) {
  return std::make_shared<Flight>(n_choices, std::nullopt, std::chrono::steady_clock::now(),
                                  Flight::Hook());
}

TEST(Flight, DropsItsRunOnceEveryChoiceFinished) {
  auto flight = NewFlight(2);
  auto run = std::make_shared<HoldingRun>(flight);
  std::weak_ptr<HoldingRun> weak_run = run;
  std::weak_ptr<Flight> weak_flight = flight;
  flight->SetRun(run);
  run.reset();
  flight->Push(Finish(0));
  EXPECT_FALSE(weak_run.expired()) << "one choice still runs: the flight must keep its run";
  flight->Push(Finish(1));
  EXPECT_TRUE(weak_run.expired()) << "a finished flight must not keep its run";
  flight.reset();
  EXPECT_TRUE(weak_flight.expired());
}

TEST(Flight, KeepsNoRunThatFinishedBeforeSetRun) {
  auto flight = NewFlight(1);
  auto run = std::make_shared<HoldingRun>(flight);
  std::weak_ptr<HoldingRun> weak_run = run;
  flight->Push(Finish(0));  // the run failed inside Start
  flight->SetRun(run);
  run.reset();
  EXPECT_TRUE(weak_run.expired());
}

TEST(Flight, CancelStillReachesARunningRun) {
  auto flight = NewFlight(1);
  auto run = std::make_shared<HoldingRun>(flight);
  flight->CancelRun();  // before SetRun: handed over with it
  flight->SetRun(run);
  EXPECT_EQ(run->cancels.load(), 1);
  flight->CancelRun();
  EXPECT_EQ(run->cancels.load(), 2);
  flight->Push(Finish(0));
  flight->CancelRun();  // finished: nothing left to cancel
  EXPECT_EQ(run->cancels.load(), 2);
}

Event Delta(int32_t index, std::string text) {
  Event e;
  e.index = index;
  e.text = std::move(text);
  return e;
}

std::string Show(const Event& e) {
  return std::to_string(e.index) + (e.kind == Event::Kind::kFinish ? "F" : ":" + e.text);
}

// What a flight did: its hook's calls and what a reader read, in order.
struct Seen {
  std::string hook;
  std::string read;
};

// Pushes `events` into a fresh flight (shared or not) in the batches
// `cuts` makes: with PushAll, or (`one_by_one`) with Push of each; after
// each batch a reader reads what is there (unshared: the queue empties).
Seen Replay(const std::vector<Event>& events, bool shared, int32_t n,
            const std::vector<size_t>& cuts, bool one_by_one) {
  Seen seen;
  std::optional<cache::CacheKey> key;
  if (shared) key = cache::CacheKey{"k", 1};
  auto flight =
      std::make_shared<Flight>(n, key, std::chrono::steady_clock::now(),
                               [&seen](const Flight&, bool ok, const std::vector<Event>& log) {
                                 seen.hook += ok ? "ok[" : "not[";
                                 for (const Event& e : log) seen.hook += Show(e) + " ";
                                 seen.hook += "]";
                               });
  size_t cursor = 0;
  size_t from = 0;
  for (size_t to : cuts) {
    std::vector<Event> batch(events.begin() + static_cast<std::ptrdiff_t>(from),
                             events.begin() + static_cast<std::ptrdiff_t>(to));
    from = to;
    if (one_by_one) {
      for (Event& e : batch) flight->Push(std::move(e));
    } else {
      flight->PushAll(std::move(batch));
    }
    std::vector<Event> got;
    if (flight->Read(&cursor, std::chrono::steady_clock::now(), &got)) {
      for (const Event& e : got) seen.read += Show(e) + " ";
    }
  }
  return seen;
}

// PushAll is Push of each event in order: the same readable events, the
// same hook (called once, with the whole flight, when the last choice
// finishes), events of a finished choice and after the end dropped.
TEST(Flight, PushAllIsPushOfEachInOrder) {
  std::mt19937 rng(1206);
  // Not more rounds: each read that finds nothing waits out a past deadline.
  for (int round = 0; round < 1000; ++round) {
    const int32_t n = 1 + static_cast<int32_t>(rng() % 3);
    std::vector<Event> events;
    for (int k = 0, len = static_cast<int>(rng() % 12); k < len; ++k) {
      const int32_t index = static_cast<int32_t>(rng() % n);
      events.push_back(rng() % 4 == 0 ? Finish(index) : Delta(index, std::to_string(k)));
    }
    for (int32_t c = 0; c < n; ++c) {
      if (rng() % 2) events.push_back(Finish(c));
    }
    events.push_back(Delta(0, "late"));
    std::vector<size_t> cuts;
    for (size_t at = 0; at < events.size();) {
      at = std::min(events.size(), at + 1 + rng() % 5);
      cuts.push_back(at);
    }
    for (bool shared : {false, true}) {
      const Seen one = Replay(events, shared, n, cuts, /*one_by_one=*/true);
      const Seen batched = Replay(events, shared, n, cuts, /*one_by_one=*/false);
      ASSERT_EQ(batched.read, one.read) << round;
      ASSERT_EQ(batched.hook, one.hook) << round;
    }
  }
}

// A reader takes what is readable in one go and hands it out event by
// event: in order, then DeadlineExceeded while nothing more is there,
// OutOfRange once every choice finished; a reader with events in hand is
// ready at once.
TEST(Flight, AGenerationHandsOutABatchEventByEvent) {
  for (bool shared : {false, true}) {
    std::optional<cache::CacheKey> key;
    if (shared) key = cache::CacheKey{"k", 1};
    auto flight =
        std::make_shared<Flight>(2, key, std::chrono::steady_clock::now(), Flight::Hook());
    FlightGeneration gen(flight, nullptr, 3, CacheOutcome::kMiss, false);
    const auto now = std::chrono::steady_clock::time_point::min();
    EXPECT_EQ(gen.Next(now).status().code(), util::StatusCode::kDeadlineExceeded);
    std::vector<Event> batch;
    batch.push_back(Delta(0, "a"));
    batch.push_back(Delta(1, "b"));
    batch.push_back(Finish(1));
    flight->PushAll(std::move(batch));
    std::string read;
    auto e = gen.Next(now);
    ASSERT_TRUE(e.ok());
    read += Show(*e) + " ";
    bool ready = false;
    gen.NotifyWhenReady([&] { ready = true; });
    EXPECT_TRUE(ready) << "events in hand: Next answers at once";
    for (int k = 0; k < 2; ++k) {
      e = gen.Next(now);
      ASSERT_TRUE(e.ok());
      read += Show(*e) + " ";
    }
    EXPECT_EQ(gen.Next(now).status().code(), util::StatusCode::kDeadlineExceeded);
    ready = false;
    gen.NotifyWhenReady([&] { ready = true; });
    EXPECT_FALSE(ready);
    flight->Push(Delta(0, "c"));
    EXPECT_TRUE(ready);
    flight->Push(Finish(0));
    for (int k = 0; k < 2; ++k) {
      e = gen.Next(now);
      ASSERT_TRUE(e.ok());
      read += Show(*e) + " ";
    }
    EXPECT_EQ(read, "0:a 1:b 1F 0:c 0F ");
    EXPECT_EQ(gen.Next(now).status().code(), util::StatusCode::kOutOfRange);
  }
}

TEST(Flight, PushAllDropsItsRunWithTheLastFinish) {
  auto flight = NewFlight(2);
  auto run = std::make_shared<HoldingRun>(flight);
  std::weak_ptr<HoldingRun> weak_run = run;
  flight->SetRun(run);
  run.reset();
  std::vector<Event> batch;
  batch.push_back(Delta(0, "a"));
  batch.push_back(Finish(0));
  flight->PushAll(std::move(batch));
  EXPECT_FALSE(weak_run.expired());
  batch.clear();
  batch.push_back(Delta(1, "b"));
  batch.push_back(Finish(1));
  flight->PushAll(std::move(batch));
  EXPECT_TRUE(weak_run.expired());
}

}  // namespace
}  // namespace strata::gateway
