// Several local models in one `strata serve` (L7): -m NAME=FILE and --models
// DIR, loading on first use within --models-memory, unloading the idle model
// to make room, --preload, the residency metrics, and the start-up errors.
// Every answer after an unload and reload is checked against the answer the
// same model gave while it stayed resident. The binary is $STRATA_BIN
// (ctest sets it); the models are written by `strata mkmodel`.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "testing/raw_http.h"
#include "testing/strata_process.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using testing::HttpRequest;
using testing::RawClient;
using testing::RawResponse;
using testing::ReadAll;
using testing::Spawn;
using testing::WaitExit;

class ModelsProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Two models of different sizes and weights.
    small_ = new testing::DemoModelDir("strata_models_small",
                                       "n_embd=64,n_layers=2,n_heads=4,n_ff=128,n_ctx=512");
    large_ = new testing::DemoModelDir("strata_models_large",
                                       "n_embd=128,n_layers=3,n_heads=4,n_ff=256,n_ctx=512");
    ASSERT_FALSE(small_->model.empty()) << small_->MkmodelLog();
    ASSERT_FALSE(large_->model.empty()) << large_->MkmodelLog();
  }
  static void TearDownTestSuite() {
    delete small_;
    delete large_;
  }
  void TearDown() override {
    if (pid_ > 0) testing::Kill(pid_);
  }

  // `strata serve ARGS --port 0 -t 1 --ctx 256 --l1-bytes 0` (every answer
  // generated), waited on until ready; its port, or -1.
  int Serve(std::vector<std::string> args) {
    if (pid_ > 0) testing::Kill(pid_);
    log_ = (small_->dir / ("serve_" + std::to_string(++serves_) + ".log")).string();
    args.insert(args.begin(), "serve");
    for (const char* a :
         {"--port", "0", "-t", "1", "--ctx", "256", "--l1-bytes", "0", "--log-level", "info"}) {
      args.push_back(a);
    }
    pid_ = Spawn(args, log_);
    if (const int port = testing::WaitReady(pid_, log_); port > 0) return port_ = port;
    ADD_FAILURE() << "the server did not start:\n" << ReadAll(log_);
    return -1;
  }
  // Runs `strata serve ARGS` expecting it to refuse to start: its log.
  std::string Refused(std::vector<std::string> args) {
    const std::string log =
        (small_->dir / ("refused_" + std::to_string(++serves_) + ".log")).string();
    args.insert(args.begin(), "serve");
    args.insert(args.end(), {"--port", "0"});
    const pid_t pid = Spawn(args, log);
    const int rc = WaitExit(pid, std::chrono::seconds(30));
    EXPECT_GT(rc, 0) << "strata serve should have refused to start:\n" << ReadAll(log);
    if (rc < 0) testing::Kill(pid);
    return ReadAll(log);
  }

  std::optional<RawResponse> Ask(const std::string& bytes) {
    RawClient c(port_);
    if (!c.connected() || !c.Send(bytes)) return std::nullopt;
    return c.ReadResponse(std::chrono::seconds(60));
  }
  std::optional<RawResponse> Get(const std::string& path) {
    return Ask("GET " + path + " HTTP/1.1\r\nHost: t\r\n\r\n");
  }
  // A greedy completion of `model`: its text with each token's logprob, or
  // "HTTP <status> <body>".
  std::string Complete(const std::string& model, const std::string& prompt = "The river") {
    const Json body = {{"model", model},   {"prompt", prompt},   {"max_tokens", 6},
                       {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 1}};
    auto r = Ask(HttpRequest("POST", "/v1/completions", body.dump()));
    if (!r) return "no answer";
    if (r->status != 200) return "HTTP " + std::to_string(r->status) + " " + r->body;
    const Json j = Json::parse(r->body, nullptr, false);
    if (j.is_discarded()) return "not JSON: " + r->body;
    return j["choices"][0]["text"].get<std::string>() + " " +
           j["choices"][0]["logprobs"]["token_logprobs"].dump();
  }
  // The value of `name{labels}` (or `name` when labels is "") on /metrics; -1 when absent.
  double Metric(const std::string& name, const std::string& labels = "") {
    auto r = Get("/metrics");
    if (!r) return -1;
    const std::string key = "\n" + name + (labels.empty() ? "" : "{" + labels + "}") + " ";
    const size_t at = r->body.find(key);
    return at == std::string::npos ? -1 : std::atof(r->body.c_str() + at + key.size());
  }
  std::vector<std::string> ModelIds() {
    std::vector<std::string> ids;
    auto r = Get("/v1/models");
    if (!r) {
      ADD_FAILURE() << "no answer from port " << port_;
      return ids;
    }
    const Json j = Json::parse(r->body, nullptr, false);
    if (r->status != 200 || !j.is_object() || !j.contains("data")) {
      ADD_FAILURE() << "GET /v1/models: " << r->status << " " << r->body;
      return ids;
    }
    for (const Json& m : j["data"]) ids.push_back(m["id"].get<std::string>());
    return ids;
  }

  static testing::DemoModelDir* small_;
  static testing::DemoModelDir* large_;
  pid_t pid_ = -1;
  int port_ = -1;
  static inline int serves_ = 0;  // log files are never reused: a stale one names a dead port
  std::string log_;
};
testing::DemoModelDir* ModelsProcessTest::small_ = nullptr;
testing::DemoModelDir* ModelsProcessTest::large_ = nullptr;

