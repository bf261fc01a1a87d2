// strata — the command-line entry point and composition root: it builds the
// real file system, clock and loggers and hands them to the subcommands.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "cli/commands.h"

namespace {

std::string ExeDir() {
  std::error_code ec;
  const auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return ".";
  return p.parent_path().string();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace strata::cli;
  CLI::App app{"strata: an LLM serving engine for GGUF models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "strata " STRATA_VERSION);
  const std::vector<Command> commands = {
      RegisterServe(app),        RegisterGenerate(app), RegisterBench(app),
      RegisterMkModel(app),      RegisterInspect(app),  RegisterEvalSampling(app),
      RegisterConfig(app),       RegisterAudit(app),    RegisterWatermark(app),
      RegisterReplay(app),       RegisterPlan(app),     RegisterEmbed(app),
      RegisterTrainEncoder(app), RegisterCache(app),    RegisterTune(app)};
  // Subcommands that join a group registered above (`eval l3` under `eval`);
  // they run instead of the group's own runner when parsed.
  const std::vector<Command> members = {RegisterEvalL3(app), RegisterEvalSemantic(app)};

  // A first word that names no command gets a plain answer, not a parser message.
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    std::string names;
    for (const Command& c : commands) {
      known |= c.app->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + c.app->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "strata: unknown command '%s' (commands: %s; see strata --help)\n",
                   argv[1], names.c_str());
      return kExitUsage;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitUsage;
  }

  auto fs = strata::util::NewPosixFileSystem();
  Env env;
  env.fs = fs.get();
  env.exe_dir = ExeDir();
  env.env_var = [](const std::string& name) {
    const char* v = std::getenv(name.c_str());
    return std::string(v != nullptr ? v : "");
  };
  for (const Command& c : members) {
    if (c.app->parsed()) return c.run(env);
  }
  for (const Command& c : commands) {
    if (c.app->parsed()) return c.run(env);
  }
  return kExitUsage;
}
