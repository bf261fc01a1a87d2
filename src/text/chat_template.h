// text/chat_template.h — turning a conversation into the prompt a chat model
// was trained on.
//
// Promise: DetectChatFormat recognises the family of a GGUF's
// `tokenizer.chat_template` (ChatML, Llama 2, Llama 3, Zephyr, Mistral, Phi-3,
// Gemma, DeepSeek R1); RenderChat produces what that template renders for a
// conversation (system/user/assistant text, the tools offered, tool calls
// and their results), split into
// segments: template scaffolding, where special tokens are meant, and message
// content, which must be tokenized as plain text so a user cannot inject
// control tokens. A model without a template gets kPlain, documented in
// docs/api.md ("Role: content" paragraphs, then "Assistant:").
//
// Threading: pure functions.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace strata::text {

enum class ChatFormat {
  kPlain,
  kChatML,      // <|im_start|>role\n...<|im_end|>   (Qwen, SmolLM, ...)
  kLlama2,      // [INST] <<SYS>>...<</SYS>> ... [/INST]
  kLlama3,      // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  kZephyr,      // <|user|>\n...</s>\n
  kMistral,     // [INST]...[/INST] (spaced or tight, as the template writes it)
  kPhi3,        // <|user|>\n...<|end|>\n
  kGemma,       // <start_of_turn>user\n...<end_of_turn>\n
  kDeepSeekR1,  // <｜User｜>...<｜Assistant｜>
};

std::string_view ChatFormatName(ChatFormat f);
std::optional<ChatFormat> ParseChatFormat(std::string_view name);

// A function the model may call (OpenAI's tools[].function, Anthropic's
// tools[]): its name, what it does, and its parameters as a JSON schema
// (compact JSON text of an object; "" = takes no parameters).
struct ToolDefinition {
  std::string name;
  std::string description;
  std::string parameters;
};

// A call an assistant turn made: the call's id, the function's name and the
// arguments (compact JSON text of an object).
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool"
  std::string content;
  std::vector<ToolCall> tool_calls = {};  // assistant: the calls it made (after its text)
  std::string tool_call_id = {};          // tool: the call whose result `content` is
  std::string name = {};                  // tool: the called function's name, when known
  bool is_error = false;                  // tool: the call failed (Anthropic's is_error)
};

// How a chat format writes tools, tool calls and their results (the syntax
// the model's output is parsed in, backend/tool_calls.h):
//   kTags    Qwen2.5 / Hermes: the tools as JSON lines inside <tools></tools>
//            in the system turn; each call <tool_call>\n{"name": ..,
//            "arguments": {..}}\n</tool_call>; results as a user turn of
//            <tool_response>\n..\n</tool_response> blocks. Also the
//            generic format of every template without tool support
//            (docs/api.md, "Tool calling").
//   kLlama3  Llama 3.1+: the tools as JSON in the first user turn; a call
//            is the whole answer {"name": .., "parameters": {..}}; results
//            in an "ipython" turn.
//   kMistral Mistral v3+: [AVAILABLE_TOOLS] [..][/AVAILABLE_TOOLS] before
//            the last user turn; calls [TOOL_CALLS] [{"name": ..,
//            "arguments": {..}}, ..]; results [TOOL_RESULTS] {..}[/TOOL_RESULTS].
enum class ToolSyntax { kTags, kLlama3, kMistral };

// A piece of the rendered prompt. `special` pieces come from the template and
// may contain special-token text; the others are message content.
struct PromptSegment {
  std::string text;
  bool special = false;
};

// Template details that change the rendering within a family.
struct ChatStyle {
  ChatFormat format = ChatFormat::kPlain;
  std::string default_system;          // ChatML templates that add one when none is given
  bool llama3_knowledge_date = false;  // Llama 3.1+: "Cutting Knowledge Date" header
  bool mistral_spaced = false;         // "[INST] x [/INST]" rather than "[INST]x[/INST]"
  std::string eos_text = "</s>";       // what closes a turn in Zephyr/Llama 2/Mistral
  // The template's own tool syntax when it has one (kLlama3, kMistral;
  // ChatML templates use kTags), else the generic kTags.
  ToolSyntax tools = ToolSyntax::kTags;
  bool native_tools = false;  // the template itself renders tools
};

// Recognises the family (and style details) from a template's source text;
// kPlain when empty or unknown.
ChatStyle DetectChatStyle(std::string_view jinja_template, std::string_view eos_text);

// InvalidArgument naming the message for an unknown role, a misplaced system
// message, or roles that do not alternate where the format requires it.
// With add_generation_prompt and a conversation that ends with an assistant
// message after at least one other, that last message is a prefill: its
// turn is opened as the template opens the answer's and left open, so the
// model continues its text (Anthropic's assistant prefill; vLLM's
// continue_final_message).
//
// `tools` (may be empty) are listed in the prompt the way `style.tools`
// says; assistant messages' tool_calls and "tool" messages (results) are
// rendered in that syntax whether or not tools are listed. Tool markup is
// template scaffolding (special), the JSON inside it and a result's text
// are content.
util::StatusOr<std::vector<PromptSegment>> RenderChat(const ChatStyle& style,
                                                      std::span<const ChatMessage> messages,
                                                      bool add_generation_prompt = true,
                                                      std::span<const ToolDefinition> tools = {});

// Text that ends an assistant turn in this format, beyond the model's EOS
// token (e.g. "<|im_end|>"); the server stops generation on it.
std::vector<std::string> TurnEndStrings(const ChatStyle& style);

}  // namespace strata::text
