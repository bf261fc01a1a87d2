// Request snapshots: the record's JSON round trip and its refusals, and the
// server recording completed requests and serving them back to their own
// tenant over HTTP (GET /v1/snapshots/{id}).
#include "server/snapshot_record.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "server/internal/snapshot_tap.h"
#include "server/server.h"
#include "server/snapshots.h"
#include "testing/fake_clock.h"
#include "testing/mem_file_system.h"
#include "testing/serving_stack.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::server {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// A record with every field away from its default.
SnapshotRecord FullRecord() {
  SnapshotRecord r;
  r.request_id = "req-42";
  r.tenant = "acme";
  r.created_ms = 1'790'000'000'123;
  r.api = "openai.chat";
  r.endpoint = "/v1/chat/completions";
  r.stream = true;
  r.strata_version = "0.1.0";
  r.backend = {.name = "tiny",
               .kind = "local",
               .fingerprint = 0xfedcba9876543210ULL,
               .n_ctx = 2048,
               .model_path = "models/tiny.gguf",
               .model_sha256 = std::string(64, 'a'),
               .chat_format = "chatml",
               .prompt_special_tokens = true,
               .max_tokens_cap = 512,
               .kv_type = "Q8_0",
               .repack = "on"};
  r.cache = "l3";
  r.similarity = 0.9375;
  gateway::CompletionRequest& q = r.request;
  q.request_id = r.request_id;
  q.tenant = r.tenant;
  q.model = "tiny";
  q.session_id = "s-1";
  q.stream = true;
  q.messages = {{"system", "Be terse."},
                {"user", "Weather in \"Paris\"?\n\xe2\x9c\x93"},
                {.role = "assistant",
                 .content = "",
                 .tool_calls = {{"call_1", "weather", R"({"city":"Paris"})"}}},
                {.role = "tool",
                 .content = "sunny",
                 .tool_call_id = "call_1",
                 .name = "weather",
                 .is_error = true}};
  q.cache_breakpoints = {0, 2};
  q.max_tokens = 33;
  q.sampling.temperature = 0.1f;
  q.sampling.top_k = 7;
  q.sampling.top_p = 0.3f;
  q.sampling.min_p = 0.01f;
  q.sampling.presence_penalty = -0.7f;
  q.sampling.frequency_penalty = 1.3f;
  q.sampling.repetition_penalty = 1.1f;
  q.sampling.seed = 18'446'744'073'709'551'615ULL;  // 2^64 - 1: no JSON reader may round it
  q.sampling.typical_p = 0.95f;
  q.sampling.target_entropy = 2.5f;
  q.sampling.entropy_tail_nats = 4.0f;
  q.sampling.mirostat = true;
  q.sampling.mirostat_tau_bits = 3.0f;
  q.sampling.mirostat_eta = 0.2f;
  q.sampling.logit_bias = {{3, -100.0f}, {17, 2.5f}};
  q.sampling_set = {.temperature = true, .top_k = true, .seed = true, .logit_bias = true};
  q.stop = {"\n\n", "END"};
  q.response_format = gateway::ResponseFormat::kJsonSchema;
  q.json_schema = {
      .name = "w", .description = "d", .schema = R"({"type":"object"})", .strict = true};
  q.tools = {{"weather", "Looks it up", R"({"type":"object"})"}};
  q.tool_choice = {gateway::ToolChoice::Mode::kNamed, "weather"};
  q.parallel_tool_calls = false;
  q.grammar = "root ::= \"x\"";
  q.n = 2;
  q.top_logprobs = 3;
  q.prefix_cache = false;
  q.ignore_eos = true;
  q.fixed_seed = true;
  q.response_cache = false;
  q.l3 = false;
  r.prompts = {{.tokens = {1, 2, 3}, .text = "<s>hi", .max_tokens = 33, .stops = {"END", "</s>"}},
               {.prompt = "second", .tokens = {1, 9}, .text = "<s>x", .max_tokens = 33}};
  // Two prompts × n = 2: four choices.
  for (int32_t i = 0; i < 4; ++i) {
    SnapshotChoice c;
    c.index = i;
    c.seed = i == 3 ? std::nullopt : std::optional<uint64_t>(1000 + i);
    c.text = "answer " + std::to_string(i);
    c.tool_calls = {{"call_9", "weather", "{}"}};
    c.tokens = {5, 6, 7 + i};
    c.finish = i == 0 ? gateway::FinishReason::kStopString : gateway::FinishReason::kToolCalls;
    c.stop_sequence = i == 0 ? "END" : "";
    c.usage = {.prompt_tokens = 3,
               .cached_tokens = 1,
               .cache_write_tokens = 2,
               .completion_tokens = 3,
               .preemptions = 1,
               .max_tokens_cut = 0};
    c.terms = " rt_level=1 sampling=topk max_tokens_cap=0";
    c.replica = "http://10.0.0.1:8000";
    r.choices.push_back(std::move(c));
  }
  return r;
}

