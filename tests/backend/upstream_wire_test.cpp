// The upstream wire's request side (backend/upstream_wire.h): every field
// rendered for both APIs and left out when the client did not set it, every
// field an API cannot carry refused by name, what strata's own parser reads
// back from the bodies (a strata upstream), and upstream error answers.
#include "backend/upstream_wire.h"

#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "server/api.h"
#include "util/utf8.h"

namespace strata::backend::upstream {
namespace {

using Json = nlohmann::json;
using util::ErrorReason;
using util::StatusCode;

Request Chat() {
  Request r;
  r.messages = {{"system", "You are terse."}, {"user", "Hello"}};
  return r;
}

Json Body(const Call& call) { return Json::parse(call.body); }

Json Render(Api api, const Request& r, RenderOptions o = {.model = "m", .max_tokens = 64}) {
  auto call = RenderRequest(api, r, o);
  EXPECT_TRUE(call.ok()) << call.status().ToString();
  return call.ok() ? Body(*call) : Json();
}

void ExpectUnsupported(Api api, const Request& r, const std::string& field) {
  auto call = RenderRequest(api, r, {.model = "m", .max_tokens = 64});
  ASSERT_FALSE(call.ok()) << "field " << field << " was rendered: " << call->body;
  EXPECT_EQ(call.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(call.status().reason(), ErrorReason::kUnsupportedByBackend);
  EXPECT_EQ(call.status().field(), field);
  EXPECT_NE(call.status().message().find(std::string(ApiName(api))), std::string::npos)
      << call.status().message();
}

TEST(UpstreamApi, NamesRoundTrip) {
  EXPECT_EQ(ApiName(Api::kOpenAI), "openai");
  EXPECT_EQ(ApiName(Api::kAnthropic), "anthropic");
  EXPECT_EQ(ParseApi("openai"), Api::kOpenAI);
  EXPECT_EQ(ParseApi("anthropic"), Api::kAnthropic);
  EXPECT_EQ(ParseApi("OpenAI"), std::nullopt);
  EXPECT_EQ(ParseApi(""), std::nullopt);
}

// --- OpenAI ------------------------------------------------------------------

TEST(RenderOpenAI, ChatSendsMessagesAndAStreamWithUsage) {
  auto call = RenderRequest(Api::kOpenAI, Chat(), {.model = "llama"});
  ASSERT_TRUE(call.ok()) << call.status().ToString();
  EXPECT_EQ(call->path, "/v1/chat/completions");
  const Json want = {{"model", "llama"},
                     {"messages",
                      {{{"role", "system"}, {"content", "You are terse."}},
                       {{"role", "user"}, {"content", "Hello"}}}},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  EXPECT_EQ(Body(*call), want);
}

TEST(RenderOpenAI, AWholeAnswerIsAskedForWithoutStreamOptions) {
  const Json body = Render(Api::kOpenAI, Chat(), {.model = "m", .max_tokens = 64, .stream = false});
  EXPECT_EQ(body["stream"], false);
  EXPECT_FALSE(body.contains("stream_options"));
  EXPECT_EQ(body["max_tokens"], 64);
}

TEST(RenderOpenAI, FieldsTheClientDidNotSetAreLeftToTheUpstream) {
  Request r = Chat();
  r.sampling.temperature = 0.3f;  // values without the "set" bit are not sent
  r.sampling.top_k = 7;
  r.sampling.seed = 9;
  const Json body = Render(Api::kOpenAI, r, {.model = "m"});
  for (const char* field : {"temperature", "top_p", "top_k", "min_p", "presence_penalty",
                            "frequency_penalty", "repetition_penalty", "seed", "max_tokens", "n",
                            "stop", "logprobs", "top_logprobs", "ignore_eos"}) {
    EXPECT_FALSE(body.contains(field)) << field;
  }
}

TEST(RenderOpenAI, EverySetFieldIsSentWithItsValue) {
  Request r = Chat();
  r.sampling.temperature = 0.7f;
  r.sampling.top_p = 0.9f;
  r.sampling.top_k = 40;
  r.sampling.min_p = 0.05f;
  r.sampling.presence_penalty = 0.5f;
  r.sampling.frequency_penalty = -0.25f;
  r.sampling.repetition_penalty = 1.1f;
  r.sampling.seed = static_cast<uint64_t>(int64_t{-42});
  r.sampling_set = {.temperature = true,
                    .top_p = true,
                    .top_k = true,
                    .min_p = true,
                    .presence_penalty = true,
                    .frequency_penalty = true,
                    .repetition_penalty = true,
                    .seed = true};
  r.n = 3;
  r.stop = {"\n\n", "END"};
  r.top_logprobs = 2;
  r.ignore_eos = true;
  auto call = RenderRequest(Api::kOpenAI, r, {.model = "m", .max_tokens = 128});
  ASSERT_TRUE(call.ok());
  // Floats go out as the decimal the client wrote, not as float noise.
  EXPECT_NE(call->body.find("\"temperature\":0.7,"), std::string::npos) << call->body;
  const Json body = Body(*call);
  EXPECT_EQ(body["temperature"], 0.7);
  EXPECT_EQ(body["top_p"], 0.9);
  EXPECT_EQ(body["top_k"], 40);
  EXPECT_EQ(body["min_p"], 0.05);
  EXPECT_EQ(body["presence_penalty"], 0.5);
  EXPECT_EQ(body["frequency_penalty"], -0.25);
  EXPECT_EQ(body["repetition_penalty"], 1.1);
  EXPECT_EQ(body["seed"], -42);
  EXPECT_EQ(body["max_tokens"], 128);
  EXPECT_EQ(body["n"], 3);
  EXPECT_EQ(body["stop"], Json::array({"\n\n", "END"}));
  EXPECT_EQ(body["logprobs"], true);
  EXPECT_EQ(body["top_logprobs"], 2);
  EXPECT_EQ(body["ignore_eos"], true);
}

// Text that is not valid UTF-8 goes out with U+FFFD for each bad byte, and
// the body stays one JSON object, wherever that text sits (after a sibling,
// inside a message, a stop list or a tool call).
TEST(RenderOpenAI, InvalidUtf8IsReplacedAndTheBodyStaysJson) {
  const std::string bad =
      "a\xff\xfe"
      "b";
  const std::string fixed =
      "a\xef\xbf\xbd\xef\xbf\xbd"
      "b";
  Request r;
  r.messages = {{"user", "ok"}, {"assistant", bad}, {"tool", bad}};
  r.messages[1].tool_calls = {{.id = "c1", .name = "f", .arguments = bad}};
  r.messages[2].tool_call_id = bad;
  r.stop = {"fine", bad};
  r.grammar = bad;
  auto call = RenderRequest(Api::kOpenAI, r, {.model = bad, .max_tokens = 8});
  ASSERT_TRUE(call.ok()) << call.status().ToString();
  ASSERT_TRUE(util::IsValidUtf8(call->body));
  const Json body = Json::parse(call->body, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(body.is_discarded()) << call->body;
  EXPECT_EQ(body["model"], fixed);
  EXPECT_EQ(body["messages"][1]["content"], fixed);
  EXPECT_EQ(body["messages"][1]["tool_calls"][0]["function"]["arguments"], fixed);
  EXPECT_EQ(body["messages"][2]["tool_call_id"], fixed);
  EXPECT_EQ(body["stop"], Json::array({"fine", fixed}));
  EXPECT_EQ(body["grammar"], fixed);
}

TEST(RenderOpenAI, APromptGoesToTheCompletionsEndpoint) {
  Request r = Chat();  // the prompt wins over messages
  r.prompt = "Once upon a time";
  r.top_logprobs = 3;
  auto call = RenderRequest(Api::kOpenAI, r, {.model = "m", .max_tokens = 16});
  ASSERT_TRUE(call.ok());
  EXPECT_EQ(call->path, "/v1/completions");
  const Json body = Body(*call);
  EXPECT_EQ(body["prompt"], "Once upon a time");
  EXPECT_FALSE(body.contains("messages"));
  EXPECT_EQ(body["logprobs"], 3);
  EXPECT_FALSE(body.contains("top_logprobs"));
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
}

// A token-id prompt goes out as OpenAI's array of ids, and a strata
// upstream reads it back as the same ids; the Anthropic API has no such
// thing.
TEST(RenderOpenAI, ATokenIdPromptIsSentAsIds) {
  Request r;
  r.prompt_ids = {1, 450, 7};
  auto call = RenderRequest(Api::kOpenAI, r, {.model = "m", .max_tokens = 4});
  ASSERT_TRUE(call.ok()) << call.status().ToString();
  EXPECT_EQ(call->path, "/v1/completions");
  EXPECT_EQ(Body(*call)["prompt"], Json::array({1, 450, 7}));
  auto parsed = server::ParseRequest(server::ApiKind::kOpenAICompletion, call->body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->request.prompt_ids, r.prompt_ids);
  EXPECT_FALSE(parsed->request.prompt.has_value());
  ExpectUnsupported(Api::kAnthropic, r, "prompt");
}

// JSON mode: OpenAI's response_format goes up as it came; the Anthropic API
// has none.
TEST(RenderOpenAI, JsonModeIsSentAsResponseFormat) {
  Request r = Chat();
  r.response_format = ResponseFormat::kJsonObject;
  auto call = RenderRequest(Api::kOpenAI, r, {.model = "m", .max_tokens = 4});
  ASSERT_TRUE(call.ok()) << call.status().ToString();
  EXPECT_EQ(Body(*call)["response_format"], Json({{"type", "json_object"}}));
  auto parsed = server::ParseRequest(server::ApiKind::kOpenAIChat, call->body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->request.response_format, ResponseFormat::kJsonObject);
  EXPECT_FALSE(
      Body(*RenderRequest(Api::kOpenAI, Chat(), {.model = "m"})).contains("response_format"));
  // Anthropic: a forced call of a tool whose input is any object.
  const Json a = Render(Api::kAnthropic, r);
  EXPECT_EQ(a["tools"],
            Json::parse(R"([{"name":"json_answer","input_schema":{"type":"object"}}])"));
  EXPECT_EQ(a["tool_choice"], Json::parse(R"({"type":"tool","name":"json_answer",
      "disable_parallel_tool_use":true})"));
  Request both = r;
  both.tools = {{"f", "", ""}};
  ExpectUnsupported(Api::kAnthropic, both, "response_format");
}

// A json_schema goes up as it came, the schema's keys in the client's order
// (OpenAI writes properties in that order), and strata's grammar as
// llama-server's `grammar`; the Anthropic API takes neither.
TEST(RenderOpenAI, JsonSchemaAndGrammarAreSentAsTheyCame) {
  Request r = Chat();
  r.response_format = ResponseFormat::kJsonSchema;
  r.json_schema = {.name = "user",
                   .description = "a user",
                   .schema = R"({"type":"object","properties":{"zeta":{},"alpha":{}}})",
                   .strict = true};
  auto call = RenderRequest(Api::kOpenAI, r, {.model = "m", .max_tokens = 4});
  ASSERT_TRUE(call.ok()) << call.status().ToString();
  EXPECT_NE(call->body.find(R"("schema":{"type":"object","properties":{"zeta":{},"alpha":{}}})"),
            std::string::npos)
      << call->body;
  const Json rf = Body(*call)["response_format"];
  EXPECT_EQ(rf["type"], "json_schema");
  EXPECT_EQ(rf["json_schema"]["name"], "user");
  EXPECT_EQ(rf["json_schema"]["description"], "a user");
  EXPECT_EQ(rf["json_schema"]["strict"], true);
  auto parsed = server::ParseRequest(server::ApiKind::kOpenAIChat, call->body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->request.response_format, ResponseFormat::kJsonSchema);
  EXPECT_EQ(parsed->request.json_schema.schema, r.json_schema.schema);
  EXPECT_TRUE(parsed->request.json_schema.strict);
  // Anthropic: a forced call of a tool named as the schema, with it as input.
  const Json a = Render(Api::kAnthropic, r);
  EXPECT_EQ(a["tools"], Json::parse(R"([{"name":"user","input_schema":{"type":"object",
      "properties":{"zeta":{},"alpha":{}}},"description":"a user"}])"));
  EXPECT_EQ(a["tool_choice"],
            Json::parse(R"({"type":"tool","name":"user","disable_parallel_tool_use":true})"));
  Request array = r;
  array.json_schema.schema = R"({"type":"array"})";
  ExpectUnsupported(Api::kAnthropic, array, "response_format.json_schema.schema");
  // A prompt holding the placeholder's text does not confuse the splice.
  Request tricky = r;
  tricky.messages[0].content = "\x01strata:json_schema.schema\x01";
  auto call2 = RenderRequest(Api::kOpenAI, tricky, {.model = "m", .max_tokens = 4});
  ASSERT_TRUE(call2.ok());
  EXPECT_EQ(Body(*call2)["response_format"]["json_schema"]["schema"]["type"], "object");
  EXPECT_EQ(Body(*call2)["messages"][0]["content"], tricky.messages[0].content);

  Request g = Chat();
  g.grammar = "root ::= \"yes\" | \"no\"";
  EXPECT_EQ(Body(*RenderRequest(Api::kOpenAI, g, {.model = "m"}))["grammar"], g.grammar);
  ExpectUnsupported(Api::kAnthropic, g, "grammar");
}

TEST(RenderOpenAI, TopLogprobsZeroAsksForTheChosenTokenOnly) {
  Request r = Chat();
  r.top_logprobs = 0;
  const Json body = Render(Api::kOpenAI, r);
  EXPECT_EQ(body["logprobs"], true);
  EXPECT_EQ(body["top_logprobs"], 0);
}

TEST(RenderOpenAI, AnEmptyModelIdIsOmitted) {
  EXPECT_FALSE(Render(Api::kOpenAI, Chat(), {}).contains("model"));
}

TEST(RenderOpenAI, CacheBreakpointsAreIgnoredBecauseItsCachingIsAutomatic) {
  Request with = Chat();
  with.cache_breakpoints = {0, 1};
  EXPECT_EQ(Render(Api::kOpenAI, with), Render(Api::kOpenAI, Chat()));
}

TEST(RenderOpenAI, StrataSamplersAreRefusedByName) {
  Request r = Chat();
  r.sampling_set.strata_sampler = true;
  r.sampling.mirostat = true;
  ExpectUnsupported(Api::kOpenAI, r, "mirostat");
  r.sampling.mirostat = false;
  r.sampling.target_entropy = 2.0f;
  ExpectUnsupported(Api::kOpenAI, r, "target_entropy");
  r.sampling.target_entropy = -1.0f;
  r.sampling.typical_p = 0.5f;
  ExpectUnsupported(Api::kOpenAI, r, "typical_p");
}

TEST(RenderOpenAI, AChatWithoutMessagesIsInvalid) {
  Request r;
  auto call = RenderRequest(Api::kOpenAI, r, {});
  ASSERT_FALSE(call.ok());
  EXPECT_EQ(call.status().field(), "messages");
}

// A strata upstream reads the body back into the same request.
TEST(RenderOpenAI, StrataParsesTheChatBodyIntoTheSameFields) {
  Request r = Chat();
  r.sampling.temperature = 0.25f;
  r.sampling.top_k = 5;
  r.sampling.min_p = 0.1f;
  r.sampling.repetition_penalty = 1.2f;
  r.sampling.seed = 1234;
  r.sampling.logit_bias = {{7, -100.0f}, {300, 2.5f}};
  r.sampling_set = {.temperature = true,
                    .top_k = true,
                    .min_p = true,
                    .repetition_penalty = true,
                    .seed = true,
                    .logit_bias = true};
  r.n = 2;
  r.stop = {"END"};
  r.top_logprobs = 4;
  r.ignore_eos = true;
  auto call = RenderRequest(Api::kOpenAI, r, {.model = "m", .max_tokens = 99});
  ASSERT_TRUE(call.ok());
  auto parsed = server::ParseRequest(server::ApiKind::kOpenAIChat, call->body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const gateway::CompletionRequest& got = parsed->request;
  EXPECT_TRUE(parsed->stream);
  EXPECT_TRUE(parsed->include_usage);
  EXPECT_EQ(parsed->model, "m");
  ASSERT_EQ(got.messages.size(), 2u);
  EXPECT_EQ(got.messages[0].role, "system");
  EXPECT_EQ(got.messages[1].content, "Hello");
  EXPECT_EQ(got.max_tokens, 99);
  EXPECT_EQ(got.sampling.temperature, 0.25f);
  EXPECT_EQ(got.sampling.top_k, 5);
  EXPECT_EQ(got.sampling.min_p, 0.1f);
  EXPECT_EQ(got.sampling.repetition_penalty, 1.2f);
  EXPECT_EQ(got.sampling.seed, 1234u);
  EXPECT_TRUE(got.fixed_seed);
  EXPECT_EQ(got.sampling.logit_bias, r.sampling.logit_bias);
  EXPECT_TRUE(got.sampling_set.logit_bias);
  EXPECT_EQ(got.n, 2);
  EXPECT_EQ(got.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(got.top_logprobs, 4);
  EXPECT_TRUE(got.ignore_eos);
}

TEST(RenderOpenAI, StrataParsesTheCompletionsBody) {
  Request r;
  r.prompt = "abc";
  r.top_logprobs = 2;
  r.sampling.seed = static_cast<uint64_t>(int64_t{-7});
  r.sampling_set.seed = true;
  auto call = RenderRequest(Api::kOpenAI, r, {.model = "m", .max_tokens = 3});
  ASSERT_TRUE(call.ok());
  auto parsed = server::ParseRequest(server::ApiKind::kOpenAICompletion, call->body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->request.prompt, "abc");
  EXPECT_EQ(parsed->request.top_logprobs, 2);
  EXPECT_EQ(parsed->request.sampling.seed, static_cast<uint64_t>(int64_t{-7}));
}

// --- Anthropic ---------------------------------------------------------------

TEST(RenderAnthropic, SendsSystemBlocksTextContentBlocksAndTheRequiredFields) {
  Request r = Chat();
  r.messages.insert(r.messages.begin() + 1, {"system", "Answer in French."});
  r.messages.push_back({"assistant", "Bonjour"});
  r.messages.push_back({"user", "Encore"});
  r.stop = {"STOP"};
  r.sampling.temperature = 0.5f;
  r.sampling.top_p = 0.8f;
  r.sampling.top_k = 3;
  r.sampling_set = {.temperature = true, .top_p = true, .top_k = true};
  auto call = RenderRequest(Api::kAnthropic, r, {.model = "claude", .max_tokens = 256});
  ASSERT_TRUE(call.ok()) << call.status().ToString();
  EXPECT_EQ(call->path, "/v1/messages");
  const Json want = {
      {"model", "claude"},
      {"max_tokens", 256},
      {"system",
       {{{"type", "text"}, {"text", "You are terse."}},
        {{"type", "text"}, {"text", "Answer in French."}}}},
      {"messages",
       {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Hello"}}}}},
        {{"role", "assistant"}, {"content", {{{"type", "text"}, {"text", "Bonjour"}}}}},
        {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Encore"}}}}}}},
      {"stop_sequences", {"STOP"}},
      {"temperature", 0.5},
      {"top_p", 0.8},
      {"top_k", 3},
      {"stream", true}};
  EXPECT_EQ(Body(*call), want);
}

TEST(RenderAnthropic, FieldsTheClientDidNotSetAreLeftToTheUpstream) {
  Request r;
  r.messages = {{"user", "Hi"}};
  const Json body = Render(Api::kAnthropic, r);
  for (const char* field :
       {"system", "temperature", "top_p", "top_k", "stop_sequences", "stream_options"}) {
    EXPECT_FALSE(body.contains(field)) << field;
  }
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["max_tokens"], 64);
}

TEST(RenderAnthropic, AWholeAnswerIsAskedForWithStreamFalse) {
  const Json body =
      Render(Api::kAnthropic, Chat(), {.model = "m", .max_tokens = 64, .stream = false});
  EXPECT_EQ(body["stream"], false);
  EXPECT_EQ(body["max_tokens"], 64);
}

TEST(RenderAnthropic, EveryFieldItsApiCannotCarryIsRefusedByName) {
  auto with = [](auto change) {
    Request r = Chat();
    change(r);
    return r;
  };
  ExpectUnsupported(Api::kAnthropic, with([](Request& r) { r.prompt = "p"; }), "prompt");
  ExpectUnsupported(Api::kAnthropic, with([](Request& r) { r.n = 2; }), "n");
  ExpectUnsupported(Api::kAnthropic,
                    with([](Request& r) { r.sampling_set.presence_penalty = true; }),
                    "presence_penalty");
  ExpectUnsupported(Api::kAnthropic,
                    with([](Request& r) { r.sampling_set.frequency_penalty = true; }),
                    "frequency_penalty");
  ExpectUnsupported(Api::kAnthropic,
                    with([](Request& r) { r.sampling_set.repetition_penalty = true; }),
                    "repetition_penalty");
  ExpectUnsupported(Api::kAnthropic, with([](Request& r) { r.sampling_set.seed = true; }), "seed");
  ExpectUnsupported(Api::kAnthropic, with([](Request& r) {
                      r.sampling.logit_bias = {{5, -100.0f}};
                      r.sampling_set.logit_bias = true;
                    }),
                    "logit_bias");
  ExpectUnsupported(Api::kAnthropic, with([](Request& r) { r.sampling_set.min_p = true; }),
                    "min_p");
  ExpectUnsupported(Api::kAnthropic, with([](Request& r) { r.top_logprobs = 0; }), "logprobs");
  ExpectUnsupported(Api::kAnthropic, with([](Request& r) {
                      r.sampling_set.strata_sampler = true;
                      r.sampling.target_entropy = 1.0f;
                    }),
                    "target_entropy");
  ExpectUnsupported(Api::kAnthropic, with([](Request& r) { r.ignore_eos = true; }), "ignore_eos");
  ExpectUnsupported(Api::kAnthropic, with([](Request& r) {
                      r.sampling.temperature = 1.5f;
                      r.sampling_set.temperature = true;
                    }),
                    "temperature");
  ExpectUnsupported(Api::kAnthropic, with([](Request& r) {
                      r.messages.push_back({"system", "x"});
                    }),
                    "messages[2]");
  ExpectUnsupported(Api::kAnthropic, with([](Request& r) {
                      r.messages.push_back({"critic", "x"});
                    }),
                    "messages[2].role");
  ExpectUnsupported(Api::kAnthropic, with([](Request& r) { r.messages.pop_back(); }), "messages");
}

TEST(RenderAnthropic, TemperatureOneIsInRange) {
  Request r = Chat();
  r.sampling.temperature = 1.0f;
  r.sampling_set.temperature = true;
  EXPECT_EQ(Render(Api::kAnthropic, r)["temperature"], 1.0);
}

TEST(RenderAnthropic, MaxTokensAndTheModelAreRequired) {
  auto no_max = RenderRequest(Api::kAnthropic, Chat(), {.model = "m", .max_tokens = 0});
  ASSERT_FALSE(no_max.ok());
  EXPECT_EQ(no_max.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(no_max.status().field(), "max_tokens");
  auto no_model = RenderRequest(Api::kAnthropic, Chat(), {.max_tokens = 5});
  ASSERT_FALSE(no_model.ok());
  EXPECT_EQ(no_model.status().code(), StatusCode::kInvalidArgument);
}

TEST(RenderAnthropic, CacheBreakpointsMarkTheirMessagesLastBlock) {
  Request r = Chat();
  r.messages.push_back({"assistant", "Hi"});
  r.messages.push_back({"user", "More"});
  r.cache_breakpoints = {0, 2};
  const Json body = Render(Api::kAnthropic, r);
  const Json ephemeral = {{"type", "ephemeral"}};
  EXPECT_EQ(body["system"][0]["cache_control"], ephemeral);
  EXPECT_FALSE(body["messages"][0]["content"][0].contains("cache_control"));
  EXPECT_EQ(body["messages"][1]["content"][0]["cache_control"], ephemeral);
  EXPECT_FALSE(body["messages"][2]["content"][0].contains("cache_control"));
}

TEST(RenderAnthropic, CacheSystemPromptMarksTheLastSystemBlockOnlyWithoutBreakpoints) {
  Request r = Chat();
  r.messages.insert(r.messages.begin() + 1, {"system", "Second."});
  const Json ephemeral = {{"type", "ephemeral"}};
  RenderOptions o{.model = "m", .max_tokens = 8, .cache_system_prompt = true};
  Json body = Render(Api::kAnthropic, r, o);
  EXPECT_FALSE(body["system"][0].contains("cache_control"));
  EXPECT_EQ(body["system"][1]["cache_control"], ephemeral);
  EXPECT_FALSE(Render(Api::kAnthropic, r).at("system")[1].contains("cache_control"));
  r.cache_breakpoints = {2};  // the client chose: its breakpoint only
  body = Render(Api::kAnthropic, r, o);
  EXPECT_FALSE(body["system"][1].contains("cache_control"));
  EXPECT_EQ(body["messages"][0]["content"][0]["cache_control"], ephemeral);
}

TEST(RenderAnthropic, MoreThanFourBreakpointsOrOneOutOfRangeIsRefused) {
  Request r;
  for (int i = 0; i < 5; ++i) r.messages.push_back({i % 2 ? "assistant" : "user", "t"});
  r.cache_breakpoints = {0, 1, 2, 3, 4};
  ExpectUnsupported(Api::kAnthropic, r, "cache_control");
  r.cache_breakpoints = {0, 1, 2, 3, 3};
  EXPECT_TRUE(RenderRequest(Api::kAnthropic, r, {.model = "m", .max_tokens = 1}).ok());
  r.cache_breakpoints = {5};
  auto call = RenderRequest(Api::kAnthropic, r, {.model = "m", .max_tokens = 1});
  ASSERT_FALSE(call.ok());
  EXPECT_EQ(call.status().field(), "cache_control");
}

TEST(RenderAnthropic, AnEmptySystemMessageSendsNoBlock) {
  Request r = Chat();
  r.messages[0].content = "";
  r.cache_breakpoints = {0};
  const Json body = Render(Api::kAnthropic, r);
  EXPECT_FALSE(body.contains("system"));
  EXPECT_FALSE(body["messages"][0]["content"][0].contains("cache_control"));
}

TEST(RenderAnthropic, StrataParsesTheBodyIntoTheSameFields) {
  Request r = Chat();
  r.messages.push_back({"assistant", "Hi"});
  r.messages.push_back({"user", "Bye"});
  r.cache_breakpoints = {1};
  r.stop = {"X"};
  r.sampling.temperature = 0.5f;
  r.sampling.top_k = 9;
  r.sampling_set = {.temperature = true, .top_k = true};
  auto call = RenderRequest(Api::kAnthropic, r, {.model = "c", .max_tokens = 77});
  ASSERT_TRUE(call.ok());
  auto parsed = server::ParseRequest(server::ApiKind::kAnthropicMessages, call->body);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  const gateway::CompletionRequest& got = parsed->request;
  ASSERT_EQ(got.messages.size(), 4u);
  EXPECT_EQ(got.messages[0].role, "system");
  EXPECT_EQ(got.messages[0].content, "You are terse.");
  EXPECT_EQ(got.messages[3].content, "Bye");
  EXPECT_EQ(got.max_tokens, 77);
  EXPECT_EQ(got.stop, std::vector<std::string>{"X"});
  EXPECT_EQ(got.sampling.temperature, 0.5f);
  EXPECT_EQ(got.sampling.top_k, 9);
  EXPECT_TRUE(parsed->stream);
}

// --- UpstreamError -------------------------------------------------------------

TEST(UpstreamError, MapsEachHttpStatusToItsCodeAndReason) {
  struct Row {
    int http;
    StatusCode code;
    ErrorReason reason;
  };
  const Row rows[] = {
      {400, StatusCode::kInvalidArgument, ErrorReason::kUpstreamRejected},
      {404, StatusCode::kInvalidArgument, ErrorReason::kUpstreamRejected},
      {413, StatusCode::kInvalidArgument, ErrorReason::kUpstreamRejected},
      {422, StatusCode::kInvalidArgument, ErrorReason::kUpstreamRejected},
      {401, StatusCode::kPermissionDenied, ErrorReason::kUpstreamError},
      {403, StatusCode::kPermissionDenied, ErrorReason::kUpstreamError},
      {408, StatusCode::kDeadlineExceeded, ErrorReason::kUpstreamTimeout},
      {504, StatusCode::kDeadlineExceeded, ErrorReason::kUpstreamTimeout},
      {429, StatusCode::kResourceExhausted, ErrorReason::kUpstreamRateLimited},
      {503, StatusCode::kUnavailable, ErrorReason::kUpstreamOverloaded},
      {529, StatusCode::kUnavailable, ErrorReason::kUpstreamOverloaded},
      {500, StatusCode::kUnavailable, ErrorReason::kUpstreamError},
      {502, StatusCode::kUnavailable, ErrorReason::kUpstreamError},
      {409, StatusCode::kUnknown, ErrorReason::kUpstreamError},
      {302, StatusCode::kUnknown, ErrorReason::kUpstreamError},
      {0, StatusCode::kUnknown, ErrorReason::kUpstreamError},
  };
  for (const Row& row : rows) {
    for (Api api : {Api::kOpenAI, Api::kAnthropic}) {
      const util::Status s = UpstreamError(api, row.http, "");
      EXPECT_EQ(s.code(), row.code) << row.http;
      EXPECT_EQ(s.reason(), row.reason) << row.http;
      EXPECT_NE(s.message().find("HTTP " + std::to_string(row.http)), std::string::npos)
          << s.message();
    }
  }
}

TEST(UpstreamError, QuotesTheUpstreamsOwnMessageInEitherApisShape) {
  const util::Status openai = UpstreamError(
      Api::kOpenAI, 400,
      R"({"error":{"message":"max_tokens is too large","type":"invalid_request_error",)"
      R"("param":"max_tokens","code":null}})");
  EXPECT_EQ(openai.message(),
            "the openai upstream answered HTTP 400 invalid_request_error: max_tokens is too large");
  // The field the upstream refused reaches the client's error as its param.
  EXPECT_EQ(openai.field(), "max_tokens");
  EXPECT_EQ(openai.reason(), ErrorReason::kUpstreamRejected);
  EXPECT_EQ(UpstreamError(Api::kOpenAI, 500, R"({"error":{"message":"x","param":"n"}})").field(),
            "");
  const util::Status anthropic = UpstreamError(
      Api::kAnthropic, 529,
      R"({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}})");
  EXPECT_EQ(anthropic.message(),
            "the anthropic upstream answered HTTP 529 overloaded_error: Overloaded");
  EXPECT_EQ(anthropic.reason(), ErrorReason::kUpstreamOverloaded);
  // vLLM's flat error shape.
  const util::Status vllm = UpstreamError(
      Api::kOpenAI, 400,
      R"({"object":"error","message":"model 'x' does not exist","type":"NotFoundError","code":404})");
  EXPECT_NE(vllm.message().find("model 'x' does not exist"), std::string::npos) << vllm.message();
  // A bare error string (some proxies).
  EXPECT_NE(UpstreamError(Api::kOpenAI, 500, R"({"error":"boom"})").message().find(": boom"),
            std::string::npos);
}

TEST(UpstreamError, APromptThatDoesNotFitTheContextKeepsItsReasonInEitherApi) {
  const std::string_view bodies[][2] = {
      // OpenAI's (and strata's) code.
      {"openai", R"({"error":{"message":"too long","type":"invalid_request_error",)"
                 R"("param":"messages","code":"context_length_exceeded"}})"},
      // The Anthropic API's wording; strata's in its Anthropic shape.
      {"anthropic", R"({"type":"error","error":{"type":"invalid_request_error",)"
                    R"("message":"prompt is too long: 204533 tokens > 200000 maximum"}})"},
      {"anthropic", R"({"type":"error","error":{"type":"invalid_request_error",)"
                    R"("message":"context length exceeded: the prompt has 9 tokens"}})"},
      // vLLM's flat shape.
      {"openai", R"({"object":"error","message":"This model's maximum context length is 2048 )"
                 R"(tokens. However, you requested 4000 tokens","type":"BadRequestError",)"
                 R"("code":400})"},
  };
  for (const auto& [api_name, body] : bodies) {
    const Api api = *ParseApi(api_name);
    const util::Status s = UpstreamError(api, 400, body);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(s.reason(), ErrorReason::kContextLengthExceeded) << body;
    EXPECT_NE(s.message().find("HTTP 400"), std::string::npos) << s.message();
  }
  // Only a rejection: the same words in a 500 are the upstream's failure.
  EXPECT_EQ(UpstreamError(Api::kOpenAI, 500, bodies[0][1]).reason(), ErrorReason::kUpstreamError);
  // Another rejection stays one.
  EXPECT_EQ(UpstreamError(Api::kAnthropic, 400,
                          R"({"type":"error","error":{"type":"invalid_request_error",)"
                          R"("message":"max_tokens: field required"}})")
                .reason(),
            ErrorReason::kUpstreamRejected);
}

TEST(UpstreamError, ABodyThatIsNotErrorJsonIsNotQuoted) {
  const util::Status s = UpstreamError(Api::kOpenAI, 502, "<html>Bad Gateway</html>");
  EXPECT_EQ(s.message(),
            "the openai upstream answered HTTP 502 (a body of 24 bytes that is not its API's "
            "error JSON)");
}

TEST(UpstreamError, ARefusedCredentialIsNamedButItsMessageNeverQuoted) {
  const util::Status s = UpstreamError(
      Api::kOpenAI, 401,
      R"({"error":{"message":"Incorrect API key provided: sk-abc***xyz","type":"invalid_request_error"}})");
  EXPECT_EQ(s.reason(), ErrorReason::kUpstreamError);
  EXPECT_NE(s.message().find("refused strata's credential"), std::string::npos);
  EXPECT_EQ(s.message().find("sk-"), std::string::npos) << s.message();
}

TEST(UpstreamError, TheQuoteIsBoundedValidUtf8OnOneLine) {
  std::string long_message;
  for (int i = 0; i < 400; ++i) long_message += "é";  // 2 bytes each
  long_message += "\r\nX-Injected: 1";
  const Json body = {{"error", {{"message", "a\nb" + long_message}}}};
  const util::Status s = UpstreamError(Api::kOpenAI, 500, body.dump());
  EXPECT_LT(s.message().size(), 400u);
  EXPECT_TRUE(util::IsValidUtf8(s.message()));
  EXPECT_EQ(s.message().find('\n'), std::string::npos);
  EXPECT_NE(s.message().find("a b"), std::string::npos);
  EXPECT_EQ(s.message().substr(s.message().size() - 3), "...");
}

TEST(UpstreamError, ArbitraryBytesNeverFail) {
  for (std::string_view body : {std::string_view("\xff\xfe{"), std::string_view("[[[[[[[["),
                                std::string_view("{\"error\":{\"message\":5}}"),
                                std::string_view("null"), std::string_view("")}) {
    const util::Status s = UpstreamError(Api::kAnthropic, 500, body);
    EXPECT_EQ(s.reason(), ErrorReason::kUpstreamError);
    EXPECT_TRUE(util::IsValidUtf8(s.message()));
  }
}

// --- tools ---------------------------------------------------------------------

Request ToolChat() {
  Request r = Chat();
  r.tools = {{"get_weather", "The weather",
              R"({"type":"object","properties":{"city":{"type":"string"}}})"},
             {"now", "", ""}};
  r.tool_choice = {ToolChoice::Mode::kNamed, "get_weather"};
  r.parallel_tool_calls = false;
  ChatMessage call{"assistant", ""};
  call.tool_calls = {{"call_1", "get_weather", R"({"city":"Oslo"})"}, {"call_2", "now", "{}"}};
  r.messages.push_back(call);
  ChatMessage a{"tool", "3 C"}, b{"tool", "boom"};
  a.tool_call_id = "call_1";
  b.tool_call_id = "call_2";
  b.is_error = true;
  r.messages.push_back(a);
  r.messages.push_back(b);
  r.messages.push_back({"user", "And tomorrow?"});
  return r;
}

TEST(RenderOpenAI, ToolsCallsAndResultsAreSent) {
  const Json body = Render(Api::kOpenAI, ToolChat());
  EXPECT_EQ(body["tools"][0],
            Json::parse(R"({"type":"function","function":{"name":"get_weather","description":
                "The weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}})"));
  EXPECT_EQ(body["tools"][1], Json::parse(R"({"type":"function","function":{"name":"now"}})"));
  EXPECT_EQ(body["tool_choice"],
            Json::parse(R"({"type":"function","function":{"name":"get_weather"}})"));
  EXPECT_EQ(body["parallel_tool_calls"], false);
  const Json& m = body["messages"];
  ASSERT_EQ(m.size(), 6u);
  EXPECT_TRUE(m[2]["content"].is_null());
  EXPECT_EQ(m[2]["tool_calls"][0],
            Json::parse(R"({"id":"call_1","type":"function","function":{"name":"get_weather",
                "arguments":"{\"city\":\"Oslo\"}"}})"));
  EXPECT_EQ(m[3], Json::parse(R"({"role":"tool","tool_call_id":"call_1","content":"3 C"})"));
  EXPECT_EQ(m[4]["content"], "Error: boom");
}

TEST(RenderAnthropic, ToolsBecomeToolUseAndToolResultBlocks) {
  const Json body = Render(Api::kAnthropic, ToolChat());
  EXPECT_EQ(body["tools"][0], Json::parse(R"({"name":"get_weather","description":"The weather",
      "input_schema":{"type":"object","properties":{"city":{"type":"string"}}}})"));
  // A tool without parameters still has the schema the API requires.
  EXPECT_EQ(body["tools"][1],
            Json::parse(R"({"name":"now","input_schema":{"type":"object","properties":{}}})"));
  EXPECT_EQ(
      body["tool_choice"],
      Json::parse(R"({"type":"tool","name":"get_weather","disable_parallel_tool_use":true})"));
  const Json& m = body["messages"];
  ASSERT_EQ(m.size(), 3u) << m.dump();
  EXPECT_EQ(m[1], Json::parse(R"({"role":"assistant","content":[
      {"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Oslo"}},
      {"type":"tool_use","id":"call_2","name":"now","input":{}}]})"));
  // Both results and the user's next words share one user turn, results first.
  EXPECT_EQ(m[2], Json::parse(R"({"role":"user","content":[
      {"type":"tool_result","tool_use_id":"call_1","content":"3 C"},
      {"type":"tool_result","tool_use_id":"call_2","content":"boom","is_error":true},
      {"type":"text","text":"And tomorrow?"}]})"));
}

// What strata's own parsers read back from either body is the request sent
// (a front strata in front of another strata, over either API).
TEST(RenderTools, StrataParsesEitherBodyIntoTheSameTools) {
  const Request r = ToolChat();
  for (Api api : {Api::kOpenAI, Api::kAnthropic}) {
    auto call = RenderRequest(api, r, {.model = "m", .max_tokens = 9});
    ASSERT_TRUE(call.ok());
    auto parsed = server::ParseRequest(
        api == Api::kOpenAI ? server::ApiKind::kOpenAIChat : server::ApiKind::kAnthropicMessages,
        call->body);
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    const Request& got = parsed->request;
    ASSERT_EQ(got.tools.size(), 2u);
    EXPECT_EQ(got.tools[0].name, "get_weather");
    EXPECT_EQ(got.tools[0].parameters, r.tools[0].parameters);
    EXPECT_EQ(got.tool_choice.mode, ToolChoice::Mode::kNamed);
    EXPECT_EQ(got.tool_choice.name, "get_weather");
    EXPECT_FALSE(got.parallel_tool_calls);
    ASSERT_EQ(got.messages.size(), 6u) << ApiName(api);
    ASSERT_EQ(got.messages[2].tool_calls.size(), 2u);
    EXPECT_EQ(got.messages[2].tool_calls[0].id, "call_1");
    EXPECT_EQ(got.messages[2].tool_calls[0].arguments, R"({"city":"Oslo"})");
    EXPECT_EQ(got.messages[3].role, "tool");
    EXPECT_EQ(got.messages[3].tool_call_id, "call_1");
    EXPECT_EQ(got.messages[4].tool_call_id, "call_2");
    if (api == Api::kAnthropic) {
      EXPECT_TRUE(got.messages[4].is_error);
      EXPECT_EQ(got.messages[4].content, "boom");
    } else {
      EXPECT_EQ(got.messages[4].content, "Error: boom");
    }
    EXPECT_EQ(got.messages[5].content, "And tomorrow?");
  }
}

}  // namespace
}  // namespace strata::backend::upstream
