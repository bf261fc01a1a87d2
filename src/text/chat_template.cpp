#include "text/chat_template.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "util/utf8.h"

namespace strata::text {
namespace {

bool Has(std::string_view s, std::string_view needle) {
  return s.find(needle) != std::string_view::npos;
}

// Builds the segment list, merging adjacent pieces of the same kind.
class Builder {
 public:
  Builder() = default;
  explicit Builder(std::vector<PromptSegment> start) : out_(std::move(start)) {}
  Builder& Special(std::string_view s) { return Add(s, true); }
  Builder& Text(std::string_view s) { return Add(s, false); }
  Builder& Segments(const std::vector<PromptSegment>& body) {
    for (const PromptSegment& seg : body) Add(seg.text, seg.special);
    return *this;
  }
  std::vector<PromptSegment> Take() { return std::move(out_); }

 private:
  Builder& Add(std::string_view s, bool special) {
    if (s.empty()) return *this;
    if (!out_.empty() && out_.back().special == special) {
      out_.back().text.append(s);
    } else {
      out_.push_back({std::string(s), special});
    }
    return *this;
  }
  std::vector<PromptSegment> out_;
};

// A message as the renderers read it: its role and its body, which may mix
// content with tool markup (special) once tools are lowered into it.
struct Turn {
  std::string role;  // system, user, assistant; "ipython" (Llama 3) and "tool" (Mistral) results
  std::vector<PromptSegment> body = {};
  std::vector<PromptSegment> before = {};  // Mistral: [AVAILABLE_TOOLS] ahead of this user turn
  bool tool_call = false;                  // an assistant turn that is (or ends in) tool calls
  size_t source = 0;                       // its index in the request's messages (for errors)
};

std::vector<PromptSegment> TextBody(std::string_view text) {
  std::vector<PromptSegment> out;
  if (!text.empty()) out.push_back({std::string(text), false});
  return out;
}

// The body with leading and trailing whitespace removed from its content
// ends (what the templates' `| trim` does to a message).
std::vector<PromptSegment> TrimBody(std::vector<PromptSegment> body) {
  const char* ws = " \t\n\r\f\v";
  if (!body.empty() && !body.front().special) {
    const size_t b = body.front().text.find_first_not_of(ws);
    body.front().text.erase(0, b == std::string::npos ? body.front().text.size() : b);
  }
  if (!body.empty() && !body.back().special) {
    const size_t e = body.back().text.find_last_not_of(ws);
    body.back().text.erase(e == std::string::npos ? 0 : e + 1);
  }
  std::erase_if(body, [](const PromptSegment& seg) { return seg.text.empty(); });
  return body;
}

util::Status RoleError(size_t i, std::string_view role, std::string_view why) {
  return util::InvalidArgumentError(fmt::format("messages[{}].role '{}': {}", i, role, why));
}

// Checks roles; `system_first_only`: a system message may only open the
// chat. Tool results and the assistant turns that call tools stand outside
// the alternation (as the templates that know tools skip them).
util::Status CheckRoles(std::span<const Turn> m, bool system_first_only, bool alternate) {
  size_t turn = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string& r = m[i].role;
    if (r == "ipython" || r == "tool") continue;
    if (r != "system" && r != "user" && r != "assistant") {
      return RoleError(m[i].source, r, "must be system, user, assistant or tool");
    }
    if (r == "system") {
      if (system_first_only && i != 0) {
        return RoleError(m[i].source, r, "this model's format allows a system message only first");
      }
      continue;
    }
    if (m[i].tool_call && r == "assistant" && (turn % 2 == 1)) continue;  // answered by results
    if (alternate && (r == "user") != (turn % 2 == 0)) {
      return RoleError(m[i].source, r,
                       "this model's format needs user and assistant turns to alternate, "
                       "starting with user");
    }
    ++turn;
  }
  return util::OkStatus();
}

// The quoted default system prompt of a ChatML template, if it has one.
std::string ChatMLDefaultSystem(std::string_view tpl) {
  const std::string_view open = "<|im_start|>system\\n";
  size_t at = 0;
  while ((at = tpl.find(open, at)) != std::string_view::npos) {
    at += open.size();
    const size_t end = tpl.find("<|im_end|>", at);
    if (end == std::string_view::npos) break;
    const std::string_view body = tpl.substr(at, end - at);
    // A literal prompt, not an expression such as "' + messages[0]['content'] + '".
    if (!body.empty() && body.find('\'') == std::string_view::npos &&
        body.find('"') == std::string_view::npos && body.find('{') == std::string_view::npos) {
      return std::string(body);
    }
  }
  return "";
}

}  // namespace

