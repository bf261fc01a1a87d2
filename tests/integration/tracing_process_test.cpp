// OpenTelemetry tracing end to end, as processes: `strata serve` exporting
// OTLP/HTTP JSON to a small collector inside this test (net::HttpServer on
// loopback), which keeps every span it is sent. One upstream serves the
// model itself; a front serves it through a remote backend; both export, so
// the upstream's root span must hang under the front's backend call. Each
// test checks the payload's shape (resourceSpans / scopeSpans / spans, hex
// ids), the links (the incoming trace id, every parent a span of the same
// trace) and the attributes, and that no prompt text reaches the collector.
// The binary is $STRATA_BIN (ctest sets it); the model is written by
// `strata mkmodel`, so nothing here needs ../shared.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "net/http_server.h"
#include "testing/raw_http.h"
#include "testing/strata_process.h"
#include "util/clock.h"
#include "util/log.h"

namespace strata {
namespace {

using Json = nlohmann::json;
using testing::RawClient;
using testing::RawResponse;
using testing::ReadAll;
using namespace std::chrono_literals;

// A prompt no span may ever carry.
constexpr std::string_view kSecretPrompt = "zebra quartz violin secret prompt";
constexpr std::string_view kCallerTrace = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr std::string_view kCallerSpan = "00f067aa0ba902b7";

// One exported span and the service that sent it.
struct Collected {
  std::string service;
  Json span;
  std::string id() const { return span.value("spanId", ""); }
  std::string parent() const { return span.value("parentSpanId", ""); }
  std::string name() const { return span.value("name", ""); }
  // The value of attribute `key` (its AnyValue's one member), null when absent.
  Json Attr(std::string_view key) const {
    for (const Json& a : span["attributes"]) {
      if (a["key"] == key) return a["value"].begin().value();
    }
    return nullptr;
  }
};

// An OTLP/HTTP receiver: POST /v1/traces with JSON, 200 "{}"; every other
// request 404. Keeps the raw bodies too.
class Collector final : public net::HttpHandler {
 public:
  ~Collector() override {
    if (server_) server_->Stop();
  }
  util::Status Start() {
    net::HttpServerOptions o;
    o.port = 0;
    o.io_threads = 1;
    o.limits.max_body_bytes = 64u << 20;
    STRATA_ASSIGN_OR_RETURN(server_, net::HttpServer::Create(o, *this, *log_, util::RealClock()));
    STRATA_ASSIGN_OR_RETURN(port_, server_->Start());
    return util::OkStatus();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  std::optional<net::Response> OnHead(const net::RequestHead& head) override {
    if (head.method != "POST" || head.path() != "/v1/traces") {
      return net::JsonResponse(404, R"({"code":5,"message":"not found"})");
    }
    return std::nullopt;
  }
  void OnRequest(std::shared_ptr<net::Exchange> ex, std::string body) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      content_types_.push_back(std::string(ex->head().headers.GetOr("Content-Type")));
      bodies_.push_back(body);
      const Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
      if (!j.is_discarded() && j.contains("resourceSpans")) {
        for (const Json& rs : j["resourceSpans"]) {
          std::string service;
          for (const Json& a : rs["resource"]["attributes"]) {
            if (a["key"] == "service.name") service = a["value"].value("stringValue", "");
          }
          for (const Json& ss : rs["scopeSpans"]) {
            for (const Json& s : ss["spans"]) spans_.push_back({service, s});
          }
        }
      }
    }
    ex->Respond(net::JsonResponse(200, "{}"));
  }

  std::vector<Collected> Trace(std::string_view trace_id) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Collected> out;
    for (const Collected& c : spans_) {
      if (c.span.value("traceId", "") == trace_id) out.push_back(c);
    }
    return out;
  }
  std::vector<std::string> bodies() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bodies_;
  }
  std::vector<std::string> content_types() const {
    std::lock_guard<std::mutex> lock(mu_);
    return content_types_;
  }
  size_t FromService(std::string_view service) const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<size_t>(std::count_if(
        spans_.begin(), spans_.end(), [&](const Collected& c) { return c.service == service; }));
  }

 private:
  std::unique_ptr<util::Logger> log_ = util::NewNullLogger();
  int port_ = 0;
  mutable std::mutex mu_;  // guards the three below
  std::vector<std::string> bodies_;
  std::vector<std::string> content_types_;
  std::vector<Collected> spans_;
  std::unique_ptr<net::HttpServer> server_;  // last: stopped before what it fills
};

