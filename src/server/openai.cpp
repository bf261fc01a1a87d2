// The OpenAI wire format: chat completions, (legacy) completions and
// embeddings, request parsing and response rendering (internal/wire.h).
#include <algorithm>
#include <iterator>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "server/api.h"
#include "server/internal/wire.h"
#include "util/utf8.h"

namespace strata::server::wire {
namespace {

using namespace std::string_view_literals;
using util::Status;
using util::StatusOr;

const char* OpenAIFinish(gateway::FinishReason r) {
  switch (r) {
    case gateway::FinishReason::kLength:
      return "length";
    case gateway::FinishReason::kToolCalls:
      return "tool_calls";
    default:
      return "stop";
  }
}

// tools: [{"type": "function", "function": {"name", "description",
// "parameters", "strict"}}].
Status OpenAITools(const Fields& f, gateway::CompletionRequest& r) {
  const Json& tools = f.Has("tools") ? f.Get("tools") : Json::array();
  if (!tools.is_array()) return f.Error("tools", "must be an array of function tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = fmt::format("tools[{}]", i);
    const Json& t = tools[i];
    if (!t.is_object()) return FieldError(at, "must be an object");
    if (!t.contains("type") || t["type"] != "function") {
      return FieldError(at + ".type", "must be 'function' (the only kind of tool)");
    }
    if (!t.contains("function") || !t["function"].is_object()) {
      return FieldError(at + ".function", "must be an object");
    }
    Fields fn(t["function"], at + ".function.");
    if (!fn.Has("name")) return fn.Error("name", "is required");
    STRATA_RETURN_IF_ERROR(CheckToolName(fn.Get("name"), fn.Name("name")));
    gateway::ToolDefinition def;
    def.name = fn.Get("name").get<std::string>();
    STRATA_ASSIGN_OR_RETURN(auto description, fn.String("description"));
    def.description = description.value_or("");
    STRATA_ASSIGN_OR_RETURN(def.parameters, ToolSchema(fn, "parameters"));
    STRATA_ASSIGN_OR_RETURN(auto strict, fn.Bool("strict"));
    (void)strict;  // strata's constrained calls always follow the schema
    r.tools.push_back(std::move(def));
  }
  if (f.Has("tool_choice")) {
    using Mode = gateway::ToolChoice::Mode;
    const Json& c = f.Get("tool_choice");
    if (c.is_string()) {
      const std::string v = c.get<std::string>();
      if (v == "none") {
        r.tool_choice.mode = Mode::kNone;
      } else if (v == "auto") {
        r.tool_choice.mode = Mode::kAuto;
      } else if (v == "required") {
        r.tool_choice.mode = Mode::kRequired;
      } else {
        return f.Error("tool_choice", "must be 'none', 'auto', 'required' or a named function");
      }
    } else if (c.is_object() && c.contains("type") && c["type"] == "function" &&
               c.contains("function") && c["function"].is_object() &&
               c["function"].contains("name")) {
      STRATA_RETURN_IF_ERROR(CheckToolName(c["function"]["name"], "tool_choice.function.name"));
      r.tool_choice = {Mode::kNamed, c["function"]["name"].get<std::string>()};
    } else {
      return f.Error("tool_choice",
                     "must be 'none', 'auto', 'required' or {\"type\": \"function\", "
                     "\"function\": {\"name\": ...}}");
    }
  }
  STRATA_ASSIGN_OR_RETURN(auto parallel, f.Bool("parallel_tool_calls"));
  if (parallel) r.parallel_tool_calls = *parallel;
  return CheckTools(r, "tools", "tool_choice");
}

// One chat message: system/developer, user, assistant (text and/or
// tool_calls), or tool (a result, with tool_call_id).
StatusOr<gateway::ChatMessage> OpenAIMessage(const Json& m, const std::string& at) {
  if (!m.is_object()) return FieldError(at, "must be an object");
  if (!m.contains("role") || !m["role"].is_string()) {
    return FieldError(at + ".role", "must be a string");
  }
  gateway::ChatMessage out;
  out.role = m["role"].get<std::string>();
  if (out.role == "developer") out.role = "system";  // OpenAI's newer name for system
  if (out.role == "function") {
    return FieldError(at + ".role", "is 'function', which is deprecated: use 'tool'");
  }
  const bool calls = out.role == "assistant" && m.contains("tool_calls") &&
                     !m["tool_calls"].is_null() &&
                     !(m["tool_calls"].is_array() && m["tool_calls"].empty());
  if (!m.contains("content") && !calls) return FieldError(at + ".content", "is required");
  if (m.contains("content")) {
    STRATA_ASSIGN_OR_RETURN(out.content, ContentText(m["content"], at + ".content"));
  }
  if (calls) {
    const Json& tc = m["tool_calls"];
    if (!tc.is_array()) return FieldError(at + ".tool_calls", "must be an array");
    for (size_t k = 0; k < tc.size(); ++k) {
      const std::string cat = fmt::format("{}.tool_calls[{}]", at, k);
      const Json& c = tc[k];
      if (!c.is_object()) return FieldError(cat, "must be an object");
      if (!c.contains("id") || !c["id"].is_string() || c["id"].get<std::string>().empty()) {
        return FieldError(cat + ".id", "must be a non-empty string");
      }
      if (c.contains("type") && c["type"] != "function") {
        return FieldError(cat + ".type", "must be 'function'");
      }
      if (!c.contains("function") || !c["function"].is_object()) {
        return FieldError(cat + ".function", "must be an object");
      }
      const Json& fn = c["function"];
      if (!fn.contains("name")) return FieldError(cat + ".function.name", "is required");
      STRATA_RETURN_IF_ERROR(CheckToolName(fn["name"], cat + ".function.name"));
      gateway::ToolCall call;
      call.id = c["id"].get<std::string>();
      call.name = fn["name"].get<std::string>();
      STRATA_ASSIGN_OR_RETURN(
          call.arguments, CompactArguments(fn.contains("arguments") ? fn["arguments"] : Json("{}"),
                                           cat + ".function.arguments"));
      out.tool_calls.push_back(std::move(call));
    }
  }
  if (out.role == "tool") {
    if (!m.contains("tool_call_id") || !m["tool_call_id"].is_string() ||
        m["tool_call_id"].get<std::string>().empty()) {
      return FieldError(at + ".tool_call_id", "must be the id of the call this result answers");
    }
    out.tool_call_id = m["tool_call_id"].get<std::string>();
  }
  return out;
}

Json Bytes(const std::vector<uint8_t>& b) {
  Json a = Json::array();
  for (uint8_t x : b) a.push_back(x);
  return a;
}

Json ChatLogprobs(const std::vector<gateway::TokenLogprob>& lps) {
  Json content = Json::array();
  for (const auto& lp : lps) {
    Json top = Json::array();
    for (const auto& [text, l] : lp.top) {
      top.push_back({{"token", text},
                     {"logprob", l},
                     {"bytes", Bytes(std::vector<uint8_t>(text.begin(), text.end()))}});
    }
    content.push_back({{"token", lp.text},
                       {"logprob", lp.logprob},
                       {"bytes", Bytes(lp.bytes)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

Json CompletionLogprobs(const std::vector<gateway::TokenLogprob>& lps, size_t text_offset) {
  Json tokens = Json::array(), token_lps = Json::array(), tops = Json::array(),
       offsets = Json::array();
  size_t off = text_offset;
  for (const auto& lp : lps) {
    tokens.push_back(lp.text);
    token_lps.push_back(lp.logprob);
    Json top = Json::object();
    for (const auto& [text, l] : lp.top) top[text] = l;
    tops.push_back(top);
    offsets.push_back(off);
    off += lp.text.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

Json OpenAIUsage(const ResponseMeta& m, int32_t completion) {
  return {{"prompt_tokens", m.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", m.prompt_tokens + completion},
          {"prompt_tokens_details", {{"cached_tokens", m.cached_tokens}}}};
}

Json ChunkBase(ApiKind kind, const ResponseMeta& m) {
  Json c = {{"id", m.id},
            {"object", kind == ApiKind::kOpenAIChat ? "chat.completion.chunk" : "text_completion"},
            {"created", m.created},
            {"model", m.model}};
  if (!m.fingerprint.empty()) c["system_fingerprint"] = m.fingerprint;
  return c;
}

void AppendInt(std::string& out, int64_t v) {
  const fmt::format_int digits(v);
  out.append(digits.data(), digits.size());
}

// The usage object as OpenAIUsage's DOM writes it.
void AppendUsage(std::string& out, const ResponseMeta& m, int32_t completion) {
  out += R"({"prompt_tokens":)"sv;
  AppendInt(out, m.prompt_tokens);
  out += R"(,"completion_tokens":)"sv;
  AppendInt(out, completion);
  out += R"(,"total_tokens":)"sv;
  AppendInt(out, m.prompt_tokens + completion);
  out += R"(,"prompt_tokens_details":{"cached_tokens":)"sv;
  AppendInt(out, m.cached_tokens);
  out += "}}"sv;
}

// The members every chunk and answer open with, as ChunkBase and
// RenderResponse put them: id, object, created, model (the fingerprint
// comes where each puts it). false when a string is not valid UTF-8.
bool AppendHead(std::string& out, bool chat, std::string_view object_chat,
                std::string_view object_text, const ResponseMeta& m) {
  out += R"({"id":)"sv;
  if (!util::AppendJsonString(out, m.id)) return false;
  out += R"(,"object":")"sv;
  out += chat ? object_chat : object_text;
  out += R"(","created":)"sv;
  AppendInt(out, m.created);
  out += R"(,"model":)"sv;
  return util::AppendJsonString(out, m.model);
}

// "data: " and a chunk's members before its choices, as ChunkBase puts
// them. false when a string is not valid UTF-8.
bool AppendChunkHead(std::string& out, bool chat, const ResponseMeta& m) {
  out += "data: "sv;
  if (!AppendHead(out, chat, "chat.completion.chunk", "text_completion", m)) return false;
  if (!m.fingerprint.empty()) {
    out += R"(,"system_fingerprint":)"sv;
    if (!util::AppendJsonString(out, m.fingerprint)) return false;
  }
  return true;
}

// A chat stream's opening frames (one per choice: the assistant's role and
// empty content), written directly as RenderStreamStart's DOM writes them.
// nullopt when a string is not valid UTF-8.
std::optional<std::string> DirectStartFrames(const ResponseMeta& m, int32_t n_choices) {
  std::string out;
  out.reserve(static_cast<size_t>(n_choices) *
              (200 + m.id.size() + m.model.size() + m.fingerprint.size()));
  for (int32_t i = 0; i < n_choices; ++i) {
    if (!AppendChunkHead(out, true, m)) return std::nullopt;
    out += R"(,"choices":[{"index":)"sv;
    AppendInt(out, i);
    out +=
        R"(,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})"sv;
    out += "\n\n"sv;
  }
  return out;
}

// A choice's finish frame, written directly as RenderStreamFinish's DOM
// writes it. nullopt when a string is not valid UTF-8.
std::optional<std::string> DirectFinishFrame(ApiKind kind, const ResponseMeta& m,
                                             const gateway::Event& e) {
  const bool chat = kind == ApiKind::kOpenAIChat;
  std::string out;
  out.reserve(200 + m.id.size() + m.model.size() + m.fingerprint.size() + e.stop_sequence.size());
  if (!AppendChunkHead(out, chat, m)) return std::nullopt;
  out += R"(,"choices":[{"index":)"sv;
  AppendInt(out, e.index);
  out += R"(,"finish_reason":")"sv;
  out += OpenAIFinish(e.finish);
  out += R"(","logprobs":null)"sv;
  if (e.finish == gateway::FinishReason::kStopString) {
    out += R"(,"stop_reason":)"sv;
    if (!util::AppendJsonString(out, e.stop_sequence)) return std::nullopt;
  }
  out += chat ? R"(,"delta":{}}]})"sv : R"(,"text":""}]})"sv;
  out += "\n\n"sv;
  return out;
}

// The usage frame that closes a stream (stream_options.include_usage),
// written directly as RenderStreamEnd's DOM writes it.
std::optional<std::string> DirectUsageFrame(ApiKind kind, const ResponseMeta& m,
                                            int32_t completion) {
  std::string out;
  out.reserve(240 + m.id.size() + m.model.size() + m.fingerprint.size());
  if (!AppendChunkHead(out, kind == ApiKind::kOpenAIChat, m)) return std::nullopt;
  out += R"(,"choices":[],"usage":)"sv;
  AppendUsage(out, m, completion);
  out += "}\n\n"sv;
  return out;
}

// The SSE frame of one text delta without logprobs, written directly: byte
// for byte what Sse of its DOM writes (members in the order the DOM is
// built, as ordered_json keeps them), appended to `out`. false (with `out`
// partly written: the caller cuts it back) when a string is not valid
// UTF-8, or the delta carries tool calls (the DOM writes those).
bool AppendDirectDeltaFrame(std::string& out, ApiKind kind, const ResponseMeta& m,
                            const gateway::Event& e, std::string* chunk_head) {
  if (!e.tool_calls.empty()) return false;
  const bool chat = kind == ApiKind::kOpenAIChat;
  out.reserve(out.size() + 176 + e.text.size() + m.id.size() + m.model.size() +
              m.fingerprint.size());
  if (chunk_head == nullptr) {
    if (!AppendChunkHead(out, chat, m)) return false;
  } else {
    if (chunk_head->empty() && !AppendChunkHead(*chunk_head, chat, m)) {
      chunk_head->clear();
      return false;
    }
    out += *chunk_head;
  }
  out += R"(,"choices":[{"index":)"sv;
  AppendInt(out, e.index);
  out += R"(,"finish_reason":null,)"sv;
  if (chat) {
    out += R"("delta":{"content":)"sv;
    if (!util::AppendJsonString(out, e.text)) return false;
    out += R"(},"logprobs":null}]})"sv;
  } else {
    out += R"("text":)"sv;
    if (!util::AppendJsonString(out, e.text)) return false;
    out += R"(,"logprobs":null}]})"sv;
  }
  out += "\n\n"sv;
  return true;
}

// A whole response without logprobs or tool calls, written directly: byte
// for byte what Dump of its DOM writes. nullopt when a string is not valid
// UTF-8, or a choice called tools.
std::optional<std::string> DirectResponse(ApiKind kind, const ResponseMeta& m,
                                          const std::vector<ChoiceResult>& choices,
                                          int32_t completion) {
  const bool chat = kind == ApiKind::kOpenAIChat;
  std::string out;
  size_t size = 320 + m.id.size() + m.model.size() + m.fingerprint.size();
  for (const ChoiceResult& c : choices) {
    if (!c.tool_calls.empty()) return std::nullopt;
    size += 128 + c.text.size() + c.stop_sequence.size();
  }
  out.reserve(size);
  if (!AppendHead(out, chat, "chat.completion", "text_completion", m)) return std::nullopt;
  out += R"(,"choices":[)"sv;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    if (i > 0) out.push_back(',');
    out += R"({"index":)"sv;
    AppendInt(out, i);
    out += R"(,"finish_reason":")"sv;
    out += OpenAIFinish(c.finish);
    out.push_back('"');
    if (c.finish == gateway::FinishReason::kStopString) {
      out += R"(,"stop_reason":)"sv;
      if (!util::AppendJsonString(out, c.stop_sequence)) return std::nullopt;
    }
    if (chat) {
      out += R"(,"message":{"role":"assistant","content":)"sv;
      if (!util::AppendJsonString(out, c.text)) return std::nullopt;
      out += R"(,"refusal":null})"sv;
    } else {
      out += R"(,"text":)"sv;
      if (!util::AppendJsonString(out, c.text)) return std::nullopt;
    }
    out += R"(,"logprobs":null})"sv;
  }
  out += R"(],"usage":)"sv;
  AppendUsage(out, m, completion);
  if (!m.fingerprint.empty()) {
    out += R"(,"system_fingerprint":)"sv;
    if (!util::AppendJsonString(out, m.fingerprint)) return std::nullopt;
  }
  out += "}"sv;
  return out;
}

std::string Base64(const uint8_t* p, size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = (static_cast<uint32_t>(p[i]) << 16) |
                       (i + 1 < n ? static_cast<uint32_t>(p[i + 1]) << 8 : 0) |
                       (i + 2 < n ? static_cast<uint32_t>(p[i + 2]) : 0);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[v & 63] : '=';
  }
  return out;
}

StatusOr<std::vector<int32_t>> TokenArray(const Json& a, const std::string& where) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number_integer() || a[i].get<int64_t>() < 0 || a[i].get<int64_t>() > INT32_MAX) {
      return FieldError(fmt::format("{}[{}]", where, i),
                        "must be a token id (a non-negative integer)");
    }
    ids.push_back(static_cast<int32_t>(a[i].get<int64_t>()));
  }
  return ids;
}

