#include "cli/serve_reload.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "cli/serve_config.h"
#include "server/auth.h"

namespace strata::cli {

Reloader::Reloader(const Env& env, config::Schema schema, std::set<std::string> given,
                   ServeFlags command_line, ServeFlags in_force, ReloadTargets targets,
                   const util::Clock& clock, util::Logger& log)
    : env_(env),
      schema_(std::move(schema)),
      given_(std::move(given)),
      command_line_(std::move(command_line)),
      targets_(std::move(targets)),
      clock_(clock),
      log_(log),
      in_force_(std::move(in_force)) {}

util::StatusOr<ServeFlags> Reloader::ReadNext() const {
  ServeFlags next = command_line_;
  if (!next.config.empty()) {
    STRATA_ASSIGN_OR_RETURN(config::Document doc, ReadConfigFile(env_, next.config, schema_));
    ApplyConfig(doc, given_, next);
  }
  if (const util::Status st = CheckServeFlags(env_, next); !st.ok()) {
    return util::InvalidArgumentError(fmt::format("{}: {}",
                                                  next.config.empty() ? "the flags" : next.config,
                                                  InConfigTerms(st.message(), given_)));
  }
  return next;
}

bool Reloader::CanApplyLive(const ServeKnob& k, const ServeFlags& next) const {
  if (k.knob.reload != config::Reload::kLive) return false;
  // L3 can change its mode only if its index exists (it was on at start).
  if (k.knob.key == "l3.mode" && !targets_.l3_at_start && next.cache.l3 != "off") return false;
  return true;
}

util::Status Reloader::Apply(const ServeFlags& f, std::vector<std::string>& reread) {
  // Everything that can fail is computed first; then each component swaps.
  server::ApiKeys keys;
  if (!f.api_keys.empty()) {
    STRATA_ASSIGN_OR_RETURN(keys, server::ApiKeys::Load(*env_.fs, f.api_keys));
    reread.push_back(f.api_keys);
  }
  std::optional<std::string> admin_key;
  if (!f.admin_key_file.empty()) {
    STRATA_ASSIGN_OR_RETURN(admin_key, ReadKeyFile(env_, "--admin-key-file", f.admin_key_file));
    reread.push_back(f.admin_key_file);
  }
  STRATA_ASSIGN_OR_RETURN(gateway::GatewayOptions go,
                          GatewayOptionsFor(f, targets_.local_n_ctx, targets_.rt, clock_));
  STRATA_ASSIGN_OR_RETURN(gateway::RtControlOptions rt, RtOptions(f));
  STRATA_ASSIGN_OR_RETURN(std::vector<backend::RemoteOptions> remotes,
                          RemoteBackendOptions(f.backends, env_, f.max_tokens_cap));
  for (const std::string& file : f.backends.key_files) {
    if (!file.empty()) reread.push_back(file);
  }
  const auto level = util::ParseLogLevel(f.log_level);
  // A new policy ramps in over the ramp this reload sets (0: at once).
  const auto ramp = std::chrono::milliseconds(std::llround(f.policy_ramp_s * 1e3));

  if (targets_.server != nullptr) {
    targets_.server->SetApiKeys(std::move(keys));
    targets_.server->SetAdminKey(std::move(admin_key));
    targets_.server->SetRequestTimeout(std::chrono::seconds(f.timeout_s));
  }
  if (targets_.log != nullptr && level) targets_.log->SetMinLevel(*level);
  if (targets_.tracer != nullptr) {
    STRATA_RETURN_IF_ERROR(targets_.tracer->SetSampleRate(f.trace.trace_sample));
  }
  if (targets_.local != nullptr) {
    STRATA_RETURN_IF_ERROR(targets_.local->SetLimits(f.max_tokens_cap, f.max_embedding_inputs));
  }
  if (targets_.gateway != nullptr) {
    STRATA_RETURN_IF_ERROR(targets_.gateway->Reconfigure(gateway::LiveOptionsOf(go), ramp));
  }
  if (targets_.rt != nullptr) STRATA_RETURN_IF_ERROR(targets_.rt->Reconfigure(rt, ramp));
  for (size_t i = 0; i < targets_.remotes.size() && i < remotes.size(); ++i) {
    STRATA_RETURN_IF_ERROR(targets_.remotes[i]->Reconfigure(backend::LiveOptionsOf(remotes[i])));
  }
  return util::OkStatus();
}

server::ReloadReport Reloader::Reload(std::string_view trigger) {
  std::lock_guard<std::mutex> lock(mu_);
  server::ReloadReport report;
  report.source = command_line_.config;
  auto next = ReadNext();
  if (!next.ok()) {
    report.status = next.status();
    log_.Error("reload ({}) refused, nothing changed: {}", trigger, next.status().message());
    return report;
  }
  // What goes in force: the live changes; a change that needs a restart
  // keeps its value until then.
  ServeFlags applied = in_force_;
  for (const ServeKnob* k : ChangedKnobs(in_force_, *next)) {
    server::ReloadReport::Change change{k->knob.key, k->get(in_force_), k->get(*next)};
    if (CanApplyLive(*k, *next)) {
      k->copy(*next, applied);
      report.applied.push_back(std::move(change));
    } else {
      report.restart_required.push_back(std::move(change));
    }
  }
  if (const util::Status st = Apply(applied, report.reread); !st.ok()) {
    // Apply computes what can fail before it changes anything; a failure
    // here is a component refusing a value the checks let through.
    report.status = util::InternalError(fmt::format(
        "the reload was applied only in part ({}); the server runs on; fix the file and reload "
        "again",
        st.message()));
    log_.Error("reload ({}): {}", trigger, report.status.message());
    return report;
  }
  in_force_ = applied;
  for (const auto& c : report.applied) {
    log_.Info("reload ({}): {} = {} (was {})", trigger, c.key, c.to, c.from);
  }
  for (const auto& c : report.restart_required) {
    log_.Warn("reload ({}): {} = {} needs a restart; it stays {} until then", trigger, c.key, c.to,
              c.from);
  }
  log_.Info("reload ({}): {} change{} applied, {} need{} a restart; {} key file{} read again",
            trigger, report.applied.size(), report.applied.size() == 1 ? "" : "s",
            report.restart_required.size(), report.restart_required.size() == 1 ? "s" : "",
            report.reread.size(), report.reread.size() == 1 ? "" : "s");
  return report;
}

}  // namespace strata::cli
