// Unit tests of the load generator's pure parts: trace parsers, the Poisson
// schedule, prompt construction, the SSE/OpenAI stream reader, the per-request
// measuring rules and the statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "loadgen/openai.h"
#include "loadgen/recorder.h"
#include "loadgen/schedule.h"
#include "loadgen/stats.h"
#include "testing/shared_data.h"
#include "tune/prompt_text.h"
#include "tune/trace.h"

namespace strata::loadgen {
namespace {

// The trace parsers are the tuner's (tune/trace.h); the load generator replays them.
using namespace strata::tune;

std::string ReadShared(const std::string& relative) {
  std::ifstream in(testing::SharedPath(relative), std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int64_t CountWords(const std::string& s) {
  if (s.empty()) return 0;
  return static_cast<int64_t>(std::count(s.begin(), s.end(), ' ')) + 1;
}

// ---------------------------------------------------------------- traces

TEST(AzureTrace, ParsesRowsAndRebasesArrivalsToTheFirstRow) {
  const std::string text =
      "TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
      "2023-11-16 18:17:03.9799600,4808,10\r\n"
      "2023-11-16 18:17:04.0319600,3180,8\r\n"
      "2023-11-16 18:18:04.5000000,100,200";  // no trailing newline, as in the real file
  auto t = ParseAzureCsv(text);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 3u);
  EXPECT_DOUBLE_EQ(t->requests[0].arrival_s, 0);
  EXPECT_NEAR(t->requests[1].arrival_s, 0.052, 1e-6);
  EXPECT_NEAR(t->requests[2].arrival_s, 60.52004, 1e-6);
  EXPECT_EQ(t->requests[0].prompt_tokens, 4808);
  EXPECT_EQ(t->requests[0].output_tokens, 10);
  EXPECT_EQ(t->requests[2].output_tokens, 200);
  EXPECT_TRUE(t->requests[0].hash_ids.empty());
}

TEST(AzureTrace, ABadRowIsAnErrorNamingItsLine) {
  auto t = ParseAzureCsv(
      "TIMESTAMP,ContextTokens,GeneratedTokens\n"
      "2023-11-16 18:17:03.9,10,1\n"
      "2023-11-16 18:17:04.0,ten,1\n");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("line 3"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("'ten'"), std::string::npos);
  auto bad_time = ParseAzureCsv("TIMESTAMP,ContextTokens,GeneratedTokens\n16/11/2023,1,1\n");
  ASSERT_FALSE(bad_time.ok());
  EXPECT_NE(bad_time.status().message().find("line 2"), std::string::npos);
  auto no_column = ParseAzureCsv("time,in,out\n");
  ASSERT_FALSE(no_column.ok());
  EXPECT_NE(no_column.status().message().find("TIMESTAMP"), std::string::npos);
}

TEST(DateTime, ParsesCalendarTimesAsUtcSeconds) {
  auto a = ParseDateTimeSeconds("1970-01-02 00:00:01.5");
  ASSERT_TRUE(a.ok());
  EXPECT_DOUBLE_EQ(*a, 86401.5);
  auto b = ParseDateTimeSeconds("2000-03-01 00:00:00");
  ASSERT_TRUE(b.ok());
  EXPECT_DOUBLE_EQ(*b, 951868800.0);  // date -u -d 2000-03-01 +%s
  EXPECT_FALSE(ParseDateTimeSeconds("2023-13-01 00:00:00").ok());
  EXPECT_FALSE(ParseDateTimeSeconds("2023-11-16 18:17:03.").ok());
  EXPECT_FALSE(ParseDateTimeSeconds("2023-11-16").ok());
}

TEST(MooncakeTrace, ParsesMillisecondsTokenCountsAndHashIds) {
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
      "{\"timestamp\": 1500, \"input_length\": 600, \"output_length\": 7, \"hash_ids\": [0, 2]}\n"
      "\n";
  auto t = ParseMooncakeJsonl(text);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->requests.size(), 2u);
  EXPECT_DOUBLE_EQ(t->requests[1].arrival_s, 1.5);
  EXPECT_EQ(t->requests[1].prompt_tokens, 600);
  EXPECT_EQ(t->requests[1].output_tokens, 7);
  EXPECT_EQ(t->requests[1].hash_ids, (std::vector<int64_t>{0, 2}));
}

TEST(MooncakeTrace, ABadLineIsAnErrorNamingItsLine) {
  auto t = ParseMooncakeJsonl(
      "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5, \"hash_ids\": [0]}\n"
      "{\"timestamp\": 1, \"input_length\": \"10\", \"output_length\": 5}\n");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("line 2"), std::string::npos) << t.status().message();
  EXPECT_NE(t.status().message().find("input_length"), std::string::npos);
  EXPECT_FALSE(ParseMooncakeJsonl("{not json\n").ok());
  EXPECT_FALSE(ParseMooncakeJsonl("").ok());
}

TEST(BurstGptTrace, ReadsBothReleasedLayoutsAndSkipsFailedRows) {
  auto v1 = ParseBurstGptCsv(
      "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
      "5,ChatGPT,472,18,490,Conversation log\n"
      "45,ChatGPT,0,0,0,Conversation log\n"
      "118,GPT-4,417,276,693,Conversation log\n");
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  ASSERT_EQ(v1->requests.size(), 2u);
  EXPECT_EQ(v1->skipped_rows, 1);
  EXPECT_DOUBLE_EQ(v1->requests[1].arrival_s, 113);
  EXPECT_EQ(v1->requests[1].prompt_tokens, 417);
  EXPECT_EQ(v1->requests[1].output_tokens, 276);

  auto v3 = ParseBurstGptCsv(
      "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log "
      "Type\n"
      "19440110.0,1722ac82,43,GPT-4,906,446,1352,Conversation log\n"
      "19454781.0,,21,GPT-4,264,171,435,API log\n");
  ASSERT_TRUE(v3.ok()) << v3.status().ToString();
  ASSERT_EQ(v3->requests.size(), 2u);
  EXPECT_DOUBLE_EQ(v3->requests[1].arrival_s, 14671);
  EXPECT_EQ(v3->requests[1].prompt_tokens, 264);
}

TEST(TraceFormat, NamesAreParsed) {
  EXPECT_EQ(*ParseTraceFormat("azure"), TraceFormat::kAzure);
  EXPECT_EQ(*ParseTraceFormat("mooncake"), TraceFormat::kMooncake);
  EXPECT_EQ(*ParseTraceFormat("burstgpt"), TraceFormat::kBurstGpt);
  EXPECT_FALSE(ParseTraceFormat("sharegpt").ok());
}

TEST(SliceTrace, CutsScalesAndCaps) {
  std::vector<RequestSpec> in;
  for (int i = 0; i < 10; ++i) {
    in.push_back(
        {.arrival_s = 10.0 * i, .prompt_tokens = 1000 + i, .output_tokens = 100, .hash_ids = {}});
  }
  in[5].hash_ids = {1, 2};
  const auto out = SliceTrace(in, {.start_s = 25,
                                   .max_requests = 4,
                                   .speedup = 2,
                                   .max_prompt_tokens = 600,
                                   .max_output_tokens = 50,
                                   .block_scale = 0.5});
  ASSERT_EQ(out.size(), 4u);  // rows 3..6
  EXPECT_DOUBLE_EQ(out[0].arrival_s, 0);
  EXPECT_DOUBLE_EQ(out[1].arrival_s, 5);
  EXPECT_DOUBLE_EQ(out[3].arrival_s, 15);
  EXPECT_EQ(out[0].prompt_tokens, 600);  // capped
  EXPECT_EQ(out[2].prompt_tokens, 503);  // 1005 * 0.5 (has hash_ids), under the cap
  EXPECT_EQ(out[0].output_tokens, 50);
  const auto all = SliceTrace(in, {});
  ASSERT_EQ(all.size(), 10u);
  EXPECT_EQ(all[9].prompt_tokens, 1009);
  EXPECT_DOUBLE_EQ(all[9].arrival_s, 90);
}

TEST(RealTraces, AzureFilesParseCompletely) {
  for (const auto& [file, rows, span_s] :
       {std::tuple{"data/traces/AzureLLMInferenceTrace_code.csv", 8819u, 3435.948056},
        std::tuple{"data/traces/AzureLLMInferenceTrace_conv.csv", 19366u, 3501.721937}}) {
    if (!testing::HaveShared(file)) {
      GTEST_SKIP() << "needs ../shared/" << file << ", which is not present";
    }
    auto t = ParseAzureCsv(ReadShared(file));
    ASSERT_TRUE(t.ok()) << file << ": " << t.status().ToString();
    EXPECT_EQ(t->requests.size(), rows) << file;
    EXPECT_NEAR(t->requests.back().arrival_s, span_s, 1e-3) << file;
    for (const RequestSpec& r : t->requests) {
      ASSERT_GT(r.prompt_tokens, 0);
      ASSERT_GT(r.output_tokens, 0);
    }
  }
}

TEST(RealTraces, MooncakeFilesHaveOneHashIdPer512Tokens) {
  for (const auto& [file, rows] :
       {std::pair{"data/traces/mooncake_conversation_trace.jsonl", 12031u},
        std::pair{"data/traces/mooncake_synthetic_trace.jsonl", 3993u}}) {
    if (!testing::HaveShared(file)) {
      GTEST_SKIP() << "needs ../shared/" << file << ", which is not present";
    }
    auto t = ParseMooncakeJsonl(ReadShared(file));
    ASSERT_TRUE(t.ok()) << file << ": " << t.status().ToString();
    EXPECT_EQ(t->requests.size(), rows) << file;
    for (const RequestSpec& r : t->requests) {
      ASSERT_EQ(static_cast<int64_t>(r.hash_ids.size()),
                (r.prompt_tokens + kMooncakeBlockTokens - 1) / kMooncakeBlockTokens);
    }
  }
}

TEST(RealTraces, BurstGptSlicesParseAndSkipFailures) {
  for (const auto& [file, skipped] : {std::pair{"data/traces/burstgpt_1_first400.csv", 17},
                                      std::pair{"data/traces/burstgpt_3_first400.csv", 1}}) {
    if (!testing::HaveShared(file)) {
      GTEST_SKIP() << "needs ../shared/" << file << ", which is not present";
    }
    auto t = ParseBurstGptCsv(ReadShared(file));
    ASSERT_TRUE(t.ok()) << file << ": " << t.status().ToString();
    EXPECT_EQ(t->skipped_rows, skipped) << file;
    EXPECT_EQ(t->requests.size(), 400u - static_cast<size_t>(skipped)) << file;
  }
}

// ---------------------------------------------------------------- schedule

TEST(PoissonSchedule, IsFixedByTheSeed) {
  const auto a = PoissonArrivals(4.0, 1000, 42);
  const auto b = PoissonArrivals(4.0, 1000, 42);
  const auto c = PoissonArrivals(4.0, 1000, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  ASSERT_EQ(a.size(), 1000u);
  EXPECT_GT(a.front(), 0);
  for (size_t i = 1; i < a.size(); ++i) ASSERT_GE(a[i], a[i - 1]);
  // The duration form draws the same process.
  const auto until = PoissonArrivalsUntil(4.0, a[99], 42);
  ASSERT_EQ(until.size(), 99u);
  EXPECT_EQ(std::vector<double>(a.begin(), a.begin() + 99), until);
}

TEST(PoissonSchedule, HasTheRequestedMeanRateAndExponentialGaps) {
  const double rate = 5;
  const auto a = PoissonArrivals(rate, 20000, 7);
  // Mean gap 1/rate: the sample mean of 20000 gaps has a relative sd of 0.7 %.
  EXPECT_NEAR(a.back() / 20000.0, 1.0 / rate, 0.03 / rate);
  // Exponential: P(gap > mean) = e^-1.
  int64_t longer = 0;
  for (size_t i = 1; i < a.size(); ++i) longer += (a[i] - a[i - 1]) > 1.0 / rate ? 1 : 0;
  EXPECT_NEAR(static_cast<double>(longer) / 19999.0, std::exp(-1.0), 0.02);
  const auto until = PoissonArrivalsUntil(rate, 2000, 7);
  EXPECT_NEAR(static_cast<double>(until.size()), rate * 2000, 0.05 * rate * 2000);
  for (double t : until) ASSERT_LT(t, 2000);
  EXPECT_TRUE(PoissonArrivals(0, 10, 1).empty());
}

// ---------------------------------------------------------------- prompts

TEST(Prompt, WordListIsDistinctLowercaseWords) {
  std::set<std::string_view> seen;
  for (std::string_view w : PromptBuilder::Words()) {
    ASSERT_FALSE(w.empty());
    for (char c : w) ASSERT_TRUE(c >= 'a' && c <= 'z') << w;
    ASSERT_TRUE(seen.insert(w).second) << "duplicate word " << w;
  }
  EXPECT_EQ(seen.size(), 256u);
}

TEST(Prompt, LengthFollowsWordsPerTokenAndIsDeterministic) {
  const PromptBuilder b({.seed = 1});
  EXPECT_EQ(CountWords(b.Unique(0, 100)), 100);
  EXPECT_EQ(b.Unique(3, 50), b.Unique(3, 50));
  EXPECT_NE(b.Unique(3, 50), b.Unique(4, 50));
  EXPECT_NE(b.Unique(3, 50), PromptBuilder({.seed = 2}).Unique(3, 50));
  EXPECT_EQ(b.Unique(0, 0), "");
  const PromptBuilder dense({.seed = 1, .words_per_token = 0.75});
  EXPECT_EQ(CountWords(dense.Unique(0, 100)), 75);
  // The system prompt is the same for everyone and unlike request prompts.
  EXPECT_EQ(b.System(40), b.System(40));
  EXPECT_EQ(CountWords(b.System(40)), 40);
  EXPECT_NE(b.System(40), b.Unique(0, 40));
}

TEST(Prompt, SeveralSystemPromptsAreDistinctAndDrawnUniformly) {
  const PromptBuilder b({.seed = 1});
  EXPECT_EQ(b.System(40, 0), b.System(40));  // a one-prompt run is unchanged
  EXPECT_NE(b.System(40, 1), b.System(40, 0));
  EXPECT_NE(b.System(40, 2), b.System(40, 1));
  EXPECT_EQ(CountWords(b.System(40, 3)), 40);
  EXPECT_EQ(b.SystemIndex(5, 1), 0);
  std::vector<int> count(6, 0);
  for (int64_t i = 0; i < 6000; ++i) {
    const int64_t k = b.SystemIndex(i, 6);
    ASSERT_GE(k, 0);
    ASSERT_LT(k, 6);
    ++count[static_cast<size_t>(k)];
    EXPECT_EQ(k, b.SystemIndex(i, 6));
  }
  for (int c : count) EXPECT_NEAR(c, 1000, 150);
  // Another seed, another draw.
  const PromptBuilder other({.seed = 2});
  int same = 0;
  for (int64_t i = 0; i < 600; ++i) same += b.SystemIndex(i, 6) == other.SystemIndex(i, 6);
  EXPECT_LT(same, 200);
}

TEST(Prompt, EqualHashIdPrefixesGiveEqualTextPrefixes) {
  const PromptBuilder b({.seed = 9});
  const int64_t block = 20;
  const std::vector<int64_t> x = {0, 1, 2};
  const std::vector<int64_t> y = {0, 1, 5};
  const std::vector<int64_t> z = {3, 1, 2};
  const std::string px = b.Mooncake(x, 3 * block, block);
  const std::string py = b.Mooncake(y, 3 * block, block);
  const std::string pz = b.Mooncake(z, 3 * block, block);
  const std::string shared = b.Block(0, block) + " " + b.Block(1, block) + " ";
  EXPECT_EQ(px.substr(0, shared.size()), shared);
  EXPECT_EQ(py.substr(0, shared.size()), shared);
  EXPECT_NE(px, py);
  EXPECT_EQ(px, shared + b.Block(2, block));
  // A different first block shares nothing at the start, even with equal later ids.
  EXPECT_NE(pz.substr(0, b.Block(0, block).size()), b.Block(0, block));
  // Same ids, same text, whatever the request.
  EXPECT_EQ(b.Mooncake(x, 3 * block, block, 1), b.Mooncake(x, 3 * block, block, 2));
}

TEST(Prompt, MooncakeCutsTheLastBlockAndFillsPastTheIds) {
  const PromptBuilder b({.seed = 9});
  const std::vector<int64_t> ids = {7, 8};
  const std::string p = b.Mooncake(ids, 30, 20);
  EXPECT_EQ(CountWords(p), 30);
  const std::string block8 = b.Block(8, 20);
  EXPECT_EQ(p, b.Block(7, 20) + " " + b.Block(8, 10));
  EXPECT_EQ(block8.substr(0, b.Block(8, 10).size()), b.Block(8, 10));  // cut = prefix
  // More tokens than the ids cover: request-private words follow.
  const std::string longer = b.Mooncake(ids, 50, 20, 3);
  EXPECT_EQ(CountWords(longer), 50);
  EXPECT_EQ(longer.substr(0, b.Block(7, 20).size()), b.Block(7, 20));
  // A cap below one block keeps just that block's start.
  EXPECT_EQ(b.Mooncake(ids, 5, 20), b.Block(7, 5));
}

// ---------------------------------------------------------------- requests

TEST(RequestBody, ChatCarriesSystemAndUserMessagesAndAlwaysStreams) {
  const auto j = nlohmann::json::parse(BuildRequestBody({.endpoint = Endpoint::kChat,
                                                         .model = "m",
                                                         .ignore_eos = true,
                                                         .temperature = 0.5,
                                                         .seed = std::nullopt,
                                                         .extra_json = ""},
                                                        "sys words", "user words", 16));
  EXPECT_EQ(j["model"], "m");
  ASSERT_EQ(j["messages"].size(), 2u);
  EXPECT_EQ(j["messages"][0]["role"], "system");
  EXPECT_EQ(j["messages"][0]["content"], "sys words");
  EXPECT_EQ(j["messages"][1]["role"], "user");
  EXPECT_EQ(j["max_tokens"], 16);
  EXPECT_EQ(j["stream"], true);
  EXPECT_EQ(j["stream_options"]["include_usage"], true);
  EXPECT_EQ(j["ignore_eos"], true);
  EXPECT_EQ(j["temperature"], 0.5);
  EXPECT_FALSE(j.contains("seed"));
}

TEST(RequestBody, CompletionsJoinSystemAndPromptAndOmitUnsetFields) {
  const auto j = nlohmann::json::parse(BuildRequestBody({.endpoint = Endpoint::kCompletions,
                                                         .model = "",
                                                         .ignore_eos = false,
                                                         .temperature = std::nullopt,
                                                         .seed = std::nullopt,
                                                         .extra_json = ""},
                                                        "sys", "prompt", 4));
  EXPECT_EQ(j["prompt"], "sys\nprompt");
  EXPECT_FALSE(j.contains("model"));
  EXPECT_FALSE(j.contains("ignore_eos"));
  EXPECT_FALSE(j.contains("temperature"));
  EXPECT_FALSE(j.contains("messages"));
  EXPECT_EQ(EndpointPath(Endpoint::kCompletions), "/v1/completions");
}

TEST(RequestBody, ExtraBodyMembersAreAddedAndOverrideTheDefaults) {
  const auto j = nlohmann::json::parse(
      BuildRequestBody({.endpoint = Endpoint::kChat,
                        .model = "m",
                        .ignore_eos = false,
                        .temperature = 0.0,
                        .seed = std::nullopt,
                        .extra_json = R"({"cache":{"prefix":false},"temperature":0.7})"},
                       "", "q", 8));
  EXPECT_EQ(j["cache"]["prefix"], false);  // added
  EXPECT_EQ(j["temperature"], 0.7);        // overridden
  EXPECT_EQ(j["messages"].size(), 1u);     // the rest untouched
  EXPECT_EQ(j["stream"], true);
  BodyOptions bad;
  bad.extra_json = "[1]";
  EXPECT_THROW(BuildRequestBody(bad, "", "q", 8), std::invalid_argument);
  bad.extra_json = "{oops";
  EXPECT_THROW(BuildRequestBody(bad, "", "q", 8), std::invalid_argument);
}

TEST(PromptFile, ReadsStringsAndPromptObjectsInOrderSkippingBlankLines) {
  const auto p = ParsePromptFile(
      "\"What is a GGUF file?\"\r\n"
      "\n"
      "   \n"
      "{\"prompt\": \"two\\nlines\", \"id\": 7}\n"
      "\"What is a GGUF file?\"");  // repeats are kept: they are the workload
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->size(), 3u);
  EXPECT_EQ((*p)[0], "What is a GGUF file?");
  EXPECT_EQ((*p)[1], "two\nlines");
  EXPECT_EQ((*p)[2], (*p)[0]);
}

TEST(PromptFile, ABadLineOrNoPromptIsAnErrorNamingTheLine) {
  const auto bad = ParsePromptFile("\"ok\"\n\nplain text\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 3"), std::string::npos) << bad.status().message();
  EXPECT_FALSE(ParsePromptFile("{\"prompt\": 3}").ok());
  EXPECT_FALSE(ParsePromptFile("\n\n").ok());
}

