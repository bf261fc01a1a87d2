// text/chat_template.h — turning a conversation into the prompt a chat model
// was trained on.
//
// Promise: DetectChatFormat recognises the family of a GGUF's
// `tokenizer.chat_template` (ChatML, Llama 2, Llama 3, Zephyr, Mistral, Phi-3,
// Gemma, DeepSeek R1); RenderChat produces what that template renders for a
// plain conversation (system/user/assistant text, no tools), split into
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

struct ChatMessage {
  std::string role;  // "system", "user" or "assistant"
  std::string content;
};

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
util::StatusOr<std::vector<PromptSegment>> RenderChat(const ChatStyle& style,
                                                      std::span<const ChatMessage> messages,
                                                      bool add_generation_prompt = true);

// Text that ends an assistant turn in this format, beyond the model's EOS
// token (e.g. "<|im_end|>"); the server stops generation on it.
std::vector<std::string> TurnEndStrings(const ChatStyle& style);

}  // namespace strata::text
