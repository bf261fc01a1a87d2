// tune/trace.h — request specs and the parsers of real serving traces, for
// the load generator (bench/loadgen) and the tuner's scenarios.
//
// Promise: turns the text of a serving trace (Azure LLM inference CSV, Mooncake
// JSONL, BurstGPT CSV; see ../shared/PROVENANCE.md) into a list of RequestSpec
// with arrival times in seconds relative to the first kept row, in arrival
// order. Rows that cannot be replayed (a BurstGPT failure row with 0 request
// tokens) are skipped and counted; malformed rows are an error naming the line.
// SliceTrace then cuts a window, time-scales it and caps the token counts so a
// small server can keep up.
//
// Pure functions over strings: no I/O, no clock. Thread-compatible.
//
//   auto parsed = ParseTrace(TraceFormat::kAzure, text);
//   auto specs = SliceTrace(parsed->requests, {.start_s = 60, .max_requests = 100,
//                                              .speedup = 2, .max_prompt_tokens = 512});
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace strata::tune {

// Mooncake hash_ids cover this many tokens each (the trace's block size).
inline constexpr int64_t kMooncakeBlockTokens = 512;

// One request to send: when, and how big.
struct RequestSpec {
  double arrival_s = 0;           // offset from the start of the run, seconds, >= 0
  int64_t prompt_tokens = 0;      // target prompt length in tokens, >= 0
  int64_t output_tokens = 0;      // max_tokens to ask for, >= 0
  std::vector<int64_t> hash_ids;  // Mooncake prefix blocks, in order; empty otherwise
};

enum class TraceFormat { kAzure, kMooncake, kBurstGpt };

// "azure", "mooncake" or "burstgpt".
util::StatusOr<TraceFormat> ParseTraceFormat(std::string_view name);

struct ParsedTrace {
  std::vector<RequestSpec> requests;  // sorted by arrival_s, first at 0
  int64_t skipped_rows = 0;           // rows that describe no replayable request
};

// Azure: header `TIMESTAMP,ContextTokens,GeneratedTokens`, timestamps
// "YYYY-MM-DD HH:MM:SS[.fraction]".
util::StatusOr<ParsedTrace> ParseAzureCsv(std::string_view text);
// Mooncake: one JSON object per line with timestamp (ms), input_length,
// output_length and hash_ids (512-token prefix blocks).
util::StatusOr<ParsedTrace> ParseMooncakeJsonl(std::string_view text);
// BurstGPT: header naming `Timestamp` (s), `Request tokens` and `Response
// tokens` among other columns (both released layouts). Rows with 0 request
// tokens are failed requests in the original log and are skipped.
util::StatusOr<ParsedTrace> ParseBurstGptCsv(std::string_view text);
util::StatusOr<ParsedTrace> ParseTrace(TraceFormat format, std::string_view text);

struct TraceSlice {
  double start_s = 0;             // trace time of the first kept request, seconds, >= 0
  int64_t max_requests = 0;       // keep at most this many; 0 = all
  double speedup = 1;             // arrival offsets are divided by this; > 0
  int64_t max_prompt_tokens = 0;  // cap on prompt_tokens; 0 = none
  int64_t max_output_tokens = 0;  // cap on output_tokens; 0 = none
  double block_scale = 1;         // Mooncake: prompt_tokens scaled by this (each
                                  // 512-token block becomes ~512*scale tokens); > 0
};

// The requests with trace time >= start_s, at most max_requests of them,
// re-based so the first arrives at 0, time-scaled and capped. prompt_tokens is
// scaled by block_scale only for requests that carry hash_ids, then capped.
std::vector<RequestSpec> SliceTrace(const std::vector<RequestSpec>& requests,
                                    const TraceSlice& slice);

// Seconds since 1970-01-01 of "YYYY-MM-DD HH:MM:SS[.fraction]" read as UTC.
util::StatusOr<double> ParseDateTimeSeconds(std::string_view text);

}  // namespace strata::tune