std::string_view ChatFormatName(ChatFormat f) {
  switch (f) {
    case ChatFormat::kPlain:
      return "plain";
    case ChatFormat::kChatML:
      return "chatml";
    case ChatFormat::kLlama2:
      return "llama2";
    case ChatFormat::kLlama3:
      return "llama3";
    case ChatFormat::kZephyr:
      return "zephyr";
    case ChatFormat::kMistral:
      return "mistral";
    case ChatFormat::kPhi3:
      return "phi3";
    case ChatFormat::kGemma:
      return "gemma";
    case ChatFormat::kDeepSeekR1:
      return "deepseek-r1";
  }
  return "plain";
}

std::optional<ChatFormat> ParseChatFormat(std::string_view name) {
  for (ChatFormat f : {ChatFormat::kPlain, ChatFormat::kChatML, ChatFormat::kLlama2,
                       ChatFormat::kLlama3, ChatFormat::kZephyr, ChatFormat::kMistral,
                       ChatFormat::kPhi3, ChatFormat::kGemma, ChatFormat::kDeepSeekR1}) {
    if (name == ChatFormatName(f)) return f;
  }
  return std::nullopt;
}

ChatStyle DetectChatStyle(std::string_view t, std::string_view eos_text) {
  ChatStyle s;
  if (!eos_text.empty()) s.eos_text = std::string(eos_text);
  if (t.empty()) return s;
  if (Has(t, "<|im_start|>")) {
    s.format = ChatFormat::kChatML;
    s.default_system = ChatMLDefaultSystem(t);
    s.native_tools = Has(t, "<tool_call>");
  } else if (Has(t, "<|start_header_id|>")) {
    s.format = ChatFormat::kLlama3;
    s.llama3_knowledge_date = Has(t, "Cutting Knowledge Date");
    // Llama 3.1+ templates answer tool results in an "ipython" turn.
    if (Has(t, "ipython")) {
      s.tools = ToolSyntax::kLlama3;
      s.native_tools = true;
    }
  } else if (Has(t, "<｜User｜>")) {
    s.format = ChatFormat::kDeepSeekR1;
  } else if (Has(t, "<start_of_turn>")) {
    s.format = ChatFormat::kGemma;
  } else if (Has(t, "[INST]") && Has(t, "<<SYS>>")) {
    s.format = ChatFormat::kLlama2;
  } else if (Has(t, "[INST]")) {
    s.format = ChatFormat::kMistral;
    s.mistral_spaced = Has(t, "[INST] ");
    if (Has(t, "[TOOL_CALLS]")) {
      s.tools = ToolSyntax::kMistral;
      s.native_tools = true;
    }
  } else if (Has(t, "<|user|>") && Has(t, "<|end|>")) {
    s.format = ChatFormat::kPhi3;
  } else if (Has(t, "<|user|>")) {
    s.format = ChatFormat::kZephyr;
  }
  return s;
}