// ---------------------------------------------------------------- SSE

TEST(SseParser, ReassemblesEventsSplitAnywhere) {
  const std::string stream =
      ": comment\r\n"
      "data: {\"a\":1}\r\n\r\n"
      "event: ping\ndata: {}\n\n"
      "data: line1\ndata:line2\n\n"
      "data: [DONE]\n\n";
  // Every split point gives the same events.
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser p;
    auto events = p.Feed(std::string_view(stream).substr(0, cut));
    auto rest = p.Feed(std::string_view(stream).substr(cut));
    events.insert(events.end(), rest.begin(), rest.end());
    ASSERT_EQ(events.size(), 4u) << "cut at " << cut;
    EXPECT_EQ(events[0].data, "{\"a\":1}");
    EXPECT_EQ(events[0].event, "");
    EXPECT_EQ(events[1].event, "ping");
    EXPECT_EQ(events[2].data, "line1\nline2");
    EXPECT_EQ(events[3].data, "[DONE]");
    EXPECT_FALSE(p.HasPartial());
  }
  SseParser p;
  EXPECT_TRUE(p.Feed("data: {\"half\"").empty());
  EXPECT_TRUE(p.HasPartial());
}

TEST(StreamFrames, ReadChatAndCompletionChunksUsageAndDone) {
  auto role = InterpretEvent(
      {"",
       R"({"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})"});
  EXPECT_EQ(role.kind, StreamFrame::Kind::kChunk);
  EXPECT_EQ(role.content, "");
  auto chat = InterpretEvent(
      {"", R"({"choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]})"});
  EXPECT_EQ(chat.content, "Hel");
  EXPECT_FALSE(chat.finished);
  auto text =
      InterpretEvent({"", R"({"choices":[{"index":0,"text":"lo","finish_reason":"length"}]})"});
  EXPECT_EQ(text.content, "lo");
  EXPECT_TRUE(text.finished);
  EXPECT_EQ(text.finish_reason, "length");
  auto usage = InterpretEvent(
      {"",
       R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}})"});
  EXPECT_EQ(usage.kind, StreamFrame::Kind::kChunk);
  EXPECT_EQ(usage.prompt_tokens, 12);
  EXPECT_EQ(usage.completion_tokens, 5);
  EXPECT_EQ(InterpretEvent({"", "[DONE]"}).kind, StreamFrame::Kind::kDone);
  EXPECT_EQ(InterpretEvent({"ping", "{}"}).kind, StreamFrame::Kind::kIgnored);
}

