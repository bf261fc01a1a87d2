// server/compliance.h — what the server records and signs of each API
// request: the audit log (obs/audit_log.h) and the response watermark
// (obs/watermark.h), set once before serving (ServerOptions::compliance).
//
// Promise: with an audit log, every request to a generation endpoint
// (/v1/chat/completions, /v1/completions, /v1/messages) or /v1/embeddings
// that the handler answers — served, failed, cancelled, or refused (a bad
// key, a bad body, an unknown model, draining) — is appended as one record
// when its answer is complete: request id, tenant, endpoint, model,
// backend, status and error reason, token counts, cache tier, the SHA-256
// of the request body as received (null when it was refused before its
// body was read) and of the response content (obs::ResponseDigest), the
// watermark, and with `audit_tokens` each output token's id and logprob (the
// local engine's; a remote backend gives text only). With a watermarker,
// a whole response that succeeded carries x-strata-watermark, and a stream
// that succeeded ends with the SSE comment line ": x-strata-watermark: V"
// before its terminator (every SSE client ignores a comment). With
// `fail_closed`, generation and embedding requests get 503 while the audit
// log is losing records (a full queue, a failing disk).
//
// Threading: the pointers are borrowed for the server's life and are
// thread-safe.
#pragma once

namespace strata::obs {
class AuditLog;
class Watermarker;
}  // namespace strata::obs

namespace strata::server {

struct ComplianceOptions {
  obs::AuditLog* audit_log = nullptr;             // null: no audit records
  const obs::Watermarker* watermarker = nullptr;  // null: no watermark
  bool audit_tokens = false;  // each output token's id and logprob in the record
  bool fail_closed = false;   // 503 while the audit log loses records
};

}  // namespace strata::server
