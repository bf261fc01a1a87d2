// The OpenAI side of the upstream wire (backend/upstream_wire.h): the chat
// and completions request bodies, their streams (chunks by choice index,
// the usage chunk, "[DONE]") and their whole responses.
#include <algorithm>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "backend/internal/json_scan.h"
#include "backend/internal/openai_chunk.h"
#include "backend/internal/upstream_json.h"
#include "util/utf8.h"

namespace strata::backend::upstream::internal {
namespace {

using util::Status;
using util::StatusOr;

// --- rendering -----------------------------------------------------------------

// A request body written straight into a string, member by member: what
// the DOM would dump (strings escaped as nlohmann writes them, invalid
// UTF-8 replaced as its dump's error handler does), without building one.
// Rare structured values (tools, schemas, logit bias) are built as DOM and
// dumped in place.
class BodyWriter {
 public:
  // Opens an object ('{') or an array ('['), closes it (with its bracket).
  void Open(char bracket) {
    Comma();
    out_ += bracket;
    first_ = true;
  }
  void Close(char bracket) {
    out_ += bracket;
    first_ = false;
  }
  // A member's key; its value follows.
  void Key(std::string_view key) {
    Comma();
    util::AppendJsonString(out_, key);  // keys are this file's own ASCII names
    out_ += ':';
    first_ = true;  // the value takes no comma
  }
  void String(std::string_view v) {
    Comma();
    if (!util::AppendJsonString(out_, v)) out_ += DumpOf(Json(std::string(v)));
    first_ = false;
  }
  void Int(int64_t v) { Raw(fmt::format_int(v).str()); }
  void Bool(bool v) { Raw(v ? "true" : "false"); }
  void Null() { Raw("null"); }
  void Double(double v) { Dump(Json(v)); }
  void Value(const Json& j) { Dump(j); }
  std::string Take() { return std::move(out_); }

 private:
  void Comma() {
    if (!first_) out_ += ',';
  }
  void Raw(std::string_view v) {
    Comma();
    out_ += v;
    first_ = false;
  }
  static std::string DumpOf(const Json& j) {
    return j.dump(-1, ' ', false, Json::error_handler_t::replace);
  }
  void Dump(const Json& j) { Raw(DumpOf(j)); }