struct Proc {
  pid_t pid = -1;
  int port = -1;
  std::string log;
};

std::string Request(const std::string& path, const std::string& body,
                    const std::string& extra_headers = "") {
  return testing::HttpRequest("POST", path, body, extra_headers);
}

std::optional<RawResponse> Post(int port, const std::string& path, const std::string& body,
                                const std::string& headers = "") {
  RawClient c(port);
  if (!c.connected() || !c.Send(Request(path, body, headers))) return std::nullopt;
  return c.ReadResponse(30s);
}

Json Chat(const std::string& model, bool stream, int max_tokens = 4) {
  return {{"model", model},
          {"messages", {{{"role", "user"}, {"content", std::string(kSecretPrompt)}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"stream", stream}};
}

std::string Traceparent(std::string_view trace, std::string_view span, bool sampled) {
  return "traceparent: 00-" + std::string(trace) + "-" + std::string(span) +
         (sampled ? "-01" : "-00") + "\r\n";
}

// The trace id of a traceresponse header ("" when absent or malformed).
std::string TraceOf(const RawResponse& r) {
  const std::string v = r.Header("traceresponse");
  return v.size() == 55 ? v.substr(3, 32) : "";
}

template <typename F>
bool Eventually(F fn, std::chrono::milliseconds timeout = 15s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!fn()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

const Collected* Named(const std::vector<Collected>& spans, std::string_view service,
                       std::string_view prefix) {
  for (const Collected& c : spans) {
    if (c.service == service && c.name().rfind(prefix, 0) == 0) return &c;
  }
  return nullptr;
}

// Every span of a trace names a parent that is in the trace, but the one
// root (whose parent, if any, is `root_parent`).
void ExpectLinked(const std::vector<Collected>& spans, const std::string& root_parent) {
  std::set<std::string> ids;
  for (const Collected& c : spans) ids.insert(c.id());
  EXPECT_EQ(ids.size(), spans.size()) << "span ids repeat";
  int roots = 0;
  for (const Collected& c : spans) {
    if (ids.count(c.parent()) == 1) continue;
    ++roots;
    EXPECT_EQ(c.parent(), root_parent) << c.span.dump();
  }
  EXPECT_EQ(roots, 1);
}

class TracingProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    demo_ = new testing::DemoModelDir("strata_tracing_process",
                                      "n_embd=64,n_layers=2,n_heads=4,n_ff=128,n_ctx=1024");
    ASSERT_FALSE(demo_->model.empty()) << demo_->MkmodelLog();
    collector_ = new Collector();
    ASSERT_TRUE(collector_->Start().ok());
    upstream_ = new Proc(
        Start({"-m", demo_->model, "--alias", "demo", "--ctx", "512", "--otlp-endpoint",
               collector_->url(), "--otlp-service-name", "upstream", "--otlp-interval-ms", "20"},
              "upstream"));
    ASSERT_GT(upstream_->port, 0) << ReadAll(upstream_->log);
    const std::string up = "http://127.0.0.1:" + std::to_string(upstream_->port);
    front_ =
        new Proc(Start({"--backend", "openai:" + up, "--backend-model", "demo", "--backend-name",
                        "front", "--l1-bytes", "0", "--otlp-endpoint", collector_->url() + "/",
                        "--otlp-service-name", "front", "--otlp-interval-ms", "20"},
                       "front"));
    ASSERT_GT(front_->port, 0) << ReadAll(front_->log);
  }
  static void TearDownTestSuite() {
    for (Proc* p : {front_, upstream_}) {
      if (p != nullptr) testing::Kill(p->pid);
      delete p;
    }
    delete collector_;
    delete demo_;
  }
  void TearDown() override {
    for (pid_t pid : pids_) testing::Kill(pid);
    // No span anywhere carries the prompt (nor the key this suite never sends).
    for (const std::string& body : collector_->bodies()) {
      EXPECT_EQ(body.find(kSecretPrompt), std::string::npos) << body;
      EXPECT_EQ(body.find("zebra"), std::string::npos);
    }
  }

  static Proc Start(std::vector<std::string> args, const std::string& name) {
    static int n = 0;
    Proc p;
    p.log = (demo_->dir / (name + "_" + std::to_string(++n) + ".log")).string();
    std::vector<std::string> full = {"serve", "--port", "0", "--log-level", "info"};
    full.insert(full.end(), args.begin(), args.end());
    p.pid = testing::Spawn(full, p.log);
    p.port = testing::WaitReady(p.pid, p.log);
    if (p.port < 0) {
      if (::waitpid(p.pid, nullptr, WNOHANG) == 0) testing::Kill(p.pid);
      p.pid = -1;
    }
    return p;
  }
  // A server this test owns (killed in TearDown).
  Proc Serve(std::vector<std::string> args, const std::string& name) {
    Proc p = Start(std::move(args), name);
    pids_.push_back(p.pid);
    EXPECT_GT(p.port, 0) << name << " did not start:\n" << ReadAll(p.log);
    return p;
  }
  // The spans of `trace` once `done` says they are all there (15 s at most).
  std::vector<Collected> WaitFor(const std::string& trace,
                                 std::function<bool(const std::vector<Collected>&)> done) {
    std::vector<Collected> spans;
    EXPECT_TRUE(Eventually([&] {
      spans = collector_->Trace(trace);
      return done(spans);
    })) << "trace "
        << trace << " has " << spans.size() << " spans";
    return spans;
  }
  static bool HasRoot(const std::vector<Collected>& spans, std::string_view service) {
    return std::any_of(spans.begin(), spans.end(), [&](const Collected& c) {
      return c.service == service && c.span.value("kind", 0) == 2;
    });
  }

  static testing::DemoModelDir* demo_;
  static Collector* collector_;
  static Proc* upstream_;
  static Proc* front_;
  std::vector<pid_t> pids_;
};
testing::DemoModelDir* TracingProcessTest::demo_ = nullptr;
Collector* TracingProcessTest::collector_ = nullptr;
Proc* TracingProcessTest::upstream_ = nullptr;
Proc* TracingProcessTest::front_ = nullptr;

TEST_F(TracingProcessTest, TheExportIsOtlpJsonOfTheRightShape) {
  auto r = Post(upstream_->port, "/v1/chat/completions", Chat("demo", false).dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string trace = TraceOf(*r);
  ASSERT_EQ(trace.size(), 32u) << r->Header("traceresponse");
  WaitFor(trace, [](const auto& s) { return HasRoot(s, "upstream"); });
  const std::regex hex32("^[0-9a-f]{32}$"), hex16("^[0-9a-f]{16}$"), digits("^[0-9]+$");
  ASSERT_FALSE(collector_->bodies().empty());
  for (const std::string& ct : collector_->content_types()) EXPECT_EQ(ct, "application/json");
  for (const std::string& body : collector_->bodies()) {
    const Json j = Json::parse(body);
    ASSERT_TRUE(j["resourceSpans"].is_array());
    for (const Json& rs : j["resourceSpans"]) {
      bool named = false;
      for (const Json& a : rs["resource"]["attributes"]) {
        named |= a["key"] == "service.name" && a["value"]["stringValue"].is_string();
      }
      EXPECT_TRUE(named) << rs["resource"].dump();
      ASSERT_TRUE(rs["scopeSpans"].is_array());
      for (const Json& ss : rs["scopeSpans"]) {
        EXPECT_EQ(ss["scope"]["name"], "strata");
        ASSERT_TRUE(ss["spans"].is_array());
        for (const Json& s : ss["spans"]) {
          EXPECT_TRUE(std::regex_match(s["traceId"].get<std::string>(), hex32)) << s.dump();
          EXPECT_TRUE(std::regex_match(s["spanId"].get<std::string>(), hex16)) << s.dump();
          if (s.contains("parentSpanId")) {
            EXPECT_TRUE(std::regex_match(s["parentSpanId"].get<std::string>(), hex16));
          }
          EXPECT_FALSE(s["name"].get<std::string>().empty());
          EXPECT_TRUE(s["kind"] == 1 || s["kind"] == 2 || s["kind"] == 3) << s.dump();
          const std::string start = s["startTimeUnixNano"], end = s["endTimeUnixNano"];
          EXPECT_TRUE(std::regex_match(start, digits));
          EXPECT_TRUE(std::regex_match(end, digits));
          EXPECT_LE(std::stoull(start), std::stoull(end));
          for (const Json& a : s["attributes"]) {
            EXPECT_TRUE(a["key"].is_string());
            EXPECT_EQ(a["value"].size(), 1u) << a.dump();
          }
        }
      }
    }
  }
}

TEST_F(TracingProcessTest, AnIncomingTraceparentIsContinuedWithItsTracestate) {
  const std::string headers = Traceparent(kCallerTrace, kCallerSpan, true) +
                              "tracestate: congo=t61rcWkgMzE, rojo=00f067aa0ba902b7\r\n";
  auto r = Post(upstream_->port, "/v1/chat/completions", Chat("demo", false, 3).dump(), headers);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(TraceOf(*r), kCallerTrace);
  const auto spans =
      WaitFor(std::string(kCallerTrace), [](const auto& s) { return HasRoot(s, "upstream"); });
  ExpectLinked(spans, std::string(kCallerSpan));
  const Collected* root = Named(spans, "upstream", "chat demo");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->span["kind"], 2);
  EXPECT_EQ(root->parent(), kCallerSpan);
  EXPECT_EQ(r->Header("traceresponse"),
            "00-" + std::string(kCallerTrace) + "-" + root->id() + "-01");
  EXPECT_EQ(root->Attr("gen_ai.operation.name"), "chat");
  EXPECT_EQ(root->Attr("gen_ai.request.model"), "demo");
  EXPECT_EQ(root->Attr("gen_ai.response.model"), "demo");
  EXPECT_EQ(root->Attr("gen_ai.provider.name"), "strata");
  EXPECT_EQ(root->Attr("gen_ai.request.max_tokens"), "3");
  EXPECT_EQ(root->Attr("gen_ai.request.temperature"), 0.0);
  EXPECT_EQ(root->Attr("gen_ai.response.id"), "chatcmpl-" + r->Header("x-request-id"));
  EXPECT_GT(std::stoi(root->Attr("gen_ai.usage.input_tokens").get<std::string>()), 0);
  EXPECT_EQ(root->Attr("gen_ai.usage.output_tokens"),
            std::to_string(Json::parse(r->body)["usage"].value("completion_tokens", -1)));
  EXPECT_TRUE(root->Attr("gen_ai.response.finish_reasons").contains("values"));
  EXPECT_EQ(root->Attr("strata.tenant"), "default");
  EXPECT_EQ(root->Attr("strata.trace.sampled_by"), "parent");
  EXPECT_EQ(root->Attr("http.response.status_code"), "200");
  EXPECT_EQ(root->span["traceState"], "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7");
  // The engine's phases and the L1 lookup, children of the root.
  for (const char* name : {"queue_wait", "prefill", "decode", "cache.lookup l1"}) {
    const Collected* c = Named(spans, "upstream", name);
    ASSERT_NE(c, nullptr) << name;
    EXPECT_EQ(c->parent(), root->id()) << name;
    EXPECT_EQ(c->span["kind"], 1);
    EXPECT_EQ(c->span["traceState"], root->span["traceState"]);
  }
  const Collected* l1 = Named(spans, "upstream", "cache.lookup l1");
  EXPECT_EQ(l1->Attr("cache.tier"), "l1");
  EXPECT_EQ(l1->Attr("cache.hit"), false);
  EXPECT_TRUE(std::regex_match(l1->Attr("cache.key.hash").get<std::string>(),
                               std::regex("^[0-9a-f]{16}$")));
  EXPECT_EQ(l1->Attr("cache.ttl.ms"), "600000");
  EXPECT_EQ(Named(spans, "upstream", "decode")->Attr("gen_ai.usage.output_tokens"),
            root->Attr("gen_ai.usage.output_tokens"));
}

TEST_F(TracingProcessTest, AStreamWithoutTraceparentStartsATrace) {
  auto r = Post(upstream_->port, "/v1/completions",
                Json{{"model", "demo"},
                     {"prompt", std::string(kSecretPrompt)},
                     {"max_tokens", 3},
                     {"stream", true}}
                    .dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const std::string trace = TraceOf(*r);
  ASSERT_EQ(trace.size(), 32u);
  EXPECT_NE(trace, kCallerTrace);
  const auto spans = WaitFor(trace, [](const auto& s) { return HasRoot(s, "upstream"); });
  ExpectLinked(spans, "");
  const Collected* root = Named(spans, "upstream", "text_completion demo");
  ASSERT_NE(root, nullptr);
  EXPECT_FALSE(root->span.contains("parentSpanId"));
  EXPECT_EQ(root->Attr("strata.stream"), true);
  EXPECT_EQ(root->Attr("strata.trace.sampled_by"), "rate");
  EXPECT_EQ(root->Attr("strata.trace.sample_rate"), 1.0);
  EXPECT_NE(Named(spans, "upstream", "decode"), nullptr);
}

TEST_F(TracingProcessTest, AnL1HitIsALookupThatHitAndNoEngineWork) {
  const std::string body = Json{
      {"model", "demo"},
      {"messages", {{{"role", "user"}, {"content", "l1 " + std::string(kSecretPrompt)}}}},
      {"max_tokens", 2},
      {"temperature", 0}}.dump();
  auto first = Post(upstream_->port, "/v1/chat/completions", body);
  ASSERT_TRUE(first);
  ASSERT_EQ(first->Header("x-strata-cache"), "miss");
  auto again = Post(upstream_->port, "/v1/chat/completions", body);
  ASSERT_TRUE(again);
  ASSERT_EQ(again->Header("x-strata-cache"), "l1");
  const auto spans = WaitFor(TraceOf(*again), [](const auto& s) { return HasRoot(s, "upstream"); });
  const Collected* root = Named(spans, "upstream", "chat demo");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->Attr("strata.cache.outcome"), "l1");
  const Collected* l1 = Named(spans, "upstream", "cache.lookup l1");
  ASSERT_NE(l1, nullptr);
  EXPECT_EQ(l1->Attr("cache.hit"), true);
  EXPECT_EQ(Named(spans, "upstream", "prefill"), nullptr);
  EXPECT_EQ(Named(spans, "upstream", "queue_wait"), nullptr);
  // The same key both times.
  const auto first_spans =
      WaitFor(TraceOf(*first), [](const auto& s) { return HasRoot(s, "upstream"); });
  const Collected* miss = Named(first_spans, "upstream", "cache.lookup l1");
  ASSERT_NE(miss, nullptr);
  EXPECT_EQ(miss->Attr("cache.key.hash"), l1->Attr("cache.key.hash"));
}

TEST_F(TracingProcessTest, AnUpstreamsRootSpanHangsUnderTheFrontsBackendCall) {
  for (const bool stream : {false, true}) {
    const std::string trace =
        stream ? "22222222222222222222222222222222" : "33333333333333333333333333333333";
    auto r = Post(front_->port, "/v1/chat/completions", Chat("front", stream).dump(),
                  Traceparent(trace, "1111111111111111", true) + "tracestate: vendor=abc\r\n");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(TraceOf(*r), trace);
    const auto spans = WaitFor(trace, [](const auto& s) {
      return HasRoot(s, "upstream") && HasRoot(s, "front") &&
             std::any_of(s.begin(), s.end(),
                         [](const Collected& c) { return c.span.value("kind", 0) == 3; });
    });
    ExpectLinked(spans, "1111111111111111");
    const Collected* front_root = nullptr;
    const Collected* call = nullptr;
    const Collected* up_root = nullptr;
    for (const Collected& c : spans) {
      if (c.service == "front" && c.span["kind"] == 2) front_root = &c;
      if (c.service == "front" && c.span["kind"] == 3) call = &c;
      if (c.service == "upstream" && c.span["kind"] == 2) up_root = &c;
    }
    ASSERT_TRUE(front_root && call && up_root);
    EXPECT_EQ(front_root->parent(), "1111111111111111");
    EXPECT_EQ(call->parent(), front_root->id());
    EXPECT_EQ(up_root->parent(), call->id());  // the propagated traceparent's parent-id
    EXPECT_EQ(call->name(), "chat demo");
    EXPECT_EQ(call->Attr("gen_ai.provider.name"), "openai");
    EXPECT_EQ(call->Attr("gen_ai.request.model"), "demo");
    EXPECT_EQ(call->Attr("server.address"), "127.0.0.1");
    EXPECT_EQ(call->Attr("server.port"), std::to_string(upstream_->port));
    EXPECT_EQ(call->Attr("http.response.status_code"), "200");
    EXPECT_EQ(front_root->Attr("gen_ai.provider.name"), "openai");
    EXPECT_EQ(front_root->Attr("gen_ai.response.model"), "front");
    EXPECT_EQ(up_root->Attr("gen_ai.response.model"), "demo");
    EXPECT_EQ(up_root->span["traceState"], "vendor=abc");  // passed on as it came
    EXPECT_EQ(up_root->Attr("strata.stream"), stream);
  }
}

TEST_F(TracingProcessTest, AnUnsampledParentIsHonouredDownTheChain) {
  const std::string trace = "44444444444444444444444444444444";
  auto r = Post(front_->port, "/v1/chat/completions", Chat("front", false).dump(),
                Traceparent(trace, "1111111111111111", false));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->Header("traceresponse").substr(0, 36), "00-" + trace + "-");
  EXPECT_EQ(r->Header("traceresponse").substr(52), "-00");
  // A sampled request sent after it is exported; the unsampled one never is.
  auto marker = Post(front_->port, "/v1/chat/completions", Chat("front", false).dump(),
                     Traceparent("55555555555555555555555555555555", "1111111111111111", true));
  ASSERT_TRUE(marker);
  WaitFor("55555555555555555555555555555555",
          [](const auto& s) { return HasRoot(s, "upstream") && HasRoot(s, "front"); });
  EXPECT_TRUE(collector_->Trace(trace).empty());
}

