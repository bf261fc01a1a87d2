// RunLive (tune/live.h) against a scripted upstream (testing/fault_upstream.h):
// every request sent when due, a session's next turn after its previous
// answer and carrying it, a closed loop one request per client at a time,
// the stream read into the record, and errors, stalls and a server that is
// gone ending as failed records, never a hang. (Against a real strata
// serve: tests/integration/cli_test.sh, "Real trials".)
#include <gtest/gtest.h>

#include <memory>

#include <nlohmann/json.hpp>

#include "net/http_client.h"
#include "testing/fault_upstream.h"
#include "tune/live.h"
#include "tune/scenario.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata::tune {
namespace {

using testing::FaultUpstream;

struct LiveRun {
  Scenario scenario;
  std::vector<WorkloadRequest> requests;
  util::StatusOr<std::vector<LiveRecord>> records = util::InternalError("not run");
};

LiveRun RunOn(const std::string& url, const std::string& scenario_toml, double request_s = 5) {
  LiveRun run;
  auto s = ParseScenario(scenario_toml, "t.toml");
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  if (!s.ok()) return run;
  run.scenario = *s;
  auto r = Requests(*s, 1, nullptr);
  EXPECT_TRUE(r.ok());
  if (!r.ok()) return run;
  run.requests = *r;
  const ScenarioText text(*s, run.requests, {}, 1);
  auto log = util::NewNullLogger();
  auto client = net::HttpClient::Create({}, *log);
  EXPECT_TRUE(client.ok());
  if (!client.ok()) return run;
  LiveOptions o;
  o.url = url;
  o.model = "demo";
  o.request_s = request_s;
  o.drain_s = 10;
  run.records = RunLive(*s, run.requests, text, o, **client, util::RealClock());
  (*client)->Stop();
  return run;
}

TEST(RunLiveTest, SendsEachRequestWhenDueAndSessionsCarryTheirAnswers) {
  FaultUpstream up;
  ASSERT_TRUE(up.Start().ok());
  const LiveRun run =
      RunOn(up.url(),
            "name = \"x\"\n[arrival]\nrate = 20\nduration = 1\n[prompts]\ntokens = 10\n"
            "system_tokens = 12\nturns = 2\n[output]\ntokens = 5\nspread = 0\n");
  ASSERT_TRUE(run.records.ok()) << run.records.status().ToString();
  const std::vector<LiveRecord>& rec = *run.records;
  ASSERT_EQ(rec.size(), run.requests.size());
  ASSERT_GE(rec.size(), 4u);
  EXPECT_EQ(up.posts(), static_cast<int>(rec.size()));
  for (size_t i = 0; i < rec.size(); ++i) {
    const LiveRecord& r = rec[i];
    const WorkloadRequest& w = run.requests[i];
    ASSERT_TRUE(r.ok) << i << ": " << r.error;
    EXPECT_EQ(r.text, FaultUpstream::kText);
    EXPECT_EQ(r.completion_tokens, 5);
    EXPECT_EQ(r.max_tokens, 5);
    EXPECT_GE(r.ttft_s, 0);
    EXPECT_GE(r.done_s, r.sent_s);
    // Not before its arrival (a session's second turn comes 4 s later:
    // the scenario's own spacing).
    EXPECT_GE(r.sent_s + 0.05, w.arrival_s) << i;
    const nlohmann::json messages = nlohmann::json::parse(r.messages);
    if (w.turn == 0) {
      ASSERT_EQ(messages.size(), 2u);  // system, user
      EXPECT_EQ(messages[0]["role"], "system");
    } else {
      // The previous turn's messages, its answer, the new question.
      ASSERT_EQ(messages.size(), 4u);
      EXPECT_EQ(messages[2]["role"], "assistant");
      EXPECT_EQ(messages[2]["content"], FaultUpstream::kText);
      EXPECT_EQ(messages[3]["role"], "user");
    }
  }
  References refs;
  const LiveSummary sum = Summarise(run.scenario, run.requests, rec, refs, nullptr);
  EXPECT_EQ(sum.answered, static_cast<int64_t>(rec.size()));
  EXPECT_EQ(sum.errors, 0);
  EXPECT_EQ(sum.measured.quality, 1);
  EXPECT_GT(sum.measured.throughput, 0);
}

TEST(RunLiveTest, ErrorsAndStallsEndAsFailedRecordsNotAHang) {
  FaultUpstream up;
  ASSERT_TRUE(up.Start().ok());
  up.Play({{.status = 503}, {.stall = true}});
  // One client: each request waits for the one before it.
  const LiveRun run = RunOn(up.url(),
                            "name = \"x\"\n[arrival]\nprocess = \"closed\"\nconcurrency = 1\n"
                            "duration = 30\nmax_requests = 6\n[output]\ntokens = 5\nspread = 0\n",
                            /*request_s=*/1);
  ASSERT_TRUE(run.records.ok()) << run.records.status().ToString();
  const std::vector<LiveRecord>& rec = *run.records;
  ASSERT_EQ(rec.size(), 6u);
  EXPECT_FALSE(rec[0].ok);
  EXPECT_EQ(rec[0].http_status, 503);
  EXPECT_NE(rec[0].error.find("503"), std::string::npos) << rec[0].error;
  EXPECT_FALSE(rec[1].ok);  // stalled: its own deadline ended it, not the run's drain
  EXPECT_NE(rec[1].error.find("within 1000 ms"), std::string::npos) << rec[1].error;
  for (size_t i = 2; i < rec.size(); ++i) {
    EXPECT_TRUE(rec[i].ok) << i << ": " << rec[i].error;
    EXPECT_GE(rec[i].sent_s + 1e-3, rec[i - 1].done_s) << "one at a time";
  }
  References refs;
  const LiveSummary sum = Summarise(run.scenario, run.requests, rec, refs, nullptr);
  EXPECT_EQ(sum.errors, 2);
  EXPECT_NEAR(sum.measured.error_rate, 2.0 / 6, 1e-9);
}

TEST(RunLiveTest, AServerThatIsGoneFailsEveryRequest) {
  FaultUpstream up;
  ASSERT_TRUE(up.Start().ok());
  const std::string url = up.url();
  up.Stop();
  const LiveRun run = RunOn(url,
                            "name = \"x\"\n[arrival]\nrate = 5\nduration = 1\n[output]\ntokens = "
                            "5\n");
  ASSERT_TRUE(run.records.ok()) << run.records.status().ToString();
  ASSERT_FALSE(run.records->empty());
  for (const LiveRecord& r : *run.records) {
    EXPECT_FALSE(r.ok);
    EXPECT_FALSE(r.error.empty());
    EXPECT_GE(r.sent_s, 0);
  }
  // No URL at all: an argument error, nothing sent.
  auto log = util::NewNullLogger();
  auto client = net::HttpClient::Create({}, *log);
  ASSERT_TRUE(client.ok());
  const Scenario s;
  EXPECT_EQ(
      RunLive(s, {}, ScenarioText(s, {}, {}, 1), {}, **client, util::RealClock()).status().code(),
      util::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::tune
