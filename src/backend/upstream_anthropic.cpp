// The Anthropic side of the upstream wire (backend/upstream_wire.h): the
// Messages request body (system blocks, text content blocks, cache_control
// breakpoints), its event stream (message_start ... message_stop) and its
// whole response.
#include <algorithm>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "backend/internal/upstream_json.h"

namespace strata::backend::upstream::internal {
namespace {

using util::Status;
using util::StatusOr;

constexpr Api kApi = Api::kAnthropic;
// The Messages API's limit on cache_control breakpoints per request.
constexpr int kMaxBreakpoints = 4;

Json TextBlock(const std::string& text) { return {{"type", "text"}, {"text", text}}; }

void MarkCache(Json& block) { block["cache_control"] = {{"type", "ephemeral"}}; }

// Compact JSON text of an object (tool arguments, a schema) as the object;
// {} when it is not one.
Json ObjectOf(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Json::object();
  return j;
}

// Anthropic's usage: input_tokens EXCLUDES the cache reads and writes, which
// come as their own fields; every field is optional, and a later event's
// field (message_delta) overrides an earlier one's (message_start).
struct UsageFields {
  std::optional<int32_t> input, cache_read, cache_creation, output;

  Status Read(const Json& u, std::string_view where) {
    if (!u.is_object()) return ProtocolError(fmt::format("'{}' is not an object", where));
    const std::string at = std::string(where) + ".";
    STRATA_ASSIGN_OR_RETURN(auto in, OptCount(u, "input_tokens", at));
    STRATA_ASSIGN_OR_RETURN(auto read, OptCount(u, "cache_read_input_tokens", at));
    STRATA_ASSIGN_OR_RETURN(auto creation, OptCount(u, "cache_creation_input_tokens", at));
    STRATA_ASSIGN_OR_RETURN(auto out, OptCount(u, "output_tokens", at));
    if (in) input = in;
    if (read) cache_read = read;
    if (creation) cache_creation = creation;
    if (out) output = out;
    return Status();
  }

  Usage ToUsage() const {
    const int64_t prompt = static_cast<int64_t>(input.value_or(0)) + cache_read.value_or(0) +
                           cache_creation.value_or(0);
    Usage u;
    u.prompt_tokens =
        static_cast<int32_t>(std::min<int64_t>(prompt, std::numeric_limits<int32_t>::max()));
    u.cached_tokens = cache_read.value_or(0);
    u.cache_write_tokens = cache_creation.value_or(0);
    u.completion_tokens = output.value_or(0);
    return u;
  }
};

// end_turn → kEndOfTurn, max_tokens (and model_context_window_exceeded) →
// kLength, stop_sequence → kStopString with the sequence; anything else
// (pause_turn, refusal) → kEndOfTurn; tool_use → kToolCalls.
std::pair<FinishReason, std::string> FinishOf(const std::optional<std::string>& stop_reason,
                                              const std::optional<std::string>& stop_sequence) {
  if (stop_reason == "max_tokens" || stop_reason == "model_context_window_exceeded") {
    return {FinishReason::kLength, ""};
  }
  if (stop_reason == "stop_sequence" && stop_sequence && !stop_sequence->empty()) {
    return {FinishReason::kStopString, *stop_sequence};
  }
  if (stop_reason == "tool_use") return {FinishReason::kToolCalls, ""};
  return {FinishReason::kEndOfTurn, ""};
}

// `prompt`: the prompt's counts from message_start, on the stream's first
// delta only (so that a client's own message_start can report them).
void PushText(std::string text, std::vector<Event>* out, const Usage* prompt = nullptr,
              std::vector<ToolCallDelta> calls = {}) {
  if (text.empty() && calls.empty()) return;
  Event e;
  e.kind = Event::Kind::kDelta;
  e.index = 0;
  e.text = std::move(text);
  e.tool_calls = std::move(calls);
  if (prompt != nullptr) {
    e.usage.prompt_tokens = prompt->prompt_tokens;
    e.usage.cached_tokens = prompt->cached_tokens;
    e.usage.cache_write_tokens = prompt->cache_write_tokens;
  }
  out->push_back(std::move(e));
}

class AnthropicDecoder : public DecoderCore {
 public:
  explicit AnthropicDecoder(size_t max_event_bytes) : DecoderCore(1, max_event_bytes) {}

