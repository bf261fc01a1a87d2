// The Anthropic wire format: messages, request parsing and response and
// stream-event rendering (internal/wire.h).
#include <algorithm>

#include <fmt/format.h>

#include "server/api.h"
#include "server/internal/wire.h"

namespace strata::server::wire {
namespace {

using util::Status;
using util::StatusOr;

const char* AnthropicStop(gateway::FinishReason r) {
  switch (r) {
    case gateway::FinishReason::kLength:
      return "max_tokens";
    case gateway::FinishReason::kStopString:
      return "stop_sequence";
    default:
      return "end_turn";
  }
}

// Anthropic's input_tokens leaves out what was read from or written to the
// prompt cache; our prompt_tokens is the whole prompt.
Json AnthropicUsage(const ResponseMeta& m, int32_t output) {
  return {{"input_tokens", std::max(0, m.prompt_tokens - m.cached_tokens - m.cache_write_tokens)},
          {"output_tokens", output},
          {"cache_read_input_tokens", m.cached_tokens},
          {"cache_creation_input_tokens", m.cache_write_tokens}};
}

// Whether a content value (a string, or an array of blocks) marks a prompt
// cache breakpoint: some block carries "cache_control" {"type": "ephemeral"}.
// A breakpoint inside a message counts as one at its end (the message's
// blocks are joined into one text).
StatusOr<bool> CacheBreakpoint(const Json& content, const std::string& where) {
  if (!content.is_array()) return false;
  bool found = false;
  for (size_t i = 0; i < content.size(); ++i) {
    if (!content[i].is_object() || !content[i].contains("cache_control")) continue;
    const Json& cc = content[i]["cache_control"];
    if (cc.is_null()) continue;
    if (!cc.is_object() || !cc.contains("type") || cc["type"] != "ephemeral") {
      return FieldError(fmt::format("{}[{}].cache_control", where, i),
                        "must be {\"type\": \"ephemeral\"}");
    }
    found = true;
  }
  return found;
}

}  // namespace

namespace anthropic {

StatusOr<ParsedRequest> ParseRequest(const Json& j) {
  ParsedRequest out;
  gateway::CompletionRequest& r = out.request;
  Fields f(j, "");
  STRATA_ASSIGN_OR_RETURN(auto model, f.String("model"));
  if (!model) return f.Error("model", "is required");
  out.model = *model;
  STRATA_ASSIGN_OR_RETURN(auto max_tokens, f.Integer("max_tokens", 1, 1 << 24));
  if (!max_tokens) return f.Error("max_tokens", "is required");
  r.max_tokens = static_cast<int32_t>(*max_tokens);
  STRATA_RETURN_IF_ERROR(f.Reject("tools", "this server does not call tools"));
  if (f.Has("system")) {
    STRATA_ASSIGN_OR_RETURN(std::string system, ContentText(f.Get("system"), "system"));
    STRATA_ASSIGN_OR_RETURN(bool breakpoint, CacheBreakpoint(f.Get("system"), "system"));
    if (breakpoint) r.cache_breakpoints.push_back(0);
    r.messages.push_back({"system", std::move(system)});
  }
  if (!f.Has("messages")) return f.Error("messages", "is required");
  const Json& msgs = f.Get("messages");
  if (!msgs.is_array() || msgs.empty()) {
    return f.Error("messages", "must be a non-empty array");
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const Json& m = msgs[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!m.is_object()) return FieldError(at, "must be an object");
    if (!m.contains("role") || !m["role"].is_string()) {
      return FieldError(at + ".role", "must be a string");
    }
    const std::string role = m["role"].get<std::string>();
    if (role != "user" && role != "assistant") {
      return FieldError(at + ".role", fmt::format("is '{}': must be 'user' or 'assistant'", role));
    }
    if (!m.contains("content")) return FieldError(at + ".content", "is required");
    STRATA_ASSIGN_OR_RETURN(std::string content, ContentText(m["content"], at + ".content"));
    STRATA_ASSIGN_OR_RETURN(bool breakpoint, CacheBreakpoint(m["content"], at + ".content"));
    if (breakpoint) r.cache_breakpoints.push_back(static_cast<int32_t>(r.messages.size()));
    r.messages.push_back({role, std::move(content)});
  }
  STRATA_RETURN_IF_ERROR(ParseSampling(f, 1.0, r));
  STRATA_ASSIGN_OR_RETURN(r.stop, f.Strings("stop_sequences"));
  STRATA_ASSIGN_OR_RETURN(auto stream, f.Bool("stream"));
  out.stream = stream.value_or(false);
  out.request.stream = out.stream;
  if (f.Has("metadata") && !f.Get("metadata").is_object()) {
    return f.Error("metadata", "must be an object");
  }
  STRATA_RETURN_IF_ERROR(ParseSessionId(f, r));
  STRATA_RETURN_IF_ERROR(ParseCacheControls(f, r));
  STRATA_RETURN_IF_ERROR(ParseGrammar(f, r));
  return out;
}

std::string RenderResponse(const ResponseMeta& m, const ChoiceResult& c, int32_t output_tokens) {
  const Json j = {
      {"id", m.id},
      {"type", "message"},
      {"role", "assistant"},
      {"model", m.model},
      {"content", Json::array({{{"type", "text"}, {"text", c.text}}})},
      {"stop_reason", AnthropicStop(c.finish)},
      {"stop_sequence", c.stop_sequence.empty() ? Json(nullptr) : Json(c.stop_sequence)},
      {"usage", AnthropicUsage(m, output_tokens)}};
  return Dump(j);
}

std::string RenderStreamStart(const ResponseMeta& m) {
  const Json msg = {{"id", m.id},
                    {"type", "message"},
                    {"role", "assistant"},
                    {"model", m.model},
                    {"content", Json::array()},
                    {"stop_reason", nullptr},
                    {"stop_sequence", nullptr},
                    {"usage", AnthropicUsage(m, 0)}};
  return SseEvent("message_start", {{"type", "message_start"}, {"message", msg}}) +
         SseEvent("content_block_start", {{"type", "content_block_start"},
                                          {"index", 0},
                                          {"content_block", {{"type", "text"}, {"text", ""}}}}) +
         SseEvent("ping", {{"type", "ping"}});
}

std::string RenderStreamDelta(const gateway::Event& e) {
  if (e.text.empty()) return "";
  return SseEvent("content_block_delta", {{"type", "content_block_delta"},
                                          {"index", 0},
                                          {"delta", {{"type", "text_delta"}, {"text", e.text}}}});
}

std::string RenderStreamFinish(const ResponseMeta& m, const gateway::Event& e) {
  return SseEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}}) +
         SseEvent("message_delta",
                  {{"type", "message_delta"},
                   {"delta",
                    {{"stop_reason", AnthropicStop(e.finish)},
                     {"stop_sequence",
                      e.stop_sequence.empty() ? Json(nullptr) : Json(e.stop_sequence)}}},
                   {"usage",
                    {{"output_tokens", e.usage.completion_tokens},
                     {"input_tokens",
                      std::max(0, std::max(m.prompt_tokens, e.usage.prompt_tokens) -
                                      e.usage.cached_tokens - e.usage.cache_write_tokens)},
                     {"cache_read_input_tokens", e.usage.cached_tokens},
                     {"cache_creation_input_tokens", e.usage.cache_write_tokens}}}}) +
         SseEvent("message_stop", {{"type", "message_stop"}});
}

}  // namespace anthropic
}  // namespace strata::server::wire

namespace strata::server {

util::StatusOr<ParsedRequest> ParseCountTokensRequest(std::string_view body) {
  STRATA_ASSIGN_OR_RETURN(wire::Json j, wire::ParseJson(body));
  // The same parser as /v1/messages, so both render the same prompt; a
  // count needs no budget, so a missing max_tokens is one token.
  if (!j.contains("max_tokens") || j["max_tokens"].is_null()) j["max_tokens"] = 1;
  j.erase("stream");
  try {
    return wire::anthropic::ParseRequest(j);
  } catch (const std::exception& e) {
    return util::InvalidArgumentError(fmt::format("invalid request: {}", e.what()))
        .WithReason(util::ErrorReason::kInvalidField);
  }
}

}  // namespace strata::server
