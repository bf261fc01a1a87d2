#include "loadgen/openai.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace strata::loadgen {
namespace {

using nlohmann::json;

std::string Cut(std::string_view s, size_t n) {
  return s.size() <= n ? std::string(s) : std::string(s.substr(0, n)) + "...";
}

// Message of an error value: an object with "message" (and maybe "type"), or a string.
std::string ErrorText(const json& e) {
  if (e.is_string()) return e.get<std::string>();
  if (e.is_object()) {
    std::string msg;
    if (auto m = e.find("message"); m != e.end() && m->is_string()) msg = m->get<std::string>();
    std::string type;
    if (auto t = e.find("type"); t != e.end() && t->is_string()) type = t->get<std::string>();
    if (!type.empty() && !msg.empty()) return type + ": " + msg;
    if (!msg.empty()) return msg;
    if (!type.empty()) return type;
  }
  return Cut(e.dump(), 200);
}

std::optional<int64_t> IntField(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

}  // namespace

std::string_view EndpointPath(Endpoint endpoint) {
  return endpoint == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions";
}

std::string BuildRequestBody(const BodyOptions& options, const std::string& system,
                             const std::string& prompt, int64_t max_tokens) {
  json body = json::object();
  if (!options.model.empty()) body["model"] = options.model;
  if (options.endpoint == Endpoint::kChat) {
    json messages = json::array();
    if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
    messages.push_back({{"role", "user"}, {"content", prompt}});
    body["messages"] = std::move(messages);
  } else {
    body["prompt"] = system.empty() ? prompt : system + "\n" + prompt;
  }
  body["max_tokens"] = max_tokens;
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  if (options.ignore_eos) body["ignore_eos"] = true;
  if (options.temperature) body["temperature"] = *options.temperature;
  if (options.seed) body["seed"] = *options.seed;
  if (!options.extra_json.empty()) {
    const json extra = json::parse(options.extra_json, nullptr, /*allow_exceptions=*/false);
    if (!extra.is_object()) throw std::invalid_argument("the extra body is not a JSON object");
    for (const auto& [key, value] : extra.items()) body[key] = value;
  }
  return body.dump();
}

std::vector<SseEvent> SseParser::Feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    if (nl == std::string_view::npos) {
      line_.append(bytes);
      break;
    }
    line_.append(bytes.substr(0, nl));
    bytes.remove_prefix(nl + 1);
    std::string_view line = line_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ProcessLine(line, out);
    line_.clear();
  }
  return out;
}

void SseParser::ProcessLine(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {  // dispatch
    if (has_data_) {
      if (error_field_) pending_.event = "error";
      out.push_back(std::move(pending_));
    }
    pending_ = SseEvent();
    has_data_ = has_fields_ = error_field_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment
  const size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  has_fields_ = true;
  if (field == "data" || field == "error") {
    if (has_data_) pending_.data += '\n';
    pending_.data.append(value);
    has_data_ = true;
    if (field == "error") error_field_ = true;
  } else if (field == "event") {
    pending_.event = std::string(value);
  }
  // id, retry and unknown fields are not used.
}

StreamFrame InterpretEvent(const SseEvent& event) {
  StreamFrame f;
  if (event.data == "[DONE]") {
    f.kind = StreamFrame::Kind::kDone;
    return f;
  }
  const json j = json::parse(event.data, nullptr, /*allow_exceptions=*/false);
  if (event.event == "error") {
    f.kind = StreamFrame::Kind::kError;
    if (j.is_discarded()) {
      f.error = Cut(event.data, 200);
    } else if (j.is_object() && j.contains("error")) {
      f.error = ErrorText(j["error"]);
    } else {
      f.error = ErrorText(j);
    }
    return f;
  }
  if (!event.event.empty() && event.event != "message") {
    f.kind = StreamFrame::Kind::kIgnored;
    return f;
  }
  if (j.is_discarded() || !j.is_object()) {
    f.kind = StreamFrame::Kind::kMalformed;
    f.error = "not a JSON object: " + Cut(event.data, 120);
    return f;
  }
  if (auto e = j.find("error"); e != j.end() && !e->is_null()) {
    f.kind = StreamFrame::Kind::kError;
    f.error = ErrorText(*e);
    return f;
  }
  f.kind = StreamFrame::Kind::kChunk;
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    f.prompt_tokens = IntField(*u, "prompt_tokens");
    f.completion_tokens = IntField(*u, "completion_tokens");
  }
  auto choices = j.find("choices");
  if (choices == j.end()) {
    if (!f.prompt_tokens && !f.completion_tokens) {
      f.kind = StreamFrame::Kind::kMalformed;
      f.error = "a chunk without 'choices' or 'usage': " + Cut(event.data, 120);
    }
    return f;
  }
  if (!choices->is_array()) {
    f.kind = StreamFrame::Kind::kMalformed;
    f.error = "'choices' is not an array";
    return f;
  }
  for (const json& c : *choices) {
    if (!c.is_object()) continue;
    if (auto d = c.find("delta"); d != c.end() && d->is_object()) {  // chat
      if (auto t = d->find("content"); t != d->end() && t->is_string()) {
        f.content += t->get_ref<const std::string&>();
      }
    } else if (auto t = c.find("text"); t != c.end() && t->is_string()) {  // completions
      f.content += t->get_ref<const std::string&>();
    }
    if (auto r = c.find("finish_reason"); r != c.end() && !r->is_null()) {
      if (!f.finished) f.finish_reason = r->is_string() ? r->get<std::string>() : r->dump();
      f.finished = true;
    }
  }
  return f;
}

std::string ErrorMessageFromBody(std::string_view body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    if (auto e = j.find("error"); e != j.end() && !e->is_null()) return ErrorText(*e);
    if (auto m = j.find("message"); m != j.end() && m->is_string()) return m->get<std::string>();
  }
  return Cut(body, 200);
}

}  // namespace strata::loadgen