 protected:
  Status OnEvent(const net::SseEventView& event, std::vector<Event>* out) override {
    std::string_view data = event.data;
    while (!data.empty() && (data.back() == ' ' || data.back() == '\t' || data.back() == '\n')) {
      data.remove_suffix(1);
    }
    if (data.empty()) return Status();
    STRATA_ASSIGN_OR_RETURN(const Json j, ParseJson(data, "stream event"));
    if (!j.is_object()) return ProtocolError("a stream event is not a JSON object");
    // The data's own "type" is what the API defines; the SSE event name
    // repeats it.
    STRATA_ASSIGN_OR_RETURN(auto type_field, OptString(j, "type", ""));
    const std::string type = type_field ? *type_field : std::string(event.event);
    if (type == "ping") return Status();
    if (type == "error") {
      const Json* error = Member(j, "error");
      return UpstreamFailed(MidStreamError(kApi, error != nullptr ? *error : Json()), out);
    }
    const bool known = type == "message_start" || type == "content_block_start" ||
                       type == "content_block_delta" || type == "content_block_stop" ||
                       type == "message_delta" || type == "message_stop";
    if (!known) return Status();  // new event types are skipped, as the API asks
    if (type == "message_start") {
      if (message_started_) return ProtocolError("the stream sent a second message_start");
      message_started_ = true;
      const Json* message = Member(j, "message");
      if (message == nullptr || !message->is_object()) {
        return ProtocolError("'message_start' has no 'message' object");
      }
      if (const Json* u = Member(*message, "usage"); u != nullptr) {
        STRATA_RETURN_IF_ERROR(usage_.Read(*u, "message.usage"));
        finishes_.usage() = usage_.ToUsage();  // a failure later still reports the prompt
      }
      return Status();
    }
    if (!message_started_) {
      return ProtocolError(fmt::format("the stream sent '{}' before message_start", type));
    }
    if (type == "content_block_start") {
      const Json* block = Member(j, "content_block");
      if (block == nullptr || !block->is_object()) {
        return ProtocolError("'content_block_start' has no 'content_block' object");
      }
      STRATA_ASSIGN_OR_RETURN(auto block_type, OptString(*block, "type", "content_block."));
      in_tool_use_ = block_type == "tool_use";
      if (block_type == "text") {
        STRATA_ASSIGN_OR_RETURN(auto text, OptString(*block, "text", "content_block."));
        Push(text.value_or(""), out);
      } else if (in_tool_use_) {
        // A call: its id and name now, its input as input_json_delta pieces.
        STRATA_ASSIGN_OR_RETURN(auto id, OptString(*block, "id", "content_block."));
        STRATA_ASSIGN_OR_RETURN(auto name, OptString(*block, "name", "content_block."));
        if (!id || id->empty() || !name || name->empty()) {
          return ProtocolError("a 'tool_use' block lacks its id or name");
        }
        ToolCallDelta d;
        d.index = calls_++;
        d.id = std::move(*id);
        d.name = std::move(*name);
        // Some servers send the whole input here rather than as pieces.
        if (const Json* input = Member(*block, "input");
            input != nullptr && input->is_object() && !input->empty()) {
          d.arguments = input->dump(-1, ' ', false, Json::error_handler_t::replace);
        }
        Push("", out, {std::move(d)});
      }
      return Status();
    }
    if (type == "content_block_delta") {
      const Json* delta = Member(j, "delta");
      if (delta == nullptr || !delta->is_object()) {
        return ProtocolError("'content_block_delta' has no 'delta' object");
      }
      STRATA_ASSIGN_OR_RETURN(auto delta_type, OptString(*delta, "type", "delta."));
      // Only text: thinking, signatures, tool input and citations are not.
      if (delta_type == "text_delta") {
        STRATA_ASSIGN_OR_RETURN(auto text, OptString(*delta, "text", "delta."));
        if (!text) return ProtocolError("a 'text_delta' has no 'text'");
        Push(std::move(*text), out);
      } else if (delta_type == "input_json_delta") {
        if (!in_tool_use_) return ProtocolError("an 'input_json_delta' outside a tool_use block");
        STRATA_ASSIGN_OR_RETURN(auto piece, OptString(*delta, "partial_json", "delta."));
        if (piece && !piece->empty()) {
          ToolCallDelta d;
          d.index = calls_ - 1;
          d.arguments = std::move(*piece);
          Push("", out, {std::move(d)});
        }
      }
      return Status();
    }
    if (type == "message_delta") {
      if (const Json* delta = Member(j, "delta"); delta != nullptr) {
        if (!delta->is_object()) return ProtocolError("'message_delta.delta' is not an object");
        STRATA_ASSIGN_OR_RETURN(auto reason, OptString(*delta, "stop_reason", "delta."));
        STRATA_ASSIGN_OR_RETURN(auto sequence, OptString(*delta, "stop_sequence", "delta."));
        if (reason) stop_reason_ = std::move(reason);
        if (sequence) stop_sequence_ = std::move(sequence);
      }
      if (const Json* u = Member(j, "usage"); u != nullptr) {
        STRATA_RETURN_IF_ERROR(usage_.Read(*u, "usage"));
        finishes_.usage() = usage_.ToUsage();
      }
      return Status();
    }
    if (type == "message_stop") {
      auto [reason, stop] = FinishOf(stop_reason_, stop_sequence_);
      finishes_.Finish(0, reason, std::move(stop));
      finishes_.Flush(out);
    }
    return Status();  // content_block_stop
  }

