// `strata serve --audit-log --audit-key-file --watermark-key-file` as a
// process: whole and streamed answers of both APIs, an L1 hit, refused and
// failed requests and an embedding each leave one record; `strata audit
// verify` passes on the log, and fails naming the record once a line is
// edited, removed or moved; the x-strata-watermark header and a stream's
// trailing watermark verify with `strata watermark verify`, and not once the
// text changes; a restart continues the chain. The binary is $STRATA_BIN;
// the model is ../shared/models/stories260K.gguf, or without ../shared a
// random-weight one from `strata mkmodel`.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "testing/raw_http.h"
#include "testing/strata_process.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using testing::RawClient;
using testing::RawResponse;
using testing::ReadAll;
using testing::Spawn;
using testing::WaitExit;

// RFC 8032, section 7.1, test 1, as PEM.
constexpr const char* kPrivatePem =
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VwBCIEIJ1hsZ3v/VpguoRK9JLsLMREScVpezJpGXA7rAMcrn9g\n"
    "-----END PRIVATE KEY-----\n";
constexpr const char* kPublicPem =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VwAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=\n"
    "-----END PUBLIC KEY-----\n";

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from < text.size()) {
    size_t nl = text.find('\n', from);
    if (nl == std::string::npos) nl = text.size() - 1;
    out.push_back(text.substr(from, nl - from + 1));
    from = nl + 1;
  }
  return out;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l;
  return out;
}

struct Ran {
  int code = -1;
  std::string output;
};

class AuditProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("strata_audit_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
    model_ = "../shared/models/stories260K.gguf";
    if (!std::filesystem::exists(model_)) {
      model_ = testing::MakeDemoModel(dir_.string(), "n_embd=64,n_layers=2,n_heads=4,n_ff=128");
      ASSERT_FALSE(model_.empty()) << ReadAll((dir_ / "mkmodel.log").string());
    }
    WriteFile(Path("audit.pem"), kPrivatePem);
    WriteFile(Path("audit.pub"), kPublicPem);
    WriteFile(Path("wm.key"), "9c1f5a3e0b7d4c2a8e6f1b3d5a7c9e0f\n");
    log_path_ = Path("logs/audit.log");
  }
  void TearDown() override {
    if (pid_ > 0) testing::Kill(pid_);
    std::filesystem::remove_all(dir_);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  int Serve() {
    static int n = 0;
    serve_log_ = Path("serve_" + std::to_string(++n) + ".log");
    pid_ = Spawn({"serve", "-m", model_, "--port", "0", "-t", "1", "--alias", "m", "--audit-log",
                  log_path_, "--audit-key-file", Path("audit.pem"), "--audit-checkpoint-records",
                  "4", "--audit-tokens", "--watermark-key-file", Path("wm.key")},
                 serve_log_);
    port_ = testing::WaitReady(pid_, serve_log_);
    if (port_ <= 0) ADD_FAILURE() << "the server did not start:\n" << ReadAll(serve_log_);
    return port_;
  }
  // SIGTERM: drains, closes the audit log, exits 0.
  void Stop() {
    ::kill(pid_, SIGTERM);
    EXPECT_EQ(WaitExit(pid_, std::chrono::seconds(30)), 0) << ReadAll(serve_log_);
    pid_ = -1;
  }
  std::optional<RawResponse> Post(const std::string& path, const Json& body) {
    RawClient c(port_);
    const std::string b = body.dump();
    if (!c.connected() || !c.Send("POST " + path +
                                  " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                                  "Content-Length: " +
                                  std::to_string(b.size()) + "\r\n\r\n" + b)) {
      return std::nullopt;
    }
    return c.ReadResponse(std::chrono::seconds(60));
  }
  Ran Run(const std::vector<std::string>& args) {
    static int n = 0;
    const std::string out = Path("cli_" + std::to_string(++n) + ".log");
    const pid_t pid = Spawn(args, out);
    Ran r;
    r.code = WaitExit(pid, std::chrono::seconds(60));
    r.output = ReadAll(out);
    return r;
  }
  std::vector<std::string> LogFiles() const {
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(dir_ / "logs")) {
      files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    return files;
  }
  Ran Verify(const std::vector<std::string>& files, bool with_key = true) {
    std::vector<std::string> args = {"audit", "verify"};
    if (with_key) args.insert(args.end(), {"--key-file", Path("audit.pub")});
    args.insert(args.end(), files.begin(), files.end());
    return Run(args);
  }

  std::filesystem::path dir_;
  std::string model_, log_path_, serve_log_;
  pid_t pid_ = -1;
  int port_ = -1;
};

Json Chat(bool stream, int max_tokens = 12) {
  return {{"model", "m"},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"stream", stream},
          {"messages", {{{"role", "user"}, {"content", "Once upon a time"}}}}};
}