namespace {

// What opens an assistant turn the model is to continue: the generation
// prompt, or the text before an assistant message's content.
std::string_view AssistantOpening(const ChatStyle& style) {
  switch (style.format) {
    case ChatFormat::kPlain:
      return "Assistant: ";
    case ChatFormat::kChatML:
      return "<|im_start|>assistant\n";
    case ChatFormat::kLlama3:
      return "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatFormat::kLlama2:
      return " ";
    case ChatFormat::kMistral:
      return "";
    case ChatFormat::kZephyr:
    case ChatFormat::kPhi3:
      return "<|assistant|>\n";
    case ChatFormat::kGemma:
      return "<start_of_turn>model\n";
    case ChatFormat::kDeepSeekR1:
      return "<｜Assistant｜>";
  }
  return "";
}

// --- tools -------------------------------------------------------------------

// `s` as a JSON string (invalid UTF-8 replaced first).
std::string JsonString(std::string_view s) {
  std::string out;
  if (!util::AppendJsonString(out, s)) util::AppendJsonString(out, util::SanitizeUtf8(s));
  return out;
}

// Compact JSON text (`json`, valid) rewritten as Python's json.dumps writes
// it, which is what the templates' `tojson` filter produces: ", " and ": "
// between items (indent 0), or one item per line indented by `indent`
// spaces, empty containers kept as {} and [].
std::string Reformat(std::string_view json, int indent) {
  std::string out;
  int depth = 0;
  bool in_string = false;
  auto newline = [&] {
    out += '\n';
    out.append(static_cast<size_t>(depth * indent), ' ');
  };
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < json.size()) {
        out += json[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        out += c;
        break;
      case '{':
      case '[': {
        out += c;
        const char close = c == '{' ? '}' : ']';
        if (i + 1 < json.size() && json[i + 1] == close) {
          out += close;
          ++i;
        } else {
          ++depth;
          if (indent > 0) newline();
        }
        break;
      }
      case '}':
      case ']':
        --depth;
        if (indent > 0) newline();
        out += c;
        break;
      case ',':
        out += ',';
        if (indent > 0) {
          newline();
        } else {
          out += ' ';
        }
        break;
      case ':':
        out += ": ";
        break;
      case ' ':
      case '\n':
      case '\t':
      case '\r':
        break;  // the input's own whitespace
      default:
        out += c;
    }
  }
  return out;
}

// A tool as OpenAI's request writes it: {"type": "function", "function":
// {"name", "description", "parameters"}} (compact).
std::string ToolJson(const ToolDefinition& t) {
  std::string f = "{\"name\":" + JsonString(t.name);
  if (!t.description.empty()) f += ",\"description\":" + JsonString(t.description);
  if (!t.parameters.empty()) f += ",\"parameters\":" + t.parameters;
  f += '}';
  return "{\"type\":\"function\",\"function\":" + f + "}";
}

std::string ArgumentsOf(const ToolCall& c) { return c.arguments.empty() ? "{}" : c.arguments; }

// Mistral's templates require call ids of 9 letters and digits: one that is
// not becomes 9 derived from it (the same for a call and its result).
std::string MistralId(std::string_view id) {
  const bool ok = id.size() == 9 && std::all_of(id.begin(), id.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) != 0;
                  });
  if (ok) return std::string(id);
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (const char c : id) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string out;
  for (int i = 0; i < 9; ++i) {
    out += kAlphabet[h % 62];
    h /= 62;
    if (h == 0) h = 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i);
  }
  return out;
}

constexpr std::string_view kTagsPreamble =
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
constexpr std::string_view kTagsPostamble =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
    "\"arguments\": <args-json-object>}\n</tool_call>";
