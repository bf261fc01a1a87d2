#include "cli/serve_snapshots.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <sstream>

namespace strata::cli {

namespace {

constexpr int64_t kMaxRetentionS = 3650LL * 86400;

// --snapshot-tenants as a list (empty names skipped).
std::vector<std::string> Tenants(const SnapshotFlags& f) {
  std::vector<std::string> out;
  std::stringstream ss(f.tenants);
  std::string t;
  while (std::getline(ss, t, ',')) {
    if (!t.empty()) out.push_back(t);
  }
  return out;
}

}  // namespace

void RegisterSnapshotFlags(CLI::App& cmd, SnapshotFlags& f) {
  cmd.add_option("--snapshots", f.dir,
                 "Record every completed generation request in DIR, encrypted (AES-256-GCM), "
                 "for GET /v1/snapshots/{id} and `strata replay ID`");
  cmd.add_option("--snapshot-key-file", f.key_file,
                 "The snapshots' key: a file of 32 raw bytes or 64 hex digits (e.g. `openssl rand "
                 "-hex 32`); required with --snapshots; never logged");
  cmd.add_option("--snapshot-retention", f.retention,
                 "How long a snapshot is kept: seconds, or a number with s, m, h or d; 1 s to "
                 "3650 d")
      ->capture_default_str();
  cmd.add_option("--snapshot-max-bytes", f.max_bytes,
                 "Bytes of snapshot files kept at most (oldest deleted first), 2^20 to 2^50")
      ->capture_default_str();
  cmd.add_option("--snapshot-tenants", f.tenants,
                 "Comma-separated tenants whose requests are recorded (default: every tenant)");
  cmd.add_option("--snapshot-queue", f.queue,
                 "Snapshots waiting to be written at most, 1 to 65536; more are dropped and "
                 "counted (strata_snapshots_dropped_total)")
      ->capture_default_str();
}

util::StatusOr<std::chrono::seconds> ParseRetention(const std::string& text, const char* flag) {
  const auto bad = [&] {
    return util::InvalidArgumentError(fmt::format(
        "{} '{}' is not a duration from 1 s to 3650 d (seconds, or a number with s, m, h or d: "
        "30d, 12h)",
        flag, text));
  };
  if (text.empty()) return bad();
  int64_t unit = 1;
  std::string_view digits = text;
  switch (text.back()) {
    case 's':
      digits.remove_suffix(1);
      break;
    case 'm':
      unit = 60;
      digits.remove_suffix(1);
      break;
    case 'h':
      unit = 3600;
      digits.remove_suffix(1);
      break;
    case 'd':
      unit = 86400;
      digits.remove_suffix(1);
      break;
    default:
      break;
  }
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || n < 1 ||
      n > kMaxRetentionS / unit) {
    return bad();
  }
  return std::chrono::seconds(n * unit);
}

util::Status ValidateSnapshotFlags(const SnapshotFlags& f) {
  if (f.dir.empty()) {
    if (!f.key_file.empty()) {
      return util::InvalidArgumentError("--snapshot-key-file needs --snapshots DIR");
    }
    if (!f.tenants.empty()) {
      return util::InvalidArgumentError("--snapshot-tenants needs --snapshots DIR");
    }
    return util::OkStatus();
  }
  for (const std::string& t : Tenants(f)) {
    const bool ok =
        t.size() <= 64 && std::all_of(t.begin(), t.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
        });
    if (!ok) {
      return util::InvalidArgumentError(
          fmt::format("--snapshot-tenants: '{}' is not a tenant name (1-64 of [A-Za-z0-9_.-])", t));
    }
  }
  if (f.key_file.empty()) {
    return util::InvalidArgumentError(
        "--snapshots needs --snapshot-key-file FILE (32 raw bytes or 64 hex digits, e.g. from "
        "`openssl rand -hex 32`): snapshots are only ever written encrypted");
  }
  STRATA_RETURN_IF_ERROR(ParseRetention(f.retention, "--snapshot-retention").status());
  if (f.max_bytes < (1u << 20) || f.max_bytes > (1ull << 50)) {
    return util::InvalidArgumentError(
        fmt::format("--snapshot-max-bytes {} is outside [2^20, 2^50]", f.max_bytes));
  }
  if (f.queue < 1 || f.queue > 65536) {
    return util::InvalidArgumentError(
        fmt::format("--snapshot-queue {} is outside [1, 65536]", f.queue));
  }
  return util::OkStatus();
}

util::StatusOr<std::unique_ptr<SnapshotServing>> OpenSnapshots(const SnapshotFlags& f,
                                                               const Env& env,
                                                               obs::MetricsRegistry& metrics,
                                                               const util::Clock& clock,
                                                               util::Logger& log) {
  if (f.dir.empty()) return std::unique_ptr<SnapshotServing>();
  STRATA_RETURN_IF_ERROR(ValidateSnapshotFlags(f));
  auto key = obs::SnapshotKey::Load(*env.fs, f.key_file);
  if (!key.ok())
    return util::InvalidArgumentError("--snapshot-key-file: " + key.status().message());
  obs::SnapshotStoreOptions o;
  o.dir = f.dir;
  STRATA_ASSIGN_OR_RETURN(o.retention, ParseRetention(f.retention, "--snapshot-retention"));
  o.max_bytes = f.max_bytes;
  o.max_pending = static_cast<size_t>(f.queue);
  auto s = std::make_unique<SnapshotServing>();
  auto store = obs::SnapshotStore::Open(o, std::move(key).value(), *env.fs, clock, &metrics, log);
  if (!store.ok()) return util::UnavailableError("--snapshots: " + store.status().message());
  s->store = std::move(store).value();
  server::SnapshotOptions so;
  so.store = s->store.get();
  so.tenants = Tenants(f);
  so.strata_version = STRATA_VERSION;
  s->recorder = std::make_unique<server::SnapshotRecorder>(std::move(so));
  log.Info("request snapshots: {} (encrypted), kept {} and under {:.1f} MiB, tenants {}", f.dir,
           f.retention, static_cast<double>(f.max_bytes) / (1 << 20),
           f.tenants.empty() ? "all" : f.tenants);
  return s;
}

void AddLocalModel(SnapshotServing& snapshots, const Env& env, const std::string& name,
                   const std::string& path, const model::Model& model,
                   const std::string& chat_format, bool prompt_special_tokens,
                   int32_t max_tokens_cap, const std::string& kv_type, const std::string& repack,
                   util::Logger& log) {
  server::SnapshotModel m{.path = path,
                          .digest = nullptr,
                          .chat_format = chat_format,
                          .prompt_special_tokens = prompt_special_tokens,
                          .max_tokens_cap = max_tokens_cap,
                          .kv_type = kv_type,
                          .repack = repack};
  // A mapping of its own: the digest outlives nothing it borrows.
  auto mapped = env.fs->MapReadOnly(path);
  const util::MappedFile* loaded = model.gguf().file();
  if (!mapped.ok()) {
    log.Warn("snapshots: no SHA-256 of the model ({}); replay checks its fingerprint only",
             mapped.status().message());
  } else if (loaded != nullptr && loaded->identity() && (*mapped)->identity() &&
             !(*loaded->identity() == *(*mapped)->identity())) {
    log.Warn("snapshots: {} changed since it was loaded; no SHA-256 of the model is recorded",
             path);
  } else {
    auto digest = std::make_shared<obs::FileDigest>(std::move(mapped).value());
    snapshots.store->AddDigest(digest);
    m.digest = std::move(digest);
  }
  snapshots.recorder->AddModel(name, std::move(m));
}

}  // namespace strata::cli
