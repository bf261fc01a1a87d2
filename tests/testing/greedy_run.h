// testing/greedy_run.h — runs generation requests to their end on the
// calling thread through the engine's one step loop (engine::StepLoop),
// choosing greedily: the reference runs of the engine, scheduler, golden and
// synthetic tests. The requests run side by side (continuous batching: decode
// tokens and prompt chunks in one forward pass), so comparing a run of
// several with runs of each alone checks batch invariance.
//
// Threading: everything runs on the calling thread, which must own the Engine.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "engine/step_loop.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::testing {

struct GreedyRequest {
  std::vector<int32_t> prompt;  // non-empty, shorter than the context
  int32_t max_tokens = 16;      // >= 1
  bool stop_at_eog = true;      // end on the model's end-of-generation tokens
};

struct GreedyResult {
  std::vector<int32_t> tokens;  // generated (without the prompt), an ending EOG token included
  engine::FinishReason finish = engine::FinishReason::kLength;
};

struct GreedyRunOptions {
  int32_t max_batch_tokens = 512;  // [1, 65536] tokens per forward pass
  // Called for every generated token (request index, token); false cancels
  // that request, which then ends with kCancelled. Empty = none.
  std::function<bool(size_t, int32_t)> on_token = nullptr;
};

namespace internal {

// Records one request's tokens and end; chooses the most likely token.
class GreedyRunSink final : public engine::RequestSink {
 public:
  GreedyRunSink(size_t index, const GreedyRunOptions& options) : index_(index), options_(options) {}
  util::StatusOr<int32_t> Choose(std::span<const float> logits) override {
    return engine::GreedyToken(logits);
  }
  bool OnToken(int32_t token) override {
    result_.tokens.push_back(token);
    if (options_.on_token && !options_.on_token(index_, token)) loop_->Cancel(id_);
    return true;
  }
  void OnFinish(engine::FinishReason reason, const util::Status& status,
                const engine::Usage&) override {
    result_.finish = reason;
    status_ = status;
  }

  engine::StepLoop* loop_ = nullptr;  // set before the first step
  engine::RequestId id_ = 0;          // likewise
  GreedyResult result_;
  util::Status status_;

 private:
  const size_t index_;
  const GreedyRunOptions& options_;
};

}  // namespace internal

// Runs every request of `requests` to its end, all of them admitted at once
// as far as the KV pool allows. The first request refused at submission, or
// the first one that failed, is the error.
inline util::StatusOr<std::vector<GreedyResult>> RunGreedy(engine::Engine& engine,
                                                           std::span<const GreedyRequest> requests,
                                                           const GreedyRunOptions& options = {}) {
  auto log = util::NewNullLogger();
  STRATA_ASSIGN_OR_RETURN(
      auto loop,
      engine::StepLoop::Create(engine, {.max_batch_tokens = options.max_batch_tokens}, *log));
  std::vector<std::shared_ptr<internal::GreedyRunSink>> sinks;
  for (size_t i = 0; i < requests.size(); ++i) {
    auto sink = std::make_shared<internal::GreedyRunSink>(i, options);
    engine::SchedulerRequest r;
    r.prompt = requests[i].prompt;
    r.max_tokens = requests[i].max_tokens;
    r.stop_at_eog = requests[i].stop_at_eog;
    r.sink = sink;
    STRATA_ASSIGN_OR_RETURN(sink->id_, loop->Submit(std::move(r)));
    sink->loop_ = loop.get();
    sinks.push_back(std::move(sink));
  }
  loop->RunUntilIdle(std::max<int32_t>(1, static_cast<int32_t>(requests.size())));
  std::vector<GreedyResult> results;
  for (auto& s : sinks) {
    STRATA_RETURN_IF_ERROR(s->status_);
    results.push_back(std::move(s->result_));
  }
  return results;
}

}  // namespace strata::testing