TEST_F(AuditProcessTest, EveryRequestIsRecordedTheChainVerifiesAndWatermarksCheck) {
  ASSERT_GT(Serve(), 0);
  // Whole, then the same again (an L1 hit), streamed chat, a streamed
  // message, a completion, an embedding, a refused request.
  auto whole = Post("/v1/chat/completions", Chat(false));
  ASSERT_TRUE(whole && whole->status == 200);
  auto hit = Post("/v1/chat/completions", Chat(false));
  ASSERT_TRUE(hit && hit->status == 200);
  EXPECT_EQ(hit->Header("x-strata-cache"), "l1");
  auto stream = Post("/v1/chat/completions", Chat(true));
  ASSERT_TRUE(stream && stream->status == 200);
  auto message = Post("/v1/messages", {{"model", "m"},
                                       {"max_tokens", 10},
                                       {"stream", true},
                                       {"messages", {{{"role", "user"}, {"content", "Hi"}}}}});
  ASSERT_TRUE(message && message->status == 200);
  auto completion = Post("/v1/completions", {{"model", "m"}, {"max_tokens", 6}, {"prompt", "A"}});
  ASSERT_TRUE(completion && completion->status == 200);
  auto embedding = Post("/v1/embeddings", {{"model", "m"}, {"input", "hello"}});
  ASSERT_TRUE(embedding && embedding->status == 200);
  auto bad = Post("/v1/chat/completions", {{"model", "m"}, {"messages", "not a list"}});
  ASSERT_TRUE(bad && bad->status == 400);
  auto unknown = Post(
      "/v1/messages",
      {{"model", "nope"}, {"max_tokens", 3}, {"messages", {{{"role", "user"}, {"content", "x"}}}}});
  ASSERT_TRUE(unknown && unknown->status == 404);

  // Whole answers carry the header; streams end with the comment line.
  const std::string mark = whole->Header("x-strata-watermark");
  EXPECT_EQ(mark.rfind("v1:", 0), 0u) << mark;
  EXPECT_NE(hit->Header("x-strata-watermark"), "");
  EXPECT_NE(hit->Header("x-strata-watermark"), mark);  // another request id
  EXPECT_NE(completion->Header("x-strata-watermark"), "");
  EXPECT_EQ(bad->Header("x-strata-watermark"), "");
  EXPECT_EQ(embedding->Header("x-strata-watermark"), "");
  for (const auto* s : {&*stream, &*message}) {
    const size_t at = s->body.find("\n: x-strata-watermark: v1:");
    EXPECT_NE(at, std::string::npos) << s->body;
  }
  EXPECT_LT(stream->body.find(": x-strata-watermark"), stream->body.find("data: [DONE]"));
  Stop();

  // The records: one per request, in the order answered.
  const std::string log_text = ReadAll(log_path_);
  std::map<std::string, Json> by_id;
  for (const std::string& line : Lines(log_text)) {
    const Json j = Json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << line;
    if (j["type"] == "request") by_id[j["id"].get<std::string>()] = j;
  }
  EXPECT_EQ(by_id.size(), 8u);
  const Json& w = by_id[whole->Header("x-request-id")];
  EXPECT_EQ(w["cache"], "miss");
  EXPECT_EQ(w["watermark"], mark);
  EXPECT_EQ(w["status"], 200);
  EXPECT_EQ(w["backend_kind"], "local");
  EXPECT_EQ(w["completion_tokens"], w["tokens"][0]["ids"].size());  // --audit-tokens
  EXPECT_EQ(w["tokens"][0]["ids"].size(), w["tokens"][0]["logprobs"].size());
  const Json& h = by_id[hit->Header("x-request-id")];
  EXPECT_EQ(h["cache"], "l1");
  EXPECT_EQ(h["response_sha256"], w["response_sha256"]);  // the same answer
  EXPECT_EQ(h["request_sha256"], w["request_sha256"]);    // the same body
  EXPECT_EQ(h["tokens"], w["tokens"]);
  EXPECT_EQ(by_id[stream->Header("x-request-id")]["stream"], true);
  EXPECT_EQ(by_id[message->Header("x-request-id")]["endpoint"], "/v1/messages");
  const Json& b = by_id[bad->Header("x-request-id")];
  EXPECT_EQ(b["status"], 400);
  EXPECT_EQ(b["outcome"], "error");
  EXPECT_EQ(b["error"], "invalid_field");
  EXPECT_TRUE(b["response_sha256"].is_null());
  EXPECT_EQ(by_id[unknown->Header("x-request-id")]["error"], "model_not_found");
  EXPECT_EQ(by_id[embedding->Header("x-request-id")]["endpoint"], "/v1/embeddings");

  // The log verifies, checkpoints and all.
  Ran ok = Verify({log_path_});
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ok.output.find("INTACT"), std::string::npos) << ok.output;
  EXPECT_NE(ok.output.find("verified with key"), std::string::npos) << ok.output;
  Ran unkeyed = Verify({log_path_}, /*with_key=*/false);
  EXPECT_EQ(unkeyed.code, 0);
  EXPECT_NE(unkeyed.output.find("NOT verified"), std::string::npos) << unkeyed.output;

  // Edited, removed, reordered: each fails naming the line.
  const std::vector<std::string> lines = Lines(log_text);
  ASSERT_GE(lines.size(), 10u);
  auto tampered = [&](const std::vector<std::string>& edited, const std::string& expect) {
    const std::string copy = Path("tampered.log");
    WriteFile(copy, Join(edited));
    Ran r = Verify({copy});
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find("TAMPERED: " + copy + " " + expect), std::string::npos) << r.output;
  };
  std::vector<std::string> edited = lines;
  const size_t tenant = edited[3].find("\"tenant\":\"default\"");
  ASSERT_NE(tenant, std::string::npos) << edited[3];
  edited[3].replace(tenant, 18, "\"tenant\":\"someone\"");
  tampered(edited, "line 4");
  std::vector<std::string> removed = lines;
  removed.erase(removed.begin() + 3);
  tampered(removed, "line 4");
  std::vector<std::string> swapped = lines;
  std::swap(swapped[2], swapped[3]);
  tampered(swapped, "line 3");

  // Watermarks: the whole answer by its header, the streams by their comment.
  const std::string body_file = Path("whole.json");
  WriteFile(body_file, whole->body);
  Ran valid = Run({"watermark", "verify", "--key-file", Path("wm.key"), "--response", body_file,
                   "--watermark", mark});
  EXPECT_EQ(valid.code, 0) << valid.output;
  EXPECT_NE(valid.output.find("VALID"), std::string::npos);
  for (const auto* s : {&*stream, &*message}) {
    const std::string sse = Path("stream.sse");
    WriteFile(sse, s->body);
    Ran r = Run({"watermark", "verify", "--key-file", Path("wm.key"), "--response", sse});
    EXPECT_EQ(r.code, 0) << r.output << s->body;
  }
  // The text alone, with the request id and model.
  const Json answer = Json::parse(whole->body);
  const std::string text = answer["choices"][0]["message"]["content"];
  Ran by_text =
      Run({"watermark", "verify", "--key-file", Path("wm.key"), "--request-id",
           whole->Header("x-request-id"), "--model", "m", "--watermark", mark, "--text", text});
  EXPECT_EQ(by_text.code, 0) << by_text.output;
  Ran changed = Run({"watermark", "verify", "--key-file", Path("wm.key"), "--request-id",
                     whole->Header("x-request-id"), "--model", "m", "--watermark", mark, "--text",
                     text + "!"});
  EXPECT_EQ(changed.code, 1) << changed.output;
  EXPECT_NE(changed.output.find("INVALID"), std::string::npos);
  Ran usage = Run({"watermark", "verify", "--key-file", Path("wm.key"), "--text", "x"});
  EXPECT_EQ(usage.code, 2) << usage.output;

  // A restart continues the chain in a new file; both verify together.
  ASSERT_GT(Serve(), 0);
  auto after = Post("/v1/chat/completions", Chat(false, 4));
  ASSERT_TRUE(after && after->status == 200);
  Stop();
  const std::vector<std::string> files = LogFiles();
  ASSERT_EQ(files.size(), 2u);
  Ran both = Verify(files);
  EXPECT_EQ(both.code, 0) << both.output;
  EXPECT_NE(both.output.find("2 file(s)"), std::string::npos) << both.output;
  Ran only_new = Verify({log_path_});  // the first file left out: checked from where it starts
  EXPECT_EQ(only_new.code, 0) << only_new.output;
  EXPECT_NE(only_new.output.find("the chain starts at seq"), std::string::npos);
}

TEST_F(AuditProcessTest, BadAuditFlagsAreUsageErrorsNamingTheFlag) {
  Ran r = Run({"serve", "-m", model_, "--audit-tokens"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--audit-tokens needs --audit-log"), std::string::npos) << r.output;
  r = Run({"serve", "-m", model_, "--audit-log", log_path_, "--audit-sync-ms", "0"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--audit-sync-ms 0 is outside [1, 60000]"), std::string::npos);
  WriteFile(Path("short.key"), "too short");
  r = Run({"serve", "-m", model_, "--port", "0", "--watermark-key-file", Path("short.key")});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("short.key"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("too short"), std::string::npos) << r.output;  // never the key
  r = Run({"audit", "verify", "--key-file", Path("short.key"), log_path_});
  EXPECT_EQ(r.code, 2) << r.output;
  r = Run({"audit", "verify", Path("missing.log")});
  EXPECT_EQ(r.code, 1) << r.output;
}

}  // namespace
}  // namespace strata
