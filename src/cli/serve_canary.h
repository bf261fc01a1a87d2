// cli/serve_canary.h — the `strata serve` flags of a canary rollout
// (--canary SPEC and its gates) and how they become a tune::CanaryController
// and the tune::CanaryBackend that takes the baseline's place among the
// served backends. docs/api.md ("Canary rollout") lists each flag.
//
// The candidate (--canary):
//  - KIND:URL[,URL...] — an upstream (openai or anthropic), with its own
//    --canary-model (default: the baseline's model id) and --canary-key-file;
//    it shares the remote backends' HTTP client and options;
//  - model:NAME — another served model (a -m NAME=FILE or a --backend);
//  - FILE.toml — a file that sets exactly one of: one [[backend]] table (an
//    upstream, as in the main configuration) or model.path (a local GGUF,
//    then also served as "<baseline>-canary"); any other key is an error.
// The baseline is --canary-for (default: the default model).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/remote.h"
#include "cli/commands.h"
#include "obs/metrics.h"
#include "tune/canary.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::cli {

struct CanaryFlags {
  std::string spec;      // --canary ("" = no canary)
  std::string of;        // --canary-for ("" = the default model)
  std::string model;     // --canary-model: an upstream candidate's model id
  std::string key_file;  // --canary-key-file
  std::string steps = "5,25,50,100";
  double step_s = 300;
  std::string state_file = "strata-canary.json";
  double mirror = 0.2;
  int32_t min_samples = 50;
  double max_error_rate = 0.0002;
  double ttft_ratio = 1.5;
  double ttft_slo_s = 0.8;
  double min_agreement = 0.9;
};

void RegisterCanaryFlags(CLI::App& cmd, CanaryFlags& flags);

struct ServeFlags;  // cli/serve_flags.h

// What --canary names, read before any backend exists.
struct CanaryPlan {
  enum class Kind { kNone, kRemote, kServed, kLocalFile };
  Kind kind = Kind::kNone;
  tune::CanaryOptions options;
  backend::RemoteOptions remote;  // kRemote: named after the baseline once it is known
  std::string served;             // kServed: the served model's name
  std::string file;               // kLocalFile: the GGUF file
};

// InvalidArgument naming the flag (or the canary file's key) at fault; the
// canary file is read against serve's schema.
util::StatusOr<CanaryPlan> PlanCanary(const Env& env, const ServeFlags& f);

// A running canary: the controller (its tick thread started) and the
// backend served in the baseline's place. Destroyed before the backends it
// borrows.
struct CanaryServing {
  std::unique_ptr<tune::CanaryController> controller;
  std::unique_ptr<tune::CanaryBackend> backend;
};

// Puts the canary in place in `served` (the baseline's entry becomes the
// CanaryBackend). `remote_candidate`: the upstream built for a kRemote plan
// (else null). Nothing for kNone. InvalidArgument for a baseline or a
// served candidate that does not exist, or the same for both.
util::StatusOr<CanaryServing> StartCanary(const CanaryPlan& plan, const ServeFlags& f,
                                          std::vector<backend::Backend*>& served,
                                          backend::Backend* remote_candidate, const Env& env,
                                          obs::MetricsRegistry& metrics, const util::Clock& clock,
                                          util::Logger& log);

// The name a local-file candidate is served under.
std::string CanaryFileModelName(const std::string& baseline);

}  // namespace strata::cli