  Status OnEnd(std::vector<Event>*) override {
    return ProtocolError(message_started_ ? "the stream ended before message_stop"
                                          : "the stream ended before message_start");
  }

 private:
  void Push(std::string text, std::vector<Event>* out, std::vector<ToolCallDelta> calls = {}) {
    if (text.empty() && calls.empty()) return;
    const Usage prompt = usage_.ToUsage();
    PushText(std::move(text), out, first_delta_sent_ ? nullptr : &prompt, std::move(calls));
    first_delta_sent_ = true;
  }

  bool message_started_ = false;
  bool in_tool_use_ = false;  // the open content block is a tool_use
  int32_t calls_ = 0;         // tool_use blocks so far
  bool first_delta_sent_ = false;
  UsageFields usage_;
  std::optional<std::string> stop_reason_, stop_sequence_;
};

}  // namespace

StatusOr<Call> RenderAnthropic(const Request& r, const RenderOptions& o) {
  const SamplingFieldsSet& set = r.sampling_set;
  const sampling::SamplingParams& p = r.sampling;
  if (r.completion())
    return Unsupported(kApi, "prompt", "the Anthropic API has no completions endpoint");
  if (r.n > 1) return Unsupported(kApi, "n", "the Anthropic API gives one choice per request");
  if (set.presence_penalty) {
    return Unsupported(kApi, "presence_penalty", "the Anthropic API has no penalties");
  }
  if (set.frequency_penalty) {
    return Unsupported(kApi, "frequency_penalty", "the Anthropic API has no penalties");
  }
  if (set.repetition_penalty) {
    return Unsupported(kApi, "repetition_penalty", "the Anthropic API has no penalties");
  }
  if (set.seed) return Unsupported(kApi, "seed", "the Anthropic API does not take a seed");
  // A JSON answer is the Anthropic API's forced tool use: one tool whose
  // input schema is the answer's (the decoded call becomes the text).
  Json answer_schema;
  if (r.response_format != ResponseFormat::kText) {
    if (!r.tools.empty()) {
      return Unsupported(kApi, "response_format",
                         "a JSON answer is sent as a forced tool, which cannot go with tools");
    }
    answer_schema = r.response_format == ResponseFormat::kJsonObject
                        ? Json{{"type", "object"}}
                        : Json::parse(r.json_schema.schema, nullptr, /*allow_exceptions=*/false);
    if (!answer_schema.is_object() || !answer_schema.contains("type") ||
        answer_schema["type"] != "object") {
      return Unsupported(kApi, "response_format.json_schema.schema",
                         "the Anthropic API takes a JSON answer as a tool's input, which must "
                         "be a schema of \"type\": \"object\"");
    }
  }
  if (!r.grammar.empty()) {
    return Unsupported(kApi, "grammar", "the Anthropic API has no grammar-constrained decoding");
  }
  if (set.logit_bias) {
    return Unsupported(kApi, "logit_bias", "the Anthropic API has no logit bias");
  }
  if (set.min_p) return Unsupported(kApi, "min_p", "the Anthropic API has no min-p sampling");
  if (r.top_logprobs >= 0) {
    return Unsupported(kApi, "logprobs", "the Anthropic API does not return logprobs");
  }
  if (set.strata_sampler) {
    return Unsupported(kApi, StrataSamplerField(p),
                       "strata's own samplers run only on the local engine");
  }
  if (r.ignore_eos) {
    return Unsupported(kApi, "ignore_eos", "the Anthropic API always ends at the end of a turn");
  }
  if (set.temperature && p.temperature > 1.0f) {
    return Unsupported(kApi, "temperature", "the Anthropic API's range is [0, 1]");
  }
  if (o.max_tokens <= 0) {
    return util::InvalidFieldError(
        "max_tokens", "'max_tokens' is required by the Anthropic API and must be positive");
  }
  if (o.model.empty()) {
    return util::InvalidArgumentError("the anthropic backend has no upstream model id");
  }

  // System messages come first and become the "system" blocks; the rest
  // alternate user and assistant turns, each one text block.
  Json system = Json::array(), messages = Json::array();
  // For each request message, where its block is: in `system` or `messages`,
  // at which position (-1: an empty system message, which has no block).
  struct Place {
    bool system = false;
    int position = -1;
    int block = 0;  // the message's last block
  };
  std::vector<Place> places(r.messages.size());
  bool conversation_began = false;
  for (size_t i = 0; i < r.messages.size(); ++i) {
    const ChatMessage& m = r.messages[i];
    if (m.role == "system") {
      if (conversation_began) {
        return Unsupported(kApi, fmt::format("messages[{}]", i),
                           "the Anthropic API takes system text only before the conversation");
      }
      // An empty block is refused by the API; it adds nothing, so a
      // breakpoint on it marks the block before (the same prefix).
      places[i] = {true, static_cast<int>(system.size()) - 1};
      if (!m.content.empty()) {
        places[i].position = static_cast<int>(system.size());
        system.push_back(TextBlock(m.content));
      }
      continue;
    }
    conversation_began = true;
    // A result is a tool_result block of a user turn; results in a row, and
    // the user's text after them, share one turn (the API wants them right
    // after the calls they answer).
    const bool joins = i > 0 && r.messages[i - 1].role == "tool" && !messages.empty() &&
                       (m.role == "tool" || m.role == "user");
    if (m.role == "tool") {
      Json result = {{"type", "tool_result"}, {"tool_use_id", m.tool_call_id}};
      if (!m.content.empty()) result["content"] = m.content;
      if (m.is_error) result["is_error"] = true;
      if (!joins) messages.push_back({{"role", "user"}, {"content", Json::array()}});
      messages.back()["content"].push_back(std::move(result));
      places[i] = {false, static_cast<int>(messages.size()) - 1,
                   static_cast<int>(messages.back()["content"].size()) - 1};
      continue;
    }
    if (m.role != "user" && m.role != "assistant") {
      return Unsupported(kApi, fmt::format("messages[{}].role", i),
                         fmt::format("the Anthropic API has no role '{}'", Quote(m.role, 32)));
    }
    Json blocks = Json::array();
    if (!m.content.empty() || m.tool_calls.empty()) blocks.push_back(TextBlock(m.content));
    for (const ToolCall& c : m.tool_calls) {
      blocks.push_back(
          {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", ObjectOf(c.arguments)}});
    }
    if (joins) {
      for (Json& b : blocks) messages.back()["content"].push_back(std::move(b));
    } else {
      messages.push_back({{"role", m.role}, {"content", std::move(blocks)}});
    }
    places[i] = {false, static_cast<int>(messages.size()) - 1,
                 static_cast<int>(messages.back()["content"].size()) - 1};
  }
  if (messages.empty()) {
    return Unsupported(kApi, "messages",
                       "the Anthropic API needs at least one user or assistant message");
  }
  int marks = 0;
  for (int32_t b : r.cache_breakpoints) {
    if (b < 0 || static_cast<size_t>(b) >= r.messages.size()) {
      return util::InvalidFieldError(
          "cache_control", fmt::format("a cache breakpoint names message {}, the request has {}", b,
                                       r.messages.size()));
    }
    const Place& at = places[b];
    if (at.position < 0) continue;
    Json& block = at.system ? system[at.position] : messages[at.position]["content"][at.block];
    if (!block.contains("cache_control")) ++marks;
    MarkCache(block);
  }
  if (marks > kMaxBreakpoints) {
    return Unsupported(kApi, "cache_control",
                       fmt::format("the Anthropic API takes at most {} cache breakpoints, the "
                                   "request has {}",
                                   kMaxBreakpoints, marks));
  }
  if (o.cache_system_prompt && r.cache_breakpoints.empty() && !system.empty()) {
    MarkCache(system.back());
  }

  Json body = {{"model", o.model}, {"max_tokens", o.max_tokens}, {"messages", messages}};
  if (!system.empty()) body["system"] = system;
  if (!r.stop.empty()) body["stop_sequences"] = r.stop;
  if (set.temperature) body["temperature"] = CleanNumber(p.temperature);
  if (set.top_p) body["top_p"] = CleanNumber(p.top_p);
  if (set.top_k) body["top_k"] = p.top_k;
  if (!answer_schema.is_null()) {
    const std::string name = r.response_format == ResponseFormat::kJsonSchema
                                 ? r.json_schema.name
                                 : std::string(kJsonAnswerTool);
    Json tool = {{"name", name}, {"input_schema", answer_schema}};
    if (!r.json_schema.description.empty()) tool["description"] = r.json_schema.description;
    body["tools"] = Json::array({std::move(tool)});
    body["tool_choice"] = {{"type", "tool"}, {"name", name}, {"disable_parallel_tool_use", true}};
  }
  if (!r.tools.empty()) {
    Json tools = Json::array();
    for (const ToolDefinition& t : r.tools) {
      Json tool = {{"name", t.name}};
      if (!t.description.empty()) tool["description"] = t.description;
      // The API requires a schema: a tool without parameters takes an empty object.
      tool["input_schema"] = t.parameters.empty()
                                 ? Json{{"type", "object"}, {"properties", Json::object()}}
                                 : ObjectOf(t.parameters);
      tools.push_back(std::move(tool));
    }
    body["tools"] = std::move(tools);
    Json choice;
    switch (r.tool_choice.mode) {
      case ToolChoice::Mode::kAuto:
        choice = {{"type", "auto"}};
        break;
      case ToolChoice::Mode::kNone:
        choice = {{"type", "none"}};
        break;
      case ToolChoice::Mode::kRequired:
        choice = {{"type", "any"}};
        break;
      case ToolChoice::Mode::kNamed:
        choice = {{"type", "tool"}, {"name", r.tool_choice.name}};
        break;
    }
    if (!r.parallel_tool_calls && r.tool_choice.mode != ToolChoice::Mode::kNone) {
      choice["disable_parallel_tool_use"] = true;
    }
    body["tool_choice"] = std::move(choice);
  }
  body["stream"] = o.stream;
  return Call{"/v1/messages", body.dump(-1, ' ', false, Json::error_handler_t::replace)};
}

std::unique_ptr<DecoderCore> NewAnthropicDecoder(size_t max_event_bytes) {
  return std::make_unique<AnthropicDecoder>(max_event_bytes);
}

Status DecodeAnthropicWhole(const Json& body, std::vector<Event>* out) {
  STRATA_ASSIGN_OR_RETURN(auto type, OptString(body, "type", ""));
  if (type == "error") {
    const Json* error = Member(body, "error");
    return MidStreamError(kApi, error != nullptr ? *error : Json());
  }
  const Json* content = Member(body, "content");
  if (content == nullptr || !content->is_array()) {
    return ProtocolError("the response has no 'content' array");
  }
  std::string text;
  std::vector<ToolCallDelta> calls;
  for (size_t k = 0; k < content->size(); ++k) {
    const Json& block = (*content)[k];
    const std::string at = fmt::format("content[{}].", k);
    if (!block.is_object()) return ProtocolError(fmt::format("'content[{}]' is not an object", k));
    STRATA_ASSIGN_OR_RETURN(auto block_type, OptString(block, "type", at));
    if (block_type == "tool_use") {
      STRATA_ASSIGN_OR_RETURN(auto id, OptString(block, "id", at));
      STRATA_ASSIGN_OR_RETURN(auto name, OptString(block, "name", at));
      const Json* input = Member(block, "input");
      if (!id || id->empty() || !name || name->empty() ||
          (input != nullptr && !input->is_object())) {
        return ProtocolError(
            fmt::format("'content[{}]' is a tool_use without id, name or an "
                        "input object",
                        k));
      }
      ToolCallDelta d;
      d.index = static_cast<int32_t>(calls.size());
      d.id = std::move(*id);
      d.name = std::move(*name);
      d.arguments =
          input != nullptr ? input->dump(-1, ' ', false, Json::error_handler_t::replace) : "{}";
      calls.push_back(std::move(d));
      continue;
    }
    if (block_type != "text") continue;
    STRATA_ASSIGN_OR_RETURN(auto block_text, OptString(block, "text", at));
    text += block_text.value_or("");
  }
  STRATA_ASSIGN_OR_RETURN(auto reason, OptString(body, "stop_reason", ""));
  STRATA_ASSIGN_OR_RETURN(auto sequence, OptString(body, "stop_sequence", ""));
  UsageFields usage;
  if (const Json* u = Member(body, "usage"); u != nullptr) {
    STRATA_RETURN_IF_ERROR(usage.Read(*u, "usage"));
  }
  Finishes finishes(1);
  finishes.usage() = usage.ToUsage();
  PushText(std::move(text), out, nullptr, std::move(calls));
  auto [finish, stop] = FinishOf(reason, sequence);
  finishes.Finish(0, finish, std::move(stop));
  finishes.Flush(out);
  return Status();
}

}  // namespace strata::backend::upstream::internal
