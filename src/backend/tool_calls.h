// backend/tool_calls.h — the tool calls in a model's generated text, found
// while it streams.
//
// Promise: a ToolCallParser reads one choice's text as the model writes it
// and splits it into the text the client sees and the calls, in the
// chat format's syntax (text::ToolSyntax):
//   kTags     <tool_call>{"name": N, "arguments": {..}}</tool_call>, any
//             number, with text before them;
//   kLlama3   the answer is {"name": N, "parameters": {..}} (several may
//             follow each other, separated by ';' or whitespace); an answer
//             that does not start with '{' is text;
//   kMistral  [TOOL_CALLS] [{"name": N, "arguments": {..}}, ..].
// Markup never reaches the text: a suffix that could begin markup, and
// whitespace before it, is held back until the next bytes decide. Each call
// goes out as ToolCallDeltas: its first piece (once its name is read) with
// the call's id and name, then its arguments' JSON text as it is generated,
// so a client sees the arguments grow. A call whose object is not JSON, or
// lacks a string "name", is text after all when nothing of it went out yet
// (the model's own words are never lost); once its name went out, the call
// ends where the JSON broke and what follows is text. Ids are "call_" and
// 24 hex digits derived from Options::id_seed and the call's place, so a
// seeded run names its calls the same every time.
//
// Threading: a value owned by one choice's thread (the scheduler thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "grammar/json_machine.h"
#include "text/chat_template.h"

namespace strata::backend {

// The grammar (GBNF, grammar/grammar.h) of an answer that is nothing but
// tool calls in `syntax`: for tool_choice kNamed, calls of that tool; for
// kRequired, of any of r.tools; one call, or with r.parallel_tool_calls
// up to kMaxConstrainedCalls. Each call's arguments follow its tool's
// parameters schema (grammar/json_schema.h; no parameters: {}). A schema
// the compiler cannot express is InvalidArgument naming the tool's field
// ("tools[1].function.parameters: ...").
inline constexpr int32_t kMaxConstrainedCalls = 8;
util::StatusOr<std::string> ToolCallGrammar(text::ToolSyntax syntax, const Request& r);

class ToolCallParser {
 public:
  struct Options {
    text::ToolSyntax syntax = text::ToolSyntax::kTags;
    // false: the first complete call is the last (done() turns true).
    bool parallel = true;
    std::string id_seed;
    // The text is calls and nothing else (a grammar holds it so): a call
    // the end cuts short before its name went out is dropped, not text.
    bool calls_only = false;
  };
  explicit ToolCallParser(Options options);

  // Reads the next bytes of the text: appends what they settle to *text
  // and *calls (fragments of one call in one Push are merged).
  void Push(std::string_view chunk, std::string* text, std::vector<ToolCallDelta>* calls);
  // The text ended: what was held back is text, or dropped whitespace
  // between calls.
  void Finish(std::string* text, std::vector<ToolCallDelta>* calls);

  // Calls begun (their first piece went out).
  int32_t calls() const { return calls_; }
  // Options::parallel is false and a call is complete: the rest is ignored.
  bool done() const { return done_; }
  // The id of call `index` under `seed` (what the parser gives it).
  static std::string CallId(std::string_view seed, int32_t index);

 private:
  enum class State {
    kText,       // outside any call
    kPlain,      // kLlama3: the answer is text, to the end
    kOpenList,   // kMistral: after [TOOL_CALLS], before '['
    kListNext,   // kMistral: inside the list, before a call or ']'
    kListAfter,  // kMistral: after a call, before ',' or ']'
    kCall,       // inside a call's object
    kClose,      // kTags: after a call's object, reading </tool_call>
    kBetween,    // kLlama3: after a call, before ';' or the next '{'
  };
  // Where the call's object parser is within its top level.
  enum class Field { kNone, kKey, kAfterKey, kValueStart, kName, kArgs, kOther };

  void Byte(char c);
  void TextByte(char c);
  // Markup begun (prefix_) turned out not to be, at byte c: all of it is text.
  void FallBack(char c);
  void StartCall();
  void CallByte(char c);
  void AddArgs(char c);
  void EndCall();
  void FailCall();
  void EmitHeader();
  void EmitArgs(std::string_view bytes);
  void FlushHeld();
  void Out(std::string_view s) { text_->append(s); }
  bool Whitespace(char c) const { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

  const Options o_;
  const std::string open_;  // the markup that opens a call (kTags, kMistral); "" for kLlama3
  State state_ = State::kText;
  std::string held_;  // kText: bytes that may begin markup (and whitespace before them)
  int32_t calls_ = 0;
  bool done_ = false;
  std::string close_;   // kClose: the bytes of "</tool_call>" matched so far (whitespace first)
  std::string prefix_;  // the markup (and whitespace) read since the current call's start

  // The call being read.
  grammar::JsonMachine json_{grammar::JsonMachine::Root::kObject};
  std::string raw_;  // its bytes so far (the text it is when it fails early)
  int depth_ = 0;
  bool in_string_ = false, escape_ = false;
  Field field_ = Field::kNone;
  std::string key_;
  std::optional<std::string> name_;
  std::string name_raw_;
  bool args_seen_ = false;
  bool args_string_ = false;  // the arguments came as a JSON string (decoded at the end)
  std::string args_held_;     // arguments read before the name (or as a string)
  bool header_out_ = false;
  int32_t index_ = 0;  // the call's index, once its header went out

  // Where Push appends.
  std::string* text_ = nullptr;
  std::vector<ToolCallDelta>* calls_out_ = nullptr;
};

}  // namespace strata::backend