// A non-empty array of token ids (non-negative 32-bit integers); `where`
// names it.
StatusOr<std::vector<int32_t>> TokenIds(const Json& a, const std::string& where) {
  if (a.empty()) return FieldError(where, "must not be an empty array of token ids");
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const Json& t = a[i];
    const bool id = t.is_number_unsigned() || (t.is_number_integer() && t.get<int64_t>() >= 0);
    if (!id || t.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
      return FieldError(fmt::format("{}[{}]", where, i), "must be a token id (an integer >= 0)");
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

// OpenAI's completions prompt: a string, an array of strings, an array of
// token ids, or an array of such arrays; at most kMaxPrompts prompts.
StatusOr<std::vector<PromptInput>> ParsePrompts(const Json& p) {
  constexpr const char* kShape =
      "must be a string, an array of strings, an array of token ids or an array of such arrays";
  std::vector<PromptInput> out;
  if (p.is_string()) {
    out.push_back({.text = p.get<std::string>(), .ids = {}});
    return out;
  }
  if (!p.is_array() || p.empty()) return FieldError("prompt", kShape);
  if (p[0].is_number()) {  // one prompt of token ids
    STRATA_ASSIGN_OR_RETURN(auto ids, TokenIds(p, "prompt"));
    out.push_back({.text = std::nullopt, .ids = std::move(ids)});
    return out;
  }
  if (p.size() > kMaxPrompts) {
    return FieldError("prompt",
                      fmt::format("has {} prompts; at most {} are allowed", p.size(), kMaxPrompts));
  }
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string at = fmt::format("prompt[{}]", i);
    if (p[i].is_string()) {
      out.push_back({.text = p[i].get<std::string>(), .ids = {}});
    } else if (p[i].is_array()) {
      STRATA_ASSIGN_OR_RETURN(auto ids, TokenIds(p[i], at));
      out.push_back({.text = std::nullopt, .ids = std::move(ids)});
    } else {
      return FieldError(at, "must be a string or an array of token ids");
    }
  }
  return out;
}

// response_format {"type": "json_schema", "json_schema": {"name",
// "description", "schema", "strict"}}, checked as OpenAI checks it; the
// schema's keys keep the client's order (the wire's JSON is ordered).
Status ParseJsonSchemaFormat(const Json& rf, gateway::CompletionRequest& r) {
  if (!rf.contains("json_schema") || !rf["json_schema"].is_object()) {
    return FieldError("response_format.json_schema",
                      "is required with type 'json_schema': an object with a 'name' and a "
                      "'schema'");
  }
  const Json& js = rf["json_schema"];
  Fields f(js, "response_format.json_schema.");
  STRATA_ASSIGN_OR_RETURN(auto name, f.String("name"));
  if (!name) return f.Error("name", "is required");
  const bool name_ok =
      !name->empty() && name->size() <= 64 && std::all_of(name->begin(), name->end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-';
      });
  if (!name_ok) return f.Error("name", "must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -");
  STRATA_ASSIGN_OR_RETURN(auto description, f.String("description"));
  STRATA_ASSIGN_OR_RETURN(auto strict, f.Bool("strict"));
  gateway::JsonSchemaFormat out;
  out.name = std::move(*name);
  out.description = description.value_or("");
  out.strict = strict.value_or(false);
  if (f.Has("schema")) {
    const Json& schema = f.Get("schema");
    if (!schema.is_object() && !schema.is_boolean()) {
      return f.Error("schema", "must be a JSON Schema (an object)");
    }
    out.schema = Dump(schema);
  } else {
    out.schema = "{}";  // OpenAI's default: any JSON value
  }
  r.response_format = gateway::ResponseFormat::kJsonSchema;
  r.json_schema = std::move(out);
  return util::OkStatus();
}

}  // namespace