TEST_F(TracingProcessTest, AnInvalidTraceparentStartsANewTraceAndIsNoError) {
  for (const std::string& bad :
       {std::string("traceparent: 00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01\r\n"),
        std::string("traceparent: ff-") + std::string(kCallerTrace) + "-00f067aa0ba902b7-01\r\n",
        std::string("traceparent: 00-00000000000000000000000000000000-00f067aa0ba902b7-01\r\n"),
        Traceparent(kCallerTrace, kCallerSpan, true) + Traceparent(kCallerTrace, kCallerSpan, true),
        std::string("traceparent: garbage\r\ntracestate: x=1\r\n")}) {
    auto r = Post(upstream_->port, "/v1/chat/completions", Chat("demo", false, 1).dump(), bad);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << bad << r->body;
    const std::string trace = TraceOf(*r);
    EXPECT_EQ(trace.size(), 32u);
    EXPECT_NE(trace, kCallerTrace) << bad;
    const auto spans = WaitFor(trace, [](const auto& s) { return HasRoot(s, "upstream"); });
    const Collected* root = Named(spans, "upstream", "chat demo");
    ASSERT_NE(root, nullptr);
    EXPECT_FALSE(root->span.contains("parentSpanId")) << bad;
    EXPECT_FALSE(root->span.contains("traceState")) << bad;  // dropped with its traceparent
  }
}