TEST(StreamFrames, RecogniseErrorFramesInAllThreeShapes) {
  // OpenAI / strata: an error object in a data line.
  SseParser p;
  auto events = p.Feed(
      "data: {\"error\":{\"message\":\"the request timed out\",\"type\":\"server_error\"}}\n\n"
      "event: error\ndata: "
      "{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"busy\"}}\n\n"
      "error: {\"code\":500,\"message\":\"slot failed\",\"type\":\"server_error\"}\n\n");
  ASSERT_EQ(events.size(), 3u);
  const auto a = InterpretEvent(events[0]);
  EXPECT_EQ(a.kind, StreamFrame::Kind::kError);
  EXPECT_EQ(a.error, "server_error: the request timed out");
  const auto b = InterpretEvent(events[1]);
  EXPECT_EQ(b.kind, StreamFrame::Kind::kError);
  EXPECT_EQ(b.error, "overloaded_error: busy");
  const auto c = InterpretEvent(events[2]);  // llama-server's "error:" field
  EXPECT_EQ(c.kind, StreamFrame::Kind::kError);
  EXPECT_EQ(c.error, "server_error: slot failed");
  const auto junk = InterpretEvent({"", "not json"});
  EXPECT_EQ(junk.kind, StreamFrame::Kind::kMalformed);
  EXPECT_EQ(InterpretEvent({"", R"({"id":"x"})"}).kind, StreamFrame::Kind::kMalformed);
}

