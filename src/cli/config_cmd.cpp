// `strata config check FILE` and `strata config defaults`: the configuration
// file of `strata serve` checked without starting anything, and the file of
// every knob at its default.
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/serve_config.h"

namespace strata::cli {
namespace {

// The serve command's knobs (their help is its flags' descriptions).
config::Schema Schema() {
  CLI::App scratch;
  const Command serve = RegisterServe(scratch);
  return ServeSchema(*serve.app);
}

// Every problem of `path` on stderr, each with its line; the values then
// checked together as `strata serve` checks them (ranges, combinations, the
// files the knobs name). 0 when it would start, 1 otherwise.
int Check(const Env& env, const std::string& path) {
  const config::Schema schema = Schema();
  auto text = env.fs->ReadFile(path);
  if (!text.ok()) {
    std::fprintf(stderr, "strata: error: config file '%s': %s\n", path.c_str(),
                 text.status().message().c_str());
    return kExitFailure;
  }
  const config::ParseResult r = config::Parse(*text, schema);
  for (const config::Diagnostic& d : r.errors) {
    std::fprintf(stderr, "%s\n", config::FormatDiagnostic(path, d).c_str());
  }
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %zu problem%s; nothing else was checked\n", path.c_str(),
                 r.errors.size(), r.errors.size() == 1 ? "" : "s");
    return kExitFailure;
  }
  ServeFlags flags;
  ApplyConfig(r.document, {}, flags);
  if (const util::Status st = CheckServeFlags(env, flags); !st.ok()) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), InConfigTerms(st.message()).c_str());
    return kExitFailure;
  }
  size_t live = 0;
  for (const auto& [key, value] : r.document.values) {
    const config::Knob* k = schema.Find(key);
    live += k != nullptr && k->reload == config::Reload::kLive;
  }
  std::printf("%s: ok (%zu knobs set, %zu of them reload live; the rest at their defaults)\n",
              path.c_str(), r.document.values.size(), live);
  return kExitOk;
}

}  // namespace

Command RegisterConfig(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand(
      "config", "The configuration file of strata serve: check one, or print the defaults");
  cmd->require_subcommand(1);
  auto path = std::make_shared<std::string>();
  CLI::App* check = cmd->add_subcommand(
      "check",
      "Check a configuration file: every problem with its line (unknown keys, types, "
      "ranges, secrets), then the values together as strata serve would; exit 0 if it "
      "would start");
  check->add_option("FILE", *path, "The TOML file")->required();
  CLI::App* defaults = cmd->add_subcommand(
      "defaults",
      "Print a complete configuration file: every knob at its default, with its "
      "help, unit, range and whether it reloads live");
  return {cmd, [check, defaults, path](const Env& env) {
            if (check->parsed()) return Check(env, *path);
            if (defaults->parsed()) {
              const std::string text = config::RenderDefaults(
                  Schema(), "strata serve configuration (strata config defaults)");
              std::fwrite(text.data(), 1, text.size(), stdout);
              return kExitOk;
            }
            return kExitUsage;
          }};
}

}  // namespace strata::cli