TEST_F(ModelsProcessTest, ModelsTakeTurnsInABudgetForOneAndAnswerAsWhenResident) {
  // Both resident (a budget for both): the reference answers and each size.
  ASSERT_GT(Serve({"-m", "small=" + small_->model, "-m", "large=" + large_->model,
                   "--models-memory", "1GiB"}),
            0);
  EXPECT_EQ(ModelIds(), (std::vector<std::string>{"small", "large"}));
  EXPECT_EQ(Metric("strata_model_loads_total", "model=\"small\""), 0);  // on first use
  std::map<std::string, std::string> want;
  for (const std::string m : {"small", "large"}) want[m] = Complete(m);
  ASSERT_NE(want["small"], want["large"]);
  ASSERT_EQ(want["small"].rfind("HTTP", 0), std::string::npos) << want["small"];
  ASSERT_EQ(want["large"].rfind("HTTP", 0), std::string::npos) << want["large"];
  // With several models a request must name one.
  {
    const Json body = {{"prompt", "The river"}, {"max_tokens", 6}};
    auto r = Ask(HttpRequest("POST", "/v1/completions", body.dump()));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_EQ(Json::parse(r->body)["error"]["param"], "model") << r->body;
  }
  const double small_bytes = Metric("strata_model_resident_bytes", "model=\"small\"");
  const double large_bytes = Metric("strata_model_resident_bytes", "model=\"large\"");
  ASSERT_GT(small_bytes, 0);
  ASSERT_GT(large_bytes, small_bytes);
  EXPECT_EQ(Metric("strata_model_loads_total", "model=\"large\""), 1);
  EXPECT_EQ(Metric("strata_models_resident_bytes"), small_bytes + large_bytes);

  // Room for the larger one only: each request for the other model unloads one.
  const auto budget = static_cast<uint64_t>(large_bytes + small_bytes / 2);
  ASSERT_GT(Serve({"-m", "small=" + small_->model, "-m", "large=" + large_->model,
                   "--models-memory", std::to_string(budget)}),
            0);
  for (int round = 0; round < 3; ++round) {
    for (const std::string m : {"small", "large"}) {
      EXPECT_EQ(Complete(m), want[m]) << m << ", round " << round;
    }
  }
  EXPECT_EQ(Metric("strata_model_loads_total", "model=\"small\""), 3);
  EXPECT_EQ(Metric("strata_model_loads_total", "model=\"large\""), 3);
  EXPECT_EQ(Metric("strata_model_evictions_total", "model=\"small\""), 3);
  EXPECT_EQ(Metric("strata_model_evictions_total", "model=\"large\""), 2);
  EXPECT_EQ(Metric("strata_model_resident", "model=\"large\""), 1);
  EXPECT_EQ(Metric("strata_model_resident", "model=\"small\""), 0);
  EXPECT_EQ(Metric("strata_models_memory_budget_bytes"), static_cast<double>(budget));
  EXPECT_LE(Metric("strata_models_resident_bytes"), static_cast<double>(budget));
  EXPECT_EQ(Metric("strata_model_load_duration_seconds_count", "model=\"small\""), 3);

  // Clients of both at once: every answer is the model's own, none is refused.
  std::vector<std::future<std::string>> calls;
  for (int k = 0; k < 12; ++k) {
    const std::string m = k % 2 ? "large" : "small";
    calls.push_back(std::async(std::launch::async, [this, m] { return Complete(m); }));
  }
  for (int k = 0; k < 12; ++k) {
    EXPECT_EQ(calls[static_cast<size_t>(k)].get(), want[k % 2 ? "large" : "small"]) << k;
  }
  EXPECT_NE(ReadAll(log_).find("unloading model 'small'"), std::string::npos);
}