TEST(ErrorBody, MessageIsTakenFromTheKnownShapes) {
  EXPECT_EQ(ErrorMessageFromBody(R"({"error":{"message":"too many","type":"rate_limit_error"}})"),
            "rate_limit_error: too many");
  EXPECT_EQ(ErrorMessageFromBody(R"({"error":"plain"})"), "plain");
  EXPECT_EQ(ErrorMessageFromBody(R"({"message":"m"})"), "m");
  EXPECT_EQ(ErrorMessageFromBody("Internal Server Error"), "Internal Server Error");
}

// ---------------------------------------------------------------- measuring

RequestSample Base() {
  RequestSample s;
  s.index = 3;
  s.scheduled_s = 0.9;
  s.sent_s = 1.0;
  s.target_prompt_tokens = 10;
  s.max_tokens = 4;
  return s;
}

std::string ChatChunk(const std::string& content) {
  return "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + content +
         "\"},\"finish_reason\":null}]}\n\n";
}

TEST(StreamRecorder, MeasuresTtftTpotAndUsageOfAStream) {
  StreamRecorder r(Base());
  r.OnStatus(200);
  r.OnBytes(
      "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
      1.05);  // role only: not a token
  r.OnBytes(ChatChunk("a"), 1.25);
  r.OnBytes(ChatChunk("b") + ChatChunk("c"), 1.35);  // two tokens in one read
  r.OnBytes(ChatChunk("d").substr(0, 10), 1.40);     // half a chunk ...
  r.OnBytes(ChatChunk("d").substr(10), 1.55);        // ... completed here
  r.OnBytes(
      "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":14,\"completion_tokens\":4}}\n\n"
      "data: [DONE]\n\n",
      1.56);
  const RequestSample s = r.Finish(1.6, TransportEnd::kComplete);
  EXPECT_EQ(s.outcome, Outcome::kOk);
  EXPECT_EQ(s.error_kind, "");
  EXPECT_NEAR(*s.TtftS(), 0.25, 1e-12);
  EXPECT_EQ(s.content_chunks, 4);
  EXPECT_EQ(s.completion_tokens, 4);
  EXPECT_EQ(s.prompt_tokens, 14);
  EXPECT_NEAR(*s.TpotS(), (1.55 - 1.25) / 3, 1e-12);
  EXPECT_NEAR(s.E2eS(), 0.6, 1e-12);
  EXPECT_EQ(s.finish_reason, "length");
  EXPECT_EQ(s.index, 3);
}

