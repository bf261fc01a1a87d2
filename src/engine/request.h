// engine/request.h — what a request to the engine is: its terms, the sink
// it reports to, and how it ends.
//
// Promise: a SchedulerRequest is run by the step loop (step_loop.h), on the
// Scheduler's thread or the caller's; its RequestSink hears of it on that
// thread only, and hears OnFinish exactly once, with a FinishReason and a
// Usage.
//
// Threading: the types are plain values and an interface; a sink is called
// on one thread (the one stepping the loop) at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "util/status.h"

namespace strata::engine {

using RequestId = uint64_t;

// How a request ended. The loop decides each one (RequestSink::OnFinish):
// kEndOfTurn for an end-of-generation token (when stop_at_eog); kStopString
// when the sink's OnToken returned false (a stop string matched); kLength for
// max_tokens, the context, or the end of an evaluate-only (embed) request's
// prompt; kCancelled for Cancel, shutdown and failures (OnFinish's status is
// then not OK). A sink that knows more may refine kEndOfTurn/kStopString for
// its own callers: the gateway reports a stop on its chat template's
// turn-end text as kEndOfTurn, and a stop on the request's own stop strings
// as kStopString (gateway/gateway.h). The values are stored (L1 and the
// shared tier): append only.
enum class FinishReason {
  kEndOfTurn,   // the model ended its turn (an end-of-generation token, or turn-end text)
  kStopString,  // a stop string matched
  kLength,      // max_tokens or the context; an evaluate-only request's whole prompt
  kCancelled,   // cancelled, or failed (see the status that comes with it)
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;  // of prompt_tokens, adopted from the prefix cache (L2)
  int32_t completion_tokens = 0;
  int32_t preemptions = 0;  // times the request was evicted and recomputed
  // Tokens memory-aware admission took off max_tokens when the request was
  // admitted under KV pressure (StepLoopOptions::kv_pressure); 0 = none.
  int32_t max_tokens_cut = 0;
};

// What the loop calls back, on the stepping thread, for one request. The
// implementation (the gateway, the CLI) samples, streams and decides when to
// stop.
class RequestSink {
 public:
  virtual ~RequestSink() = default;
  // Once, when the request first gets a sequence (not again after a
  // preemption), before any Choose. Returns a cap on its max_tokens (0 = none):
  // the request runs to the end on the terms it was admitted with.
  virtual int32_t OnAdmit() { return 0; }
  // Picks the next token from this step's logits ([n_vocab]).
  virtual util::StatusOr<int32_t> Choose(std::span<const float> logits) = 0;
  // A token was generated. Return false to end the request (a stop string
  // matched): it ends with kStopString, unless the token also ended the turn.
  virtual bool OnToken(int32_t token) = 0;
  // Evaluate-only (embed) requests: the final hidden states of the prompt
  // tokens just evaluated, `rows` = [n_rows][n_embd] in position order. Every
  // prompt token is reported exactly once, in order, between the last
  // OnRestart and a successful OnFinish. `rows` is valid during the call.
  virtual void OnHidden(std::span<const float> /*rows*/, int32_t /*n_rows*/) {}
  // The request was preempted: it is recomputed from its first position when
  // readmitted, and the hidden states reported so far will be reported again
  // (discard them). Tokens already reported stand and are not repeated.
  virtual void OnRestart() {}
  // Exactly once. `status` is OK unless the request failed; `reason` says why
  // it ended (FinishReason).
  virtual void OnFinish(FinishReason reason, const util::Status& status, const Usage& usage) = 0;
};

struct SchedulerRequest {
  std::vector<int32_t> prompt;  // non-empty, shorter than the context
  int32_t max_tokens = 16;      // >= 1; capped by the context (prompt + generated <= n_ctx)
  bool stop_at_eog = true;
  std::shared_ptr<RequestSink> sink;  // required
  // Evaluate the prompt only and hand its final hidden states to the sink
  // (OnHidden); no generation, max_tokens unused; the prompt may fill the context.
  bool embed = false;
  // != 0: use the prefix cache within this namespace (an embedding request
  // publishes its blocks but adopts none: it needs every hidden state)
  uint64_t cache_namespace = 0;
};

}  // namespace strata::engine
