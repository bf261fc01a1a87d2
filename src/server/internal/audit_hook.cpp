#include "server/internal/audit_hook.h"

#include <algorithm>

namespace strata::server {

RequestAudit::RequestAudit(const ComplianceOptions& options, const util::Clock& clock,
                           std::string_view request_id, const char* endpoint,
                           std::optional<std::string_view> body,
                           std::chrono::steady_clock::time_point t0) {
  if (options.audit_log == nullptr && options.watermarker == nullptr) return;
  options_ = &options;
  clock_ = &clock;
  t0_ = t0;
  record_.request_id = std::string(request_id);
  record_.endpoint = endpoint;
  record_.cache = "none";
  // The body is borrowed only until the handler returns: hashed now.
  if (options.audit_log != nullptr && body) record_.request_sha256 = obs::Hex(obs::Sha256(*body));
}

util::Status RequestAudit::Admit(const ComplianceOptions& options) {
  if (!options.fail_closed || options.audit_log == nullptr || options.audit_log->healthy()) {
    return util::OkStatus();
  }
  return util::UnavailableError(
      "the audit log is not keeping records (its queue is full or its disk fails), and this "
      "server refuses requests it cannot record; retry shortly");
}

void RequestAudit::SetTenant(const std::string& tenant) {
  if (active()) record_.tenant = tenant;
}

void RequestAudit::SetModel(const std::string& model, const backend::Backend* backend) {
  if (!active()) return;
  record_.model = model;
  if (backend != nullptr) {
    record_.backend = backend->name();
    record_.backend_kind = std::string(backend->kind());
  }
}

void RequestAudit::SetStream(bool stream) {
  if (active()) record_.stream = stream;
}

void RequestAudit::SetGeneration(const gateway::Generation& gen) {
  if (!active()) return;
  record_.cache = std::string(gateway::CacheOutcomeName(gen.cache_outcome()));
  record_.similarity = gen.cache_similarity();
  content_.choices.resize(static_cast<size_t>(std::max(gen.n_choices(), 0)));
}

void RequestAudit::OnDelta(const gateway::Event& e) {
  if (!active() || e.index < 0) return;
  const size_t i = static_cast<size_t>(e.index);
  if (i >= content_.choices.size()) content_.choices.resize(i + 1);
  obs::ResponseContent::Choice& c = content_.choices[i];
  c.text += e.text;
  backend::AppendToolCallDeltas(c.tool_calls, e.tool_calls);
  if (options_->audit_tokens && options_->audit_log != nullptr && !e.logprobs.empty()) {
    auto it = std::find_if(record_.tokens.begin(), record_.tokens.end(),
                           [&](const obs::AuditRecord::Tokens& t) { return t.choice == e.index; });
    if (it == record_.tokens.end()) {
      record_.tokens.push_back({.choice = e.index, .ids = {}, .logprobs = {}});
      it = record_.tokens.end() - 1;
    }
    for (const auto& lp : e.logprobs) {
      it->ids.push_back(lp.id);
      it->logprobs.push_back(lp.logprob);
    }
  }
}

std::string RequestAudit::Watermark() {
  if (!active() || options_->watermarker == nullptr) return "";
  record_.watermark = options_->watermarker->Mark(record_.request_id, record_.model, content_);
  return record_.watermark;
}

void RequestAudit::Record(int http_status, const util::Status& status, bool cancelled,
                          int64_t prompt_tokens, int64_t completion_tokens) {
  if (!active() || recorded_ || options_->audit_log == nullptr) return;
  recorded_ = true;
  record_.time = clock_->WallNow();
  record_.duration_ms = util::SecondsBetween(t0_, clock_->Now()) * 1e3;
  record_.http_status = http_status;
  record_.prompt_tokens = prompt_tokens;
  record_.completion_tokens = completion_tokens;
  if (!status.ok()) {
    record_.outcome = "error";
    record_.error = status.reason() != util::ErrorReason::kNone
                        ? std::string(util::ErrorReasonName(status.reason()))
                        : std::string(util::StatusCodeName(status.code()));
  } else if (cancelled) {
    record_.outcome = "cancelled";
    record_.error = "client_disconnected";
  } else {
    record_.outcome = "ok";
    record_.response_sha256 = obs::Hex(obs::ResponseDigest(content_));
  }
  std::sort(record_.tokens.begin(), record_.tokens.end(),
            [](const auto& a, const auto& b) { return a.choice < b.choice; });
  options_->audit_log->Append(record_);
}

void RequestAudit::RecordBody(int http_status, std::string_view body, int64_t prompt_tokens) {
  if (!active() || recorded_ || options_->audit_log == nullptr) return;
  recorded_ = true;
  record_.time = clock_->WallNow();
  record_.duration_ms = util::SecondsBetween(t0_, clock_->Now()) * 1e3;
  record_.http_status = http_status;
  record_.prompt_tokens = prompt_tokens;
  record_.outcome = "ok";
  record_.response_sha256 = obs::Hex(obs::Sha256(body));
  options_->audit_log->Append(record_);
}

}  // namespace strata::server