TEST(StreamRecorder, TpotCountsUsageTokensWhenChunksCarrySeveral) {
  StreamRecorder r(Base());
  r.OnStatus(200);
  r.OnBytes(ChatChunk("ab"), 2.0);
  r.OnBytes(ChatChunk("cd") +
                "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,"
                "\"completion_tokens\":5}}\n\ndata: [DONE]\n\n",
            3.0);
  const RequestSample s = r.Finish(3.0, TransportEnd::kComplete);
  EXPECT_EQ(s.OutputTokens(), 5);
  EXPECT_NEAR(*s.TpotS(), 1.0 / 4, 1e-12);
  // Without usage the chunks are the tokens; one token has no TPOT.
  StreamRecorder one(Base());
  one.OnStatus(200);
  one.OnBytes(ChatChunk("x") + "data: [DONE]\n\n", 1.5);
  const RequestSample t = one.Finish(1.5, TransportEnd::kComplete);
  EXPECT_EQ(t.outcome, Outcome::kOk);
  EXPECT_EQ(t.OutputTokens(), 1);
  EXPECT_FALSE(t.TpotS().has_value());
}

TEST(StreamRecorder, ClassifiesEveryFailure) {
  {
    StreamRecorder r(Base());
    r.OnStatus(429);
    r.OnBytes(R"({"error":{"message":"queue is full","type":"rate_limit_error"}})", 1.1);
    const auto s = r.Finish(1.1, TransportEnd::kComplete);
    EXPECT_EQ(s.outcome, Outcome::kFailed);
    EXPECT_EQ(s.error_kind, "http_429");
    EXPECT_EQ(s.error_message, "rate_limit_error: queue is full");
  }
  {
    StreamRecorder r(Base());
    r.OnStatus(200);
    r.OnBytes(ChatChunk("a") + "data: {\"error\":{\"message\":\"boom\"}}\n\n", 1.2);
    const auto s = r.Finish(1.3, TransportEnd::kDropped, "Read");
    EXPECT_EQ(s.error_kind, "stream_error");  // the server's reason beats the drop
    EXPECT_EQ(s.error_message, "boom");
    EXPECT_TRUE(s.TtftS().has_value());
  }
  {
    StreamRecorder r(Base());
    r.OnStatus(200);
    r.OnBytes(ChatChunk("a"), 1.2);
    EXPECT_EQ(r.Finish(1.3, TransportEnd::kDropped, "Read").error_kind, "dropped");
  }
  {
    StreamRecorder r(Base());
    r.OnStatus(200);
    r.OnBytes(ChatChunk("a"), 1.2);
    EXPECT_EQ(r.Finish(1.3, TransportEnd::kComplete).error_kind, "incomplete_stream");
  }
  {
    StreamRecorder r(Base());
    EXPECT_EQ(r.Finish(1.0, TransportEnd::kConnect, "Connection").error_kind, "connect");
  }
  {
    StreamRecorder r(Base());
    r.OnStatus(200);
    EXPECT_EQ(r.Finish(9.0, TransportEnd::kTimeout, "late").error_kind, "timeout");
  }
  {
    StreamRecorder r(Base());
    r.OnStatus(200);
    r.OnBytes("data: <html>\n\ndata: [DONE]\n\n", 1.2);
    EXPECT_EQ(r.Finish(1.3, TransportEnd::kComplete).error_kind, "bad_response");
  }
  {
    StreamRecorder r(Base());
    r.OnStatus(200);
    const auto s = r.Finish(1.3, TransportEnd::kInterrupted, "Canceled");
    EXPECT_EQ(s.outcome, Outcome::kInterrupted);
  }
}

