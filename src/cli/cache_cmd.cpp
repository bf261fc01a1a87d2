// `strata cache export`: a running server's cache tiers and cached prompt
// prefixes as a snapshot file (GET /admin/cache/snapshot), for `strata
// serve --warm-from` on a new instance.
#include <fmt/format.h>

#include "cli/commands.h"
#include "net/http_client.h"

namespace strata::cli {
namespace {

struct CacheExportFlags {
  std::string url = "http://127.0.0.1:8080";
  std::string admin_key_file;
  std::string out;
  double timeout_s = 300;
  std::string log_level = "warn";
};

int RunCacheExport(const Env& env, const CacheExportFlags& f) {
  if (f.admin_key_file.empty()) return UsageError("--admin-key-file FILE is required");
  if (!(f.timeout_s > 0 && f.timeout_s <= 86400)) {
    return UsageError(fmt::format("--timeout {} is outside (0, 86400] seconds", f.timeout_s));
  }
  auto key = ReadKeyFile(env, "--admin-key-file", f.admin_key_file);
  if (!key.ok()) return ReportError(key.status());
  auto log = MakeLogger(f.log_level);
  auto client = net::HttpClient::Create({}, *log);
  if (!client.ok()) return ReportError(client.status());
  net::ClientRequest req;
  req.url = f.url + "/admin/cache/snapshot";
  req.headers.Set("Authorization", "Bearer " + *key);
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(f.timeout_s * 1000));
  req.first_byte_timeout = timeout;
  req.total_timeout = timeout;
  auto got = (*client)->Fetch(std::move(req));
  (*client)->Stop();
  if (!got.ok()) return ReportError(got.status());
  if (got->status != 200) {
    std::fprintf(stderr, "strata: %s answered %d: %s\n", f.url.c_str(), got->status,
                 got->body.substr(0, 500).c_str());
    return kExitFailure;
  }
  auto file = env.fs->NewWritableFile(f.out);
  if (!file.ok()) return ReportError(file.status());
  const auto* data = reinterpret_cast<const uint8_t*>(got->body.data());
  util::Status st = (*file)->Append(std::span<const uint8_t>(data, got->body.size()));
  if (st.ok()) st = (*file)->Sync();
  if (st.ok()) st = (*file)->Close();
  if (!st.ok()) return ReportError(st);
  std::printf("wrote %s (%zu bytes): load it with strata serve --warm-from %s\n", f.out.c_str(),
              got->body.size(), f.out.c_str());
  return kExitOk;
}

}  // namespace

Command RegisterCache(CLI::App& app) {
  auto f = std::make_shared<CacheExportFlags>();
  CLI::App* cache = app.add_subcommand("cache", "A running server's caches");
  cache->require_subcommand(1);
  CLI::App* cmd = cache->add_subcommand(
      "export",
      "Write a running server's cache tiers (L1, L3, semantic) and cached prompt prefixes (L2) to "
      "a file, for strata serve --warm-from on a new instance");
  cmd->add_option("--url", f->url, "The running server")->capture_default_str();
  cmd->add_option("--admin-key-file", f->admin_key_file, "File whose first line is its admin key")
      ->required();
  cmd->add_option("-o,--output,FILE", f->out, "The snapshot file to write")->required();
  cmd->add_option("--timeout", f->timeout_s, "Seconds to wait for the snapshot")
      ->capture_default_str();
  cmd->add_option("--log-level", f->log_level, "debug, info, warn, error or off")
      ->capture_default_str();
  // `export` is the group's one subcommand (required above): the group runs it.
  return {cache, [f](const Env& env) { return RunCacheExport(env, *f); }};
}

}  // namespace strata::cli
