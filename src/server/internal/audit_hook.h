// server/internal/audit_hook.h — one API request's audit record and
// response watermark (server/compliance.h says what is recorded), filled in
// by the handler as the request goes: its body when read, its tenant and
// model once known, each delta of its answer, and its outcome at the end.
//
// Promise: inactive (every call a no-op costing nothing) unless the server
// has an audit log or a watermarker. Record appends at most one record per
// request, however often it is called.
//
// Threading: a RequestAudit belongs to the thread handling its request at
// the time (a worker, then the connection's I/O thread); AuditLog::Append
// is thread-safe.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/gateway.h"
#include "obs/audit_log.h"
#include "obs/watermark.h"
#include "server/compliance.h"
#include "util/clock.h"
#include "util/status.h"

namespace strata::server {

class RequestAudit {
 public:
  RequestAudit() = default;  // inactive
  // `body`: the request body as received; nullopt when the request was
  // refused before its body was read.
  RequestAudit(const ComplianceOptions& options, const util::Clock& clock,
               std::string_view request_id, const char* endpoint,
               std::optional<std::string_view> body, std::chrono::steady_clock::time_point t0);

  bool active() const { return options_ != nullptr; }
  // Whether the client should be refused (fail-closed, and the audit log is
  // losing records): Unavailable saying so, else OK.
  static util::Status Admit(const ComplianceOptions& options);

  void SetTenant(const std::string& tenant);
  // The served model id and the backend that serves it (may be null).
  void SetModel(const std::string& model, const backend::Backend* backend);
  void SetStream(bool stream);
  // How the cache served it, and how many choices it has.
  void SetGeneration(const gateway::Generation& gen);
  // A delta of the answer as the client receives it.
  void OnDelta(const gateway::Event& delta);
  // The watermark of the whole answer received (call once it is complete);
  // "" without a watermarker.
  std::string Watermark();
  // Appends the record: `http_status` sent, `status` of the outcome
  // ("ok" when OK, "cancelled" when `cancelled`, else "error"), and the
  // token counts. The response's hash is recorded for a complete answer
  // (status OK and not cancelled).
  void Record(int http_status, const util::Status& status, bool cancelled, int64_t prompt_tokens,
              int64_t completion_tokens);
  // An embeddings answer: its body's SHA-256 is the response hash.
  void RecordBody(int http_status, std::string_view body, int64_t prompt_tokens);

 private:
  const ComplianceOptions* options_ = nullptr;  // null: inactive
  const util::Clock* clock_ = nullptr;
  std::chrono::steady_clock::time_point t0_;
  obs::AuditRecord record_;
  obs::ResponseContent content_;  // what the client received, per choice
  bool recorded_ = false;
};

}  // namespace strata::server
