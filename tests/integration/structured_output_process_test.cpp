// Structured output through `strata serve` as a process: response_format
// json_schema and strata's `grammar` field on a random-weight model (written
// by `strata mkmodel`), whose free text is gibberish, so whatever shape an
// answer has the constraint gave it; bad schemas and grammars are 400s that
// name what is wrong. The binary is $STRATA_BIN (ctest sets it).
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "testing/raw_http.h"
#include "testing/strata_process.h"

namespace strata {
namespace {

using Json = nlohmann::ordered_json;
using testing::RawClient;
using testing::RawResponse;
using testing::ReadAll;
using testing::Spawn;

std::string Request(const std::string& path, const std::string& body,
                    const std::string& extra_headers = "") {
  return testing::HttpRequest("POST", path, body, extra_headers);
}

Json Parse(const std::string& text) {
  return Json::parse(text, nullptr, /*allow_exceptions=*/false);
}

class StructuredOutputProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    demo_ = new testing::DemoModelDir("strata_structured",
                                      "n_embd=64,n_layers=2,n_heads=4,n_ff=128,n_ctx=2048");
    ASSERT_FALSE(demo_->model.empty()) << demo_->MkmodelLog();
  }
  static void TearDownTestSuite() { delete demo_; }
  void SetUp() override {
    static int n = 0;  // one log per server: a finished one's "ready" must not be read
    log_ = (demo_->dir / ("serve_" + std::to_string(++n) + ".log")).string();
    pid_ = Spawn({"serve", "-m", demo_->model, "--port", "0", "--ctx", "1024", "-t", "1",
                  "--l1-bytes", "0", "--alias", "demo", "--log-level", "info"},
                 log_);
    port_ = testing::WaitReady(pid_, log_);
    ASSERT_GT(port_, 0) << ReadAll(log_);
  }
  void TearDown() override {
    if (pid_ > 0) testing::Kill(pid_);
  }

  std::optional<RawResponse> Post(const std::string& path, const Json& body) {
    RawClient c(port_);
    if (!c.connected() || !c.Send(Request(path, body.dump()))) return std::nullopt;
    return c.ReadResponse(std::chrono::seconds(120));
  }

  static testing::DemoModelDir* demo_;
  pid_t pid_ = -1;
  int port_ = -1;
  std::string log_;
};
testing::DemoModelDir* StructuredOutputProcessTest::demo_ = nullptr;

Json Chat(Json extra) {
  Json body = {{"model", "demo"},
               {"messages", {{{"role", "user"}, {"content", "Describe a user."}}}},
               {"max_tokens", 160},
               {"temperature", 1.0}};
  for (auto& [k, v] : extra.items()) body[k] = v;
  return body;
}

TEST_F(StructuredOutputProcessTest, JsonSchemaAnswersValidateAgainstTheSchema) {
  const Json schema = Json::parse(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 8},
      "age": {"type": "integer"},
      "role": {"enum": ["admin", "user"]},
      "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,4}$"},
               "maxItems": 2}
    },
    "required": ["name", "age", "role"],
    "additionalProperties": false})");
  int ended = 0;
  for (int seed = 0; seed < 8; ++seed) {
    auto r =
        Post("/v1/chat/completions",
             Chat({{"seed", seed},
                   {"response_format",
                    {{"type", "json_schema"},
                     {"json_schema", {{"name", "user"}, {"strict", true}, {"schema", schema}}}}}}));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const Json j = Parse(r->body);
    const std::string text = j["choices"][0]["message"]["content"];
    if (j["choices"][0]["finish_reason"] != "stop") continue;  // cut by max_tokens
    ++ended;
    const Json doc = Parse(text);
    ASSERT_TRUE(doc.is_object()) << text;
    // Properties in the schema's order, the required ones present.
    std::vector<std::string> keys;
    for (const auto& [k, v] : doc.items()) keys.push_back(k);
    ASSERT_GE(keys.size(), 3u) << text;
    EXPECT_EQ(keys[0], "name") << text;
    EXPECT_EQ(keys[1], "age") << text;
    EXPECT_EQ(keys[2], "role") << text;
    EXPECT_TRUE(doc["name"].is_string() && doc["name"].get<std::string>().size() <= 8 * 4) << text;
    EXPECT_TRUE(doc["age"].is_number_integer()) << text;
    EXPECT_TRUE(doc["role"] == "admin" || doc["role"] == "user") << text;
    if (doc.contains("tags")) {
      ASSERT_TRUE(doc["tags"].is_array()) << text;
      EXPECT_LE(doc["tags"].size(), 2u);
      for (const auto& t : doc["tags"]) {
        EXPECT_TRUE(std::regex_match(t.get<std::string>(), std::regex("[a-z]{1,4}"))) << text;
      }
    }
  }
  EXPECT_GT(ended, 0) << "no answer finished within max_tokens";
}

