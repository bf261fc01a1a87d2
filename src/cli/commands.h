// cli/commands.h — the subcommands of the `strata` binary (the composition root).
//
// Each Register* adds a subcommand to the CLI11 app and returns it with a
// runner that executes it after parsing. Runners return the process exit code: 0 success,
// 1 runtime failure (the message says what), 2 invalid command-line values.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "util/file_system.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Everything a command may use from the outside world, built once in main().
struct Env {
  util::FileSystem* fs = nullptr;
  std::string exe_dir;  // directory of the running binary
  // The process environment's variable `name`, "" when unset.
  std::function<std::string(const std::string& name)> env_var = nullptr;
};

using Runner = std::function<int(const Env&)>;

struct Command {
  CLI::App* app;  // the subcommand, owned by the parent app
  Runner run;
};

Command RegisterGenerate(CLI::App& app);
Command RegisterInspect(CLI::App& app);
Command RegisterEmbed(CLI::App& app);
Command RegisterTrainEncoder(CLI::App& app);
Command RegisterCache(CLI::App& app);
Command RegisterPlan(CLI::App& app);
Command RegisterMkModel(CLI::App& app);
Command RegisterBench(CLI::App& app);
Command RegisterServe(CLI::App& app);
// `strata config check FILE` and `strata config defaults`.
Command RegisterConfig(CLI::App& app);
Command RegisterEvalSampling(CLI::App& app);
Command RegisterReplay(CLI::App& app);
// `strata eval l3` joins the `eval` group (creating it when no command before
// it has); the returned Command holds the `l3` subcommand itself, and main()
// runs it before the group's own runner.
Command RegisterEvalL3(CLI::App& app);
// `strata eval semantic`, in the same group.
Command RegisterEvalSemantic(CLI::App& app);
// The `eval` group's subcommand of `app`, added by the first member that asks.
CLI::App* EvalGroup(CLI::App& app);
// `strata audit verify` (cli/audit_cmd.cpp) and `strata watermark verify`
// (cli/watermark_cmd.cpp).
Command RegisterAudit(CLI::App& app);
// `strata tune calibrate|scenarios|sensitivity|pareto` (cli/tune_cmd.cpp).
Command RegisterTune(CLI::App& app);
Command RegisterWatermark(CLI::App& app);

// The model to use: `flag` if set, else $STRATA_MODEL, else
// ../shared/models/stories260K.gguf (relative to the working directory) if
// present, else a random-weight demo model written next to the binary (with a notice that its text
// is gibberish).
util::StatusOr<std::string> ResolveModelPath(const Env& env, const std::string& flag,
                                             util::Logger& log);

// The secret on the first line of `path` (surrounding blanks and the line
// end dropped): an upstream credential, the admin key. InvalidArgument
// naming `flag` when the file cannot be read or its first line is empty;
// the message never holds the file's content.
util::StatusOr<std::string> ReadKeyFile(const Env& env, const std::string& flag,
                                        const std::string& path);

// Print the message on stderr and return kExitFailure / kExitUsage.
int ReportError(const util::Status& status);
int UsageError(const std::string& message);

// Parses --log-level; defaults to info.
std::unique_ptr<util::Logger> MakeLogger(const std::string& level);

}  // namespace strata::cli
