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
    case gateway::FinishReason::kToolCalls:
      return "tool_use";
    default:
      return "end_turn";
  }
}

// A tool call's arguments as a tool_use block's input: the object they are
// ({} when they are not one: a call cut short by max_tokens).
Json InputOf(const std::string& arguments) {
  Json j = Json::parse(arguments, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Json::object();
  return j;
}

// A stream's next text block opens / its open block closes.
std::string OpenText(StreamState& state) {
  std::string out =
      SseEvent("content_block_start", {{"type", "content_block_start"},
                                       {"index", state.blocks},
                                       {"content_block", {{"type", "text"}, {"text", ""}}}});
  ++state.blocks;
  state.open = true;
  state.open_text = true;
  state.open_call = -1;
  return out;
}

std::string CloseBlock(StreamState& state) {
  if (!state.open) return "";
  state.open = false;
  return SseEvent("content_block_stop",
                  {{"type", "content_block_stop"}, {"index", state.blocks - 1}});
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

// tools: [{"name", "description", "input_schema"}] (custom tools; the
// server tools Anthropic runs itself are not strata's to run), and
// tool_choice {"type": auto | any | tool | none, "name",
// "disable_parallel_tool_use"}.
Status AnthropicTools(const Fields& f, gateway::CompletionRequest& r) {
  if (f.Has("tools")) {
    const Json& tools = f.Get("tools");
    if (!tools.is_array()) return f.Error("tools", "must be an array of tools");
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string at = fmt::format("tools[{}]", i);
      if (!tools[i].is_object()) return FieldError(at, "must be an object");
      Fields t(tools[i], at + ".");
      STRATA_ASSIGN_OR_RETURN(auto type, t.String("type"));
      if (type && *type != "custom") {
        return t.Error("type", fmt::format("is '{}': only custom tools (with an input_schema) "
                                           "are supported",
                                           type->substr(0, 40)));
      }
      if (!t.Has("name")) return t.Error("name", "is required");
      STRATA_RETURN_IF_ERROR(CheckToolName(t.Get("name"), t.Name("name")));
      gateway::ToolDefinition def;
      def.name = t.Get("name").get<std::string>();
      STRATA_ASSIGN_OR_RETURN(auto description, t.String("description"));
      def.description = description.value_or("");
      if (!t.Has("input_schema")) return t.Error("input_schema", "is required");
      STRATA_ASSIGN_OR_RETURN(def.parameters, ToolSchema(t, "input_schema"));
      r.tools.push_back(std::move(def));
    }
  }
  if (f.Has("tool_choice")) {
    using Mode = gateway::ToolChoice::Mode;
    const Json& c = f.Get("tool_choice");
    if (!c.is_object()) return f.Error("tool_choice", "must be an object with a 'type'");
    Fields cf(c, "tool_choice.");
    STRATA_ASSIGN_OR_RETURN(auto type, cf.String("type"));
    if (type == "auto") {
      r.tool_choice.mode = Mode::kAuto;
    } else if (type == "any") {
      r.tool_choice.mode = Mode::kRequired;
    } else if (type == "none") {
      r.tool_choice.mode = Mode::kNone;
    } else if (type == "tool") {
      if (!cf.Has("name")) return cf.Error("name", "is required when the type is 'tool'");
      STRATA_RETURN_IF_ERROR(CheckToolName(cf.Get("name"), cf.Name("name")));
      r.tool_choice = {Mode::kNamed, cf.Get("name").get<std::string>()};
    } else {
      return cf.Error("type", "must be 'auto', 'any', 'tool' or 'none'");
    }
    STRATA_ASSIGN_OR_RETURN(auto no_parallel, cf.Bool("disable_parallel_tool_use"));
    if (no_parallel) r.parallel_tool_calls = !*no_parallel;
  }
  return CheckTools(r, "tools", "tool_choice");
}

// One message's content: a string, or blocks of text, tool_use (assistant)
// and tool_result (user). The results become "tool" messages, ahead of the
// user's text (Anthropic puts them first); the calls ride on the assistant
// message.
Status AnthropicContent(const std::string& role, const Json& content, const std::string& at,
                        std::vector<gateway::ChatMessage>& out) {
  gateway::ChatMessage msg;
  msg.role = role;
  if (!content.is_array()) {
    STRATA_ASSIGN_OR_RETURN(msg.content, ContentText(content, at));
    out.push_back(std::move(msg));
    return Status();
  }
  Json text_blocks = Json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& b = content[i];
    const std::string bat = fmt::format("{}[{}]", at, i);
    const bool typed = b.is_object() && b.contains("type") && b["type"].is_string();
    const std::string type = typed ? b["type"].get<std::string>() : "";
    if (type == "tool_use") {
      if (role != "assistant") return FieldError(bat + ".type", "'tool_use' is an assistant's");
      Fields bf(b, bat + ".");
      STRATA_ASSIGN_OR_RETURN(auto id, bf.String("id"));
      if (!id || id->empty()) return bf.Error("id", "must be a non-empty string");
      if (!bf.Has("name")) return bf.Error("name", "is required");
      STRATA_RETURN_IF_ERROR(CheckToolName(bf.Get("name"), bf.Name("name")));
      gateway::ToolCall call;
      call.id = std::move(*id);
      call.name = bf.Get("name").get<std::string>();
      STRATA_ASSIGN_OR_RETURN(
          call.arguments,
          CompactArguments(bf.Has("input") ? bf.Get("input") : Json::object(), bf.Name("input")));
      msg.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result") {
      if (role != "user") return FieldError(bat + ".type", "'tool_result' is a user's");
      Fields bf(b, bat + ".");
      STRATA_ASSIGN_OR_RETURN(auto id, bf.String("tool_use_id"));
      if (!id || id->empty()) return bf.Error("tool_use_id", "must be a non-empty string");
      gateway::ChatMessage result;
      result.role = "tool";
      result.tool_call_id = std::move(*id);
      if (bf.Has("content")) {
        STRATA_ASSIGN_OR_RETURN(result.content, ContentText(bf.Get("content"), bf.Name("content")));
      }
      STRATA_ASSIGN_OR_RETURN(auto is_error, bf.Bool("is_error"));
      result.is_error = is_error.value_or(false);
      out.push_back(std::move(result));
    } else {
      if (!msg.tool_calls.empty() && type == "text") {
        return FieldError(bat, "text after a tool_use block is not supported");
      }
      text_blocks.push_back(b);
    }
  }
  STRATA_ASSIGN_OR_RETURN(msg.content, ContentText(text_blocks, at));
  // A user turn of results alone adds no user message.
  if (role == "assistant" || !text_blocks.empty() || out.empty() || out.back().role != "tool") {
    out.push_back(std::move(msg));
  }
  return Status();
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
    STRATA_RETURN_IF_ERROR(AnthropicContent(role, m["content"], at + ".content", r.messages));
    STRATA_ASSIGN_OR_RETURN(bool breakpoint, CacheBreakpoint(m["content"], at + ".content"));
    if (breakpoint) r.cache_breakpoints.push_back(static_cast<int32_t>(r.messages.size()) - 1);
  }
  STRATA_RETURN_IF_ERROR(AnthropicTools(f, r));
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
  Json content = Json::array();
  if (!c.text.empty() || c.tool_calls.empty())
    content.push_back({{"type", "text"}, {"text", c.text}});
  for (const auto& t : c.tool_calls) {
    content.push_back(
        {{"type", "tool_use"}, {"id", t.id}, {"name", t.name}, {"input", InputOf(t.arguments)}});
  }
  const Json j = {
      {"id", m.id},
      {"type", "message"},
      {"role", "assistant"},
      {"model", m.model},
      {"content", std::move(content)},
      {"stop_reason", AnthropicStop(c.finish)},
      {"stop_sequence", c.stop_sequence.empty() ? Json(nullptr) : Json(c.stop_sequence)},
      {"usage", AnthropicUsage(m, output_tokens)}};
  return Dump(j);
}