TEST_F(TracingProcessTest, AnErrorEndsTheRootSpanWithItsReasonButNotTheBody) {
  const std::string trace = "66666666666666666666666666666666";
  auto missing = Post(upstream_->port, "/v1/chat/completions", Chat("no-such-model", false).dump(),
                      Traceparent(trace, kCallerSpan, true));
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(TraceOf(*missing), trace);
  const auto spans = WaitFor(trace, [](const auto& s) { return HasRoot(s, "upstream"); });
  const Collected* root = Named(spans, "upstream", "chat");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->span["status"]["code"], 2);
  EXPECT_FALSE(root->span["status"]["message"].get<std::string>().empty());
  EXPECT_EQ(root->Attr("error.type"), "model_not_found");
  EXPECT_EQ(root->Attr("http.response.status_code"), "404");
  // Malformed JSON: the answer quotes the body near the fault; the span does not.
  const std::string broken =
      R"({"model":"demo","messages":[{"role":"user","content":"zebra quartz)";
  auto bad = Post(upstream_->port, "/v1/chat/completions", broken,
                  Traceparent("77777777777777777777777777777777", kCallerSpan, true));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  const auto bad_spans = WaitFor("77777777777777777777777777777777",
                                 [](const auto& s) { return HasRoot(s, "upstream"); });
  ASSERT_EQ(bad_spans.size(), 1u);
  EXPECT_EQ(bad_spans[0].Attr("error.type"), "malformed_json");
  EXPECT_EQ(bad_spans[0].span["status"]["message"].get<std::string>().find("zebra"),
            std::string::npos);
  // The upstream refuses what the front let through (max_tokens beyond its
  // context): the backend call's span and the front's root fail too.
  const std::string trace3 = "88888888888888888888888888888888";
  auto cut = Post(front_->port, "/v1/chat/completions",
                  Json{{"model", "front"},
                       {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                       {"max_tokens", 4000}}
                      .dump(),
                  Traceparent(trace3, kCallerSpan, true));
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->status, 400) << cut->body;
  const auto front_spans = WaitFor(trace3, [](const auto& s) {
    return HasRoot(s, "front") && std::any_of(s.begin(), s.end(), [](const Collected& c) {
             return c.span.value("kind", 0) == 3;
           });
  });
  for (const Collected& c : front_spans) {
    if (c.service != "front") continue;
    EXPECT_EQ(c.span["status"]["code"], 2) << c.span.dump();
  }
}

