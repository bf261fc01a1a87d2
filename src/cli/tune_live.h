// cli/tune_live.h — `strata tune`'s real trials: each configuration served
// by its own `strata serve` process (this binary), the scenario replayed on
// it over HTTP (tune/live.h), then the process stopped.
//
// Promise: Run writes the configuration to DIR/trials/N.toml (serve's
// knobs that differ from the defaults; no canary, Redis or snapshots, and
// one random API key of the run's in DIR/trials/api-keys, readable by this
// user only: the trial server is private to the tuner, on 127.0.0.1 at a
// port the system picks), starts `strata serve --config N.toml -m MODEL`
// with its log in DIR/trials/N.log, waits until it is ready (at most
// `start_timeout_s`), replays the scenario's requests, judges the answers
// against the scenario's references (asking the same server for the ones
// missing), and stops the process (SIGTERM, then SIGKILL after 20 s). A
// server that does not start is FailedPrecondition with its log's last
// lines; a server that dies during the trial is measured as it went (its
// requests failed) and named in the summary's errors. Progress goes to
// `progress` as (answered, of).
//
// Threading: one caller at a time.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/serve_flags.h"
#include "net/http_client.h"
#include "tune/live.h"
#include "tune/scenario.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::cli {

struct LiveTrialOptions {
  std::string model;  // -m: the GGUF the trials serve
  int32_t threads = 2;
  std::string dir;  // the run's directory (trials/ goes under it)
  double start_timeout_s = 180;
  double drain_s = 120;
};

class LiveTrials {
 public:
  static util::StatusOr<std::unique_ptr<LiveTrials>> Create(const Env& env,
                                                            LiveTrialOptions options,
                                                            util::Logger& log);
  ~LiveTrials();

  util::StatusOr<tune::LiveSummary> Run(const tune::Scenario& s,
                                        const std::vector<tune::WorkloadRequest>& requests,
                                        const tune::ScenarioText& text, const ServeFlags& flags,
                                        tune::References& references,
                                        const std::function<void(size_t, size_t)>& progress);

 private:
  LiveTrials(const Env& env, LiveTrialOptions options, util::Logger& log)
      : env_(env), o_(std::move(options)), log_(log) {}
  // Stops the trial server, if one runs.
  void Stop();

  const Env& env_;
  const LiveTrialOptions o_;
  util::Logger& log_;
  std::string exe_;
  std::string api_key_;    // the trial servers' (random, per run)
  std::string keys_path_;  // DIR/trials/api-keys, mode 0600
  std::unique_ptr<net::HttpClient> client_;
  pid_t pid_ = -1;  // the running trial server
  int64_t trials_ = 0;
};

}  // namespace strata::cli