TEST_F(StructuredOutputProcessTest, BadSchemasAndGrammarsAre400sNamingTheProblem) {
  struct Case {
    Json body;
    std::string param, words;
  };
  const std::vector<Case> cases = {
      {Chat({{"response_format",
              {{"type", "json_schema"},
               {"json_schema",
                {{"name", "n"},
                 {"schema",
                  {{"type", "object"},
                   {"properties", {{"age", {{"type", "integer"}, {"minimum", 0}}}}}}}}}}}}),
       "response_format.json_schema.schema", "unsupported keyword 'minimum' at #/properties/age"},
      {Chat(
           {{"response_format",
             {{"type", "json_schema"}, {"json_schema", {{"name", "bad name!"}, {"schema", {}}}}}}}),
       "response_format.json_schema.name", "1 to 64 characters"},
      {Chat({{"grammar", "root ::= \"a\" rest\n"}}), "grammar",
       "line 1, column 14: rule 'rest' is not defined"},
      {Chat({{"grammar", "root ::= root \"a\""}}), "grammar", "left-recursive"},
      {Chat({{"grammar", "root ::= \"a\""}, {"response_format", {{"type", "json_object"}}}}),
       "grammar", "cannot be combined"},
  };
  for (const auto& c : cases) {
    auto r = Post("/v1/chat/completions", c.body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << r->body;
    const Json j = Parse(r->body);
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << r->body;
    EXPECT_EQ(j["error"]["param"], c.param) << r->body;
    EXPECT_NE(j["error"]["message"].get<std::string>().find(c.words), std::string::npos) << r->body;
  }
}

TEST_F(StructuredOutputProcessTest, TheGrammarFieldShapesEveryApisAnswers) {
  // OpenAI completions: one of two words, ended when nothing can follow.
  for (int seed = 0; seed < 4; ++seed) {
    auto r = Post("/v1/completions", {{"model", "demo"},
                                      {"prompt", "Answer:"},
                                      {"max_tokens", 20},
                                      {"temperature", 1.0},
                                      {"seed", seed},
                                      {"grammar", R"(root ::= " " ("yes" | "no"))"}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const Json j = Parse(r->body);
    const std::string text = j["choices"][0]["text"];
    EXPECT_TRUE(text == " yes" || text == " no") << text;
    EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  }
  // Anthropic messages.
  auto m = Post("/v1/messages", {{"model", "demo"},
                                 {"max_tokens", 20},
                                 {"messages", {{{"role", "user"}, {"content", "Three letters?"}}}},
                                 {"grammar", "root ::= [a-c]{3} \".\""}});
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200) << m->body;
  const std::string text = Parse(m->body)["content"][0]["text"];
  EXPECT_TRUE(std::regex_match(text, std::regex("[a-c]{3}\\."))) << text;
  // Chat, streamed: the same constraint over SSE.
  auto s = Post("/v1/chat/completions",
                Chat({{"stream", true}, {"grammar", R"(root ::= "[" [0-9]{2,3} "]")"}}));
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200) << s->body;
  std::string streamed;
  for (size_t at = 0; (at = s->body.find("data: {", at)) != std::string::npos; ++at) {
    const size_t end = s->body.find("\n\n", at);
    const Json chunk = Parse(s->body.substr(at + 6, end - at - 6));
    if (chunk["choices"].empty()) continue;
    const Json& delta = chunk["choices"][0]["delta"];
    if (delta.contains("content") && delta["content"].is_string()) {
      streamed += delta["content"].get<std::string>();
    }
  }
  EXPECT_TRUE(std::regex_match(streamed, std::regex("\\[[0-9]{2,3}\\]"))) << streamed;
}

}  // namespace
}  // namespace strata
