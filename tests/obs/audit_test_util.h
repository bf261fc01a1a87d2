// tests/obs/audit_test_util.h — what the audit log tests share: records,
// reading a log's files back, and editing lines.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "obs/audit_log.h"
#include "obs/audit_verify.h"
#include "testing/mem_file_system.h"

namespace strata::obs::testing_audit {

// RFC 8032, section 7.1, test 1: the key pair, as PKCS#8 / SPKI PEM.
inline constexpr const char* kEd25519Private =
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VwBCIEIJ1hsZ3v/VpguoRK9JLsLMREScVpezJpGXA7rAMcrn9g\n"
    "-----END PRIVATE KEY-----\n";
inline constexpr const char* kEd25519Public =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VwAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=\n"
    "-----END PUBLIC KEY-----\n";

inline AuditRecord Request(int i) {
  AuditRecord r;
  r.time = std::chrono::system_clock::time_point(std::chrono::seconds(1'800'000'000 + i));
  r.request_id = "req-" + std::to_string(i);
  r.tenant = i % 2 ? "alpha" : "beta";
  r.endpoint = "/v1/chat/completions";
  r.model = "stories260K";
  r.backend = "stories260K";
  r.backend_kind = "local";
  r.outcome = "ok";
  r.prompt_tokens = 10 + i;
  r.completion_tokens = 5;
  r.cache = "miss";
  r.request_sha256 = std::string(64, 'a');
  r.response_sha256 = std::string(64, 'b');
  return r;
}

// The files of the log at `path` (PATH and PATH.NNNNNN), their contents owned.
struct LogFiles {
  std::vector<std::pair<std::string, std::string>> files;  // (name, bytes), by name
  std::vector<AuditFile> View() const {
    std::vector<AuditFile> out;
    for (const auto& [name, bytes] : files) out.push_back({name, bytes});
    return out;
  }
  std::string& Bytes(const std::string& name) {
    for (auto& [n, b] : files) {
      if (n == name) return b;
    }
    files.emplace_back(name, "");
    return files.back().second;
  }
};

inline LogFiles ReadLog(testing::MemFileSystem& fs, const std::string& dir,
                        const std::string& base) {
  LogFiles out;
  auto names = fs.ListDir(dir);
  if (!names.ok()) return out;
  std::sort(names->begin(), names->end());
  for (const std::string& n : *names) {
    if (n.rfind(base, 0) != 0) continue;
    auto bytes = fs.ReadFile(dir + "/" + n);
    if (bytes.ok()) out.files.emplace_back(dir + "/" + n, *bytes);
  }
  return out;
}

inline std::vector<std::string> SplitLines(const std::string& bytes) {
  std::vector<std::string> lines;
  size_t from = 0;
  while (from < bytes.size()) {
    size_t nl = bytes.find('\n', from);
    if (nl == std::string::npos) nl = bytes.size() - 1;
    lines.push_back(bytes.substr(from, nl - from + 1));
    from = nl + 1;
  }
  return lines;
}

inline std::string JoinLines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l;
  return out;
}

}  // namespace strata::obs::testing_audit