namespace openai {

StatusOr<ParsedRequest> ParseRequest(ApiKind kind, const Json& j) {
  ParsedRequest out;
  gateway::CompletionRequest& r = out.request;
  Fields f(j, "");
  STRATA_ASSIGN_OR_RETURN(auto model, f.String("model"));
  if (!model) return f.Error("model", "is required");
  out.model = *model;
  STRATA_RETURN_IF_ERROR(f.Reject("functions", "it is deprecated: use 'tools'"));
  STRATA_RETURN_IF_ERROR(f.Reject("function_call", "it is deprecated: use 'tool_choice'"));
  STRATA_RETURN_IF_ERROR(f.Reject("echo", "echoing the prompt"));
  STRATA_RETURN_IF_ERROR(f.Reject("suffix", "insertion with a suffix"));
  if (f.Has("response_format") && !f.Get("response_format").is_null()) {
    const Json& rf = f.Get("response_format");
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string()) {
      return f.Error("response_format", "must be an object with a 'type'");
    }
    const std::string type = rf["type"].get<std::string>();
    if (type == "json_object") {
      r.response_format = gateway::ResponseFormat::kJsonObject;
    } else if (type == "json_schema") {
      STRATA_RETURN_IF_ERROR(ParseJsonSchemaFormat(rf, r));
    } else if (type != "text") {
      return FieldError("response_format.type",
                        fmt::format("is '{}': it must be 'text', 'json_object' or 'json_schema'",
                                    type.substr(0, 40)));
    }
  }
  STRATA_RETURN_IF_ERROR(ParseGrammar(f, r));
  if (kind == ApiKind::kOpenAIChat) {
    if (!f.Has("messages")) return f.Error("messages", "is required");
    const Json& msgs = f.Get("messages");
    if (!msgs.is_array() || msgs.empty()) {
      return f.Error("messages", "must be a non-empty array");
    }
    for (size_t i = 0; i < msgs.size(); ++i) {
      STRATA_ASSIGN_OR_RETURN(gateway::ChatMessage m,
                              OpenAIMessage(msgs[i], fmt::format("messages[{}]", i)));
      r.messages.push_back(std::move(m));
    }
    STRATA_RETURN_IF_ERROR(OpenAITools(f, r));
  } else {
    STRATA_RETURN_IF_ERROR(f.Reject("tools", "tools need a chat: use /v1/chat/completions"));
    if (!f.Has("prompt")) return f.Error("prompt", "is required");
    STRATA_ASSIGN_OR_RETURN(std::vector<PromptInput> prompts, ParsePrompts(f.Get("prompt")));
    r.prompt = std::move(prompts[0].text);
    r.prompt_ids = std::move(prompts[0].ids);
    out.more_prompts.assign(std::make_move_iterator(prompts.begin() + 1),
                            std::make_move_iterator(prompts.end()));
  }
  STRATA_ASSIGN_OR_RETURN(auto max_tokens, f.Integer("max_tokens", 1, 1 << 24));
  STRATA_ASSIGN_OR_RETURN(auto max_completion, f.Integer("max_completion_tokens", 1, 1 << 24));
  if (max_completion) max_tokens = max_completion;
  if (max_tokens) r.max_tokens = static_cast<int32_t>(*max_tokens);
  STRATA_RETURN_IF_ERROR(ParseSampling(f, 2.0, r));
  STRATA_RETURN_IF_ERROR(ParseLogitBias(f, r));
  STRATA_ASSIGN_OR_RETURN(r.stop, f.Strings("stop"));
  STRATA_ASSIGN_OR_RETURN(auto n, f.Integer("n", 1, 128));
  if (n) r.n = static_cast<int32_t>(*n);
  if (const size_t prompts = out.more_prompts.size() + 1;
      prompts > 1 && static_cast<int64_t>(prompts) * r.n > kMaxChoicesPerRequest) {
    return f.Error(
        "n", fmt::format("times the {} prompts is {} choices; at most {} are allowed", prompts,
                         static_cast<int64_t>(prompts) * r.n, kMaxChoicesPerRequest));
  }
  STRATA_ASSIGN_OR_RETURN(auto stream, f.Bool("stream"));
  out.stream = stream.value_or(false);
  out.request.stream = out.stream;
  if (f.Has("stream_options")) {
    const Json& so = f.Get("stream_options");
    if (!so.is_object()) return f.Error("stream_options", "must be an object");
    Fields sf(so, "stream_options.");
    STRATA_ASSIGN_OR_RETURN(auto iu, sf.Bool("include_usage"));
    out.include_usage = iu.value_or(false);
  }
  if (kind == ApiKind::kOpenAIChat) {
    STRATA_ASSIGN_OR_RETURN(auto lp, f.Bool("logprobs"));
    STRATA_ASSIGN_OR_RETURN(auto top, f.Integer("top_logprobs", 0, 20));
    out.logprobs = lp.value_or(false);
    if (top && !out.logprobs) {
      return f.Error("top_logprobs", "needs 'logprobs' to be true");
    }
    if (out.logprobs) r.top_logprobs = static_cast<int32_t>(top.value_or(0));
  } else {
    STRATA_ASSIGN_OR_RETURN(auto lp, f.Integer("logprobs", 0, 5));
    out.logprobs = lp.has_value();
    if (lp) r.top_logprobs = static_cast<int32_t>(*lp);
  }
  STRATA_ASSIGN_OR_RETURN(auto user, f.String("user"));
  (void)user;  // accepted for compatibility; not used
  STRATA_RETURN_IF_ERROR(ParseSessionId(f, r));
  STRATA_RETURN_IF_ERROR(ParseCacheControls(f, r));
  return out;
}