constexpr std::string_view kLlama3Preamble =
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\nRespond in the format {\"name\": "
    "function name, \"parameters\": dictionary of argument name and its value}.Do not use "
    "variables.\n\n";

// The conversation as turns, with the tools listed and tool calls and
// results written in the style's syntax.
util::StatusOr<std::vector<Turn>> Lower(const ChatStyle& style, std::span<const ChatMessage> m,
                                        std::span<const ToolDefinition> tools) {
  std::vector<Turn> out;
  const ToolSyntax syntax = style.tools;
  for (size_t i = 0; i < m.size(); ++i) {
    const ChatMessage& msg = m[i];
    if (msg.role == "tool") {
      // A failed call's result says so (Anthropic's is_error).
      const std::string result = msg.is_error ? "Error: " + msg.content : msg.content;
      if (syntax == ToolSyntax::kLlama3) {
        // The template writes a string result as a JSON string.
        out.push_back({.role = "ipython", .body = TextBody(JsonString(result)), .source = i});
      } else if (syntax == ToolSyntax::kMistral) {
        const std::string_view sp = style.mistral_spaced ? " " : "";
        Turn t{.role = "tool", .source = i};
        t.body.push_back({"[TOOL_RESULTS]" + std::string(sp), true});
        t.body.push_back(
            {"{\"content\": " + result + ", \"call_id\": \"" + MistralId(msg.tool_call_id) + "\"}",
             false});
        t.body.push_back({"[/TOOL_RESULTS]", true});
        out.push_back(std::move(t));
      } else {
        // Consecutive results share one user turn.
        const bool join = i > 0 && m[i - 1].role == "tool" && !out.empty();
        if (!join) out.push_back({.role = "user", .source = i});
        Turn& t = out.back();
        t.body.push_back({join ? "\n<tool_response>\n" : "<tool_response>\n", true});
        if (!result.empty()) t.body.push_back({result, false});
        t.body.push_back({"\n</tool_response>", true});
      }
      continue;
    }
    Turn t{.role = msg.role, .body = TextBody(msg.content), .source = i};
    if (msg.role == "assistant" && !msg.tool_calls.empty()) {
      if (syntax == ToolSyntax::kTags) {
        for (size_t k = 0; k < msg.tool_calls.size(); ++k) {
          const ToolCall& c = msg.tool_calls[k];
          t.body.push_back(
              {(k == 0 && msg.content.empty()) ? "<tool_call>\n" : "\n<tool_call>\n", true});
          t.body.push_back({"{\"name\": " + JsonString(c.name) +
                                ", \"arguments\": " + Reformat(ArgumentsOf(c), 0) + "}",
                            false});
          t.body.push_back({"\n</tool_call>", true});
        }
      } else if (syntax == ToolSyntax::kLlama3) {
        // The template takes one call per turn, as the whole of it.
        std::string calls;
        for (size_t k = 0; k < msg.tool_calls.size(); ++k) {
          const ToolCall& c = msg.tool_calls[k];
          if (k > 0) calls += "\n";
          calls += "{\"name\": " + JsonString(c.name) +
                   ", \"parameters\": " + Reformat(ArgumentsOf(c), 0) + "}";
        }
        t.body = TextBody(calls);
      } else {
        // Mistral: the calls replace the turn's text.
        std::string calls = "[";
        for (size_t k = 0; k < msg.tool_calls.size(); ++k) {
          const ToolCall& c = msg.tool_calls[k];
          if (k > 0) calls += ", ";
          calls += "{\"name\": " + JsonString(c.name) +
                   ", \"arguments\": " + Reformat(ArgumentsOf(c), 0) + ", \"id\": \"" +
                   MistralId(c.id) + "\"}";
        }
        t.body = {{style.mistral_spaced ? "[TOOL_CALLS] " : "[TOOL_CALLS]", true},
                  {calls + "]", false}};
        t.tool_call = true;
      }
    }
    out.push_back(std::move(t));
  }
  if (tools.empty()) return out;
  if (syntax == ToolSyntax::kTags) {
    std::vector<PromptSegment> listing{{std::string(kTagsPreamble), true}};
    for (const ToolDefinition& tool : tools) {
      listing.push_back({"\n", true});
      listing.push_back({Reformat(ToolJson(tool), 0), false});
    }
    listing.push_back({std::string(kTagsPostamble), true});
    if (out.empty() || out[0].role != "system") {
      // The template's default system prompt, or none, then the tools.
      out.insert(out.begin(), Turn{.role = "system", .body = TextBody(style.default_system)});
      if (style.default_system.empty()) listing[0].text.erase(0, 2);  // no blank line first
    }
    for (PromptSegment& seg : listing) out[0].body.push_back(std::move(seg));
  } else if (syntax == ToolSyntax::kLlama3) {
    // Into the first user turn, each tool as indented JSON.
    std::string listing(kLlama3Preamble);
    for (const ToolDefinition& tool : tools) listing += Reformat(ToolJson(tool), 4) + "\n\n";
    auto first_user =
        std::find_if(out.begin(), out.end(), [](const Turn& t) { return t.role == "user"; });
    if (first_user == out.end()) {
      return util::InvalidArgumentError(
          "tools need a user message to be listed in (this model's format)");
    }
    std::vector<PromptSegment> body = TrimBody(std::move(first_user->body));
    body.insert(body.begin(), PromptSegment{listing, false});
    first_user->body = std::move(body);
  } else {
    // Mistral: before the last user turn.
    std::string listing = "[";
    for (size_t k = 0; k < tools.size(); ++k) {
      if (k > 0) listing += ", ";
      listing += Reformat(ToolJson(tools[k]), 0);
    }
    auto last_user =
        std::find_if(out.rbegin(), out.rend(), [](const Turn& t) { return t.role == "user"; });
    if (last_user == out.rend()) {
      return util::InvalidArgumentError(
          "tools need a user message to be listed in (this model's format)");
    }
    last_user->before = {{style.mistral_spaced ? "[AVAILABLE_TOOLS] " : "[AVAILABLE_TOOLS]", true},
                         {listing + "]", false},
                         {"[/AVAILABLE_TOOLS]", true}};
  }
  return out;
}

util::StatusOr<std::vector<PromptSegment>> RenderClosed(const ChatStyle& style,
                                                        std::span<const Turn> m,
                                                        bool add_generation_prompt, bool tools);

}  // namespace

