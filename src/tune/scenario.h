// tune/scenario.h — a workload the tuner measures a configuration on,
// declared in a TOML file (bench/scenarios/*.toml), and the requests it
// makes.
//
// Promise: ParseScenario reads a scenario file against its schema (every
// problem with its line, unknown keys with a did-you-mean) into a Scenario:
// how requests arrive (Poisson at a rate, a closed loop of clients, or the
// timing and sizes of a real trace), what their prompts are (lengths, a
// shared system prompt, exact repeats and rewordings of earlier questions,
// multi-turn sessions), how long the answers are, and which metrics matter.
// Requests() turns it into the same list of requests for the same seed:
// what the simulator (tune/simulator.h) replays and what a real run sends.
//
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tune/trace.h"
#include "util/file_system.h"
#include "util/status.h"

namespace strata::tune {

enum class ArrivalProcess { kPoisson, kClosed, kTrace };

struct Scenario {
  std::string name;  // [a-z0-9-]+
  std::string description;
  // [arrival]
  ArrivalProcess arrival = ArrivalProcess::kPoisson;
  double rate = 2;          // kPoisson: requests per second
  int32_t concurrency = 4;  // kClosed: clients, each sending when its last answer is in
  std::string trace;        // kTrace: the trace file (a path relative to the repository root)
  TraceFormat trace_format = TraceFormat::kAzure;
  double speedup = 1;             // kTrace: arrival offsets divided by this
  int32_t max_prompt_tokens = 0;  // kTrace: longer prompts are cut to this (0 = none)
  int32_t max_output_tokens = 0;  // kTrace: longer answers are cut to this (0 = none)
  double duration_s = 60;         // arrivals over this long (kTrace: the slice of the trace)
  int32_t max_requests = 0;       // 0 = as many as the duration holds
  // [prompts]
  int32_t prompt_tokens = 200;  // the question's own tokens (a trace gives its own)
  double prompt_spread = 0.3;   // log-normal sigma of the lengths; 0 = all equal
  int32_t system_tokens = 0;    // a shared system prompt before each question
  int32_t system_prompts = 1;   // how many distinct system prompts (picked uniformly)
  double repeat = 0;            // share of requests asking an earlier question word for word
  double reword = 0;            // share asking an earlier question in other words
  int32_t pool = 0;         // repeats and rewordings draw from the last `pool` questions (0 = all)
  int32_t turns = 1;        // > 1: sessions of this many turns, each carrying the history
  std::string prompt_file;  // real runs: the questions' text (loadgen --prompt-file); "" = made-up
  // [output]
  int32_t output_tokens = 64;
  double output_spread = 0.3;
  double temperature = 0;  // 0 = greedy: answers are deterministic and cacheable
  // [metrics]
  std::vector<std::string> metrics{"throughput", "ttft_p95", "quality"};
  double measure_first_s = 0;  // > 0: TTFT is measured over the first seconds only (cold start)
  double ttft_p99_slo_s = 0;   // > 0: this workload's own P99 TTFT bound (else the tuner's)
  double warmup_s = 0;         // TTFT of requests arriving in the first seconds is not counted
};

// InvalidArgument listing every problem, "FILE:LINE: key: message" per line.
util::StatusOr<Scenario> ParseScenario(std::string_view text, std::string_view file);

// Every *.toml in `dir`, by name; `only` (names) keeps those, in that
// order, and names one that is not there as an error.
util::StatusOr<std::vector<Scenario>> LoadScenarios(util::FileSystem& fs, const std::string& dir,
                                                    const std::vector<std::string>& only = {});

// The scenario file's schema as `strata tune scenarios --defaults` prints it.
std::string ScenarioDefaults();

// One request of a scenario, as the simulator sees it.
struct WorkloadRequest {
  double arrival_s = -1;      // < 0: a closed loop's (sent when a client is free)
  int32_t client = -1;        // kClosed: the client that sends it
  int32_t prompt_tokens = 0;  // in all (system prompt, history, question)
  int32_t shared_tokens = 0;  // leading tokens another request also starts with
  uint64_t prefix_id = 0;     // what those leading tokens are (0 = nothing shared)
  uint64_t question = 0;      // exact repeats share it
  uint64_t meaning = 0;       // rewordings share it (and exact repeats)
  int32_t output_tokens = 0;
  bool greedy = true;
  uint64_t session = 0;  // 0 = none
  int32_t turn = 0;
  // What a later request finds cached of this one once it is answered: its
  // prompt and answer, under this id (a session's next turn starts with
  // them); 0 = nothing beyond its shared prefix.
  uint64_t publishes = 0;
};

// The requests of `s` for `seed`. A kTrace scenario needs the trace's
// parsed requests (`trace`); the others ignore it.
util::StatusOr<std::vector<WorkloadRequest>> Requests(const Scenario& s, uint64_t seed,
                                                      const std::vector<RequestSpec>* trace);

}  // namespace strata::tune
