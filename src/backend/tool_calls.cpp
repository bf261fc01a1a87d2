#include "backend/tool_calls.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "grammar/json_schema.h"
#include "util/hash.h"

namespace strata::backend {
namespace {

constexpr std::string_view kTagsOpen = "<tool_call>";
constexpr std::string_view kTagsClose = "</tool_call>";
constexpr std::string_view kMistralOpen = "[TOOL_CALLS]";

size_t LeadingWhitespace(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) ++i;
  return i;
}

// The text of a JSON string's body (between its quotes, escapes as
// written); nullopt when it is not one.
std::optional<std::string> DecodeString(std::string_view body) {
  std::string quoted;
  quoted.reserve(body.size() + 2);
  quoted.push_back('"');
  quoted.append(body);
  quoted.push_back('"');
  const nlohmann::json j = nlohmann::json::parse(quoted, nullptr, /*allow_exceptions=*/false);
  if (!j.is_string()) return std::nullopt;
  return j.get<std::string>();
}

// A GBNF string literal of `s`.
std::string GbnfLiteral(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out += c;
    }
  }
  return out + "\"";
}

}  // namespace

util::StatusOr<std::string> ToolCallGrammar(text::ToolSyntax syntax, const Request& r) {
  const bool named = r.tool_choice.mode == ToolChoice::Mode::kNamed;
  const char* const args_key = syntax == text::ToolSyntax::kLlama3 ? "parameters" : "arguments";
  std::string rules;
  std::string alternatives;
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const ToolDefinition& t = r.tools[i];
    if (named && t.name != r.tool_choice.name) continue;
    const std::string schema =
        t.parameters.empty() ? R"({"type":"object","properties":{},"additionalProperties":false})"
                             : t.parameters;
    auto args = grammar::JsonSchemaRules(schema, fmt::format("t{}-", i), rules);
    if (!args.ok()) {
      return util::InvalidFieldError(fmt::format("tools[{}].function.parameters", i),
                                     fmt::format("'tools[{}]' ({}) cannot be enforced: {}", i,
                                                 t.name, args.status().message()));
    }
    if (!alternatives.empty()) alternatives += " | ";
    alternatives += GbnfLiteral(fmt::format("{}\", \"{}\": ", t.name, args_key)) + " " + *args;
  }
  if (alternatives.empty()) return util::InvalidArgumentError("no tool to call");
  const std::string call = "call ::= " + GbnfLiteral("{\"name\": \"") + " (" + alternatives + ") " +
                           GbnfLiteral("}") + "\n";
  // More calls after the first, each after its separator.
  auto more = [&](std::string_view separator, std::string_view item) {
    if (!r.parallel_tool_calls) return std::string();
    return fmt::format(" ({} {}){{0,{}}}", GbnfLiteral(separator), item, kMaxConstrainedCalls - 1);
  };
  std::string root;
  switch (syntax) {
    case text::ToolSyntax::kTags:
      root = fmt::format("root ::= tagged{}\ntagged ::= {} call {}\n", more("\n", "tagged"),
                         GbnfLiteral("<tool_call>\n"), GbnfLiteral("\n</tool_call>"));
      break;
    case text::ToolSyntax::kLlama3:
      root = fmt::format("root ::= call{}\n", more("; ", "call"));
      break;
    case text::ToolSyntax::kMistral:
      root = fmt::format("root ::= {} call{} {}\n", GbnfLiteral("[TOOL_CALLS]["),
                         more(", ", "call"), GbnfLiteral("]"));
      break;
  }
  return root + call + rules;
}

ToolCallParser::ToolCallParser(Options options)
    : o_(std::move(options)),
      open_(o_.syntax == text::ToolSyntax::kTags      ? kTagsOpen
            : o_.syntax == text::ToolSyntax::kMistral ? kMistralOpen
                                                      : "") {}

