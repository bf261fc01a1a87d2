#include "cli/serve_canary.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "cli/serve_config.h"
#include "cli/serve_flags.h"

namespace strata::cli {

void RegisterCanaryFlags(CLI::App& cmd, CanaryFlags& f) {
  cmd.add_option("--canary", f.spec,
                 "Roll out a candidate for one served model: KIND:URL[,URL...] (an openai or "
                 "anthropic upstream), model:NAME (another served model) or FILE.toml (one "
                 "[[backend]] table or model.path); it takes a rising share of the model's "
                 "requests and is rolled back when a gate fails");
  cmd.add_option("--canary-for", f.of,
                 "The served model the canary takes traffic from "
                 "(default: the default model)");
  cmd.add_option("--canary-model", f.model,
                 "The model id sent to an upstream candidate (default: the baseline's model id)");
  cmd.add_option("--canary-key-file", f.key_file,
                 "File whose first line is an upstream candidate's API key");
  cmd.add_option("--canary-steps", f.steps,
                 "The candidate's share at each step, in percent, rising to 100")
      ->capture_default_str();
  cmd.add_option("--canary-step-s", f.step_s,
                 "Seconds each step lasts at least (it is held until it has --canary-min-samples)")
      ->capture_default_str();
  cmd.add_option("--canary-state", f.state_file,
                 "File the ramp's state is kept in, so a restart resumes it (\"\" = not kept)")
      ->capture_default_str();
  cmd.add_option("--canary-mirror", f.mirror,
                 "Share of the candidate's greedy requests also run on the baseline to compare "
                 "the answers (the quality gate) [0, 1]")
      ->capture_default_str();
  cmd.add_option("--canary-min-samples", f.min_samples,
                 "Candidate requests a segment (tenant and request class) needs before it is "
                 "judged, and a step needs before it passes")
      ->capture_default_str();
  cmd.add_option("--canary-max-error-rate", f.max_error_rate,
                 "Error rate allowed the candidate beyond the baseline's (its 95 % lower bound is "
                 "compared) [0, 1)")
      ->capture_default_str();
  cmd.add_option("--canary-ttft-ratio", f.ttft_ratio,
                 "The candidate's P99 time to first token may be this times the baseline's "
                 "(plus 100 ms) [1, 100]")
      ->capture_default_str();
  cmd.add_option("--canary-ttft-slo", f.ttft_slo_s,
                 "Seconds of P99 time to first token the candidate may not exceed while the "
                 "baseline stays within it")
      ->capture_default_str();
  cmd.add_option("--canary-min-agreement", f.min_agreement,
                 "Share of mirrored answers that must agree with the baseline's (its 95 % upper "
                 "bound is compared) (0, 1]")
      ->capture_default_str();
}

std::string CanaryFileModelName(const std::string& baseline) { return baseline + "-canary"; }

namespace {

util::StatusOr<tune::CanaryOptions> OptionsFrom(const CanaryFlags& f) {
  tune::CanaryOptions o;
  o.id = f.spec;
  auto steps = tune::ParseCanarySteps(f.steps);
  if (!steps.ok()) return util::InvalidArgumentError("--canary-steps: " + steps.status().message());
  o.steps = *steps;
  if (!(f.step_s >= 1 && f.step_s <= 7 * 86400)) {
    return util::InvalidArgumentError(
        fmt::format("--canary-step-s {} is outside [1, 604800] seconds", f.step_s));
  }
  o.step_time = std::chrono::milliseconds(std::llround(f.step_s * 1e3));
  o.state_file = f.state_file;
  o.mirror = f.mirror;
  o.min_samples = f.min_samples;
  o.max_error_rate = f.max_error_rate;
  o.ttft_ratio = f.ttft_ratio;
  if (!(f.ttft_slo_s >= 0.001 && f.ttft_slo_s <= 3600)) {
    return util::InvalidArgumentError(
        fmt::format("--canary-ttft-slo {} is outside [0.001, 3600] seconds", f.ttft_slo_s));
  }
  o.ttft_slo = std::chrono::milliseconds(std::llround(f.ttft_slo_s * 1e3));
  o.min_agreement = f.min_agreement;
  if (auto st = tune::ValidateCanaryOptions(o); !st.ok()) {
    std::string m = st.message();
    // Name the flag: the option's words are the flags' own.
    for (const auto& [words, flag] :
         {std::pair{"canary mirror", "--canary-mirror"},
          std::pair{"canary min samples", "--canary-min-samples"},
          std::pair{"canary max error rate", "--canary-max-error-rate"},
          std::pair{"canary TTFT ratio", "--canary-ttft-ratio"},
          std::pair{"canary min agreement", "--canary-min-agreement"}}) {
      if (m.rfind(words, 0) == 0) m = std::string(flag) + ": " + m;
    }
    return util::InvalidArgumentError(m);
  }
  return o;
}

// An upstream candidate's options: the remote backends' shared options, its
// spec, model and key file.
util::StatusOr<backend::RemoteOptions> RemoteCandidate(const Env& env, const ServeFlags& f,
                                                       const std::string& spec,
                                                       const std::string& model,
                                                       const std::string& key_file) {
  BackendFlags b = f.backends;
  b.specs = {spec};
  b.names = {"canary"};  // renamed after the baseline once it is known
  b.models = {model};
  b.key_files = {key_file};
  auto options = RemoteBackendOptions(b, env, f.max_tokens_cap);
  if (!options.ok()) {
    std::string m = options.status().message();
    return util::InvalidArgumentError("--canary: " + m);
  }
  return options->front();
}

}  // namespace

util::StatusOr<CanaryPlan> PlanCanary(const Env& env, const ServeFlags& f) {
  CanaryPlan plan;
  const CanaryFlags& c = f.canary;
  // The gates are checked with or without a canary: a value out of range is
  // an error wherever it is given.
  STRATA_ASSIGN_OR_RETURN(plan.options, OptionsFrom(c));
  if (c.spec.empty()) {
    for (const auto& [flag, value] :
         {std::pair{"--canary-for", c.of}, std::pair{"--canary-model", c.model},
          std::pair{"--canary-key-file", c.key_file}}) {
      if (!value.empty())
        return util::InvalidArgumentError(std::string(flag) + " needs a --canary");
    }
    return plan;
  }
  const std::string& spec = c.spec;
  if (spec.rfind("model:", 0) == 0) {
    plan.kind = CanaryPlan::Kind::kServed;
    plan.served = spec.substr(6);
    if (plan.served.empty()) {
      return util::InvalidArgumentError("--canary model:NAME needs the served model's name");
    }
    if (!c.model.empty() || !c.key_file.empty()) {
      return util::InvalidArgumentError(
          "--canary-model and --canary-key-file are for an upstream candidate, not model:NAME");
    }
    return plan;
  }
  const bool toml = spec.size() > 5 && spec.compare(spec.size() - 5, 5, ".toml") == 0 &&
                    spec.find("://") == std::string::npos;
  if (!toml) {
    plan.kind = CanaryPlan::Kind::kRemote;
    STRATA_ASSIGN_OR_RETURN(plan.remote, RemoteCandidate(env, f, spec, c.model, c.key_file));
    return plan;
  }
  // A canary file: serve's schema, one backend or one model file, nothing else.
  auto doc = ReadConfigFile(env, spec, ServeFileSchema());
  if (!doc.ok()) return util::InvalidArgumentError("--canary: " + doc.status().message());
  ServeFlags g;
  const ServeFlags defaults;
  ApplyConfig(*doc, {}, g);
  for (const ServeKnob* k : ChangedKnobs(defaults, g)) {
    if (k->knob.key != "backend" && k->knob.key != "model.path") {
      return util::InvalidArgumentError(
          fmt::format("--canary {}: a canary file sets one [[backend]] table or model.path, not {}",
                      spec, k->knob.key));
    }
  }
  const size_t backends = g.backends.specs.size();
  if (backends + g.model.size() != 1) {
    return util::InvalidArgumentError(fmt::format(
        "--canary {}: a canary file sets exactly one [[backend]] table or one model.path", spec));
  }
  if (backends == 1) {
    plan.kind = CanaryPlan::Kind::kRemote;
    STRATA_ASSIGN_OR_RETURN(
        plan.remote, RemoteCandidate(env, f, g.backends.specs[0],
                                     g.backends.models.empty() ? "" : g.backends.models[0],
                                     g.backends.key_files.empty() ? "" : g.backends.key_files[0]));
    return plan;
  }
  std::string path = g.model[0];
  if (const size_t eq = path.find('='); eq != std::string::npos) path = path.substr(eq + 1);
  if (!env.fs->Exists(path)) {
    return util::InvalidArgumentError(
        fmt::format("--canary {}: model.path '{}' does not exist", spec, path));
  }
  plan.kind = CanaryPlan::Kind::kLocalFile;
  plan.file = path;
  return plan;
}

util::StatusOr<CanaryServing> StartCanary(const CanaryPlan& plan, const ServeFlags& f,
                                          std::vector<backend::Backend*>& served,
                                          backend::Backend* remote_candidate, const Env& env,
                                          obs::MetricsRegistry& metrics, const util::Clock& clock,
                                          util::Logger& log) {
  CanaryServing out;
  if (plan.kind == CanaryPlan::Kind::kNone) return out;
  auto find = [&](const std::string& name) -> std::vector<backend::Backend*>::iterator {
    return std::find_if(served.begin(), served.end(),
                        [&](const backend::Backend* b) { return b->name() == name; });
  };
  if (served.empty()) return util::InvalidArgumentError("--canary: no model is served");
  const std::string baseline_name = f.canary.of.empty() ? served.front()->name() : f.canary.of;
  auto baseline = find(baseline_name);
  if (baseline == served.end()) {
    return util::InvalidArgumentError(
        fmt::format("--canary-for '{}' is not a served model", baseline_name));
  }
  backend::Backend* candidate = nullptr;
  switch (plan.kind) {
    case CanaryPlan::Kind::kRemote:
      candidate = remote_candidate;
      break;
    case CanaryPlan::Kind::kServed: {
      auto it = find(plan.served);
      if (it == served.end()) {
        return util::InvalidArgumentError(
            fmt::format("--canary model:{}: no served model has that name", plan.served));
      }
      candidate = *it;
      break;
    }
    case CanaryPlan::Kind::kLocalFile: {
      auto it = find(CanaryFileModelName(baseline_name));
      if (it != served.end()) candidate = *it;
      break;
    }
    case CanaryPlan::Kind::kNone:
      break;
  }
  if (candidate == nullptr) return util::InternalError("--canary: the candidate was not built");
  if (candidate == *baseline) {
    return util::InvalidArgumentError(
        fmt::format("--canary: '{}' would be its own candidate", baseline_name));
  }
  STRATA_ASSIGN_OR_RETURN(
      out.controller, tune::CanaryController::Create(plan.options, clock, *env.fs, &metrics, log));
  out.backend = std::make_unique<tune::CanaryBackend>(**baseline, *candidate, *out.controller);
  *baseline = out.backend.get();
  std::string steps;
  for (int32_t s : plan.options.steps) steps += fmt::format("{}{}%", steps.empty() ? "" : " ", s);
  log.Info(
      "canary: {} ({} '{}') takes {}% of '{}' now; steps {} of at least {:.0f} s; gates: errors "
      "over {}, P99 TTFT over {}x the baseline's or the {:.0f} ms SLO, agreement under {} ({}% "
      "of greedy requests mirrored); state in {}",
      plan.options.id, candidate->kind(), candidate->name(), out.controller->percent(),
      baseline_name, steps, f.canary.step_s, plan.options.max_error_rate, plan.options.ttft_ratio,
      f.canary.ttft_slo_s * 1e3, plan.options.min_agreement, plan.options.mirror * 100,
      plan.options.state_file.empty() ? "no file" : plan.options.state_file);
  out.controller->Start();
  return out;
}

}  // namespace strata::cli