TEST_F(TracingProcessTest, TheRateIsTheFlagTimesTheRtSwitchersTraceRate) {
  // Level 0 of this ladder traces half of what --trace-sample says.
  Proc p = Serve({"-m",
                  demo_->model,
                  "--alias",
                  "demo",
                  "--ctx",
                  "512",
                  "--l1-bytes",
                  "0",
                  "--otlp-endpoint",
                  collector_->url(),
                  "--otlp-service-name",
                  "sampled",
                  "--otlp-interval-ms",
                  "20",
                  "--trace-sample",
                  "0.5",
                  "--rt-switcher",
                  "on",
                  "--rt-levels",
                  "0.5:entropy:0:0"},
                 "sampled");
  ASSERT_GT(p.port, 0);
  int recorded = 0;
  std::string last;
  for (int i = 0; i < 48; ++i) {
    auto r = Post(p.port, "/v1/completions",
                  Json{{"model", "demo"}, {"prompt", "x"}, {"max_tokens", 1}}.dump());
    ASSERT_TRUE(r);
    const std::string tr = r->Header("traceresponse");
    ASSERT_EQ(tr.size(), 55u);
    if (tr.substr(53) == "01") {
      ++recorded;
      last = tr.substr(3, 32);
    }
  }
  // 48 draws at 0.25: P(none) < 1e-5, P(all) far less.
  ASSERT_GT(recorded, 0);
  EXPECT_LT(recorded, 48);
  const auto spans = WaitFor(last, [](const auto& s) { return HasRoot(s, "sampled"); });
  const Collected* root = Named(spans, "sampled", "text_completion demo");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->Attr("strata.trace.sample_rate"), 0.25);
  EXPECT_EQ(root->Attr("strata.rt.level"), "0");
  // A sampled parent is honoured whatever the rate.
  auto forced = Post(p.port, "/v1/completions",
                     Json{{"model", "demo"}, {"prompt", "x"}, {"max_tokens", 1}}.dump(),
                     Traceparent("99999999999999999999999999999999", kCallerSpan, true));
  ASSERT_TRUE(forced);
  WaitFor("99999999999999999999999999999999", [](const auto& s) { return HasRoot(s, "sampled"); });
}