TEST_F(ModelsProcessTest, PreloadLoadsEveryModelThatFitsBeforeTheServerIsReady) {
  ASSERT_GT(Serve({"-m", "small=" + small_->model, "-m", "large=" + large_->model,
                   "--models-memory", "1GiB", "--preload"}),
            0);
  EXPECT_EQ(Metric("strata_model_loads_total", "model=\"small\""), 1);
  EXPECT_EQ(Metric("strata_model_loads_total", "model=\"large\""), 1);
  EXPECT_EQ(Metric("strata_model_resident", "model=\"large\""), 1);
  const std::string log = ReadAll(log_);
  EXPECT_NE(log.find("(warm-up)"), std::string::npos) << log;
  // The models were loaded before "ready": a request loads nothing more.
  EXPECT_EQ(Complete("large").rfind("HTTP", 0), std::string::npos);
  EXPECT_EQ(Metric("strata_model_loads_total", "model=\"large\""), 1);
}

TEST_F(ModelsProcessTest, ADirectoryOfModelsIsServedByFileName) {
  const std::filesystem::path dir = small_->dir / "models";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(small_->model, dir / "alpha.gguf",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(large_->model, dir / "beta.gguf",
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(small_->model, dir / "notes.txt",
                             std::filesystem::copy_options::overwrite_existing);
  ASSERT_GT(Serve({"--models", dir.string()}), 0);
  EXPECT_EQ(ModelIds(), (std::vector<std::string>{"alpha", "beta"}));
  EXPECT_EQ(Complete("beta").rfind("HTTP", 0), std::string::npos);
  const std::string unknown = Complete("gamma");
  EXPECT_NE(unknown.find("HTTP 404"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("model_not_found"), std::string::npos) << unknown;
}

// A BERT-family encoder beside a chat model: served by its name for
// /v1/embeddings (unit vectors of its width, the same for the same text),
// refused for chat with the reason, and checked like any input.
TEST_F(ModelsProcessTest, AnEncoderServesEmbeddingsByNameBesideAChatModel) {
  testing::DemoModelDir enc("strata_models_encoder",
                            "arch=bert,n_embd=64,n_layers=2,n_heads=4,n_ff=128,n_ctx=32");
  ASSERT_FALSE(enc.model.empty()) << enc.MkmodelLog();
  ASSERT_GT(Serve({"-m", "chat=" + small_->model, "-m", "embed=" + enc.model}), 0);
  EXPECT_EQ(ModelIds(), (std::vector<std::string>{"chat", "embed"}));
  auto embed = [&](const Json& input) {
    const Json body = {{"model", "embed"}, {"input", input}};
    return Ask(HttpRequest("POST", "/v1/embeddings", body.dump()));
  };
  auto r = embed(Json::array({"the cat saw the dog", "what is a model", "the cat saw the dog"}));
  ASSERT_TRUE(r.has_value());
  ASSERT_EQ(r->status, 200) << r->body;
  const Json j = Json::parse(r->body);
  ASSERT_EQ(j["data"].size(), 3u);
  const std::vector<float> a = j["data"][0]["embedding"], b = j["data"][1]["embedding"],
                           c = j["data"][2]["embedding"];
  ASSERT_EQ(a.size(), 64u);
  double norm = 0.0, ab = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    norm += a[i] * a[i];
    ab += a[i] * b[i];
  }
  EXPECT_NEAR(norm, 1.0, 1e-4);
  EXPECT_LT(ab, 0.99);
  EXPECT_EQ(a, c);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 7 + 6 + 7);

  const Json chat = {{"model", "embed"},
                     {"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}};
  auto refused = Ask(HttpRequest("POST", "/v1/chat/completions", chat.dump()));
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status, 400);
  EXPECT_NE(refused->body.find("is an embedding model"), std::string::npos) << refused->body;
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "fun ";
  auto too_long = embed(long_text);
  ASSERT_TRUE(too_long.has_value());
  EXPECT_EQ(too_long->status, 400);
  EXPECT_NE(too_long->body.find("context_length_exceeded"), std::string::npos) << too_long->body;
  // The chat model still answers.
  EXPECT_EQ(Complete("chat").rfind("HTTP", 0), std::string::npos);
}

// The semantic tier over HTTP with a served encoder (--encoder backend:NAME):
// a rewording of an answered request is answered from the tier, marked with
// its similarity; a request that refuses it is generated; an encoder that
// does not exist stops the start with the reason.
TEST_F(ModelsProcessTest, TheSemanticTierAnswersARewordingThroughAServedEncoder) {
  testing::DemoModelDir enc("strata_models_semantic",
                            "arch=bert,n_embd=64,n_layers=2,n_heads=4,n_ff=128,n_ctx=32");
  ASSERT_FALSE(enc.model.empty()) << enc.MkmodelLog();
  const std::string file = (enc.dir / "semantic.bin").string();
  const std::vector<std::string> args = {"-m",
                                         "chat=" + small_->model,
                                         "-m",
                                         "embed=" + enc.model,
                                         "--semantic",
                                         "on",
                                         "--encoder",
                                         "backend:embed",
                                         "--semantic-similarity",
                                         "0.98",
                                         "--semantic-file",
                                         file,
                                         "--semantic-verify",  // served at once, unverified
                                         "0"};
  ASSERT_GT(Serve(args), 0);
  auto ask = [&](const std::string& text, const Json& cache = nullptr) {
    Json body = {{"model", "chat"},
                 {"messages", Json::array({{{"role", "user"}, {"content", text}}})},
                 {"max_tokens", 4},
                 {"temperature", 0}};
    if (!cache.is_null()) body["cache"] = cache;
    return Ask(HttpRequest("POST", "/v1/chat/completions", body.dump()));
  };
  auto first = ask("the little bird saw the dog in the park");
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->status, 200) << first->body;
  EXPECT_EQ(first->Header("x-strata-cache"), "miss");
  auto second = ask("The little bird saw the dog, in the park!");
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->Header("x-strata-cache"), "semantic") << second->body;
  EXPECT_GE(std::atof(second->Header("x-strata-cache-similarity").c_str()), 0.98);
  EXPECT_EQ(Json::parse(second->body)["choices"][0]["message"]["content"],
            Json::parse(first->body)["choices"][0]["message"]["content"]);
  auto refused = ask("The little bird saw the dog in the park.", {{"semantic", false}});
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->Header("x-strata-cache"), "miss");
  EXPECT_EQ(Metric("strata_cache_hits_total", "tier=\"semantic\""), 1);

  // A graceful stop saves the tier; the next start loads it and answers the
  // rewording at once.
  ::kill(pid_, SIGTERM);
  EXPECT_EQ(testing::WaitExit(pid_, std::chrono::seconds(30)), 0);
  pid_ = -1;
  EXPECT_TRUE(std::filesystem::exists(file));
  ASSERT_GT(Serve(args), 0);
  EXPECT_NE(ReadAll(log_).find("entries loaded from"), std::string::npos) << ReadAll(log_);
  auto after = ask("the little bird saw the dog in the park!");
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->Header("x-strata-cache"), "semantic") << after->body;

  const std::string log =
      Refused({"-m", "chat=" + small_->model, "--semantic", "on", "--encoder", "backend:nothing"});
  EXPECT_NE(log.find("no served model is named 'nothing'"), std::string::npos) << log;
}