std::string ToolCallParser::CallId(std::string_view seed, int32_t index) {
  const std::string key = fmt::format("{}\x1f{}", seed, index);
  const uint64_t a = util::Hash64(key, 0x746f6f6c'63616c6cULL);
  const uint64_t b = util::Hash64(key, 0x69642d73'65656431ULL);
  return fmt::format("call_{:016x}{:08x}", a, static_cast<uint32_t>(b));
}

void ToolCallParser::Push(std::string_view chunk, std::string* text,
                          std::vector<ToolCallDelta>* calls) {
  text_ = text;
  calls_out_ = calls;
  for (const char c : chunk) {
    if (done_) break;
    Byte(c);
  }
}

void ToolCallParser::Byte(char c) {
  switch (state_) {
    case State::kText:
      TextByte(c);
      return;
    case State::kPlain:
      Out(std::string_view(&c, 1));
      return;
    case State::kOpenList:
      if (Whitespace(c)) {
        prefix_ += c;
      } else if (c == '[') {
        prefix_ += c;
        state_ = State::kListNext;
      } else {
        FallBack(c);
      }
      return;
    case State::kListNext:
      if (Whitespace(c)) {
        prefix_ += c;
      } else if (c == '{') {
        StartCall();
        CallByte(c);
      } else if (c == ']') {
        prefix_.clear();
        state_ = State::kText;
      } else {
        FallBack(c);
      }
      return;
    case State::kListAfter:
      if (Whitespace(c)) return;
      if (c == ',') {
        state_ = State::kListNext;
      } else if (c == ']') {
        state_ = State::kText;
      } else {
        state_ = State::kText;
        TextByte(c);
      }
      return;
    case State::kCall:
      CallByte(c);
      return;
    case State::kClose: {
      close_ += c;
      const std::string_view rest = std::string_view(close_).substr(LeadingWhitespace(close_));
      if (kTagsClose.starts_with(rest)) {
        if (rest.size() == kTagsClose.size()) {
          close_.clear();
          state_ = State::kText;
        }
        return;
      }
      // Not the closing tag: what followed the call is text.
      std::string bytes = std::move(close_);
      close_.clear();
      state_ = State::kText;
      for (const char b : bytes) TextByte(b);
      return;
    }
    case State::kBetween:
      if (Whitespace(c) || c == ';') return;
      if (c == '{') {
        prefix_.clear();
        StartCall();
        CallByte(c);
      } else {
        state_ = State::kPlain;
        Out(std::string_view(&c, 1));
      }
      return;
  }
}

void ToolCallParser::TextByte(char c) {
  if (o_.syntax == text::ToolSyntax::kLlama3) {
    // A call is the whole answer: it starts with '{' (after whitespace).
    if (Whitespace(c)) {
      held_ += c;
      return;
    }
    if (c == '{') {
      prefix_ = std::move(held_);
      held_.clear();
      StartCall();
      CallByte(c);
      return;
    }
    state_ = State::kPlain;
    FlushHeld();
    Out(std::string_view(&c, 1));
    return;
  }
  held_ += c;
  while (true) {
    const size_t ws = LeadingWhitespace(held_);
    const std::string_view rest = std::string_view(held_).substr(ws);
    if (rest.empty()) return;  // whitespace: it goes out with what follows it, or is dropped
    if (open_.starts_with(rest)) {
      if (rest.size() < open_.size()) return;
      // The markup: whitespace before it is not text.
      prefix_ = std::string(rest);
      held_.clear();
      state_ = o_.syntax == text::ToolSyntax::kTags ? State::kCall : State::kOpenList;
      if (state_ == State::kCall) StartCall();
      return;
    }
    Out(std::string_view(held_).substr(0, 1));
    held_.erase(0, 1);
  }
}

void ToolCallParser::FlushHeld() {
  Out(held_);
  held_.clear();
}

void ToolCallParser::FallBack(char c) {
  // What looked like markup was not: it is text.
  std::string bytes = std::move(prefix_);
  bytes += c;
  prefix_.clear();
  state_ = o_.syntax == text::ToolSyntax::kLlama3 ? State::kPlain : State::kText;
  if (state_ == State::kPlain) {
    Out(bytes);
  } else {
    // The first byte cannot open markup again (it was the markup's start).
    Out(std::string_view(bytes).substr(0, 1));
    for (const char b : std::string_view(bytes).substr(1)) TextByte(b);
  }
}

void ToolCallParser::StartCall() {
  state_ = State::kCall;
  json_ = grammar::JsonMachine(grammar::JsonMachine::Root::kObject);
  raw_.clear();
  depth_ = 0;
  in_string_ = escape_ = false;
  field_ = Field::kNone;
  key_.clear();
  name_.reset();
  name_raw_.clear();
  args_seen_ = args_string_ = false;
  args_held_.clear();
  header_out_ = false;
}

void ToolCallParser::CallByte(char c) {
  if (raw_.empty() && Whitespace(c)) {  // between the markup and the object
    prefix_ += c;
    return;
  }
  const bool was_in_string = in_string_;
  const int depth_before = depth_;
  raw_ += c;
  if (!json_.Feed(static_cast<uint8_t>(c))) {
    FailCall();
    return;
  }
  bool string_closed = false;
  if (in_string_) {
    if (escape_) {
      escape_ = false;
    } else if (c == '\\') {
      escape_ = true;
    } else if (c == '"') {
      in_string_ = false;
      string_closed = true;
    }
  } else if (c == '"') {
    in_string_ = true;
  } else if (c == '{' || c == '[') {
    ++depth_;
  } else if (c == '}' || c == ']') {
    --depth_;
  }
  // A byte of the call object's own level (not inside a member's value).
  const bool top = !was_in_string && depth_before == 1;
  if (top && (c == ',' || c == '}')) {
    field_ = Field::kNone;  // a number or literal value ended before it
    if (c == '}') EndCall();
    return;
  }
  switch (field_) {
    case Field::kNone:
      if (top && c == '"') {
        field_ = Field::kKey;
        key_.clear();
      }
      return;
    case Field::kKey:
      if (string_closed) {
        field_ = Field::kAfterKey;
      } else {
        key_ += c;
      }
      return;
    case Field::kAfterKey:
      if (top && c == ':') field_ = Field::kValueStart;
      return;
    case Field::kValueStart:
      if (Whitespace(c)) return;
      if (key_ == "name" && !name_) {
        field_ = c == '"' ? Field::kName : Field::kOther;
        name_raw_.clear();
        return;
      }
      if ((key_ == "arguments" || key_ == "parameters") && !args_seen_) {
        field_ = Field::kArgs;
        args_seen_ = true;
        args_string_ = c == '"';
        AddArgs(c);
        return;
      }
      field_ = Field::kOther;
      return;
    case Field::kName:
      if (!string_closed) {
        name_raw_ += c;
        return;
      }
      field_ = Field::kOther;
      name_ = DecodeString(name_raw_);
      if (!name_ || name_->empty()) {
        name_.reset();
        return;
      }
      EmitHeader();
      if (args_seen_ && !args_string_) {
        EmitArgs(args_held_);
        args_held_.clear();
      }
      return;
    case Field::kArgs:
      if (top && Whitespace(c)) {  // after a number or literal
        field_ = Field::kOther;
        return;
      }
      AddArgs(c);
      if (depth_ == 1 && !in_string_ && (string_closed || c == '}' || c == ']')) {
        field_ = Field::kOther;
      }
      return;
    case Field::kOther:
      return;
  }
}

void ToolCallParser::AddArgs(char c) {
  if (header_out_ && !args_string_) {
    EmitArgs(std::string_view(&c, 1));
  } else {
    args_held_ += c;
  }
}

void ToolCallParser::EndCall() {
  if (!name_) {
    FailCall();
    return;
  }
  if (args_string_) {
    // Arguments sent as a string of JSON text: the text is the arguments.
    std::string_view held = args_held_;
    if (held.size() >= 2) held = held.substr(1, held.size() - 2);
    EmitArgs(DecodeString(held).value_or("{}"));
  } else if (!args_seen_) {
    EmitArgs("{}");
  }
  prefix_.clear();
  raw_.clear();
  if (!o_.parallel) done_ = true;
  switch (o_.syntax) {
    case text::ToolSyntax::kTags:
      state_ = State::kClose;
      break;
    case text::ToolSyntax::kMistral:
      state_ = State::kListAfter;
      break;
    case text::ToolSyntax::kLlama3:
      state_ = State::kBetween;
      break;
  }
}

void ToolCallParser::FailCall() {
  state_ = o_.syntax == text::ToolSyntax::kLlama3 ? State::kPlain : State::kText;
  // A call that went out ends where its JSON broke (and counts as the one
  // call when parallel calls are refused).
  if (header_out_ && !o_.parallel) done_ = true;
  std::string bytes;
  if (!header_out_) bytes = prefix_ + raw_;  // nothing of it went out: the model's words
  prefix_.clear();
  raw_.clear();
  if (bytes.empty()) return;
  if (state_ == State::kPlain) {
    Out(bytes);
    return;
  }
  Out(std::string_view(bytes).substr(0, 1));
  for (const char b : std::string_view(bytes).substr(1)) TextByte(b);
}

void ToolCallParser::EmitHeader() {
  header_out_ = true;
  index_ = calls_++;
  ToolCallDelta d;
  d.index = index_;
  d.id = CallId(o_.id_seed, index_);
  d.name = *name_;
  calls_out_->push_back(std::move(d));
}

void ToolCallParser::EmitArgs(std::string_view bytes) {
  if (bytes.empty()) return;
  if (calls_out_->empty() || calls_out_->back().index != index_) {
    ToolCallDelta d;
    d.index = index_;
    calls_out_->push_back(std::move(d));
  }
  calls_out_->back().arguments.append(bytes);
}

void ToolCallParser::Finish(std::string* text, std::vector<ToolCallDelta>* calls) {
  text_ = text;
  calls_out_ = calls;
  switch (state_) {
    case State::kText:
      // Whitespace after the calls is not an answer, nor is the start of
      // another call's markup that the end cut short.
      if ((calls_ > 0 || o_.calls_only) &&
          open_.starts_with(std::string_view(held_).substr(LeadingWhitespace(held_)))) {
        held_.clear();
      }
      FlushHeld();
      break;
    case State::kPlain:
      FlushHeld();
      break;
    case State::kCall:
      // Cut short (max_tokens): a call that went out stays as far as it
      // got; one that did not is text when it is all the answer has (and
      // the answer may be text), else markup cut short.
      if (!header_out_ && !o_.calls_only && calls_ == 0) Out(prefix_ + raw_);
      break;
    case State::kOpenList:
    case State::kListNext:
      if (calls_ == 0 && !o_.calls_only) Out(prefix_);
      break;
    case State::kListAfter:
    case State::kClose:
    case State::kBetween:
      break;
  }
  held_.clear();
  prefix_.clear();
  raw_.clear();
}

}  // namespace strata::backend
