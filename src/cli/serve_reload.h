// cli/serve_reload.h — what `strata serve` does on SIGHUP and on
// POST /admin/reload: read the configuration again and change what can
// change while requests run.
//
// Promise: a reload reads the file (--config) onto the command line as
// given at start, and checks the result as a start would (every range, the
// combinations, the files the knobs name). An invalid result changes
// nothing and says why. Otherwise every live knob that changed takes its new
// value in the component that owns it, each swapping an immutable snapshot
// (a request that already started keeps the one it took), and every knob
// that needs a restart is named and left as it is. The key files (API keys,
// the admin key, the upstream credentials) are read again on every reload,
// so a rotated key takes effect without a restart. Each reload is one log
// line per change.
//
// Threading: Reload is thread-safe; reloads run one at a time (a SIGHUP on
// the main thread, a POST on a worker).
#pragma once

#include <CLI/CLI.hpp>

#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "backend/local.h"
#include "backend/remote.h"
#include "cli/commands.h"
#include "cli/serve_config.h"
#include "cli/serve_flags.h"
#include "cli/serve_models.h"
#include "config/config.h"
#include "gateway/gateway.h"
#include "gateway/rt_control.h"
#include "obs/tracer.h"
#include "server/server.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::cli {

// The running components a reload changes; borrowed, each must outlive the
// Reloader (null where the server has none).
struct ReloadTargets {
  server::HttpServer* server = nullptr;
  gateway::Gateway* gateway = nullptr;
  gateway::RtControl* rt = nullptr;              // the RT-Switcher, when on
  LocalModels* local = nullptr;                  // the local models, if any
  int32_t local_n_ctx = 0;                       // their largest context (0 without one)
  std::vector<backend::RemoteBackend*> remotes;  // in --backend order
  bool l3_at_start = false;                      // the L3 tier exists (it was not off at start)
  util::Logger* log = nullptr;                   // the logger whose level log.level sets
  obs::Tracer* tracer = nullptr;                 // with --otlp-endpoint: traces.sample
};

class Reloader {
 public:
  // `command_line`: the flags as parsed (before the file); `in_force`: what
  // the server started with; `given`: the flags given on the command line
  // (they keep winning over the file). `env`, `targets` and `log` must
  // outlive the Reloader.
  Reloader(const Env& env, config::Schema schema, std::set<std::string> given,
           ServeFlags command_line, ServeFlags in_force, ReloadTargets targets,
           const util::Clock& clock, util::Logger& log);

  // One reload; `trigger` names its cause in the log ("SIGHUP").
  server::ReloadReport Reload(std::string_view trigger);

 private:
  // The settings a reload would put in force, or why it cannot.
  util::StatusOr<ServeFlags> ReadNext() const;
  // Whether `key` can take a new value now (live, and its component there).
  bool CanApplyLive(const ServeKnob& knob, const ServeFlags& next) const;
  // Sets every component from `flags` (already checked); the files re-read.
  util::Status Apply(const ServeFlags& flags, std::vector<std::string>& reread);

  const Env& env_;
  const config::Schema schema_;
  const std::set<std::string> given_;
  const ServeFlags command_line_;
  const ReloadTargets targets_;
  const util::Clock& clock_;
  util::Logger& log_;
  std::mutex mu_;  // one reload at a time; guards in_force_
  ServeFlags in_force_;
};

}  // namespace strata::cli
