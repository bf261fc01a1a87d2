// tune/live.h — a scenario replayed on a running server: the real trial
// that the simulator (tune/simulator.h) stands in for, measured the same
// way.
//
// Promise:
//  - ScenarioText gives every request of a scenario (tune/scenario.h) its
//    text, deterministically: the system prompt shared by the requests with
//    the same prefix, the question (from the scenario's prompts file when it
//    has one: a reworded request gets the file's paraphrase of the question,
//    or the question with another opening; else made-up words, a rewording
//    sharing most of them), padded to the request's length with words fixed
//    by its meaning, so rewordings stay close.
//  - RunLive sends each request as a streamed OpenAI chat completion when it
//    is due: at its arrival, after its session's previous turn has answered
//    (that answer is part of its history), or, in a closed loop, when its
//    client's previous request has answered and the duration has not passed.
//    Answers are `ignore_eos` of the request's length; greedy requests ask
//    for their logprobs. It records, per request, when it was sent, its time
//    to the first content, its outcome (an HTTP error or a failed stream is
//    an error), how it was served (`x-strata-cache`), its text, tokens and
//    log-likelihood. Every request has a deadline; none is left hanging.
//  - Summarise turns the records into the simulator's metrics (throughput
//    over first arrival to last answer; TTFT percentiles outside the warm-up
//    and within `first_seconds`; the error rate) and the quality score of
//    docs/tuning.md: the mean over answered requests of the delivered share
//    of the answer (tokens / asked) times, for a greedy answer, whether it
//    agrees with the greedy reference answer to the same prompt (equal
//    texts, or L3's similarity of the two >= 0.8: AnswersAgree). References
//    are the complete fresh generations (`x-strata-cache: miss`) seen so far;
//    an answer from an approximate tier (l3, semantic) without one gets one
//    from `fetch_reference` (the same server, every response tier off). It
//    also reports the mean log-likelihood per token of the generated greedy
//    answers and the false-hit rate of the approximate tiers.
//
// Threading: RunLive blocks its caller; the client's I/O threads run the
// callbacks, which only record and signal (one lock, held briefly).
// ScenarioText and References are used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "net/http_client.h"
#include "tune/scenario.h"
#include "tune/search.h"
#include "util/clock.h"
#include "util/status.h"

namespace strata::tune {

// Two answers agree when their texts are equal or L3's similarity of them
// is at least `similarity` (the canary's quality gate says the same).
bool AnswersAgree(std::string_view a, std::string_view b, double similarity);

// The questions of a prompts file: a JSON array of {"origin", "similar"}
// (a question and its paraphrase) or of strings, or JSON lines, each a
// string or an object with a string "prompt" or a "turns" array whose
// first element is a string. InvalidArgument naming what is wrong.
struct PromptPool {
  std::vector<std::string> questions;
  std::vector<std::string> paraphrases;  // "" where the file has none
};
util::StatusOr<PromptPool> ParsePromptPool(std::string_view text);

class ScenarioText {
 public:
  // `pool` may be empty (made-up questions).
  ScenarioText(const Scenario& s, const std::vector<WorkloadRequest>& requests,
               const PromptPool& pool, uint64_t seed);
  const std::string& System(size_t i) const { return system_[i]; }
  const std::string& Question(size_t i) const { return question_[i]; }
  // A made-up answer of `tokens` tokens (a session's history when the real
  // answer failed).
  std::string FillerAnswer(size_t i, int32_t tokens) const;

 private:
  std::vector<std::string> system_, question_;
  uint64_t seed_;
};

struct LiveRecord {
  double sent_s = -1;  // seconds after the run's start; < 0: never sent
  double ttft_s = -1;  // sent to the first content; < 0: none
  double done_s = -1;
  bool ok = false;
  int http_status = 0;
  std::string error;
  std::string cache;  // the response's x-strata-cache
  std::string text;
  int32_t completion_tokens = 0;
  int32_t max_tokens = 0;
  double logprob_sum = 0;
  int32_t logprob_tokens = 0;
  uint64_t prompt_key = 0;  // the messages' and max_tokens' hash: references are per prompt
  std::string messages;     // the messages sent, as JSON
};

struct LiveOptions {
  std::string url;  // "http://127.0.0.1:PORT"
  std::string model;
  std::string api_key;     // "" = none
  double drain_s = 120;    // after the last request is sent, how long answers may take
  double request_s = 300;  // one request's deadline
  // Called from RunLive's thread about twice a second: (answered or failed, of).
  std::function<void(size_t, size_t)> progress;
};

util::StatusOr<std::vector<LiveRecord>> RunLive(const Scenario& s,
                                                const std::vector<WorkloadRequest>& requests,
                                                const ScenarioText& text,
                                                const LiveOptions& options, net::HttpClient& client,
                                                const util::Clock& clock);

// The greedy answer of `messages` (JSON) of `max_tokens` tokens with every
// response tier off, from the server of `options` (its `ok` says whether
// it came whole).
util::StatusOr<LiveRecord> FetchReference(const LiveOptions& options, net::HttpClient& client,
                                          const std::string& messages, int32_t max_tokens);

// The reference answers of one scenario's prompts, kept across trials.
using References = std::map<uint64_t, std::string>;

struct LiveSummary {
  Measured measured;
  int64_t requests = 0, answered = 0, errors = 0;
  double ttft_p50_s = 0;
  double duration_s = 0;
  std::map<std::string, int64_t> served;  // by x-strata-cache
  int64_t approximate_hits = 0, false_hits = 0;
  int64_t compared = 0, agreed = 0;       // greedy answers compared with a reference
  double log_likelihood = 0;              // per token, generated greedy answers (0: none)
  std::vector<std::string> first_errors;  // up to 3, for the log
};

// `fetch_reference` (may be null: then such answers are not judged) is
// called for approximate answers whose prompt has no reference yet.
LiveSummary Summarise(
    const Scenario& s, const std::vector<WorkloadRequest>& requests,
    const std::vector<LiveRecord>& records, References& references,
    const std::function<std::optional<std::string>(const LiveRecord&)>& fetch_reference);

}  // namespace strata::tune