std::string RenderResponse(ApiKind kind, const ResponseMeta& m,
                           const std::vector<ChoiceResult>& choices, bool logprobs) {
  int32_t completion = 0;
  for (const auto& c : choices) completion += c.completion_tokens;
  if (!logprobs) {
    if (auto direct = DirectResponse(kind, m, choices, completion)) return *std::move(direct);
  }
  Json out_choices = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    Json choice = {{"index", i}, {"finish_reason", OpenAIFinish(c.finish)}};
    // vLLM's extension: which stop string ended the choice (an upstream
    // strata's front end reads it to say stop_sequence to Anthropic clients).
    if (c.finish == gateway::FinishReason::kStopString) choice["stop_reason"] = c.stop_sequence;
    if (kind == ApiKind::kOpenAIChat) {
      choice["message"] = {
          {"role", "assistant"},
          {"content", c.text.empty() && !c.tool_calls.empty() ? Json(nullptr) : Json(c.text)},
          {"refusal", nullptr}};
      if (!c.tool_calls.empty()) {
        Json calls = Json::array();
        for (const auto& t : c.tool_calls) {
          calls.push_back({{"id", t.id},
                           {"type", "function"},
                           {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
        }
        choice["message"]["tool_calls"] = std::move(calls);
      }
      choice["logprobs"] = logprobs ? ChatLogprobs(c.logprobs) : Json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = logprobs ? CompletionLogprobs(c.logprobs, 0) : Json(nullptr);
    }
    out_choices.push_back(choice);
  }
  Json j = {{"id", m.id},
            {"object", kind == ApiKind::kOpenAIChat ? "chat.completion" : "text_completion"},
            {"created", m.created},
            {"model", m.model},
            {"choices", out_choices},
            {"usage", OpenAIUsage(m, completion)}};
  if (!m.fingerprint.empty()) j["system_fingerprint"] = m.fingerprint;
  return Dump(j);
}

std::string RenderStreamStart(ApiKind kind, const ResponseMeta& m, int32_t n_choices) {
  if (kind == ApiKind::kOpenAICompletion) return "";
  if (std::optional<std::string> direct = DirectStartFrames(m, n_choices)) {
    return *std::move(direct);
  }
  std::string out;
  for (int32_t i = 0; i < n_choices; ++i) {
    Json c = ChunkBase(kind, m);
    c["choices"] = Json::array({{{"index", i},
                                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}});
    out += Sse(c);
  }
  return out;
}

std::string RenderStreamDelta(ApiKind kind, const ResponseMeta& m, const gateway::Event& e,
                              bool logprobs) {
  std::string out;
  openai::AppendStreamDelta(out, kind, m, e, logprobs, nullptr);
  return out;
}

void AppendStreamDelta(std::string& out, ApiKind kind, const ResponseMeta& m,
                       const gateway::Event& e, bool logprobs, std::string* chunk_head) {
  // The common frame (every token of a stream without logprobs) skips the DOM.
  if (!logprobs) {
    const size_t before = out.size();
    if (AppendDirectDeltaFrame(out, kind, m, e, chunk_head)) return;
    out.resize(before);
  }
  Json c = ChunkBase(kind, m);
  Json choice = {{"index", e.index}, {"finish_reason", nullptr}};
  if (kind == ApiKind::kOpenAIChat) {
    choice["delta"] = Json::object();
    if (!e.text.empty() || e.tool_calls.empty()) choice["delta"]["content"] = e.text;
    if (!e.tool_calls.empty()) {
      Json calls = Json::array();
      for (const auto& t : e.tool_calls) {
        Json call = {{"index", t.index}};
        Json fn = {{"arguments", t.arguments}};
        if (!t.id.empty()) {  // a call's first piece names it
          call["id"] = t.id;
          call["type"] = "function";
          fn["name"] = t.name;
        }
        call["function"] = std::move(fn);
        calls.push_back(std::move(call));
      }
      choice["delta"]["tool_calls"] = std::move(calls);
    }
    choice["logprobs"] = logprobs ? ChatLogprobs(e.logprobs) : Json(nullptr);
  } else {
    choice["text"] = e.text;
    choice["logprobs"] = logprobs ? CompletionLogprobs(e.logprobs, 0) : Json(nullptr);
  }
  c["choices"] = Json::array({choice});
  out += Sse(c);
}

std::string RenderStreamFinish(ApiKind kind, const ResponseMeta& m, const gateway::Event& e) {
  if (std::optional<std::string> direct = DirectFinishFrame(kind, m, e)) return *std::move(direct);
  Json c = ChunkBase(kind, m);
  Json choice = {
      {"index", e.index}, {"finish_reason", OpenAIFinish(e.finish)}, {"logprobs", nullptr}};
  if (e.finish == gateway::FinishReason::kStopString) choice["stop_reason"] = e.stop_sequence;
  if (kind == ApiKind::kOpenAIChat) {
    choice["delta"] = Json::object();
  } else {
    choice["text"] = "";
  }
  c["choices"] = Json::array({choice});
  return Sse(c);
}

std::string RenderStreamEnd(ApiKind kind, const ResponseMeta& m, int32_t completion_tokens,
                            bool include_usage) {
  std::string out;
  if (include_usage) {
    if (std::optional<std::string> direct = DirectUsageFrame(kind, m, completion_tokens)) {
      return *std::move(direct) + "data: [DONE]\n\n";
    }
    Json c = ChunkBase(kind, m);
    c["choices"] = Json::array();
    c["usage"] = OpenAIUsage(m, completion_tokens);
    out += Sse(c);
  }
  return out + "data: [DONE]\n\n";
}

StatusOr<ParsedEmbeddingRequest> ParseEmbeddingRequest(const Json& j) {
  ParsedEmbeddingRequest out;
  Fields f(j, "");
  STRATA_ASSIGN_OR_RETURN(auto model, f.String("model"));
  if (!model) return f.Error("model", "is required");
  out.model = *model;
  if (!f.Has("input")) return f.Error("input", "is required");
  const Json& in = f.Get("input");
  if (in.is_string()) {
    out.request.texts.push_back(in.get<std::string>());
  } else if (in.is_array() && !in.empty() && in[0].is_number_integer()) {
    STRATA_ASSIGN_OR_RETURN(auto ids, TokenArray(in, "input"));
    out.request.token_ids.push_back(std::move(ids));
  } else if (in.is_array()) {
    for (size_t i = 0; i < in.size(); ++i) {
      const std::string at = fmt::format("input[{}]", i);
      if (in[i].is_string()) {
        out.request.texts.push_back(in[i].get<std::string>());
      } else if (in[i].is_array()) {
        STRATA_ASSIGN_OR_RETURN(auto ids, TokenArray(in[i], at));
        out.request.token_ids.push_back(std::move(ids));
      } else {
        return FieldError(at, "must be a string or an array of token ids");
      }
    }
    if (!out.request.texts.empty() && !out.request.token_ids.empty()) {
      return f.Error("input", "must not mix strings and token arrays");
    }
  } else {
    return f.Error("input", "must be a string, an array of strings or token ids");
  }
  STRATA_ASSIGN_OR_RETURN(auto fmt_name, f.String("encoding_format"));
  if (fmt_name && *fmt_name != "float" && *fmt_name != "base64") {
    return f.Error("encoding_format", "must be 'float' or 'base64'");
  }
  out.base64 = fmt_name && *fmt_name == "base64";
  STRATA_RETURN_IF_ERROR(f.Reject("dimensions", "this model's embeddings have a fixed size"));
  return out;
}

std::string RenderEmbeddings(const std::string& model, const gateway::EmbeddingResult& r,
                             bool base64) {
  Json data = Json::array();
  for (size_t i = 0; i < r.embeddings.size(); ++i) {
    const auto& e = r.embeddings[i];
    Json item = {{"object", "embedding"}, {"index", i}};
    if (base64) {
      item["embedding"] =
          Base64(reinterpret_cast<const uint8_t*>(e.data()), e.size() * sizeof(float));
    } else {
      item["embedding"] = e;
    }
    data.push_back(std::move(item));
  }
  return Dump({{"object", "list"},
               {"data", data},
               {"model", model},
               {"usage", {{"prompt_tokens", r.prompt_tokens}, {"total_tokens", r.prompt_tokens}}}});
}

}  // namespace openai
}  // namespace strata::server::wire