  std::string out_;
  bool first_ = true;
};

void WriteMessages(const std::vector<ChatMessage>& messages, BodyWriter& w) {
  w.Open('[');
  for (const ChatMessage& m : messages) {
    w.Open('{');
    w.Key("role");
    if (m.role == "tool") {
      // OpenAI has no error flag on a result: the text says so.
      w.String("tool");
      w.Key("tool_call_id");
      w.String(m.tool_call_id);
      w.Key("content");
      w.String(m.is_error ? "Error: " + m.content : m.content);
      w.Close('}');
      continue;
    }
    w.String(m.role);
    w.Key("content");
    if (!m.tool_calls.empty() && m.content.empty()) {
      w.Null();
    } else {
      w.String(m.content);
    }
    if (!m.tool_calls.empty()) {
      w.Key("tool_calls");
      w.Open('[');
      for (const ToolCall& c : m.tool_calls) {
        w.Open('{');
        w.Key("id");
        w.String(c.id);
        w.Key("type");
        w.String("function");
        w.Key("function");
        w.Open('{');
        w.Key("name");
        w.String(c.name);
        w.Key("arguments");
        w.String(c.arguments);
        w.Close('}');
        w.Close('}');
      }
      w.Close(']');
    }
    w.Close('}');
  }
  w.Close(']');
}

Json OpenAITools(const std::vector<ToolDefinition>& tools) {
  Json out = Json::array();
  for (const ToolDefinition& t : tools) {
    Json fn = {{"name", t.name}};
    if (!t.description.empty()) fn["description"] = t.description;
    if (!t.parameters.empty()) {
      Json schema = Json::parse(t.parameters, nullptr, /*allow_exceptions=*/false);
      if (!schema.is_discarded()) fn["parameters"] = std::move(schema);
    }
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// --- decoding ------------------------------------------------------------------

std::vector<uint8_t> BytesOf(std::string_view text) {
  return std::vector<uint8_t>(text.begin(), text.end());
}

StatusOr<std::vector<uint8_t>> ByteArray(const Json& obj, std::string_view text,
                                         std::string_view where) {
  const Json* b = Member(obj, "bytes");
  if (b == nullptr) return BytesOf(text);
  if (!b->is_array()) return ProtocolError(fmt::format("'{}bytes' is not an array", where));
  std::vector<uint8_t> out;
  out.reserve(b->size());
  for (const Json& x : *b) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > 255) {
      return ProtocolError(fmt::format("'{}bytes' holds something other than a byte", where));
    }
    out.push_back(static_cast<uint8_t>(x.get<int64_t>()));
  }
  return out;
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token",
// "logprob", "bytes"}]}]}.
Status ChatLogprobs(const Json& lp, const std::string& where, std::vector<TokenLogprob>* out) {
  if (!lp.is_object()) return ProtocolError(fmt::format("'{}' is not an object", where));
  const Json* content = Member(lp, "content");
  if (content == nullptr) return Status();
  if (!content->is_array()) {
    return ProtocolError(fmt::format("'{}.content' is not an array", where));
  }
  for (size_t k = 0; k < content->size(); ++k) {
    const Json& entry = (*content)[k];
    const std::string at = fmt::format("{}.content[{}].", where, k);
    if (!entry.is_object()) return ProtocolError(fmt::format("'{}' is not an object", at));
    TokenLogprob t;
    STRATA_ASSIGN_OR_RETURN(auto token, OptString(entry, "token", at));
    if (!token) return ProtocolError(fmt::format("'{}token' is missing", at));
    t.text = std::move(*token);
    const auto lp_it = entry.find("logprob");
    if (lp_it == entry.end()) return ProtocolError(fmt::format("'{}logprob' is missing", at));
    STRATA_ASSIGN_OR_RETURN(t.logprob, Logprob(*lp_it, at + "logprob"));
    STRATA_ASSIGN_OR_RETURN(t.bytes, ByteArray(entry, t.text, at));
    if (const Json* top = Member(entry, "top_logprobs"); top != nullptr) {
      if (!top->is_array()) {
        return ProtocolError(fmt::format("'{}top_logprobs' is not an array", at));
      }
      for (size_t m = 0; m < top->size(); ++m) {
        const Json& alt = (*top)[m];
        const std::string alt_at = fmt::format("{}top_logprobs[{}].", at, m);
        if (!alt.is_object()) return ProtocolError(fmt::format("'{}' is not an object", alt_at));
        STRATA_ASSIGN_OR_RETURN(auto alt_token, OptString(alt, "token", alt_at));
        if (!alt_token) return ProtocolError(fmt::format("'{}token' is missing", alt_at));
        const auto alt_lp = alt.find("logprob");
        if (alt_lp == alt.end()) {
          return ProtocolError(fmt::format("'{}logprob' is missing", alt_at));
        }
        STRATA_ASSIGN_OR_RETURN(float l, Logprob(*alt_lp, alt_at + "logprob"));
        t.top.emplace_back(std::move(*alt_token), l);
      }
    }
    out->push_back(std::move(t));
  }
  return Status();
}

// Completions: {"tokens": [...], "token_logprobs": [...], "top_logprobs":
// [{token: logprob} or null, ...]}.
Status CompletionLogprobs(const Json& lp, const std::string& where,
                          std::vector<TokenLogprob>* out) {
  if (!lp.is_object()) return ProtocolError(fmt::format("'{}' is not an object", where));
  const Json* tokens = Member(lp, "tokens");
  if (tokens == nullptr) return Status();
  const Json* lps = Member(lp, "token_logprobs");
  const Json* tops = Member(lp, "top_logprobs");
  if (!tokens->is_array() || lps == nullptr || !lps->is_array() || lps->size() != tokens->size() ||
      (tops != nullptr && !tops->is_array())) {
    return ProtocolError(fmt::format(
        "'{}' needs arrays 'tokens' and 'token_logprobs' of one length (and 'top_logprobs')",
        where));
  }
  for (size_t k = 0; k < tokens->size(); ++k) {
    const Json& token = (*tokens)[k];
    if (!token.is_string()) {
      return ProtocolError(fmt::format("'{}.tokens[{}]' is not a string", where, k));
    }
    TokenLogprob t;
    t.text = token.get<std::string>();
    t.bytes = BytesOf(t.text);
    STRATA_ASSIGN_OR_RETURN(t.logprob,
                            Logprob((*lps)[k], fmt::format("{}.token_logprobs[{}]", where, k)));
    if (tops != nullptr && k < tops->size() && !(*tops)[k].is_null()) {
      const Json& top = (*tops)[k];
      if (!top.is_object()) {
        return ProtocolError(fmt::format("'{}.top_logprobs[{}]' is not an object", where, k));
      }
      for (const auto& [alt, l] : top.items()) {
        STRATA_ASSIGN_OR_RETURN(
            float v, Logprob(l, fmt::format("{}.top_logprobs[{}].{}", where, k, Quote(alt, 32))));
        t.top.emplace_back(alt, v);
      }
      // A JSON object has no order: most likely first, as the API means it.
      std::stable_sort(t.top.begin(), t.top.end(),
                       [](const auto& a, const auto& b) { return a.second > b.second; });
    }
    out->push_back(std::move(t));
  }
  return Status();
}

// The usage object: prompt_tokens, completion_tokens,
// prompt_tokens_details.cached_tokens.
Status ReadUsage(const Json& u, Usage* usage) {
  if (!u.is_object()) return ProtocolError("'usage' is not an object");
  STRATA_ASSIGN_OR_RETURN(auto prompt, OptCount(u, "prompt_tokens", "usage."));
  STRATA_ASSIGN_OR_RETURN(auto completion, OptCount(u, "completion_tokens", "usage."));
  std::optional<int32_t> cached;
  if (const Json* details = Member(u, "prompt_tokens_details"); details != nullptr) {
    if (!details->is_object()) {
      return ProtocolError("'usage.prompt_tokens_details' is not an object");
    }
    STRATA_ASSIGN_OR_RETURN(cached,
                            OptCount(*details, "cached_tokens", "usage.prompt_tokens_details."));
  }
  usage->prompt_tokens = prompt.value_or(0);
  usage->completion_tokens = completion.value_or(0);
  usage->cached_tokens = std::min(cached.value_or(0), usage->prompt_tokens);
  return Status();
}

// A message's or a delta's tool_calls: [{"index", "id", "type", "function":
// {"name", "arguments"}}]. A whole message's calls have no index (their
// place is it); a stream's pieces carry theirs.
Status ReadToolCalls(const Json& calls, const std::string& where, std::vector<ToolCallDelta>* out) {
  if (!calls.is_array()) return ProtocolError(fmt::format("'{}' is not an array", where));
  for (size_t k = 0; k < calls.size(); ++k) {
    const Json& c = calls[k];
    const std::string at = fmt::format("{}[{}].", where, k);
    if (!c.is_object()) return ProtocolError(fmt::format("'{}' is not an object", at));
    ToolCallDelta d;
    d.index = static_cast<int32_t>(k);
    if (const Json* index = Member(c, "index"); index != nullptr) {
      if (!index->is_number_integer() || index->get<int64_t>() < 0 ||
          index->get<int64_t>() >= 1024) {
        return ProtocolError(fmt::format("'{}index' is not a call index", at));
      }
      d.index = static_cast<int32_t>(index->get<int64_t>());
    }
    STRATA_ASSIGN_OR_RETURN(auto id, OptString(c, "id", at));
    d.id = id.value_or("");
    if (const Json* fn = Member(c, "function"); fn != nullptr) {
      if (!fn->is_object()) return ProtocolError(fmt::format("'{}function' is not an object", at));
      STRATA_ASSIGN_OR_RETURN(auto name, OptString(*fn, "name", at + "function."));
      STRATA_ASSIGN_OR_RETURN(auto args, OptString(*fn, "arguments", at + "function."));
      d.name = name.value_or("");
      d.arguments = args.value_or("");
    }
    out->push_back(std::move(d));
  }
  return Status();
}

// `text_holder`: "delta" (chat stream), "message" (chat response), or ""
// (completions: the choice's own "text").
StatusOr<ChoicePart> ReadChoice(const Json& c, size_t k, int32_t n, bool chat,
                                const char* text_holder) {
  const std::string at = fmt::format("choices[{}]", k);
  if (!c.is_object()) return ProtocolError(fmt::format("'{}' is not an object", at));
  ChoicePart p;
  if (const Json* index = Member(c, "index"); index != nullptr) {
    if (!index->is_number_integer() || index->get<int64_t>() < 0 || index->get<int64_t>() >= n) {
      return ProtocolError(fmt::format("'{}.index' is {}, the request has {} choice{}", at,
                                       Quote(index->dump(), 32), n, n == 1 ? "" : "s"));
    }
    p.index = static_cast<int32_t>(index->get<int64_t>());
  }
  const Json* holder = &c;
  std::string holder_at = at + ".";
  if (*text_holder != '\0') {
    holder = Member(c, text_holder);
    holder_at = fmt::format("{}.{}.", at, text_holder);
    if (holder != nullptr && !holder->is_object()) {
      return ProtocolError(fmt::format("'{}{}' is not an object", at, text_holder));
    }
  }
  if (holder != nullptr) {
    // Only text: role-only deltas, tool calls and reasoning are not text.
    STRATA_ASSIGN_OR_RETURN(auto text,
                            OptString(*holder, *text_holder ? "content" : "text", holder_at));
    p.text = text.value_or("");
    if (const Json* calls = *text_holder ? Member(*holder, "tool_calls") : nullptr;
        calls != nullptr) {
      STRATA_RETURN_IF_ERROR(ReadToolCalls(*calls, holder_at + "tool_calls", &p.tool_calls));
    }
  }
  if (const Json* lp = Member(c, "logprobs"); lp != nullptr) {
    const std::string lp_at = at + ".logprobs";
    STRATA_RETURN_IF_ERROR(chat ? ChatLogprobs(*lp, lp_at, &p.logprobs)
                                : CompletionLogprobs(*lp, lp_at, &p.logprobs));
  }
  STRATA_ASSIGN_OR_RETURN(p.finish_reason, OptString(c, "finish_reason", at + "."));
  if (const Json* sr = Member(c, "stop_reason"); sr != nullptr && sr->is_string()) {
    p.stop_reason = sr->get<std::string>();  // a token id (an integer) is not a stop string
  }
  return p;
}

// "length" → kLength; "stop" → kStopString when vLLM's stop_reason names one
// of the request's stop strings, else kEndOfTurn; anything else
// ("content_filter") → kEndOfTurn; "tool_calls" (and the older
// "function_call") → kToolCalls.
std::pair<FinishReason, std::string> FinishOf(const ChoicePart& p,
                                              const std::vector<std::string>& stops) {
  if (*p.finish_reason == "length") return {FinishReason::kLength, ""};
  if (*p.finish_reason == "tool_calls" || *p.finish_reason == "function_call") {
    return {FinishReason::kToolCalls, ""};
  }
  if (*p.finish_reason == "stop" && p.stop_reason &&
      std::find(stops.begin(), stops.end(), *p.stop_reason) != stops.end()) {
    return {FinishReason::kStopString, *p.stop_reason};
  }
  return {FinishReason::kEndOfTurn, ""};
}

void PushDelta(ChoicePart& p, std::vector<Event>* out) {
  if (p.text.empty() && p.logprobs.empty() && p.tool_calls.empty()) return;
  Event& e = out->emplace_back();
  e.kind = Event::Kind::kDelta;
  e.index = p.index;
  e.text = std::move(p.text);
  e.logprobs = std::move(p.logprobs);
  e.tool_calls = std::move(p.tool_calls);
}

// Tool call pieces as Event promises them: the first piece of each call has
// its id and name (an upstream that gives no id gets one: "call_" and the
// choice and call numbers), later pieces neither. `started[c]`: call c of
// this choice has had its first piece.
Status NormalizeCalls(std::vector<ToolCallDelta>& calls, std::vector<bool>& started,
                      int32_t choice) {
  for (ToolCallDelta& d : calls) {
    if (static_cast<size_t>(d.index) >= started.size()) started.resize(d.index + 1, false);
    if (started[d.index]) {
      d.id.clear();
      d.name.clear();
      continue;
    }
    if (d.name.empty()) {
      return ProtocolError(
          fmt::format("tool call {} of choice {} has no function name", d.index, choice));
    }
    if (d.id.empty()) d.id = fmt::format("call_{}_{}", choice, d.index);
    started[d.index] = true;
  }
  return Status();
}

class OpenAIDecoder : public DecoderCore {
 public:
  OpenAIDecoder(bool chat, int32_t n_choices, std::vector<std::string> stops,
                size_t max_event_bytes)
      : DecoderCore(n_choices, max_event_bytes), chat_(chat), stops_(std::move(stops)) {}

 protected:
  Status OnEvent(const net::SseEventView& event, std::vector<Event>* out) override {
    std::string_view data = event.data;
    while (!data.empty() && (data.back() == ' ' || data.back() == '\t' || data.back() == '\n')) {
      data.remove_suffix(1);
    }
    if (data.empty()) return Status();
    if (data == "[DONE]") {
      if (!finishes_.all_finished()) {
        return ProtocolError(fmt::format("the stream sent [DONE] before choice {} finished",
                                         finishes_.first_unfinished()));
      }
      finishes_.Flush(out);
      return Status();
    }
    if (std::optional<ChoicePart> p = shape_.Match(data)) {
      STRATA_RETURN_IF_ERROR(ApplyChoice(*p, out));
      if (usage_final_ && finishes_.all_finished()) finishes_.Flush(out);
      return Status();
    }
    if (std::optional<PlainChunk> plain =
            ReadPlainChunk(data, chat_ ? "delta" : "", finishes_.n())) {
      shape_.Learn(data, *plain);
      for (ChoicePart& p : plain->choices) STRATA_RETURN_IF_ERROR(ApplyChoice(p, out));
      if (plain->usage) {
        ApplyPlainUsage(*plain->usage, &finishes_.usage());
        if (!plain->any_choice) usage_final_ = true;
      }
      if (usage_final_ && finishes_.all_finished()) finishes_.Flush(out);
      return Status();
    }
    STRATA_ASSIGN_OR_RETURN(const Json j, ParseJson(data, "stream chunk"));
    if (!j.is_object()) return ProtocolError("a stream chunk is not a JSON object");
    if (const Json* error = Member(j, "error"); error != nullptr) {
      return UpstreamFailed(MidStreamError(Api::kOpenAI, *error), out);
    }
    const Json* choices = Member(j, "choices");
    bool any_choice = false;
    if (choices != nullptr) {
      if (!choices->is_array()) return ProtocolError("'choices' is not an array");
      any_choice = !choices->empty();
      for (size_t k = 0; k < choices->size(); ++k) {
        STRATA_ASSIGN_OR_RETURN(
            ChoicePart p, ReadChoice((*choices)[k], k, finishes_.n(), chat_, chat_ ? "delta" : ""));
        STRATA_RETURN_IF_ERROR(ApplyChoice(p, out));
      }
    }
    if (const Json* usage = Member(j, "usage"); usage != nullptr) {
      STRATA_RETURN_IF_ERROR(ReadUsage(*usage, &finishes_.usage()));
      // The usage chunk proper (empty choices) is the last before [DONE];
      // vLLM's continuous usage rides on every chunk and only updates it.
      if (!any_choice) usage_final_ = true;
    }
    if (usage_final_ && finishes_.all_finished()) finishes_.Flush(out);
    return Status();
  }

  // One choice of a chunk, read: its text and its finish, if any.
  Status ApplyChoice(ChoicePart& p, std::vector<Event>* out) {
    if (finishes_.finished(p.index)) {
      if (!p.text.empty()) {
        return ProtocolError(fmt::format("choice {} sent text after its finish_reason", p.index));
      }
      return Status();
    }
    const int32_t index = p.index;
    if (calls_started_.size() < static_cast<size_t>(finishes_.n())) {
      calls_started_.resize(static_cast<size_t>(finishes_.n()));
    }
    STRATA_RETURN_IF_ERROR(NormalizeCalls(p.tool_calls, calls_started_[index], index));
    std::optional<std::pair<FinishReason, std::string>> finish;
    if (p.finish_reason) finish = FinishOf(p, stops_);
    PushDelta(p, out);  // a chunk may carry the last text and the finish together
    if (finish) finishes_.Finish(index, finish->first, std::move(finish->second));
    return Status();
  }

  Status OnEnd(std::vector<Event>* out) override {
    if (!finishes_.all_finished()) {
      return ProtocolError(
          fmt::format("the stream ended before choice {} finished", finishes_.first_unfinished()));
    }
    finishes_.Flush(out);  // every choice finished; [DONE] (or the usage) never came
    return Status();
  }

 private:
  const bool chat_;
  const std::vector<std::string> stops_;
  bool usage_final_ = false;
  std::vector<std::vector<bool>> calls_started_;  // per choice: its calls begun
  RepeatShape shape_;  // the last plain chunk's, to read the next like it fast
};

}  // namespace

StatusOr<Call> RenderOpenAI(const Request& r, const RenderOptions& o) {
  const Api api = Api::kOpenAI;
  const SamplingFieldsSet& set = r.sampling_set;
  const sampling::SamplingParams& p = r.sampling;
  if (set.strata_sampler) {
    return Unsupported(api, StrataSamplerField(p),
                       "strata's own samplers run only on the local engine");
  }
  const bool chat = !r.completion();
  if (chat && r.messages.empty()) return util::InvalidFieldError("messages", "'messages' is empty");
  BodyWriter w;
  w.Open('{');
  if (!o.model.empty()) {
    w.Key("model");
    w.String(o.model);
  }
  if (chat) {
    w.Key("messages");
    WriteMessages(r.messages, w);
  } else if (!r.prompt_ids.empty()) {
    w.Key("prompt");  // OpenAI's token-id prompt
    w.Open('[');
    for (int32_t id : r.prompt_ids) w.Int(id);
    w.Close(']');
  } else {
    w.Key("prompt");
    w.String(*r.prompt);
  }
  if (o.max_tokens > 0) {
    w.Key("max_tokens");
    w.Int(o.max_tokens);
  }
  if (r.n > 1) {
    w.Key("n");
    w.Int(r.n);
  }
  if (!r.stop.empty()) {
    w.Key("stop");
    w.Open('[');
    for (const std::string& stop : r.stop) w.String(stop);
    w.Close(']');
  }
  auto number = [&w](const char* key, double v) {
    w.Key(key);
    w.Double(v);
  };
  if (set.temperature) number("temperature", CleanNumber(p.temperature));
  if (set.top_p) number("top_p", CleanNumber(p.top_p));
  if (set.presence_penalty) number("presence_penalty", CleanNumber(p.presence_penalty));
  if (set.frequency_penalty) number("frequency_penalty", CleanNumber(p.frequency_penalty));
  if (set.seed) {
    // The client's seed was a signed 64-bit integer; send it back as one.
    w.Key("seed");
    w.Int(static_cast<int64_t>(p.seed));
  }
  if (r.response_format == ResponseFormat::kJsonObject) {
    w.Key("response_format");
    w.Value({{"type", "json_object"}});
  } else if (r.response_format == ResponseFormat::kJsonSchema) {
    // As the client sent it (the schema's keys in its order).
    Json js = {{"name", r.json_schema.name}};
    if (!r.json_schema.description.empty()) js["description"] = r.json_schema.description;
    // Json keeps keys in order: the schema's properties go up as written.
    Json schema = Json::parse(r.json_schema.schema, nullptr, /*allow_exceptions=*/false);
    js["schema"] = schema.is_discarded() ? Json::object() : std::move(schema);
    js["strict"] = r.json_schema.strict;
    w.Key("response_format");
    w.Value({{"type", "json_schema"}, {"json_schema", std::move(js)}});
  }
  if (!r.tools.empty()) {
    w.Key("tools");
    w.Value(OpenAITools(r.tools));
    switch (r.tool_choice.mode) {
      case ToolChoice::Mode::kAuto:
        break;  // the API's default
      case ToolChoice::Mode::kNone:
        w.Key("tool_choice");
        w.String("none");
        break;
      case ToolChoice::Mode::kRequired:
        w.Key("tool_choice");
        w.String("required");
        break;
      case ToolChoice::Mode::kNamed:
        w.Key("tool_choice");
        w.Value({{"type", "function"}, {"function", {{"name", r.tool_choice.name}}}});
        break;
    }
    if (!r.parallel_tool_calls) {
      w.Key("parallel_tool_calls");
      w.Bool(false);
    }
  }
  // llama-server's field (vLLM and SGLang read guided_grammar / ebnf instead).
  if (!r.grammar.empty()) {
    w.Key("grammar");
    w.String(r.grammar);
  }
  if (set.logit_bias) {
    Json bias = Json::object();
    for (const auto& [id, b] : p.logit_bias) bias[std::to_string(id)] = CleanNumber(b);
    w.Key("logit_bias");
    w.Value(bias);
  }
  // Not OpenAI's own, but vLLM, SGLang, llama-server and strata take them.
  if (set.top_k) {
    w.Key("top_k");
    w.Int(p.top_k);
  }
  if (set.min_p) number("min_p", CleanNumber(p.min_p));
  if (set.repetition_penalty) number("repetition_penalty", CleanNumber(p.repetition_penalty));
  if (r.top_logprobs >= 0) {
    w.Key("logprobs");
    if (chat) {
      w.Bool(true);
      w.Key("top_logprobs");
    }
    w.Int(r.top_logprobs);
  }
  if (r.ignore_eos) {
    w.Key("ignore_eos");
    w.Bool(true);
  }
  w.Key("stream");
  w.Bool(o.stream);
  if (o.stream) {
    w.Key("stream_options");
    w.Value({{"include_usage", true}});
  }
  w.Close('}');
  return Call{chat ? "/v1/chat/completions" : "/v1/completions", w.Take()};
}

std::unique_ptr<DecoderCore> NewOpenAIDecoder(bool chat, int32_t n_choices,
                                              std::vector<std::string> stops,
                                              size_t max_event_bytes) {
  return std::make_unique<OpenAIDecoder>(chat, n_choices, std::move(stops), max_event_bytes);
}

std::optional<Status> DecodeOpenAIWholePlain(bool chat, int32_t n_choices,
                                             const std::vector<std::string>& stops,
                                             std::string_view body, std::vector<Event>* out) {
  std::optional<PlainChunk> plain = ReadPlainChunk(body, chat ? "message" : "", n_choices);
  if (!plain) return std::nullopt;
  // DecodeOpenAIWhole's steps, over what the plain reader found.
  Finishes finishes(n_choices);
  if (!plain->has_choices) return ProtocolError("the response has no 'choices' array");
  for (ChoicePart& p : plain->choices) {
    if (finishes.finished(p.index)) {
      return ProtocolError(fmt::format("the response holds choice {} twice", p.index));
    }
    if (!p.finish_reason) p.finish_reason = "stop";
    auto [reason, stop] = FinishOf(p, stops);
    PushDelta(p, out);
    finishes.Finish(p.index, reason, std::move(stop));
  }
  if (!finishes.all_finished()) {
    return ProtocolError(fmt::format("the response lacks choice {}", finishes.first_unfinished()));
  }
  if (plain->usage) ApplyPlainUsage(*plain->usage, &finishes.usage());
  finishes.Flush(out);
  return Status();
}

Status DecodeOpenAIWhole(bool chat, int32_t n_choices, const std::vector<std::string>& stops,
                         const Json& body, std::vector<Event>* out) {
  if (const Json* error = Member(body, "error"); error != nullptr) {
    return MidStreamError(Api::kOpenAI, *error);
  }
  Finishes finishes(n_choices);
  const Json* choices = Member(body, "choices");
  if (choices == nullptr || !choices->is_array()) {
    return ProtocolError("the response has no 'choices' array");
  }
  for (size_t k = 0; k < choices->size(); ++k) {
    STRATA_ASSIGN_OR_RETURN(
        ChoicePart p, ReadChoice((*choices)[k], k, finishes.n(), chat, chat ? "message" : ""));
    if (finishes.finished(p.index)) {
      return ProtocolError(fmt::format("the response holds choice {} twice", p.index));
    }
    // A whole response is finished even where an upstream left the reason null.
    if (!p.finish_reason) p.finish_reason = "stop";
    std::vector<bool> started;
    STRATA_RETURN_IF_ERROR(NormalizeCalls(p.tool_calls, started, p.index));
    auto [reason, stop] = FinishOf(p, stops);
    PushDelta(p, out);
    finishes.Finish(p.index, reason, std::move(stop));
  }
  if (!finishes.all_finished()) {
    return ProtocolError(fmt::format("the response lacks choice {}", finishes.first_unfinished()));
  }
  if (const Json* usage = Member(body, "usage"); usage != nullptr) {
    STRATA_RETURN_IF_ERROR(ReadUsage(*usage, &finishes.usage()));
  }
  finishes.Flush(out);
  return Status();
}

}  // namespace strata::backend::upstream::internal
