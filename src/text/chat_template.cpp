#include "text/chat_template.h"

#include <fmt/format.h>

namespace strata::text {
namespace {

bool Has(std::string_view s, std::string_view needle) {
  return s.find(needle) != std::string_view::npos;
}

std::string Trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(ws);
  return std::string(s.substr(b, e - b + 1));
}

// Builds the segment list, merging adjacent pieces of the same kind.
class Builder {
 public:
  Builder() = default;
  explicit Builder(std::vector<PromptSegment> start) : out_(std::move(start)) {}
  Builder& Special(std::string_view s) { return Add(s, true); }
  Builder& Text(std::string_view s) { return Add(s, false); }
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

util::Status RoleError(size_t i, std::string_view role, std::string_view why) {
  return util::InvalidArgumentError(fmt::format("messages[{}].role '{}': {}", i, role, why));
}

// Checks roles; `system_first_only`: a system message may only open the chat.
util::Status CheckRoles(std::span<const ChatMessage> m, bool system_first_only, bool alternate) {
  size_t turn = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string& r = m[i].role;
    if (r != "system" && r != "user" && r != "assistant") {
      return RoleError(i, r, "must be system, user or assistant");
    }
    if (r == "system") {
      if (system_first_only && i != 0) {
        return RoleError(i, r, "this model's format allows a system message only first");
      }
      continue;
    }
    if (alternate && (r == "user") != (turn % 2 == 0)) {
      return RoleError(i, r,
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
  } else if (Has(t, "<|start_header_id|>")) {
    s.format = ChatFormat::kLlama3;
    s.llama3_knowledge_date = Has(t, "Cutting Knowledge Date");
  } else if (Has(t, "<｜User｜>")) {
    s.format = ChatFormat::kDeepSeekR1;
  } else if (Has(t, "<start_of_turn>")) {
    s.format = ChatFormat::kGemma;
  } else if (Has(t, "[INST]") && Has(t, "<<SYS>>")) {
    s.format = ChatFormat::kLlama2;
  } else if (Has(t, "[INST]")) {
    s.format = ChatFormat::kMistral;
    s.mistral_spaced = Has(t, "[INST] ");
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

util::StatusOr<std::vector<PromptSegment>> RenderClosed(const ChatStyle& style,
                                                        std::span<const ChatMessage> m,
                                                        bool add_generation_prompt);

}  // namespace

util::StatusOr<std::vector<PromptSegment>> RenderChat(const ChatStyle& style,
                                                      std::span<const ChatMessage> m,
                                                      bool add_generation_prompt) {
  if (add_generation_prompt && m.size() >= 2 && m.back().role == "assistant") {
    // A prefill: the conversation up to the last turn, then that assistant
    // turn opened and left open, its text the start of the answer.
    STRATA_ASSIGN_OR_RETURN(auto head, RenderClosed(style, m.first(m.size() - 1), false));
    Builder b(std::move(head));
    b.Special(AssistantOpening(style)).Text(m.back().content);
    return b.Take();
  }
  return RenderClosed(style, m, add_generation_prompt);
}

namespace {

util::StatusOr<std::vector<PromptSegment>> RenderClosed(const ChatStyle& style,
                                                        std::span<const ChatMessage> m,
                                                        bool add_generation_prompt) {
  if (m.empty()) return util::InvalidArgumentError("messages is empty");
  Builder b;
  switch (style.format) {
    case ChatFormat::kPlain: {
      STRATA_RETURN_IF_ERROR(CheckRoles(m, false, false));
      for (const auto& msg : m) {
        const std::string role = msg.role == "system" ? "System"
                                 : msg.role == "user" ? "User"
                                                      : "Assistant";
        b.Special(role + ": ").Text(msg.content).Special("\n\n");
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
        b.Special("<|im_start|>" + msg.role + "\n").Text(msg.content).Special("<|im_end|>\n");
      }
      if (add_generation_prompt) b.Special("<|im_start|>assistant\n");
      break;
    }
    case ChatFormat::kLlama3: {
      STRATA_RETURN_IF_ERROR(CheckRoles(m, false, false));
      size_t first = 0;
      if (style.llama3_knowledge_date) {
        // Llama 3.1+ always opens with a system header carrying the dates.
        std::string system;
        if (m[0].role == "system") {
          system = Trim(m[0].content);
          first = 1;
        }
        b.Special("<|start_header_id|>system<|end_header_id|>\n\n")
            .Text("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n")
            .Text(system)
            .Special("<|eot_id|>");
      }
      for (size_t i = first; i < m.size(); ++i) {
        b.Special("<|start_header_id|>" + m[i].role + "<|end_header_id|>\n\n")
            .Text(Trim(m[i].content))
            .Special("<|eot_id|>");
      }
      if (add_generation_prompt) b.Special("<|start_header_id|>assistant<|end_header_id|>\n\n");
      break;
    }
    case ChatFormat::kLlama2: {
      STRATA_RETURN_IF_ERROR(CheckRoles(m, true, true));
      size_t i = 0;
      std::string system;
      if (m[0].role == "system") {
        system = m[0].content;
        i = 1;
      }
      bool first_user = true;
      for (; i < m.size(); ++i) {
        if (m[i].role == "user") {
          if (!first_user) b.Special("<s>");
          b.Special("[INST] ");
          if (first_user && !system.empty()) {
            b.Special("<<SYS>>\n").Text(system).Special("\n<</SYS>>\n\n");
          }
          b.Text(Trim(m[i].content)).Special(" [/INST]");
          first_user = false;
        } else {
          b.Special(" ").Text(Trim(m[i].content)).Special(" " + style.eos_text);
        }
      }
      break;
    }
    case ChatFormat::kMistral: {
      STRATA_RETURN_IF_ERROR(CheckRoles(m, true, true));
      size_t i = 0;
      std::string system;
      if (m[0].role == "system") {
        system = m[0].content;
        i = 1;
      }
      size_t last_user = 0;
      for (size_t k = i; k < m.size(); ++k) {
        if (m[k].role == "user") last_user = k;
      }
      const std::string open = style.mistral_spaced ? "[INST] " : "[INST]";
      const std::string close = style.mistral_spaced ? " [/INST]" : "[/INST]";
      for (; i < m.size(); ++i) {
        if (m[i].role == "user") {
          b.Special(open);
          if (i == last_user && !system.empty()) b.Text(system).Special("\n\n");
          b.Text(m[i].content).Special(close);
        } else {
          b.Text(m[i].content).Special(style.eos_text);
        }
      }
      break;
    }
    case ChatFormat::kZephyr:
    case ChatFormat::kPhi3: {
      STRATA_RETURN_IF_ERROR(CheckRoles(m, false, false));
      const std::string end = style.format == ChatFormat::kPhi3 ? "<|end|>" : style.eos_text;
      for (const auto& msg : m) {
        if (style.format == ChatFormat::kPhi3 && msg.role == "system" && msg.content.empty())
          continue;
        b.Special("<|" + msg.role + "|>\n").Text(msg.content).Special(end + "\n");
      }
      if (add_generation_prompt) b.Special("<|assistant|>\n");
      break;
    }
    case ChatFormat::kGemma: {
      // Gemma has no system role: its text opens the first user turn.
      STRATA_RETURN_IF_ERROR(CheckRoles(m, true, true));
      size_t i = 0;
      std::string system;
      if (m[0].role == "system") {
        system = Trim(m[0].content);
        i = 1;
      }
      bool first = true;
      for (; i < m.size(); ++i) {
        const std::string role = m[i].role == "assistant" ? "model" : "user";
        b.Special("<start_of_turn>" + role + "\n");
        if (first && !system.empty()) b.Text(system + "\n\n");
        b.Text(Trim(m[i].content)).Special("<end_of_turn>\n");
        first = false;
      }
      if (add_generation_prompt) b.Special("<start_of_turn>model\n");
      break;
    }
    case ChatFormat::kDeepSeekR1: {
      STRATA_RETURN_IF_ERROR(CheckRoles(m, false, false));
      for (const auto& msg : m) {
        if (msg.role == "system") b.Text(msg.content);
      }
      for (const auto& msg : m) {
        if (msg.role == "user") {
          b.Special("<｜User｜>").Text(msg.content);
        } else if (msg.role == "assistant") {
          b.Special("<｜Assistant｜>").Text(msg.content).Special("<｜end▁of▁sentence｜>");
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