TEST(SnapshotRecord, EveryFieldSurvivesTheRoundTripExactly) {
  const SnapshotRecord r = FullRecord();
  const std::string text = EncodeSnapshotRecord(r);
  auto back = DecodeSnapshotRecord(text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  // Whatever Encode writes, Decode reads back into the same fields.
  EXPECT_EQ(EncodeSnapshotRecord(*back), text);
  // And the fields that are easiest to lose, directly.
  EXPECT_EQ(back->request.sampling.seed, r.request.sampling.seed);
  EXPECT_EQ(back->request.sampling.temperature, 0.1f);
  EXPECT_EQ(back->request.sampling.top_p, 0.3f);
  EXPECT_EQ(back->request.sampling.logit_bias, r.request.sampling.logit_bias);
  EXPECT_TRUE(back->request.sampling_set.logit_bias);
  EXPECT_FALSE(back->request.sampling_set.top_p);
  EXPECT_EQ(back->request.messages[1].content, r.request.messages[1].content);
  EXPECT_EQ(back->request.messages[2].tool_calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_TRUE(back->request.messages[3].is_error);
  EXPECT_EQ(back->request.l3, std::optional<bool>(false));
  EXPECT_EQ(back->request.tool_choice.mode, gateway::ToolChoice::Mode::kNamed);
  EXPECT_EQ(back->request.request_id, "req-42");
  EXPECT_EQ(back->request.tenant, "acme");
  EXPECT_EQ(back->backend.fingerprint, 0xfedcba9876543210ULL);
  EXPECT_EQ(back->backend.kv_type, "Q8_0");
  EXPECT_EQ(back->backend.repack, "on");
  EXPECT_EQ(back->similarity, std::optional<double>(0.9375));
  EXPECT_EQ(back->prompts[1].prompt, std::optional<std::string>("second"));
  EXPECT_EQ(back->choices[2].seed, std::optional<uint64_t>(1002));
  EXPECT_FALSE(back->choices[3].seed.has_value());
  EXPECT_EQ(back->choices[0].finish, gateway::FinishReason::kStopString);
  EXPECT_EQ(back->choices[1].usage.preemptions, 1);
  // 64-bit values are strings in the JSON: no reader rounds them.
  EXPECT_NE(text.find(R"("seed":"18446744073709551615")"), std::string::npos);
  EXPECT_NE(text.find(R"("fingerprint":"fedcba9876543210")"), std::string::npos);
  // A default request (no optional fields) round-trips too.
  SnapshotRecord plain;
  plain.request_id = "r";
  plain.tenant = "t";
  plain.prompts = {{}};
  plain.choices = {{}};
  auto plain_back = DecodeSnapshotRecord(EncodeSnapshotRecord(plain));
  ASSERT_TRUE(plain_back.ok()) << plain_back.status().ToString();
  EXPECT_EQ(EncodeSnapshotRecord(*plain_back), EncodeSnapshotRecord(plain));
  EXPECT_FALSE(plain_back->request.max_tokens.has_value());
  EXPECT_FALSE(plain_back->request.prompt.has_value());
}

TEST(SnapshotRecord, ARecordThatCannotBeReadIsDataLossNamingTheField) {
  const json good = json::parse(EncodeSnapshotRecord(FullRecord()));
  auto refuse = [&](const std::function<void(json&)>& edit, const std::string& field) {
    json j = good;
    edit(j);
    auto r = DecodeSnapshotRecord(j.dump());
    ASSERT_FALSE(r.ok()) << field;
    EXPECT_EQ(r.status().code(), util::StatusCode::kDataLoss) << field;
    EXPECT_NE(r.status().message().find(field), std::string::npos) << r.status().message();
  };
  refuse([](json& j) { j["format"] = 2; }, "format 2");
  refuse([](json& j) { j.erase("tenant"); }, "'tenant' is missing");
  refuse([](json& j) { j["request"]["n"] = "two"; }, "request.n");
  refuse([](json& j) { j["request"]["n"] = 0; }, "request.n");
  refuse([](json& j) { j["request"]["sampling"]["seed"] = 5; }, "request.sampling.seed");
  refuse([](json& j) { j["request"]["sampling"]["seed"] = "-5"; }, "request.sampling.seed");
  refuse([](json& j) { j["request"]["sampling"]["top_p"] = 1e300; }, "request.sampling.top_p");
  refuse([](json& j) { j["request"]["response_format"] = "xml"; }, "request.response_format");
  refuse([](json& j) { j["request"]["messages"][1]["role"] = 7; }, "request.messages[1].role");
  refuse([](json& j) { j["request"]["sampling"]["logit_bias"][0] = {1}; }, "logit_bias[0]");
  refuse([](json& j) { j["request"]["sampling_set"] = {"bogus"}; }, "request.sampling_set");
  refuse([](json& j) { j["choices"].erase(3); }, "choices");
  refuse([](json& j) { j["choices"][1]["index"] = 2; }, "choices[1].index");
  refuse([](json& j) { j["choices"][0]["finish"] = "done"; }, "choices[0].finish");
  refuse([](json& j) { j["choices"][0]["tokens"] = {1, 1ll << 40}; }, "choices[0].tokens[1]");
  refuse([](json& j) { j["prompts"] = json::array(); }, "prompts");
  refuse([](json& j) { j["backend"]["fingerprint"] = "xyz"; }, "backend.fingerprint");
  EXPECT_EQ(DecodeSnapshotRecord("[1,2]").status().code(), util::StatusCode::kDataLoss);
  EXPECT_EQ(DecodeSnapshotRecord("{").status().code(), util::StatusCode::kDataLoss);
}

// The server with snapshots on, over the tiny model, with two tenants' keys.
class SnapshotServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::StartServingStack(s_, testing::TinyGatewayOptions(), metrics_, util::RealClock(),
                               *log_);
    ASSERT_NE(s_.gw, nullptr);
    std::array<uint8_t, obs::kSnapshotKeyBytes> raw{};
    raw.fill(0x9c);
    auto store =
        obs::SnapshotStore::Open({.dir = "snaps", .sweep_interval = 24h},
                                 obs::SnapshotKey::FromBytes(raw), fs_, clock_, &metrics_, *log_);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
    recorder_ = std::make_unique<SnapshotRecorder>(
        SnapshotOptions{.store = store_.get(),
                        .tenants = {"acme", "globex"},
                        .models = {{"tiny", {.path = "models/tiny.gguf", .max_tokens_cap = 64}}},
                        .strata_version = "test"});
    ServerOptions so;
    so.port = 0;
    so.snapshots = recorder_.get();
    auto keys =
        ApiKeys::Parse("key-acme-123 acme\nkey-globex-123 globex\nkey-other-123 other\n", "keys");
    ASSERT_TRUE(keys.ok());
    srv_ = std::move(HttpServer::Create(so, *keys, metrics_, util::RealClock(), *log_)).value();
    auto port = srv_->Start();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    srv_->SetGateway(s_.gw.get());
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
    client_->set_read_timeout(60, 0);
  }
  void TearDown() override {
    if (srv_) srv_->Stop();
    srv_.reset();
    s_.Stop();
  }
  httplib::Result Post(const std::string& key, const std::string& id, const json& body,
                       const std::string& path = "/v1/chat/completions") {
    return client_->Post(path.c_str(), {{"Authorization", "Bearer " + key}, {"X-Request-ID", id}},
                         body.dump(), "application/json");
  }
  httplib::Result Get(const std::string& key, const std::string& id) {
    return client_->Get(("/v1/snapshots/" + id).c_str(), {{"Authorization", "Bearer " + key}});
  }

  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  obs::MetricsRegistry metrics_;
  testing::MemFileSystem fs_;
  testing::FakeClock clock_;
  testing::ServingStack s_;
  std::unique_ptr<obs::SnapshotStore> store_;
  std::unique_ptr<SnapshotRecorder> recorder_;
  std::unique_ptr<HttpServer> srv_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(SnapshotServerTest, ACompletedRequestIsReadBackByItsTenantOnly) {
  const json chat = {{"model", "tiny"},
                     {"messages", {{{"role", "user"}, {"content", "the cat"}}}},
                     {"max_tokens", 6},
                     {"temperature", 0.9},
                     {"n", 2}};
  auto answer = Post("key-acme-123", "snap-1", chat);
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  ASSERT_TRUE(store_->Flush(10s));
  auto mine = Get("key-acme-123", "snap-1");
  ASSERT_TRUE(mine);
  ASSERT_EQ(mine->status, 200) << mine->body;
  const json snap = json::parse(mine->body);
  const json reply = json::parse(answer->body);
  EXPECT_EQ(snap["request_id"], "snap-1");
  EXPECT_EQ(snap["tenant"], "acme");
  EXPECT_EQ(snap["api"], "openai.chat");
  EXPECT_EQ(snap["backend"]["kind"], "local");
  EXPECT_EQ(snap["cache"]["outcome"], "miss");
  EXPECT_FALSE(snap["backend"]["model"].contains("path")) << "an operator-only field leaked";
  EXPECT_EQ(snap["backend"]["model"]["max_tokens_cap"], 64);
  ASSERT_EQ(snap["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(snap["choices"][i]["text"], reply["choices"][i]["message"]["content"]) << i;
    EXPECT_TRUE(snap["choices"][i].contains("seed")) << "an unseeded request's drawn seed";
    EXPECT_EQ(snap["choices"][i]["tokens"].size(),
              snap["choices"][i]["usage"]["completion_tokens"]);
    EXPECT_FALSE(snap["choices"][i].contains("replica"));
  }
  EXPECT_FALSE(snap["prompts"][0]["tokens"].empty());
  EXPECT_NE(snap["prompts"][0]["text"].get<std::string>().find("the cat"), std::string::npos);
  // Another tenant: 404, exactly as for an id that never existed.
  auto theirs = Get("key-globex-123", "snap-1");
  auto never = Get("key-globex-123", "snap-never");
  ASSERT_TRUE(theirs && never);
  EXPECT_EQ(theirs->status, 404);
  EXPECT_EQ(never->status, 404);
  EXPECT_EQ(json::parse(theirs->body)["error"]["message"].get<std::string>().find("acme"),
            std::string::npos);
  // Bad ids and bad keys.
  auto bad = Get("key-acme-123", "a%20b");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  auto nokey = client_->Get("/v1/snapshots/snap-1");
  ASSERT_TRUE(nokey);
  EXPECT_EQ(nokey->status, 401);
  auto post = client_->Post("/v1/snapshots/snap-1", {{"Authorization", "Bearer key-acme-123"}},
                            "{}", "application/json");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
}

TEST_F(SnapshotServerTest, UnrecordedTenantsAndRefusedRequestsLeaveNoSnapshot) {
  const json chat = {{"model", "tiny"},
                     {"messages", {{{"role", "user"}, {"content", "a dog"}}}},
                     {"max_tokens", 4},
                     {"temperature", 0}};
  auto other = Post("key-other-123", "not-recorded", chat);
  ASSERT_TRUE(other);
  ASSERT_EQ(other->status, 200);
  json too_long = chat;
  too_long["max_tokens"] = 100000;
  auto refused = Post("key-acme-123", "refused", too_long);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  ASSERT_TRUE(store_->Flush(10s));
  EXPECT_EQ(Get("key-other-123", "not-recorded")->status, 404);
  EXPECT_EQ(Get("key-acme-123", "refused")->status, 404);
  EXPECT_EQ(store_->stats().written, 0);
}

// The hook over the real gateway: a generation its reader cancels leaves
// nothing; one read to the end is recorded.
TEST_F(SnapshotServerTest, ACancelledGenerationLeavesNoSnapshot) {
  ParsedRequest parsed;
  parsed.request.model = "tiny";
  parsed.request.tenant = "acme";
  parsed.request.prompt = "the cat";
  parsed.request.max_tokens = 8;
  parsed.request.sampling.temperature = 0;
  const auto far = std::chrono::steady_clock::now() + 1min;
  auto run = [&](const std::string& id, bool cancel) {
    parsed.request.request_id = id;
    auto gen = s_.gw->Start(parsed.request);
    ASSERT_TRUE(gen.ok()) << gen.status().ToString();
    auto tapped = TapForSnapshot(
        std::move(gen).value(), *recorder_, ApiKind::kOpenAICompletion, "/v1/completions", parsed,
        std::chrono::duration_cast<std::chrono::milliseconds>(clock_.WallNow().time_since_epoch())
            .count());
    ASSERT_TRUE(tapped->Next(far).ok());
    if (cancel) tapped->Cancel();
    while (tapped->Next(far).ok()) {
    }
  };
  run("cancelled", true);
  run("read-to-the-end", false);
  ASSERT_TRUE(store_->Flush(10s));
  EXPECT_EQ(Get("key-acme-123", "cancelled")->status, 404);
  EXPECT_EQ(Get("key-acme-123", "read-to-the-end")->status, 200);
  EXPECT_EQ(store_->stats().written, 1);
}

TEST_F(SnapshotServerTest, APromptArrayIsOneSnapshotWithEveryPrompt) {
  const json completion = {{"model", "tiny"},
                           {"prompt", {"the cat", "a dog ran"}},
                           {"max_tokens", 3},
                           {"temperature", 0},
                           {"n", 2}};
  auto answer = Post("key-acme-123", "array-1", completion, "/v1/completions");
  ASSERT_TRUE(answer);
  ASSERT_EQ(answer->status, 200) << answer->body;
  ASSERT_TRUE(store_->Flush(10s));
  auto got = Get("key-acme-123", "array-1");
  ASSERT_TRUE(got);
  ASSERT_EQ(got->status, 200) << got->body;
  auto record = DecodeSnapshotRecord(got->body);
  ASSERT_TRUE(record.ok()) << record.status().ToString();
  ASSERT_EQ(record->prompts.size(), 2u);
  EXPECT_EQ(record->prompts[1].prompt, std::optional<std::string>("a dog ran"));
  EXPECT_NE(record->prompts[0].tokens, record->prompts[1].tokens);
  ASSERT_EQ(record->choices.size(), 4u);
  const json reply = json::parse(answer->body);
  for (size_t i = 0; i < 4; ++i) {
    const json& c = reply["choices"][i];
    EXPECT_EQ(record->choices[static_cast<size_t>(c["index"].get<int>())].text, c["text"]) << i;
  }
  EXPECT_EQ(record->api, "openai.completions");
}

}  // namespace
}  // namespace strata::server