util::StatusOr<std::vector<PromptSegment>> RenderChat(const ChatStyle& style,
                                                      std::span<const ChatMessage> messages,
                                                      bool add_generation_prompt,
                                                      std::span<const ToolDefinition> tools) {
  if (messages.empty()) return util::InvalidArgumentError("messages is empty");
  STRATA_ASSIGN_OR_RETURN(std::vector<Turn> m, Lower(style, messages, tools));
  const std::span<const Turn> turns(m);
  if (add_generation_prompt && messages.size() >= 2 && messages.back().role == "assistant" &&
      messages.back().tool_calls.empty()) {
    // A prefill: the conversation up to the last turn, then that assistant
    // turn opened and left open, its text the start of the answer.
    STRATA_ASSIGN_OR_RETURN(
        auto head, RenderClosed(style, turns.first(turns.size() - 1), false, !tools.empty()));
    Builder b(std::move(head));
    b.Special(AssistantOpening(style)).Segments(turns.back().body);
    return b.Take();
  }
  return RenderClosed(style, turns, add_generation_prompt, !tools.empty());
}

namespace {

util::StatusOr<std::vector<PromptSegment>> RenderClosed(const ChatStyle& style,
                                                        std::span<const Turn> m,
                                                        bool add_generation_prompt, bool tools) {
  if (m.empty()) return util::InvalidArgumentError("messages is empty");
  Builder b;
  switch (style.format) {
    case ChatFormat::kPlain: {
      STRATA_RETURN_IF_ERROR(CheckRoles(m, false, false));
      for (const auto& msg : m) {
        const std::string role = msg.role == "system" ? "System"
                                 : msg.role == "user" ? "User"
                                                      : "Assistant";
        b.Special(role + ": ").Segments(msg.body).Special("\n\n");
      }
      if (add_generation_prompt) b.Special("Assistant:");
      break;
    }
    case ChatFormat::kChatML: {
      STRATA_RETURN_IF_ERROR(CheckRoles(m, false, false));
      if (m[0].role != "system" && !style.default_system.empty()) {
        b.Special("<|im_start|>system\n").Text(style.default_system).Special("<|im_end|>\n");
      }
      for (const auto& msg : m) {
        b.Special("<|im_start|>" + msg.role + "\n").Segments(msg.body).Special("<|im_end|>\n");
      }
      if (add_generation_prompt) b.Special("<|im_start|>assistant\n");
      break;
    }
    case ChatFormat::kLlama3: {
      STRATA_RETURN_IF_ERROR(CheckRoles(m, false, false));
      size_t first = 0;
      if (style.llama3_knowledge_date) {
        // Llama 3.1+ always opens with a system header carrying the dates
        // (and, with tools, the environment they run in).
        std::vector<PromptSegment> system;
        if (m[0].role == "system") {
          system = TrimBody(m[0].body);
          first = 1;
        }
        b.Special("<|start_header_id|>system<|end_header_id|>\n\n");
        if (tools) b.Text("Environment: ipython\n");
        b.Text("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n")
            .Segments(system)
            .Special("<|eot_id|>");
      }
      for (size_t i = first; i < m.size(); ++i) {
        b.Special("<|start_header_id|>" + m[i].role + "<|end_header_id|>\n\n")
            .Segments(TrimBody(m[i].body))
            .Special("<|eot_id|>");
      }
      if (add_generation_prompt) b.Special("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    }
    case ChatFormat::kLlama2: {
      STRATA_RETURN_IF_ERROR(CheckRoles(m, true, true));
      size_t i = 0;
      std::vector<PromptSegment> system;
      if (m[0].role == "system") {
        system = m[0].body;
        i = 1;
      }
      bool first_user = true;
      for (; i < m.size(); ++i) {
        if (m[i].role == "user") {
          if (!first_user) b.Special("<s>");
          b.Special("[INST] ");
          if (first_user && !system.empty()) {
            b.Special("<<SYS>>\n").Segments(system).Special("\n<</SYS>>\n\n");
          }
          b.Segments(TrimBody(m[i].body)).Special(" [/INST]");
          first_user = false;
        } else {
          b.Special(" ").Segments(TrimBody(m[i].body)).Special(" " + style.eos_text);
        }
      }
      break;
    }
    case ChatFormat::kMistral: {
      STRATA_RETURN_IF_ERROR(CheckRoles(m, true, true));
      size_t i = 0;
      std::vector<PromptSegment> system;
      if (m[0].role == "system") {
        system = m[0].body;
        i = 1;
      }
      size_t last_user = 0;
      for (size_t k = i; k < m.size(); ++k) {
        if (m[k].role == "user") last_user = k;
      }
      const std::string open = style.mistral_spaced ? "[INST] " : "[INST]";
      const std::string close = style.mistral_spaced ? " [/INST]" : "[/INST]";
      for (; i < m.size(); ++i) {
        b.Segments(m[i].before);
        if (m[i].role == "user") {
          b.Special(open);
          if (i == last_user && !system.empty()) b.Segments(system).Special("\n\n");
          b.Segments(m[i].body).Special(close);
        } else if (m[i].role == "tool") {
          b.Segments(m[i].body);
        } else {
          b.Segments(m[i].body).Special(style.eos_text);
        }
      }
      break;
    }
    case ChatFormat::kZephyr:
    case ChatFormat::kPhi3: {
      STRATA_RETURN_IF_ERROR(CheckRoles(m, false, false));
      const std::string end = style.format == ChatFormat::kPhi3 ? "<|end|>" : style.eos_text;
      for (const auto& msg : m) {
        if (style.format == ChatFormat::kPhi3 && msg.role == "system" && msg.body.empty()) continue;
        b.Special("<|" + msg.role + "|>\n").Segments(msg.body).Special(end + "\n");
      }
      if (add_generation_prompt) b.Special("<|assistant|>\n");
      break;
    }
    case ChatFormat::kGemma: {
      // Gemma has no system role: its text opens the first user turn.
      STRATA_RETURN_IF_ERROR(CheckRoles(m, true, true));
      size_t i = 0;
      std::vector<PromptSegment> system;
      if (m[0].role == "system") {
        system = TrimBody(m[0].body);
        i = 1;
      }
      bool first = true;
      for (; i < m.size(); ++i) {
        const std::string role = m[i].role == "assistant" ? "model" : "user";
        b.Special("<start_of_turn>" + role + "\n");
        if (first && !system.empty()) b.Segments(system).Text("\n\n");
        b.Segments(TrimBody(m[i].body)).Special("<end_of_turn>\n");
        first = false;
      }
      if (add_generation_prompt) b.Special("<start_of_turn>model\n");
      break;
    }
    case ChatFormat::kDeepSeekR1: {
      STRATA_RETURN_IF_ERROR(CheckRoles(m, false, false));
      for (const auto& msg : m) {
        if (msg.role == "system") b.Segments(msg.body);
      }
      for (const auto& msg : m) {
        if (msg.role == "user") {
          b.Special("<｜User｜>").Segments(msg.body);
        } else if (msg.role == "assistant") {
          b.Special("<｜Assistant｜>").Segments(msg.body).Special("<｜end▁of▁sentence｜>");
        }
      }
      if (add_generation_prompt) b.Special("<｜Assistant｜><think>\n");
      break;
    }
  }
  return b.Take();
}

}  // namespace

std::vector<std::string> TurnEndStrings(const ChatStyle& style) {
  switch (style.format) {
    case ChatFormat::kPlain:
      return {"\nUser:", "\nSystem:"};
    case ChatFormat::kChatML:
      return {"<|im_end|>"};
    case ChatFormat::kLlama3:
      return {"<|eot_id|>"};
    case ChatFormat::kPhi3:
      return {"<|end|>"};
    case ChatFormat::kGemma:
      return {"<end_of_turn>"};
    case ChatFormat::kZephyr:
    case ChatFormat::kLlama2:
    case ChatFormat::kMistral:
      return {style.eos_text};
    case ChatFormat::kDeepSeekR1:
      return {"<｜end▁of▁sentence｜>"};
  }
  return {};
}

}  // namespace strata::text
