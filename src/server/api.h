// server/api.h — the OpenAI and Anthropic wire formats: request parsing,
// response and stream-event rendering, and error bodies.
//
// Promise: parsing never throws and never crashes, whatever the bytes:
// malformed JSON is an InvalidArgument with reason kMalformedJson saying where
// ("malformed JSON at byte 17: ..."), a wrong type or range has reason
// kInvalidField and names the field, in the message ("'temperature' must be a
// number in [0, 2]") and as Status::field(). Rendering produces exactly the
// shapes the official clients parse (checked by the integration tests with the
// openai and @anthropic-ai/sdk packages). A failed Status maps to an HTTP
// status and each API's error type and code here and only here (MapError),
// by its reason and, without one, its code; never by its message.
//
// The implementation is one file per API (openai.cpp, anthropic.cpp), what
// they share (wire.cpp) and the error table (errors.cpp).
//
// Threading: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gateway/gateway.h"
#include "util/status.h"

namespace strata::server {

enum class ApiKind { kOpenAIChat, kOpenAICompletion, kAnthropicMessages };

// One prompt of /v1/completions: text, or token ids.
struct PromptInput {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

struct ParsedRequest {
  gateway::CompletionRequest request;
  std::string model;  // as the client sent it
  bool stream = false;
  bool include_usage = false;  // OpenAI stream_options.include_usage
  bool logprobs = false;       // OpenAI: logprobs requested
  // /v1/completions with an array of prompts: the second and later ones
  // (`request` carries the first). Each gets request.n choices, numbered
  // on from the previous prompt's.
  std::vector<PromptInput> more_prompts;
};

// At most this many prompts in one /v1/completions request, and this many
// choices in all (prompts × n).
inline constexpr size_t kMaxPrompts = 64;
inline constexpr int32_t kMaxChoicesPerRequest = 128;

// Parses a request body.
util::StatusOr<ParsedRequest> ParseRequest(ApiKind kind, std::string_view body);

// POST /v1/messages/count_tokens (Anthropic): the fields of /v1/messages,
// parsed exactly as ParseRequest parses them (so the prompt renders the
// same), except that max_tokens is not required and the generation fields
// (stream) do not matter.
util::StatusOr<ParsedRequest> ParseCountTokensRequest(std::string_view body);

struct ParsedEmbeddingRequest {
  gateway::EmbeddingRequest request;
  std::string model;
  bool base64 = false;  // encoding_format "base64": little-endian float32, base64
};

// POST /v1/embeddings (OpenAI): input is a string, an array of strings, an
// array of token ids or an array of such arrays.
util::StatusOr<ParsedEmbeddingRequest> ParseEmbeddingRequest(std::string_view body);
std::string RenderEmbeddings(const std::string& model, const gateway::EmbeddingResult& result,
                             bool base64);

// The finished result of one choice, for non-streaming responses.
struct ChoiceResult {
  std::string text;
  std::vector<gateway::ToolCall> tool_calls;
  std::vector<gateway::TokenLogprob> logprobs;
  gateway::FinishReason finish = gateway::FinishReason::kLength;
  std::string stop_sequence;
  int32_t completion_tokens = 0;
};

struct ResponseMeta {
  std::string id;  // response id ("chatcmpl-...", "cmpl-...", "msg_...")
  std::string model;
  int64_t created = 0;  // unix seconds
  int32_t prompt_tokens = 0;
  int32_t cached_tokens = 0;       // of prompt_tokens, read from a prefix cache
  int32_t cache_write_tokens = 0;  // of prompt_tokens, written to an upstream's prompt cache
  std::string fingerprint;         // system_fingerprint
};

// A whole non-streaming response body.
std::string RenderResponse(ApiKind kind, const ResponseMeta& meta,
                           const std::vector<ChoiceResult>& choices, bool logprobs);

// What a stream's frames remember of the ones before (Anthropic's content
// blocks: which one is open; OpenAI's common opening of every chunk). One
// per response; without one, each call sees a stream whose text block 0
// opened at the start.
struct StreamState {
  // The text block opens at the first text rather than at the start (a
  // request with tools, whose answer may be tool_use blocks only).
  bool lazy_text = false;
  int32_t blocks = 0;      // content blocks started
  bool open = false;       // the last block started is still open
  bool open_text = false;  // ... and is a text block
  int32_t open_call = -1;  // ... or the tool_use block of this call
  // OpenAI: "data: " and the members every chunk of this response opens
  // with (id, object, created, model, fingerprint), written once.
  std::string chunk_head;
};

// Streaming: the SSE frames ("data: ...\n\n" or "event: ...\ndata: ...\n\n").
std::string RenderStreamStart(ApiKind kind, const ResponseMeta& meta, int32_t n_choices,
                              StreamState* state = nullptr);
std::string RenderStreamDelta(ApiKind kind, const ResponseMeta& meta, const gateway::Event& delta,
                              bool logprobs, StreamState* state = nullptr);
// The same frame, appended to `out` (a batch of frames in one buffer).
void AppendStreamDelta(std::string& out, ApiKind kind, const ResponseMeta& meta,
                       const gateway::Event& delta, bool logprobs, StreamState* state = nullptr);
std::string RenderStreamFinish(ApiKind kind, const ResponseMeta& meta, const gateway::Event& finish,
                               StreamState* state = nullptr);
// After every choice finished: usage chunk (if asked) and the terminator.
std::string RenderStreamEnd(ApiKind kind, const ResponseMeta& meta, int32_t completion_tokens,
                            bool include_usage);
// An error in the middle of a stream (after headers went out).
std::string RenderStreamError(ApiKind kind, const util::Status& status);

// How a failed Status answers a client (the table is in docs/api.md, "Errors").
struct ErrorMapping {
  int http_status = 500;
  const char* openai_type = "";       // error.type
  const char* openai_code = nullptr;  // error.code; nullptr: JSON null
  const char* anthropic_type = "";    // error.type
  bool retry_after = false;           // send Retry-After: kRetryAfterSeconds
};
// By reason when the Status has one, else by code; an OK Status maps to 200.
const ErrorMapping& MapError(const util::Status& status);

// HTTP status for a Status: MapError(status).http_status.
int HttpStatus(const util::Status& status);
// The error body in the API's own shape; OpenAI's `param` is status.field().
std::string RenderError(ApiKind kind, const util::Status& status);

// Seconds to suggest in Retry-After where MapError says so.
inline constexpr int kRetryAfterSeconds = 1;

}  // namespace strata::server
