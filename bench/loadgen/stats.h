// bench/loadgen/stats.h — summary statistics of a load-generator run.
//
// Promise: exact percentiles from the samples themselves (no histograms, no
// sampling): the nearest-rank method, P(p) = the smallest sample x such that
// at least p% of the samples are <= x, i.e. sorted[ceil(p/100 * n) - 1]
// (P0 = the minimum). Every reported percentile is therefore a value some
// request actually saw. Summarize folds a run's samples into throughput,
// latency distributions over the successful requests, and errors by kind;
// RenderTable and the JSON functions print it.
//
// Pure functions. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "loadgen/recorder.h"

namespace strata::loadgen {

// Nearest-rank percentile of ascending `sorted`, p in [0, 100]; NaN when empty.
double Percentile(std::span<const double> sorted, double p);

struct Distribution {
  int64_t count = 0;  // samples; the fields below are NaN when 0
  double mean = 0;
  double min = 0;
  double p50 = 0;
  double p90 = 0;
  double p95 = 0;
  double p99 = 0;
  double max = 0;
};

// Describes `values` (any order; taken by value to sort).
Distribution Describe(std::vector<double> values);

struct Summary {
  int64_t requests = 0;  // samples in the run
  int64_t ok = 0;
  int64_t failed = 0;
  int64_t interrupted = 0;  // cut short by Ctrl-C (not counted as failed)
  double duration_s = 0;    // first send to last completion (or to the interrupt)

  double request_rate = 0;       // ok requests / duration, per second
  double output_token_rate = 0;  // output tokens of ok requests / duration, per second
  double prompt_token_rate = 0;  // server-reported prompt tokens of ok requests / duration
  int64_t output_tokens = 0;     // over ok requests
  int64_t prompt_tokens = 0;     // server-reported, over ok requests that reported usage

  // Over ok requests, milliseconds.
  Distribution ttft_ms;
  Distribution tpot_ms;
  Distribution e2e_ms;
  Distribution send_lag_ms;  // sent - scheduled, over every request: > 0 when the
                             // client fell behind the schedule (the concurrency cap)

  // Prompt size: what was built for vs what the server counted (ok requests
  // that reported usage; the server's count includes the template and system prompt).
  double target_prompt_tokens_mean = 0;
  double reported_prompt_tokens_mean = 0;
  int64_t usage_reported = 0;     // ok requests that carried usage
  double max_tokens_mean = 0;     // asked for, ok requests
  double output_tokens_mean = 0;  // received, ok requests

  std::map<std::string, int64_t> errors;  // kind -> count
  // x-strata-cache value -> ok requests that carried it ("miss", "l1", "l3",
  // "coalesced"); empty when the server sends no such header (llama-server).
  std::map<std::string, int64_t> cache;
  std::map<std::string, std::string> error_examples;  // kind -> first message
};

Summary Summarize(std::span<const RequestSample> samples, double duration_s);

// The human-readable table; `title` is its first line.
std::string RenderTable(const Summary& summary, const std::string& title);

nlohmann::json SummaryJson(const Summary& summary);
nlohmann::json SampleJson(const RequestSample& sample);

}  // namespace strata::loadgen
