#include "cli/serve_audit.h"

#include <fmt/format.h>

namespace strata::cli {

void RegisterAuditFlags(CLI::App& cmd, AuditFlags& f) {
  cmd.add_option("--audit-log", f.audit_log,
                 "Append a hash-chained audit record of every generation and embeddings request "
                 "to FILE (JSON lines; rotated files are FILE.NNNNNN; check with `strata audit "
                 "verify`)");
  cmd.add_option("--audit-key-file", f.audit_key_file,
                 "Sign audit checkpoints with this key: an Ed25519 private key in PEM (verify "
                 "with its public key) or an HMAC secret of at least 32 bytes");
  cmd.add_flag("--audit-tokens", f.audit_tokens,
               "Also record each output token's id and logprob (the local model's; remote "
               "backends give text only)");
  cmd.add_flag("--audit-fail-closed", f.audit_fail_closed,
               "Answer generation and embeddings requests 503 while the audit log loses records "
               "(queue full, disk failing); default: serve them and count the loss");
  cmd.add_option("--audit-max-file-bytes", f.audit_max_file_bytes,
                 "Rotate the audit log before a file passes this many bytes [4096, 2^40]")
      ->capture_default_str();
  cmd.add_option("--audit-sync-ms", f.audit_sync_ms,
                 "fsync the audit log at least every this many milliseconds: the most a power "
                 "cut loses [1, 60000]")
      ->capture_default_str();
  cmd.add_option("--audit-sync-records", f.audit_sync_records,
                 "fsync the audit log sooner once this many records are unsynced [1, 1000000]")
      ->capture_default_str();
  cmd.add_option("--audit-queue", f.audit_queue,
                 "Audit records that may wait for the writer; more are dropped and counted "
                 "[16, 10000000]")
      ->capture_default_str();
  cmd.add_option("--audit-checkpoint-records", f.audit_checkpoint_records,
                 "Records between signed checkpoints (with --audit-key-file) [1, 1000000000]")
      ->capture_default_str();
  cmd.add_option("--audit-checkpoint-s", f.audit_checkpoint_s,
                 "Seconds between signed checkpoints at most, while records come [1, 86400]")
      ->capture_default_str();
  cmd.add_option("--watermark-key-file", f.watermark_key_file,
                 "Sign each response with HMAC-SHA256 under this secret (at least 32 bytes): the "
                 "x-strata-watermark header, or a stream's last comment line");
}

util::Status ValidateAuditFlags(const AuditFlags& f) {
  using util::InvalidArgumentError;
  if (f.audit_max_file_bytes < 4096 || f.audit_max_file_bytes > (1ull << 40)) {
    return InvalidArgumentError(
        fmt::format("--audit-max-file-bytes {} is outside [4096, 2^40]", f.audit_max_file_bytes));
  }
  if (f.audit_sync_ms < 1 || f.audit_sync_ms > 60000) {
    return InvalidArgumentError(
        fmt::format("--audit-sync-ms {} is outside [1, 60000]", f.audit_sync_ms));
  }
  if (f.audit_sync_records < 1 || f.audit_sync_records > 1'000'000) {
    return InvalidArgumentError(
        fmt::format("--audit-sync-records {} is outside [1, 1000000]", f.audit_sync_records));
  }
  if (f.audit_queue < 16 || f.audit_queue > 10'000'000) {
    return InvalidArgumentError(
        fmt::format("--audit-queue {} is outside [16, 10000000]", f.audit_queue));
  }
  if (f.audit_checkpoint_records < 1 || f.audit_checkpoint_records > 1'000'000'000) {
    return InvalidArgumentError(fmt::format(
        "--audit-checkpoint-records {} is outside [1, 1000000000]", f.audit_checkpoint_records));
  }
  if (f.audit_checkpoint_s < 1 || f.audit_checkpoint_s > 86400) {
    return InvalidArgumentError(
        fmt::format("--audit-checkpoint-s {} is outside [1, 86400]", f.audit_checkpoint_s));
  }
  if (f.audit_log.empty()) {
    // Each of these would change nothing without a log: refused rather than ignored.
    const AuditFlags d;
    const char* needs =
        !f.audit_key_file.empty()                                  ? "--audit-key-file"
        : f.audit_tokens                                           ? "--audit-tokens"
        : f.audit_fail_closed                                      ? "--audit-fail-closed"
        : f.audit_max_file_bytes != d.audit_max_file_bytes         ? "--audit-max-file-bytes"
        : f.audit_sync_ms != d.audit_sync_ms                       ? "--audit-sync-ms"
        : f.audit_sync_records != d.audit_sync_records             ? "--audit-sync-records"
        : f.audit_queue != d.audit_queue                           ? "--audit-queue"
        : f.audit_checkpoint_records != d.audit_checkpoint_records ? "--audit-checkpoint-records"
        : f.audit_checkpoint_s != d.audit_checkpoint_s             ? "--audit-checkpoint-s"
                                                                   : nullptr;
    if (needs != nullptr) return InvalidArgumentError(fmt::format("{} needs --audit-log", needs));
  }
  return util::OkStatus();
}

util::StatusOr<std::unique_ptr<Compliance>> StartCompliance(const Env& env, const AuditFlags& f,
                                                            obs::MetricsRegistry& metrics,
                                                            const util::Clock& clock,
                                                            util::Logger& log) {
  auto c = std::make_unique<Compliance>();
  if (!f.watermark_key_file.empty()) {
    STRATA_ASSIGN_OR_RETURN(std::string secret, obs::LoadHmacKey(*env.fs, f.watermark_key_file));
    c->watermarker = std::make_unique<obs::Watermarker>(std::move(secret));
    log.Info("response watermark: HMAC-SHA256, key id {}", c->watermarker->key_id());
  }
  if (!f.audit_log.empty()) {
    std::unique_ptr<obs::Signer> signer;
    if (!f.audit_key_file.empty()) {
      STRATA_ASSIGN_OR_RETURN(signer, obs::LoadSigner(*env.fs, f.audit_key_file));
    }
    const std::string signing =
        signer ? fmt::format("checkpoints {} key {} every {} records or {} s",
                             obs::SignatureAlgorithmName(signer->algorithm()), signer->key_id(),
                             f.audit_checkpoint_records, f.audit_checkpoint_s)
               : "no checkpoints (no --audit-key-file)";
    const obs::AuditLogOptions o{
        .path = f.audit_log,
        .max_file_bytes = f.audit_max_file_bytes,
        .sync_interval = std::chrono::milliseconds(f.audit_sync_ms),
        .sync_records = f.audit_sync_records,
        .queue_records = static_cast<size_t>(f.audit_queue),
        .checkpoint_records = f.audit_checkpoint_records,
        .checkpoint_interval = std::chrono::seconds(f.audit_checkpoint_s),
    };
    STRATA_ASSIGN_OR_RETURN(
        c->audit_log, obs::AuditLog::Open(*env.fs, clock, o, std::move(signer), &metrics, log));
    log.Info("audit log: {} ({}; fsync every {} ms; {}{})", f.audit_log, signing, f.audit_sync_ms,
             f.audit_fail_closed ? "fails closed" : "fails open", f.audit_tokens ? "; tokens" : "");
  }
  c->options = server::ComplianceOptions{.audit_log = c->audit_log.get(),
                                         .watermarker = c->watermarker.get(),
                                         .audit_tokens = f.audit_tokens,
                                         .fail_closed = f.audit_fail_closed};
  return c;
}

void CloseCompliance(Compliance& c, util::Logger& log) {
  if (!c.audit_log) return;
  c.audit_log->Close();
  const obs::AuditLogStats s = c.audit_log->stats();
  log.Info("audit log closed: {} requests recorded (last seq {}), {} dropped, {} lost", s.appended,
           s.last_seq, s.dropped_queue_full + s.dropped_closed + s.dropped_write_error, s.lost);
}

}  // namespace strata::cli
