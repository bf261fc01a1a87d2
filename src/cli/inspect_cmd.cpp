// `strata inspect`: print a GGUF file's metadata and tensor table.
#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "format/gguf.h"

namespace strata::cli {
namespace {

struct InspectFlags {
  std::string path;
  bool tensors = false;
};

int RunInspect(const Env& env, const InspectFlags& f) {
  auto gguf = format::GgufFile::Open(*env.fs, f.path);
  if (!gguf.ok()) return ReportError(gguf.status());
  const format::GgufFile& g = **gguf;
  fmt::print("{}: GGUF v{}, {} metadata keys, {} tensors, alignment {}, data at {}\n", f.path,
             g.version(), g.metadata().size(), g.tensors().size(), g.alignment(), g.data_offset());
  for (const auto& [key, value] : g.metadata()) {
    fmt::print("  {:<48} {}\n", key, value.DebugString());
  }
  if (f.tensors) {
    for (const auto& t : g.tensors()) {
      std::string shape;
      for (size_t i = 0; i < t.shape.size(); ++i)
        shape += (i ? " x " : "") + std::to_string(t.shape[i]);
      fmt::print("  {:<40} {:<7} [{}] {} bytes @ {}\n", t.name, kernels::TypeName(t.type), shape,
                 t.n_bytes, g.data_offset() + t.offset);
    }
  }
  return kExitOk;
}

}  // namespace

Command RegisterInspect(CLI::App& app) {
  auto f = std::make_shared<InspectFlags>();
  CLI::App* cmd = app.add_subcommand("inspect", "Show a GGUF file's metadata and tensors");
  cmd->add_option("file", f->path, "GGUF file")->required();
  cmd->add_flag("--tensors", f->tensors, "Also list every tensor");
  return {cmd, [f](const Env& env) { return RunInspect(env, *f); }};
}

}  // namespace strata::cli
