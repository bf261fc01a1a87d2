// `strata watermark verify --key-file KEY ...`: checks a response's
// x-strata-watermark (obs/watermark.h) against the request id, model and
// text it claims. The response comes as a saved file (--response: a JSON
// body or an SSE stream, with or without the HTTP head `curl -i` prints),
// which gives all of them, or as --text with --request-id, --model and
// --watermark. Exit codes: 0 valid, 1 invalid (another key, other text, a
// malformed mark), 2 invalid arguments or a response file that says nothing
// checkable.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "obs/crypto.h"
#include "obs/watermark.h"

namespace strata::cli {
namespace {

using OJson = nlohmann::ordered_json;

struct WatermarkFlags {
  std::string key_file;
  std::string watermark;
  std::string response_file;
  std::string request_id;
  std::string model;
  std::optional<std::string> text;
  std::string text_file;
};

// What a saved response says.
struct SavedResponse {
  std::string request_id;
  std::string model;
  std::string watermark;
  obs::ResponseContent content;
};

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

// The request id inside a response id ("chatcmpl-ID", "cmpl-ID", "msg_ID").
std::string RequestIdOf(const std::string& id) {
  for (const char* prefix : {"chatcmpl-", "cmpl-", "msg_"}) {
    if (id.rfind(prefix, 0) == 0) return id.substr(std::string_view(prefix).size());
  }
  return id;
}

std::string StringOr(const OJson& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

obs::ResponseContent::Choice& ChoiceAt(obs::ResponseContent& c, const OJson& choice) {
  size_t index = 0;
  if (auto it = choice.find("index"); it != choice.end() && it->is_number_unsigned()) {
    index = std::min<size_t>(it->get<size_t>(), 1024);
  }
  if (index >= c.choices.size()) c.choices.resize(index + 1);
  return c.choices[index];
}

// An OpenAI tool call piece, assembled as the server does (a piece with an
// id, or an index past the last, opens a call; the rest extend it).
void AddCallPiece(obs::ResponseContent::Choice& c, const OJson& call) {
  const OJson fn = call.contains("function") ? call["function"] : OJson::object();
  const std::string id = StringOr(call, "id");
  size_t index = c.tool_calls.size();
  if (auto it = call.find("index"); it != call.end() && it->is_number_unsigned()) {
    index = it->get<size_t>();
  }
  if (!id.empty() || index >= c.tool_calls.size() || c.tool_calls.empty()) {
    c.tool_calls.push_back({id, StringOr(fn, "name"), ""});
  }
  c.tool_calls.back().arguments += StringOr(fn, "arguments");
}

util::Status ParseWhole(const OJson& j, SavedResponse& out) {
  if (j.contains("error")) {
    return util::InvalidArgumentError("the response is an error: an error carries no watermark");
  }
  const std::string object = StringOr(j, "object");
  out.request_id = RequestIdOf(StringOr(j, "id"));
  out.model = StringOr(j, "model");
  if (object == "chat.completion" || object == "text_completion") {
    if (!j.contains("choices") || !j["choices"].is_array()) {
      return util::InvalidArgumentError("the response has no 'choices' array");
    }
    for (const OJson& choice : j["choices"]) {
      if (!choice.is_object()) continue;
      auto& c = ChoiceAt(out.content, choice);
      if (object == "text_completion") {
        c.text = StringOr(choice, "text");
        continue;
      }
      const OJson msg = choice.contains("message") ? choice["message"] : OJson::object();
      c.text = StringOr(msg, "content");
      if (msg.contains("tool_calls") && msg["tool_calls"].is_array()) {
        for (const OJson& call : msg["tool_calls"]) {
          const OJson fn = call.contains("function") ? call["function"] : OJson::object();
          c.tool_calls.push_back(
              {StringOr(call, "id"), StringOr(fn, "name"), StringOr(fn, "arguments")});
        }
      }
    }
    return util::OkStatus();
  }
  if (StringOr(j, "type") == "message") {
    out.content.choices.resize(1);
    auto& c = out.content.choices[0];
    if (j.contains("content") && j["content"].is_array()) {
      for (const OJson& block : j["content"]) {
        const std::string type = StringOr(block, "type");
        if (type == "text") c.text += StringOr(block, "text");
        if (type == "tool_use") {
          // The input object as the arguments' JSON text (compact, keys in
          // the order sent): docs/api.md says when that is exact.
          c.tool_calls.push_back({StringOr(block, "id"), StringOr(block, "name"),
                                  block.contains("input") ? block["input"].dump() : "{}"});
        }
      }
    }
    return util::OkStatus();
  }
  return util::InvalidArgumentError(
      "the JSON is not a chat completion, a text completion or an Anthropic message");
}

util::Status ParseStream(std::string_view body, SavedResponse& out) {
  constexpr std::string_view kMark = "x-strata-watermark:";
  bool anthropic = false;
  size_t events = 0;
  while (!body.empty()) {
    const size_t nl = body.find('\n');
    std::string_view line = body.substr(0, nl);
    body.remove_prefix(nl == std::string_view::npos ? body.size() : nl + 1);
    line = Trim(line);
    if (line.empty()) continue;
    if (line.front() == ':') {
      const std::string_view comment = Trim(line.substr(1));
      if (comment.rfind(kMark, 0) == 0)
        out.watermark = std::string(Trim(comment.substr(kMark.size())));
      continue;
    }
    if (line.rfind("data:", 0) != 0) continue;
    const std::string_view data = Trim(line.substr(5));
    if (data == "[DONE]") continue;
    const OJson j = OJson::parse(data, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) continue;
    ++events;
    const std::string type = StringOr(j, "type");
    if (type == "error" || j.contains("error")) {
      return util::InvalidArgumentError("the stream ended in an error: it carries no watermark");
    }
    if (type == "message_start") {
      anthropic = true;
      const OJson msg = j.contains("message") ? j["message"] : OJson::object();
      out.request_id = RequestIdOf(StringOr(msg, "id"));
      out.model = StringOr(msg, "model");
      out.content.choices.resize(1);
      continue;
    }
    if (anthropic) {
      auto& c = out.content.choices[0];
      if (type == "content_block_start" && j.contains("content_block")) {
        const OJson& block = j["content_block"];
        if (StringOr(block, "type") == "tool_use") {
          c.tool_calls.push_back({StringOr(block, "id"), StringOr(block, "name"), ""});
        } else {
          c.text += StringOr(block, "text");
        }
      } else if (type == "content_block_delta" && j.contains("delta")) {
        const OJson& d = j["delta"];
        if (StringOr(d, "type") == "input_json_delta" && !c.tool_calls.empty()) {
          c.tool_calls.back().arguments += StringOr(d, "partial_json");
        } else {
          c.text += StringOr(d, "text");
        }
      }
      continue;
    }
    // OpenAI chunks.
    if (out.request_id.empty()) out.request_id = RequestIdOf(StringOr(j, "id"));
    if (out.model.empty()) out.model = StringOr(j, "model");
    if (!j.contains("choices") || !j["choices"].is_array()) continue;
    const bool completion = StringOr(j, "object") == "text_completion";
    for (const OJson& choice : j["choices"]) {
      if (!choice.is_object()) continue;
      auto& c = ChoiceAt(out.content, choice);
      if (completion) {
        c.text += StringOr(choice, "text");
        continue;
      }
      const OJson delta = choice.contains("delta") ? choice["delta"] : OJson::object();
      c.text += StringOr(delta, "content");
      if (delta.contains("tool_calls") && delta["tool_calls"].is_array()) {
        for (const OJson& call : delta["tool_calls"]) AddCallPiece(c, call);
      }
    }
  }
  if (events == 0) return util::InvalidArgumentError("the file holds no response events");
  return util::OkStatus();
}

// A saved response: an optional HTTP head, then a JSON body or an SSE stream.
util::StatusOr<SavedResponse> ParseSavedResponse(std::string_view bytes) {
  SavedResponse out;
  std::string header_id;
  if (bytes.rfind("HTTP/", 0) == 0) {
    size_t end = bytes.find("\r\n\r\n");
    size_t skip = 4;
    if (end == std::string_view::npos) {
      end = bytes.find("\n\n");
      skip = 2;
    }
    if (end == std::string_view::npos)
      return util::InvalidArgumentError("an HTTP head without a body");
    std::string_view head = bytes.substr(0, end);
    bytes.remove_prefix(end + skip);
    while (!head.empty()) {
      const size_t nl = head.find('\n');
      const std::string_view line = Trim(head.substr(0, nl));
      head.remove_prefix(nl == std::string_view::npos ? head.size() : nl + 1);
      const size_t colon = line.find(':');
      if (colon == std::string_view::npos) continue;
      const std::string name = Lower(std::string(Trim(line.substr(0, colon))));
      const std::string value(Trim(line.substr(colon + 1)));
      if (name == "x-strata-watermark") out.watermark = value;
      if (name == "x-request-id") header_id = value;
    }
  }
  const std::string_view body = Trim(bytes);
  if (!body.empty() && body.front() == '{') {
    const OJson j = OJson::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return util::InvalidArgumentError("the body starts like JSON but is not a JSON object");
    }
    const std::string mark = out.watermark;
    STRATA_RETURN_IF_ERROR(ParseWhole(j, out));
    out.watermark = mark;
  } else {
    STRATA_RETURN_IF_ERROR(ParseStream(body, out));
  }
  if (!header_id.empty()) out.request_id = header_id;
  return out;
}

int RunWatermarkVerify(const Env& env, const WatermarkFlags& f) {
  const bool has_text = f.text.has_value() || !f.text_file.empty();
  if (f.response_file.empty() == !has_text) {
    return UsageError(
        "watermark verify: give the response (--response FILE) or its text (--text "
        "or --text-file), one of them");
  }
  if (f.text && !f.text_file.empty()) return UsageError("--text and --text-file: give one");
  auto secret = obs::LoadHmacKey(*env.fs, f.key_file);
  if (!secret.ok()) return UsageError("--key-file: " + secret.status().message());
  SavedResponse r;
  if (!f.response_file.empty()) {
    auto bytes = env.fs->ReadFile(f.response_file);
    if (!bytes.ok()) return UsageError("--response: " + bytes.status().message());
    auto parsed = ParseSavedResponse(*bytes);
    if (!parsed.ok()) {
      return UsageError(
          fmt::format("--response '{}': {}", f.response_file, parsed.status().message()));
    }
    r = std::move(parsed).value();
  } else {
    std::string text = f.text.value_or("");
    if (!f.text_file.empty()) {
      auto bytes = env.fs->ReadFile(f.text_file);
      if (!bytes.ok()) return UsageError("--text-file: " + bytes.status().message());
      text = std::move(bytes).value();
    }
    r.content.choices.push_back({std::move(text), {}});
  }
  if (!f.request_id.empty()) r.request_id = f.request_id;
  if (!f.model.empty()) r.model = f.model;
  if (!f.watermark.empty()) r.watermark = f.watermark;
  if (r.watermark.empty()) {
    return UsageError(
        "no watermark: give --watermark (the x-strata-watermark header's value), or "
        "a response file that carries it (curl -i keeps the header)");
  }
  if (r.request_id.empty()) return UsageError("no request id: give --request-id");
  if (r.model.empty()) return UsageError("no model: give --model");
  const obs::Watermarker wm(std::move(secret).value());
  const obs::WatermarkCheck check = wm.Verify(r.watermark, r.request_id, r.model, r.content);
  size_t text_bytes = 0;
  for (const auto& c : r.content.choices) text_bytes += c.text.size();
  const std::string what = fmt::format("request {}, model {}, {} choice(s), {} bytes of text",
                                       r.request_id, r.model, r.content.choices.size(), text_bytes);
  switch (check) {
    case obs::WatermarkCheck::kValid:
      std::printf("VALID: %s\n", what.c_str());
      return kExitOk;
    case obs::WatermarkCheck::kInvalid:
      std::printf(
          "INVALID: the watermark does not match %s (the text, request id or model "
          "differ from what was signed)\n",
          what.c_str());
      return kExitFailure;
    case obs::WatermarkCheck::kOtherKey:
      std::printf("INVALID: the watermark was made with key %s, not this key (%s)\n",
                  r.watermark.substr(3, 16).c_str(), wm.key_id().c_str());
      return kExitFailure;
    case obs::WatermarkCheck::kMalformed:
      std::printf("INVALID: '%s' is not a watermark (v1:KEY_ID:HMAC)\n",
                  r.watermark.substr(0, 120).c_str());
      return kExitFailure;
  }
  return kExitFailure;
}

}  // namespace

Command RegisterWatermark(CLI::App& app) {
  auto f = std::make_shared<WatermarkFlags>();
  CLI::App* group =
      app.add_subcommand("watermark", "Check a response's watermark (serve --watermark-key-file)");
  group->require_subcommand(1);
  CLI::App* cmd = group->add_subcommand(
      "verify",
      "Check x-strata-watermark against the request id, model and text it signs. Exit 0 valid, "
      "1 invalid, 2 invalid arguments");
  cmd->add_option("--key-file", f->key_file, "The HMAC secret the server signs with")->required();
  cmd->add_option("--response", f->response_file,
                  "A saved response: its JSON body or SSE stream, with or without the HTTP head "
                  "(curl -i); gives the request id, model, text and watermark");
  cmd->add_option("--watermark", f->watermark,
                  "The x-strata-watermark value (default: from --response)");
  cmd->add_option("--request-id", f->request_id,
                  "The request id (default: from --response: X-Request-ID, or the response id)");
  cmd->add_option("--model", f->model, "The model id (default: from --response)");
  cmd->add_option("--text", f->text, "The response text (one choice, no tool calls)");
  cmd->add_option("--text-file", f->text_file, "A file holding the response text, byte for byte");
  return {group, [f](const Env& env) { return RunWatermarkVerify(env, *f); }};
}

}  // namespace strata::cli