// --semantic on alone: strata's built-in encoder embeds the texts, so a
// rewording of an answered question is answered from the tier with no
// encoder file or served encoder.
TEST_F(ModelsProcessTest, TheBuiltInEncoderServesTheSemanticTierWithNoOtherFlag) {
  ASSERT_GT(Serve({"-m", "chat=" + small_->model, "--semantic", "on", "--semantic-verify", "0"}),
            0);
  EXPECT_NE(ReadAll(log_).find("built-in encoder"), std::string::npos) << ReadAll(log_);
  auto ask = [&](const std::string& text) {
    const Json body = {{"model", "chat"},
                       {"messages", Json::array({{{"role", "user"}, {"content", text}}})},
                       {"max_tokens", 4},
                       {"temperature", 0}};
    return Ask(HttpRequest("POST", "/v1/chat/completions", body.dump()));
  };
  auto first = ask("How do I reset my password?");
  ASSERT_TRUE(first.has_value());
  ASSERT_EQ(first->status, 200) << first->body;
  auto reworded = ask("how can i reset my password");  // cosine 0.915 (strata embed -m builtin)
  ASSERT_TRUE(reworded.has_value());
  EXPECT_EQ(reworded->Header("x-strata-cache"), "semantic") << reworded->body;
  auto other = ask("What is the capital of France?");
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->Header("x-strata-cache"), "miss");
}