TEST_F(TracingProcessTest, WithoutAnEndpointNothingIsExportedAndTheContextPassesThrough) {
  const std::string up = "http://127.0.0.1:" + std::to_string(upstream_->port);
  Proc plain = Serve({"--backend", "openai:" + up, "--backend-model", "demo", "--backend-name",
                      "plain", "--l1-bytes", "0"},
                     "plain");
  ASSERT_GT(plain.port, 0);
  const std::string trace = "abababababababababababababababab";
  auto r = Post(plain.port, "/v1/chat/completions", Chat("plain", false).dump(),
                Traceparent(trace, "cdcdcdcdcdcdcdcd", true) + "tracestate: k=v\r\n");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(r->Header("traceresponse"), "");  // strata took no part
  // The upstream saw the caller's context unchanged: its root's parent is the caller's span.
  const auto spans = WaitFor(trace, [](const auto& s) { return HasRoot(s, "upstream"); });
  ASSERT_EQ(std::count_if(spans.begin(), spans.end(),
                          [](const Collected& c) { return c.service != "upstream"; }),
            0);
  const Collected* root = Named(spans, "upstream", "chat demo");
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->parent(), "cdcdcdcdcdcdcdcd");
  EXPECT_EQ(root->span["traceState"], "k=v");
  // No tracing metric exists there.
  RawClient c(plain.port);
  ASSERT_TRUE(c.Send("GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto m = c.ReadResponse();
  ASSERT_TRUE(m);
  EXPECT_EQ(m->body.find("strata_trace_"), std::string::npos);
}

TEST_F(TracingProcessTest, ShutdownSendsTheSpansStillQueued) {
  // A minute's interval: nothing is sent before the server is told to stop.
  Proc p =
      Serve({"-m", demo_->model, "--alias", "demo", "--ctx", "512", "--otlp-endpoint",
             collector_->url(), "--otlp-service-name", "stopping", "--otlp-interval-ms", "60000"},
            "stopping");
  ASSERT_GT(p.port, 0);
  auto r = Post(p.port, "/v1/completions",
                Json{{"model", "demo"}, {"prompt", "x"}, {"max_tokens", 2}}.dump());
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const std::string trace = TraceOf(*r);
  EXPECT_TRUE(collector_->Trace(trace).empty());
  ASSERT_EQ(::kill(p.pid, SIGTERM), 0);
  EXPECT_EQ(testing::WaitExit(p.pid, 20s), 0) << ReadAll(p.log);
  pids_.clear();  // reaped
  const auto spans = collector_->Trace(trace);
  EXPECT_TRUE(HasRoot(spans, "stopping")) << spans.size() << " spans";
  EXPECT_NE(ReadAll(p.log).find("traces: "), std::string::npos);
  EXPECT_NE(ReadAll(p.log).find(" spans exported, 0 dropped"), std::string::npos) << ReadAll(p.log);
}

TEST_F(TracingProcessTest, TheExportCountersShowOnMetrics) {
  RawClient c(upstream_->port);
  ASSERT_TRUE(c.Send("GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n"));
  auto m = c.ReadResponse();
  ASSERT_TRUE(m);
  for (const char* series :
       {"strata_trace_spans_exported_total ",
        "strata_trace_spans_dropped_total{reason=\"queue_full\"} 0", "strata_trace_queue_spans ",
        "strata_trace_export_requests_total{result=\"ok\"} ",
        "strata_trace_requests_total{sampled=\"true\",by=\"rate\"} ",
        // Earlier tests sent misses and an L1 hit, all traced: the
        // dashboard's traced share by cache tier.
        "strata_requests_traced_total{cache=\"miss\",traced=\"true\"} ",
        "strata_requests_traced_total{cache=\"l1\",traced=\"true\"} "}) {
    EXPECT_NE(m->body.find(series), std::string::npos) << series;
  }
}

}  // namespace
}  // namespace strata