std::string RenderStreamStart(const ResponseMeta& m, StreamState& state) {
  const Json msg = {{"id", m.id},
                    {"type", "message"},
                    {"role", "assistant"},
                    {"model", m.model},
                    {"content", Json::array()},
                    {"stop_reason", nullptr},
                    {"stop_sequence", nullptr},
                    {"usage", AnthropicUsage(m, 0)}};
  std::string out = SseEvent("message_start", {{"type", "message_start"}, {"message", msg}});
  if (!state.lazy_text) out += OpenText(state);
  return out + SseEvent("ping", {{"type", "ping"}});
}

std::string RenderStreamDelta(const gateway::Event& e, StreamState& state) {
  std::string out;
  if (!e.text.empty()) {
    if (!(state.open && state.open_text)) out += CloseBlock(state) + OpenText(state);
    out += SseEvent("content_block_delta", {{"type", "content_block_delta"},
                                            {"index", state.blocks - 1},
                                            {"delta", {{"type", "text_delta"}, {"text", e.text}}}});
  }
  for (const auto& t : e.tool_calls) {
    if (!t.id.empty()) {  // a new call: its own tool_use block
      out += CloseBlock(state);
      out += SseEvent(
          "content_block_start",
          {{"type", "content_block_start"},
           {"index", state.blocks},
           {"content_block",
            {{"type", "tool_use"}, {"id", t.id}, {"name", t.name}, {"input", Json::object()}}}});
      ++state.blocks;
      state.open = true;
      state.open_text = false;
      state.open_call = t.index;
    }
    if (t.arguments.empty() || !state.open || state.open_call != t.index) continue;
    out += SseEvent("content_block_delta",
                    {{"type", "content_block_delta"},
                     {"index", state.blocks - 1},
                     {"delta", {{"type", "input_json_delta"}, {"partial_json", t.arguments}}}});
  }
  return out;
}

std::string RenderStreamFinish(const ResponseMeta& m, const gateway::Event& e, StreamState& state) {
  return CloseBlock(state) +
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
