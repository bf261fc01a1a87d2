// cli/serve_audit.h — the `strata serve` flags of the audit log and the
// response watermark (server/compliance.h), and the objects they start.
// docs/formats/audit_log.md has the file format, docs/api.md the header.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "obs/audit_log.h"
#include "obs/metrics.h"
#include "obs/watermark.h"
#include "server/compliance.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/status.h"

namespace strata::cli {

// Each default is the obs option's (obs/audit_log.h); ranges in the --help.
struct AuditFlags {
  std::string audit_log;       // FILE; empty = no audit log
  std::string audit_key_file;  // Ed25519 private key (PEM) or HMAC secret; empty = unsigned
  bool audit_tokens = false;
  bool audit_fail_closed = false;
  uint64_t audit_max_file_bytes = obs::AuditLogOptions{}.max_file_bytes;
  int32_t audit_sync_ms = static_cast<int32_t>(obs::AuditLogOptions{}.sync_interval.count());
  int32_t audit_sync_records = obs::AuditLogOptions{}.sync_records;
  uint64_t audit_queue = obs::AuditLogOptions{}.queue_records;
  int32_t audit_checkpoint_records = obs::AuditLogOptions{}.checkpoint_records;
  int32_t audit_checkpoint_s =
      static_cast<int32_t>(obs::AuditLogOptions{}.checkpoint_interval.count());
  std::string watermark_key_file;  // HMAC secret; empty = no watermark
};

void RegisterAuditFlags(CLI::App& cmd, AuditFlags& flags);

// Ranges, and flags that need --audit-log; InvalidArgument naming the flag.
util::Status ValidateAuditFlags(const AuditFlags& flags);

// The audit log and watermarker the flags ask for, and the server's view of
// them (whose pointers stay valid while this lives).
struct Compliance {
  std::unique_ptr<obs::AuditLog> audit_log;
  std::unique_ptr<obs::Watermarker> watermarker;
  server::ComplianceOptions options;
};

// Loads the keys and opens the audit log (continuing its chain); errors
// name the file (a key that is not one, a log that cannot go on).
// `metrics` must not render after the Compliance is destroyed.
util::StatusOr<std::unique_ptr<Compliance>> StartCompliance(const Env& env, const AuditFlags& flags,
                                                            obs::MetricsRegistry& metrics,
                                                            const util::Clock& clock,
                                                            util::Logger& log);

// Writes the audit log's close record (after the server stopped), logging
// what it wrote.
void CloseCompliance(Compliance& compliance, util::Logger& log);

}  // namespace strata::cli
