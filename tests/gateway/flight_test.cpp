// A flight holds its backend's run only while a choice is still running: a
// run may hold the flight back (a remote run holds its sink, the sink its
// flight), so a finished run kept by the flight would keep both alive.
#include "gateway/internal/flight.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>

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

}  // namespace
}  // namespace strata::gateway