// The CPUs a thread of `pid` may run on ("0", "1", "0-1"): each thread's
// Cpus_allowed_list.
std::vector<std::string> ThreadCpus(pid_t pid) {
  std::vector<std::string> out;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    const std::string status = ReadAll((task.path() / "status").string());
    const std::string key = "Cpus_allowed_list:";
    const size_t at = status.find(key);
    if (at == std::string::npos) continue;
    const size_t begin = status.find_first_not_of(" \t", at + key.size());
    out.push_back(status.substr(begin, status.find('\n', begin) - begin));
  }
  return out;
}

// Two nodes described by --topology (CPU 0 and CPU 1): the planner puts the
// larger model on the first and the smaller on the one with the most room
// left, and each model's scheduler thread runs on its node's CPU only.
TEST_F(ModelsProcessTest, ModelsArePlacedOnTheNodesOfATopologyAndTheirThreadsBound) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0 || !CPU_ISSET(0, &allowed) ||
      !CPU_ISSET(1, &allowed)) {
    GTEST_SKIP() << "needs CPUs 0 and 1";
  }
  const std::string topology = (small_->dir / "two_nodes.json").string();
  {
    std::ofstream out(topology);
    out << R"({"nodes": [{"id": 0, "memory_gib": 1, "cpus": "0"},
                         {"id": 1, "memory_gib": 1, "cpus": "1"}],
               "distances": [[10, 21], [21, 10]]})";
  }
  ASSERT_GT(Serve({"-m", "small=" + small_->model, "-m", "large=" + large_->model, "--preload",
                   "--topology", topology}),
            0);
  const std::string log = ReadAll(log_);
  EXPECT_NE(log.find("model 'large' on NUMA nodes: token_embd .. output on node 0 (CPUs 0)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("model 'small' on NUMA nodes: token_embd .. output on node 1 (CPUs 1)"),
            std::string::npos)
      << log;
  const std::vector<std::string> cpus = ThreadCpus(pid_);
  EXPECT_EQ(std::count(cpus.begin(), cpus.end(), "0"), 1) << ::testing::PrintToString(cpus);
  EXPECT_EQ(std::count(cpus.begin(), cpus.end(), "1"), 1) << ::testing::PrintToString(cpus);
  // Placed models answer as before.
  EXPECT_EQ(Complete("small").rfind("HTTP", 0), std::string::npos);
  EXPECT_EQ(Complete("large").rfind("HTTP", 0), std::string::npos);

  // A node naming a CPU this process may not use stops the start.
  {
    std::ofstream out(topology);
    out << R"({"nodes": [{"id": 0, "memory_gib": 1, "cpus": "0"},
                         {"id": 1, "memory_gib": 1, "cpus": "1000"}]})";
  }
  const std::string refused = Refused({"-m", small_->model, "--topology", topology});
  EXPECT_NE(refused.find("CPU 1000"), std::string::npos) << refused;
}

TEST_F(ModelsProcessTest, BadModelSettingsAreRefusedAtStartWithTheReason) {
  std::string log = Refused({"-m", "a=" + small_->model, "-m", "b=/nonexistent/x.gguf"});
  EXPECT_NE(log.find("model 'b'"), std::string::npos) << log;
  log = Refused({"-m", "a=" + small_->model, "-m", "a=" + large_->model});
  EXPECT_NE(log.find("two local models are named 'a'"), std::string::npos) << log;
  log = Refused({"-m", small_->model, "--models-memory", "12XB"});
  EXPECT_NE(log.find("--models-memory"), std::string::npos) << log;
  log = Refused({"-m", "small=" + small_->model, "--models-memory", "1K"});
  EXPECT_NE(log.find("more than the whole models' memory budget"), std::string::npos) << log;
  const std::filesystem::path empty = small_->dir / "empty";
  std::filesystem::create_directories(empty);
  log = Refused({"--models", empty.string()});
  EXPECT_NE(log.find("holds no .gguf file"), std::string::npos) << log;
  log = Refused({"-m", "bad name=" + small_->model});
  EXPECT_NE(log.find("model name"), std::string::npos) << log;
  log = Refused({"-m", "a=" + small_->model, "-m", "b=" + large_->model, "--accept-any-model"});
  EXPECT_NE(log.find("--accept-any-model needs exactly one served model"), std::string::npos)
      << log;
}

}  // namespace
}  // namespace strata
