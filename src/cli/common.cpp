#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "cli/commands.h"
#include "model/synthetic.h"

namespace strata::cli {

int ReportError(const util::Status& status) {
  std::fprintf(stderr, "strata: error: %s\n", status.message().c_str());
  return kExitFailure;
}

int UsageError(const std::string& message) {
  std::fprintf(stderr, "strata: invalid arguments: %s\n", message.c_str());
  return kExitUsage;
}

util::StatusOr<std::string> ReadKeyFile(const Env& env, const std::string& flag,
                                        const std::string& path) {
  auto bytes = env.fs->ReadFile(path);
  if (!bytes.ok()) {
    return util::InvalidArgumentError(
        fmt::format("{} '{}': {}", flag, path, bytes.status().message()));
  }
  std::string key = std::move(bytes).value();
  key = key.substr(0, key.find_first_of("\r\n"));
  while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
  while (!key.empty() && (key.front() == ' ' || key.front() == '\t')) key.erase(0, 1);
  if (key.empty()) {
    return util::InvalidArgumentError(
        fmt::format("{} '{}' holds no key on its first line", flag, path));
  }
  return key;
}

std::unique_ptr<util::Logger> MakeLogger(const std::string& level) {
  auto parsed = util::ParseLogLevel(level);
  return util::NewStderrLogger(parsed.value_or(util::LogLevel::kInfo));
}

util::StatusOr<std::string> ResolveModelPath(const Env& env, const std::string& flag,
                                             util::Logger& log) {
  if (!flag.empty()) return flag;
  if (const char* e = std::getenv("STRATA_MODEL"); e != nullptr && *e != '\0') {
    log.Info("model from STRATA_MODEL: {}", e);
    return std::string(e);
  }
  // The small test model that sits beside a checkout (scripts/run starts from
  // the repository root).
  const std::string shared = "../shared/models/stories260K.gguf";
  if (env.fs->Exists(shared)) return shared;
  const std::string demo = (std::filesystem::path(env.exe_dir) / "strata-demo.gguf").string();
  log.Warn(
      "no model given: using a random-weight demo model, so the text it writes is "
      "gibberish. Point strata at a real GGUF with -m FILE or STRATA_MODEL=FILE.");
  if (!env.fs->Exists(demo)) {
    model::SyntheticOptions o;
    o.shape = model::DemoShape();
    o.name = "strata-demo (random weights)";
    STRATA_RETURN_IF_ERROR(model::WriteSyntheticModel(*env.fs, demo, o, log));
  }
  return demo;
}

CLI::App* EvalGroup(CLI::App& app) {
  const std::vector<CLI::App*> groups =
      app.get_subcommands([](CLI::App* a) { return a->get_name() == "eval"; });
  if (!groups.empty()) return groups.front();
  CLI::App* eval = app.add_subcommand("eval", "Evaluate a component");
  eval->require_subcommand(1);
  return eval;
}

}  // namespace strata::cli