// ---------------------------------------------------------------- statistics

TEST(Percentile, IsTheNearestRankOfTheSortedSamples) {
  std::vector<double> v;
  for (int i = 1; i <= 20; ++i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 50), 10);
  EXPECT_EQ(Percentile(v, 95), 19);
  EXPECT_EQ(Percentile(v, 99), 20);
  EXPECT_EQ(Percentile(v, 100), 20);
  EXPECT_EQ(Percentile(v, 0), 1);
  EXPECT_EQ(Percentile(v, 5), 1);
  EXPECT_EQ(Percentile(v, 5.01), 2);
  // The textbook example: 15, 20, 35, 40, 50.
  const std::vector<double> w = {15, 20, 35, 40, 50};
  EXPECT_EQ(Percentile(w, 30), 20);
  EXPECT_EQ(Percentile(w, 40), 20);
  EXPECT_EQ(Percentile(w, 50), 35);
  EXPECT_EQ(Percentile(std::vector<double>{7}, 99), 7);
  EXPECT_TRUE(std::isnan(Percentile(std::vector<double>{}, 50)));
  // 1000 samples: P99 is the 990th.
  std::vector<double> k;
  for (int i = 1; i <= 1000; ++i) k.push_back(i);
  EXPECT_EQ(Percentile(k, 99), 990);
  EXPECT_EQ(Percentile(k, 99.9), 999);
}

