// server/internal/wire.h — what the OpenAI (openai.cpp) and Anthropic
// (anthropic.cpp) wire formats share: JSON parsing and typed field access
// whose errors name the field, the request fields both APIs accept (sampling,
// strata's cache controls, session ids), JSON and SSE framing; and each API's
// entry points, which server/api.h dispatches to by ApiKind.
//
// Promise: every parse error is an InvalidArgument with reason kMalformedJson
// (naming the byte) or kInvalidField (with the field as the client spelled
// it, "messages[2].content[0].type", also quoted at the start of the
// message). Nothing here throws except nlohmann's own accessors on exotic
// input, which ParseRequest and ParseEmbeddingRequest contain.
//
// Threading: pure functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api.h"

namespace strata::server::wire {

// Objects keep their keys in the order the client (or upstream) wrote them:
// a schema's properties, a tool's arguments, are meant in that order.
using Json = nlohmann::ordered_json;

// Compact JSON text; invalid UTF-8 is replaced, never thrown on.
std::string Dump(const Json& j);

// "data: JSON\n\n" and "event: NAME\ndata: JSON\n\n".
std::string Sse(const Json& j);
std::string SseEvent(const char* event, const Json& j);

// The body as a JSON object, or kMalformedJson ("malformed JSON at byte 17: ...").
util::StatusOr<Json> ParseJson(std::string_view body);

// InvalidArgument, reason kInvalidField, field `field`: "'FIELD' WHAT".
util::Status FieldError(const std::string& field, std::string_view what);

// Typed access to the fields of one JSON object; errors name the field with
// `prefix` in front ("cache.", "stream_options."). Absent and null are the same.
class Fields {
 public:
  Fields(const Json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  bool Has(const char* name) const { return obj_.contains(name) && !obj_.at(name).is_null(); }
  const Json& Get(const char* name) const { return obj_.at(name); }
  std::string Name(const char* name) const { return prefix_ + name; }
  // FieldError for `name` (prefixed).
  util::Status Error(const char* name, std::string_view what) const {
    return FieldError(Name(name), what);
  }

  util::StatusOr<std::optional<double>> Number(const char* name, double lo, double hi) const;
  util::StatusOr<std::optional<int64_t>> Integer(const char* name, int64_t lo, int64_t hi) const;
  util::StatusOr<std::optional<bool>> Bool(const char* name) const;
  util::StatusOr<std::optional<std::string>> String(const char* name) const;
  // A string or an array of strings.
  util::StatusOr<std::vector<std::string>> Strings(const char* name) const;
  // OK when `name` is absent, false, or an empty array/object; otherwise
  // "'name' is not supported: WHY".
  util::Status Reject(const char* name, const char* why) const;

 private:
  const Json& obj_;
  const std::string prefix_;
};

// Message content: a string, or an array of text parts; `where` names it.
util::StatusOr<std::string> ContentText(const Json& content, const std::string& where);

// The sampling fields both APIs accept, with the APIs' defaults (plain
// sampling); `temp_max` is 2 for OpenAI, 1 for Anthropic.
util::Status ParseSampling(const Fields& f, double temp_max, gateway::CompletionRequest& r);
// OpenAI's "logit_bias" (token id strings to [-100, 100]); sorted into
// r.sampling.logit_bias.
util::Status ParseLogitBias(const Fields& f, gateway::CompletionRequest& r);
// strata's "no_cache" and "cache": {"prefix", "l1", "l3"} (docs/api.md);
// any other key inside "cache" is refused.
util::Status ParseCacheControls(const Fields& f, gateway::CompletionRequest& r);
// strata's "grammar": GBNF text every choice must be a sentence of (any
// API; not beside a JSON response_format). Compiled by the backend.
util::Status ParseGrammar(const Fields& f, gateway::CompletionRequest& r);
// strata's "session_id": 1-128 characters of [A-Za-z0-9._:@-].
util::Status ParseSessionId(const Fields& f, gateway::CompletionRequest& r);

// At most this many tools in one request, and this many bytes of their
// definitions (names, descriptions and schemas) in all.
inline constexpr size_t kMaxTools = 128;
inline constexpr size_t kMaxToolBytes = 1u << 20;

// A tool's name as both APIs allow it: 1-64 of [A-Za-z0-9_-]; `where` names
// the field.
util::Status CheckToolName(const Json& name, const std::string& where);
// A function's parameters / a tool's input_schema: a JSON object (a schema),
// compact; absent or null is "" (none).
util::StatusOr<std::string> ToolSchema(const Fields& f, const char* name);
// Checks what both APIs require of the tools together (distinct names, the
// limits) and that a named tool_choice names one of them.
util::Status CheckTools(const gateway::CompletionRequest& r, const char* tools_field,
                        const char* choice_field);
// A tool call's arguments as the client sent them (OpenAI: a string of
// JSON text; Anthropic: the input object) as compact JSON text.
util::StatusOr<std::string> CompactArguments(const Json& v, const std::string& where);

// OpenAI chat, (legacy) completions and embeddings: openai.cpp.
namespace openai {
util::StatusOr<ParsedRequest> ParseRequest(ApiKind kind, const Json& j);
util::StatusOr<ParsedEmbeddingRequest> ParseEmbeddingRequest(const Json& j);
std::string RenderEmbeddings(const std::string& model, const gateway::EmbeddingResult& result,
                             bool base64);
std::string RenderResponse(ApiKind kind, const ResponseMeta& meta,
                           const std::vector<ChoiceResult>& choices, bool logprobs);
std::string RenderStreamStart(ApiKind kind, const ResponseMeta& meta, int32_t n_choices);
std::string RenderStreamDelta(ApiKind kind, const ResponseMeta& meta, const gateway::Event& delta,
                              bool logprobs);
// `chunk_head` (may be null): the chunks' common opening, written into it
// at the first frame and copied from it after.
void AppendStreamDelta(std::string& out, ApiKind kind, const ResponseMeta& meta,
                       const gateway::Event& delta, bool logprobs, std::string* chunk_head);
std::string RenderStreamFinish(ApiKind kind, const ResponseMeta& meta,
                               const gateway::Event& finish);
std::string RenderStreamEnd(ApiKind kind, const ResponseMeta& meta, int32_t completion_tokens,
                            bool include_usage);
}  // namespace openai

// Anthropic messages: anthropic.cpp.
namespace anthropic {
util::StatusOr<ParsedRequest> ParseRequest(const Json& j);
std::string RenderResponse(const ResponseMeta& meta, const ChoiceResult& choice,
                           int32_t output_tokens);
std::string RenderStreamStart(const ResponseMeta& meta, StreamState& state);
std::string RenderStreamDelta(const gateway::Event& delta, StreamState& state);
std::string RenderStreamFinish(const ResponseMeta& meta, const gateway::Event& finish,
                               StreamState& state);
}  // namespace anthropic

}  // namespace strata::server::wire
