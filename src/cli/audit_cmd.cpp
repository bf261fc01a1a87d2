// `strata audit verify [--key-file KEY] [--json] FILE...`: checks an audit
// log written by `strata serve --audit-log` (obs/audit_verify.h): every
// record's hash, the chain across the files (given in any order), and with
// a key every signed checkpoint. Exit codes: 0 intact, 1 tampered (the first
// bad record is named), a file that cannot be read, or a key that signed
// none of the log's checkpoints, 2 invalid arguments,
// 3 intact but incomplete (a crash's partial line, records the writer
// dropped or lost). docs/formats/audit_log.md has the format.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "obs/audit_verify.h"
#include "obs/crypto.h"

namespace strata::cli {
namespace {

constexpr int kExitIncomplete = 3;

struct AuditVerifyFlags {
  std::vector<std::string> files;
  std::string key_file;
  bool json = false;
};

std::string Where(const obs::AuditProblem& p) {
  std::string at = p.file;
  if (p.line > 0) at += fmt::format(" line {}", p.line);
  if (p.seq) at += fmt::format(" (seq {})", *p.seq);
  return at;
}

nlohmann::json ProblemJson(const obs::AuditProblem& p) {
  nlohmann::json j = {{"file", p.file}, {"line", p.line}, {"what", p.what}, {"loss", p.loss}};
  j["seq"] = p.seq ? nlohmann::json(*p.seq) : nlohmann::json(nullptr);
  return j;
}

void PrintJson(const obs::AuditVerifyReport& r, const obs::Verifier* key) {
  nlohmann::json j = {{"verdict", obs::VerdictName(r.verdict)},
                      {"files", r.files},
                      {"records", r.records},
                      {"requests", r.requests},
                      {"first_seq", r.first_seq},
                      {"last_seq", r.last_seq},
                      {"from_genesis", r.from_genesis},
                      {"closed", r.closed},
                      {"checkpoints", r.checkpoints},
                      {"checkpoints_checked", r.checkpoints_checked},
                      {"checkpoints_verified", r.checkpoints_verified},
                      {"unsigned_tail", r.unsigned_tail},
                      {"dropped", r.dropped}};
  j["key_id"] = key ? nlohmann::json(key->key_id()) : nlohmann::json(nullptr);
  j["first_bad"] = r.first_bad ? ProblemJson(*r.first_bad) : nlohmann::json(nullptr);
  j["notes"] = nlohmann::json::array();
  for (const auto& n : r.notes) j["notes"].push_back(ProblemJson(n));
  std::printf("%s\n", j.dump(2).c_str());
}

void PrintText(const obs::AuditVerifyReport& r, const obs::Verifier* key) {
  if (r.verdict == obs::AuditVerifyReport::Verdict::kTampered) {
    std::printf("TAMPERED: %s: %s\n", Where(*r.first_bad).c_str(), r.first_bad->what.c_str());
    std::printf("(records before it in chain order checked out: %llu)\n",
                static_cast<unsigned long long>(r.records));
    return;
  }
  std::printf("audit log: %llu file(s), seq %llu..%llu%s, %llu records, %llu requests%s\n",
              static_cast<unsigned long long>(r.files),
              static_cast<unsigned long long>(r.first_seq),
              static_cast<unsigned long long>(r.last_seq),
              r.from_genesis ? " (from the start of the chain)" : "",
              static_cast<unsigned long long>(r.records),
              static_cast<unsigned long long>(r.requests), r.closed ? ", closed cleanly" : "");
  if (key == nullptr) {
    std::printf("checkpoints: %llu, NOT verified (no --key-file): only the chain was checked\n",
                static_cast<unsigned long long>(r.checkpoints));
  } else {
    std::printf(
        "checkpoints: %llu, %llu verified with key %s (%s); %llu record(s) after the last "
        "verified one are covered by the chain only\n",
        static_cast<unsigned long long>(r.checkpoints),
        static_cast<unsigned long long>(r.checkpoints_verified), key->key_id().c_str(),
        std::string(obs::SignatureAlgorithmName(key->algorithm())).c_str(),
        static_cast<unsigned long long>(r.unsigned_tail));
  }
  for (const auto& n : r.notes) {
    std::printf("%s: %s: %s\n", n.loss ? "loss" : "note", Where(n).c_str(), n.what.c_str());
  }
  std::printf("%s\n", r.verdict == obs::AuditVerifyReport::Verdict::kIntact
                          ? "INTACT"
                          : "INCOMPLETE: the chain holds, but records are missing (see 'loss')");
}

int RunAuditVerify(const Env& env, const AuditVerifyFlags& f) {
  if (f.files.empty()) return UsageError("audit verify: name the log's files (FILE...)");
  std::unique_ptr<obs::Verifier> key;
  if (!f.key_file.empty()) {
    auto loaded = obs::LoadVerifier(*env.fs, f.key_file);
    if (!loaded.ok()) return UsageError("--key-file: " + loaded.status().message());
    key = std::move(loaded).value();
  }
  // Mapped, not copied: a log may be large.
  std::vector<std::unique_ptr<util::MappedFile>> mapped;
  std::vector<obs::AuditFile> files;
  for (const std::string& path : f.files) {
    auto m = env.fs->MapReadOnly(path);
    if (!m.ok()) return ReportError(m.status());
    const auto bytes = (*m)->bytes();
    files.push_back(
        {path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size())});
    mapped.push_back(std::move(m).value());
  }
  const obs::AuditVerifyReport r = obs::VerifyAuditLog(files, key.get());
  if (f.json) {
    PrintJson(r, key.get());
  } else {
    PrintText(r, key.get());
  }
  if (key && r.verdict != obs::AuditVerifyReport::Verdict::kTampered && r.checkpoints > 0 &&
      r.checkpoints_verified == 0) {
    // Asked to check signatures, none could be: that is no verification.
    if (!f.json)
      std::printf("NOT VERIFIED: no checkpoint of this log was signed with the given key\n");
    return kExitFailure;
  }
  switch (r.verdict) {
    case obs::AuditVerifyReport::Verdict::kIntact:
      return kExitOk;
    case obs::AuditVerifyReport::Verdict::kIncomplete:
      return kExitIncomplete;
    case obs::AuditVerifyReport::Verdict::kTampered:
      return kExitFailure;
  }
  return kExitFailure;
}

}  // namespace

Command RegisterAudit(CLI::App& app) {
  auto f = std::make_shared<AuditVerifyFlags>();
  CLI::App* audit = app.add_subcommand("audit", "Check an audit log written by serve --audit-log");
  audit->require_subcommand(1);
  CLI::App* cmd = audit->add_subcommand(
      "verify",
      "Check every record's hash and the chain across FILE... (any order), and with --key-file "
      "the signed checkpoints. Exit 0 intact, 1 tampered (the first bad record is named), 2 "
      "invalid arguments, 3 intact but incomplete (a crash's partial line, records dropped)");
  cmd->add_option("files", f->files, "The log's files: FILE and its rotated FILE.NNNNNN")
      ->required();
  cmd->add_option("--key-file", f->key_file,
                  "Verify checkpoints with this key: the Ed25519 public (or private) key in PEM, "
                  "or the HMAC secret the server signed with");
  cmd->add_flag("--json", f->json, "Print the report as JSON");
  // The runner belongs to `audit`, the word main() recognises.
  return {audit, [f](const Env& env) { return RunAuditVerify(env, *f); }};
}

}  // namespace strata::cli