TEST(Describe, SortsAndSummarisesAnyOrder) {
  const Distribution d = Describe({5, 1, 4, 2, 3});
  EXPECT_EQ(d.count, 5);
  EXPECT_DOUBLE_EQ(d.mean, 3);
  EXPECT_EQ(d.min, 1);
  EXPECT_EQ(d.p50, 3);
  EXPECT_EQ(d.p99, 5);
  EXPECT_EQ(d.max, 5);
  EXPECT_TRUE(std::isnan(Describe({}).p50));
}

TEST(Summarize, CountsOutcomesThroughputAndErrorsByKind) {
  std::vector<RequestSample> samples;
  for (int i = 0; i < 4; ++i) {
    RequestSample s;
    s.index = i;
    s.sent_s = i;
    s.first_token_s = i + 0.1 * (i + 1);
    s.last_token_s = s.first_token_s + 0.9;
    s.end_s = i + 1.5;
    s.completion_tokens = 10;
    s.prompt_tokens = 110;
    s.target_prompt_tokens = 100;
    s.max_tokens = 10;
    samples.push_back(s);
  }
  RequestSample bad;
  bad.outcome = Outcome::kFailed;
  bad.error_kind = "http_429";
  bad.error_message = "full";
  samples.push_back(bad);
  bad.error_kind = "timeout";
  samples.push_back(bad);
  samples.push_back(bad);
  RequestSample cut;
  cut.outcome = Outcome::kInterrupted;
  samples.push_back(cut);

  const Summary s = Summarize(samples, 10.0);
  EXPECT_EQ(s.requests, 8);
  EXPECT_EQ(s.ok, 4);
  EXPECT_EQ(s.failed, 3);
  EXPECT_EQ(s.interrupted, 1);
  EXPECT_DOUBLE_EQ(s.request_rate, 0.4);
  EXPECT_DOUBLE_EQ(s.output_token_rate, 4.0);
  EXPECT_EQ(s.errors.at("http_429"), 1);
  EXPECT_EQ(s.errors.at("timeout"), 2);
  EXPECT_EQ(s.error_examples.at("http_429"), "full");
  EXPECT_EQ(s.ttft_ms.count, 4);
  EXPECT_NEAR(s.ttft_ms.p50, 200, 1e-9);
  EXPECT_NEAR(s.ttft_ms.max, 400, 1e-9);
  EXPECT_NEAR(s.tpot_ms.p50, 100, 1e-9);
  EXPECT_NEAR(s.e2e_ms.p99, 1500, 1e-9);
  EXPECT_DOUBLE_EQ(s.reported_prompt_tokens_mean, 110);
  EXPECT_DOUBLE_EQ(s.target_prompt_tokens_mean, 100);

  const nlohmann::json j = SummaryJson(s);
  EXPECT_EQ(j["errors"]["timeout"]["count"], 2);
  EXPECT_EQ(j["ok"], 4);
  EXPECT_TRUE(j["ttft_ms"].contains("p99"));
  const std::string table = RenderTable(s, "title");
  EXPECT_NE(table.find("TTFT"), std::string::npos);
  EXPECT_NE(table.find("http_429"), std::string::npos);
  const nlohmann::json sj = SampleJson(samples[4]);
  EXPECT_EQ(sj["outcome"], "failed");
  EXPECT_EQ(sj["error_kind"], "http_429");
  EXPECT_TRUE(sj["ttft_ms"].is_null());
}

