// A stream's frames (opening, delta, finish, usage) and a whole response are
// written without a DOM where no logprobs go with them: byte for byte what
// the DOM (nlohmann, as the rest of the wire format writes JSON) gives, for
// any text.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api.h"

namespace strata::server {
namespace {

using Json = nlohmann::ordered_json;  // as the wire format keeps members: in the order set

// The frame as the DOM writes it (the wire format's own way).
std::string DomFrame(ApiKind kind, const ResponseMeta& m, const gateway::Event& e) {
  Json c = {{"id", m.id},
            {"object", kind == ApiKind::kOpenAIChat ? "chat.completion.chunk" : "text_completion"},
            {"created", m.created},
            {"model", m.model}};
  if (!m.fingerprint.empty()) c["system_fingerprint"] = m.fingerprint;
  Json choice = {{"index", e.index}, {"finish_reason", nullptr}};
  if (kind == ApiKind::kOpenAIChat) {
    choice["delta"] = {{"content", e.text}};
  } else {
    choice["text"] = e.text;
  }
  choice["logprobs"] = nullptr;
  c["choices"] = Json::array({choice});
  return "data: " + c.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

gateway::Event Delta(int32_t index, std::string text) {
  gateway::Event e;
  e.kind = gateway::Event::Kind::kDelta;
  e.index = index;
  e.text = std::move(text);
  return e;
}

TEST(StreamRender, ADeltaFrameIsWhatTheDomWrites) {
  const std::vector<std::string> texts = {"",
                                          "Hello",
                                          " world",
                                          "quote \" backslash \\ slash /",
                                          "\b\f\n\r\t",
                                          "\x01\x1f\x7f",
                                          "héllo 😀",
                                          "\xff\xfe broken",
                                          "ends mid \xe2\x82",
                                          std::string("nul\0x", 5)};
  for (ApiKind kind : {ApiKind::kOpenAIChat, ApiKind::kOpenAICompletion}) {
    for (const std::string& fingerprint : {std::string(), std::string("strata")}) {
      for (const std::string& text : texts) {
        const ResponseMeta m{.id = "chatcmpl-\"1\"",
                             .model = "demo\n",
                             .created = 1796226978,
                             .fingerprint = fingerprint};
        const gateway::Event e = Delta(3, text);
        EXPECT_EQ(RenderStreamDelta(kind, m, e, false), DomFrame(kind, m, e)) << text;
      }
    }
  }
}

TEST(StreamRender, ADeltaFrameOfRandomBytesIsWhatTheDomWrites) {
  std::mt19937 rng(7);
  for (int round = 0; round < 3000; ++round) {
    std::string text(rng() % 24, ' ');
    for (char& c : text) {
      // Mostly printable, some controls, some UTF-8 lead and continuation bytes.
      const uint32_t r = rng() % 10;
      c = static_cast<char>(r < 6   ? 0x20 + rng() % 0x60
                            : r < 8 ? rng() % 0x20
                                    : 0x80 + rng() % 0x80);
    }
    const ResponseMeta m{.id = "cmpl-" + std::to_string(round),
                         .model = round % 2 ? "m" : text,
                         .created = static_cast<int64_t>(rng()),
                         .fingerprint = round % 3 ? "" : "fp"};
    const ApiKind kind = round % 2 ? ApiKind::kOpenAIChat : ApiKind::kOpenAICompletion;
    const gateway::Event e = Delta(static_cast<int32_t>(rng() % 128), text);
    ASSERT_EQ(RenderStreamDelta(kind, m, e, false), DomFrame(kind, m, e));
  }
}

TEST(StreamRender, AnAppendedDeltaFrameIsTheRenderedOneAfterWhatWasThere) {
  ResponseMeta m;
  m.id = "chatcmpl-1";
  m.model = "demo";
  m.created = 1;
  gateway::Event call = Delta(0, "");
  call.tool_calls.push_back({.index = 0, .id = "call_1", .name = "f", .arguments = "{}"});
  for (const gateway::Event& e : {Delta(0, "plain"), Delta(1, "broken \xff"), call}) {
    for (bool logprobs : {false, true}) {
      std::string out = "data: earlier\n\n";
      AppendStreamDelta(out, ApiKind::kOpenAIChat, m, e, logprobs);
      EXPECT_EQ(out, "data: earlier\n\n" + RenderStreamDelta(ApiKind::kOpenAIChat, m, e, logprobs));
    }
  }
}

TEST(StreamRender, FramesWrittenWithTheStreamsStateAreTheRenderedOnes) {
  // A stream's state keeps the chunks' common opening after the first frame.
  for (const std::string& model : {std::string("demo"), std::string("bad \xff model")}) {
    ResponseMeta m;
    m.id = "chatcmpl-7";
    m.model = model;
    m.created = 1796226978;
    m.fingerprint = "fp";
    StreamState state;
    std::string out, expected;
    for (const gateway::Event& e :
         {Delta(0, "a"), Delta(1, "b\n"), Delta(0, "\xfe"), Delta(0, "")}) {
      AppendStreamDelta(out, ApiKind::kOpenAIChat, m, e, false, &state);
      expected += RenderStreamDelta(ApiKind::kOpenAIChat, m, e, false);
    }
    EXPECT_EQ(out, expected) << model;
  }
}

// The whole response as the DOM writes it.
std::string DomResponse(ApiKind kind, const ResponseMeta& m,
                        const std::vector<ChoiceResult>& choices) {
  int32_t completion = 0;
  for (const auto& c : choices) completion += c.completion_tokens;
  Json out_choices = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    Json choice = {
        {"index", i},
        {"finish_reason", c.finish == gateway::FinishReason::kLength ? "length" : "stop"}};
    if (c.finish == gateway::FinishReason::kStopString) choice["stop_reason"] = c.stop_sequence;
    if (kind == ApiKind::kOpenAIChat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = nullptr;
    out_choices.push_back(choice);
  }
  Json j = {{"id", m.id},
            {"object", kind == ApiKind::kOpenAIChat ? "chat.completion" : "text_completion"},
            {"created", m.created},
            {"model", m.model},
            {"choices", out_choices},
            {"usage",
             {{"prompt_tokens", m.prompt_tokens},
              {"completion_tokens", completion},
              {"total_tokens", m.prompt_tokens + completion},
              {"prompt_tokens_details", {{"cached_tokens", m.cached_tokens}}}}}};
  if (!m.fingerprint.empty()) j["system_fingerprint"] = m.fingerprint;
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

TEST(StreamRender, AWholeResponseIsWhatTheDomWrites) {
  std::mt19937 rng(13);
  const std::vector<std::string> words = {"",        "Hello",    "\"q\"\\", "\n\t\x01",
                                          "héllo 😀", "\xff bad", "###"};
  const gateway::FinishReason finishes[] = {gateway::FinishReason::kLength,
                                            gateway::FinishReason::kEndOfTurn,
                                            gateway::FinishReason::kStopString};
  for (int round = 0; round < 1500; ++round) {
    std::vector<ChoiceResult> choices(1 + rng() % 3);
    for (ChoiceResult& c : choices) {
      for (int k = 0; k < 3; ++k) c.text += words[rng() % words.size()];
      c.finish = finishes[rng() % 3];
      if (c.finish == gateway::FinishReason::kStopString)
        c.stop_sequence = words[rng() % words.size()];
      c.completion_tokens = static_cast<int32_t>(rng() % 100);
    }
    const ResponseMeta m{.id = "chatcmpl-" + std::to_string(round),
                         .model = round % 5 ? "demo" : words[rng() % words.size()],
                         .created = static_cast<int64_t>(rng()),
                         .prompt_tokens = static_cast<int32_t>(rng() % 1000),
                         .cached_tokens = static_cast<int32_t>(rng() % 10),
                         .fingerprint = round % 3 ? "" : "strata"};
    const ApiKind kind = round % 2 ? ApiKind::kOpenAIChat : ApiKind::kOpenAICompletion;
    ASSERT_EQ(RenderResponse(kind, m, choices, false), DomResponse(kind, m, choices));
  }
}

// A stream's other frames as the DOM writes them: the opening frames of a
// chat stream, a choice's finish, the closing usage frame.
Json DomChunk(ApiKind kind, const ResponseMeta& m) {
  Json c = {{"id", m.id},
            {"object", kind == ApiKind::kOpenAIChat ? "chat.completion.chunk" : "text_completion"},
            {"created", m.created},
            {"model", m.model}};
  if (!m.fingerprint.empty()) c["system_fingerprint"] = m.fingerprint;
  return c;
}

std::string DomSse(const Json& j) {
  return "data: " + j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n\n";
}

std::string DomStart(const ResponseMeta& m, int32_t n) {
  std::string out;
  for (int32_t i = 0; i < n; ++i) {
    Json c = DomChunk(ApiKind::kOpenAIChat, m);
    c["choices"] = Json::array({{{"index", i},
                                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}});
    out += DomSse(c);
  }
  return out;
}

std::string DomFinish(ApiKind kind, const ResponseMeta& m, const gateway::Event& e) {
  Json c = DomChunk(kind, m);
  const char* reason = e.finish == gateway::FinishReason::kLength      ? "length"
                       : e.finish == gateway::FinishReason::kToolCalls ? "tool_calls"
                                                                       : "stop";
  Json choice = {{"index", e.index}, {"finish_reason", reason}, {"logprobs", nullptr}};
  if (e.finish == gateway::FinishReason::kStopString) choice["stop_reason"] = e.stop_sequence;
  if (kind == ApiKind::kOpenAIChat) {
    choice["delta"] = Json::object();
  } else {
    choice["text"] = "";
  }
  c["choices"] = Json::array({choice});
  return DomSse(c);
}

std::string DomEnd(ApiKind kind, const ResponseMeta& m, int32_t completion) {
  Json c = DomChunk(kind, m);
  c["choices"] = Json::array();
  c["usage"] = {{"prompt_tokens", m.prompt_tokens},
                {"completion_tokens", completion},
                {"total_tokens", m.prompt_tokens + completion},
                {"prompt_tokens_details", {{"cached_tokens", m.cached_tokens}}}};
  return DomSse(c) + "data: [DONE]\n\n";
}

TEST(StreamRender, OpeningFinishAndUsageFramesAreWhatTheDomWrites) {
  std::mt19937 rng(29);
  const std::vector<std::string> words = {"",        "stop",     "\"q\"\\",      "\n\t\x01",
                                          "héllo 😀", "\xff bad", "ends \xe2\x82"};
  const gateway::FinishReason finishes[] = {
      gateway::FinishReason::kLength, gateway::FinishReason::kEndOfTurn,
      gateway::FinishReason::kStopString, gateway::FinishReason::kToolCalls};
  for (int round = 0; round < 2000; ++round) {
    const ResponseMeta m{.id = "chatcmpl-" + words[rng() % words.size()],
                         .model = round % 4 ? "demo" : words[rng() % words.size()],
                         .created = static_cast<int64_t>(rng()),
                         .prompt_tokens = static_cast<int32_t>(rng() % 1000),
                         .cached_tokens = static_cast<int32_t>(rng() % 10),
                         .fingerprint = round % 3 ? "" : words[rng() % words.size()]};
    const ApiKind kind = round % 2 ? ApiKind::kOpenAIChat : ApiKind::kOpenAICompletion;
    const int32_t n = 1 + static_cast<int32_t>(rng() % 3);
    ASSERT_EQ(RenderStreamStart(kind, m, n), kind == ApiKind::kOpenAIChat ? DomStart(m, n) : "");
    gateway::Event e;
    e.kind = gateway::Event::Kind::kFinish;
    e.index = static_cast<int32_t>(rng() % 8);
    e.finish = finishes[rng() % 4];
    if (e.finish == gateway::FinishReason::kStopString)
      e.stop_sequence = words[rng() % words.size()];
    ASSERT_EQ(RenderStreamFinish(kind, m, e), DomFinish(kind, m, e));
    const int32_t completion = static_cast<int32_t>(rng() % 500);
    ASSERT_EQ(RenderStreamEnd(kind, m, completion, true), DomEnd(kind, m, completion));
    ASSERT_EQ(RenderStreamEnd(kind, m, completion, false), "data: [DONE]\n\n");
  }
}

}  // namespace
}  // namespace strata::server