TEST(Summarize, CountsHowStrataServedTheOkRequests) {
  std::vector<RequestSample> samples;
  for (const char* c : {"miss", "l1", "l3", "l1", ""}) {  // "": no header (llama-server)
    StreamRecorder r(Base());
    r.OnStatus(200);
    if (*c != '\0') r.OnCacheHeader(c);
    r.OnBytes(ChatChunk("a") + "data: [DONE]\n\n", 1.2);
    samples.push_back(r.Finish(1.3, TransportEnd::kComplete));
  }
  EXPECT_EQ(samples[2].cache, "l3");
  EXPECT_EQ(samples[4].cache, "");
  StreamRecorder failed(Base());  // a failed request's header is not counted
  failed.OnStatus(200);
  failed.OnCacheHeader("l1");
  samples.push_back(failed.Finish(1.3, TransportEnd::kDropped, "reset"));

  const Summary s = Summarize(samples, 1.0);
  EXPECT_EQ(s.ok, 5);
  EXPECT_EQ(s.failed, 1);
  const std::map<std::string, int64_t> want = {{"l1", 2}, {"l3", 1}, {"miss", 1}};
  EXPECT_EQ(s.cache, want);
  EXPECT_EQ(SummaryJson(s)["cache"]["l1"], 2);
  EXPECT_NE(RenderTable(s, "t").find("x-strata-cache l1 2, l3 1, miss 1"), std::string::npos)
      << RenderTable(s, "t");
  EXPECT_EQ(SampleJson(samples[2])["cache"], "l3");
  EXPECT_TRUE(SampleJson(samples[4])["cache"].is_null());
  // Without any header the summary has nothing to say about caching.
  EXPECT_TRUE(Summarize(std::span(samples).subspan(4, 1), 1.0).cache.empty());
  EXPECT_EQ(
      RenderTable(Summarize(std::span(samples).subspan(4, 1), 1.0), "t").find("x-strata-cache"),
      std::string::npos);
}

}  // namespace
}  // namespace strata::loadgen
