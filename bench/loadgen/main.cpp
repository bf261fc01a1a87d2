// loadgen — a load generator for OpenAI-compatible LLM servers (strata serve,
// llama.cpp's llama-server, ...).
//
// Three ways to make load:
//   closed loop  --concurrency N clients back to back, for --requests or --duration
//   open loop    --rate R: Poisson arrivals (seeded), up to --max-in-flight at once
//   trace replay --trace FILE [--trace-format azure|mooncake|burstgpt]: the
//                arrival times and token counts of a real serving trace
// Prompts are made-up words of a target length (after an optional shared
// system prompt, --system-prompt-tokens), or read from --prompt-file (a
// workload of real questions written in request order); --extra-body adds
// server-specific fields (strata's "cache" controls) to every request. The
// x-strata-cache header of each response is recorded and counted.
// Every request streams (stream_options.include_usage) so TTFT and TPOT can be
// measured; see recorder.h for the measuring rules and stats.h for the
// percentile method. Prints a table; --json FILE writes the same numbers plus
// one record per request. Ctrl-C stops the run and prints what was measured.
//
// Exit codes: 0 the run finished; 1 it could not start (bad trace, server not
// ready, no model); 2 bad command line; 3 --fail-on-error and some request
// failed; 130 interrupted.

#include <fmt/format.h>
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "loadgen/openai.h"
#include "loadgen/runner.h"
#include "loadgen/schedule.h"
#include "loadgen/stats.h"
#include "tune/prompt_text.h"
#include "tune/trace.h"

namespace strata::loadgen {
namespace {

using tune::kMooncakeBlockTokens;
using tune::ParsePromptFile;
using tune::ParseTrace;
using tune::ParseTraceFormat;
using tune::PromptBuilder;
using tune::RequestSpec;
using tune::SliceTrace;

// Set by SIGINT/SIGTERM; the only global, as a signal handler needs one.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void OnSignal(int) { g_stop.store(true); }

void InstallSignalHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C kills the tool at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a server that closes the socket must not kill us
}

struct Flags {
  std::string url = "http://127.0.0.1:8080";
  std::string endpoint = "chat";
  std::string model;
  std::string api_key;
  int64_t concurrency = 1;
  int64_t requests = 0;
  double duration_s = 0;
  double rate = 0;
  int64_t max_in_flight = 256;
  std::string trace;
  std::string trace_format;
  double speedup = 1;
  double start_s = 0;
  int64_t max_requests = 0;
  int64_t max_prompt_tokens = 0;
  int64_t max_output_tokens = 0;
  double block_scale = 1;
  int64_t prompt_tokens = 128;
  int64_t max_tokens = 64;
  int64_t system_prompt_tokens = 0;
  int64_t system_prompts = 1;
  std::optional<uint64_t> system_seed;
  std::string prompt_file;
  std::string extra_body;
  bool ignore_eos = false;
  std::optional<double> temperature;
  uint64_t seed = 0;
  double words_per_token = 1.0;
  double timeout_s = 600;
  double wait_ready_s = 0;
  std::string json_path;
  bool fail_on_error = false;
  bool quiet = false;
};

// Base URL: "http://host:port" (a trailing '/' is dropped); no path.
std::optional<std::string> CheckUrl(std::string url, std::string& why) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (url.rfind("http://", 0) != 0) {
    why = fmt::format("--url '{}' must start with http://", url);
    return std::nullopt;
  }
  if (url.find('/', 7) != std::string::npos) {
    why = fmt::format("--url '{}' must be http://host:port without a path (see --endpoint)", url);
    return std::nullopt;
  }
  return url;
}

std::optional<std::string> ReadFile(const std::string& path, std::string& why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    why = fmt::format("cannot open '{}'", path);
    return std::nullopt;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    why = fmt::format("cannot read '{}'", path);
    return std::nullopt;
  }
  return ss.str();
}

std::string GuessTraceFormat(const std::string& path) {
  std::string name = path.substr(path.find_last_of('/') + 1);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (name.find("mooncake") != std::string::npos || name.ends_with(".jsonl")) return "mooncake";
  if (name.find("burst") != std::string::npos) return "burstgpt";
  if (name.find("azure") != std::string::npos) return "azure";
  return "";
}

// Polls GET /health until 200 or `wait_s` passes.
bool WaitReady(const std::string& url, double wait_s) {
  httplib::Client c(url);
  c.set_connection_timeout(std::chrono::seconds(2));
  c.set_read_timeout(std::chrono::seconds(5));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  while (!g_stop.load()) {
    auto r = c.Get("/health");
    if (r && r->status == 200) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return false;
}

// The id of the first model GET /v1/models lists.
std::optional<std::string> DiscoverModel(const std::string& url, const std::string& api_key,
                                         std::string& why) {
  httplib::Client c(url);
  c.set_connection_timeout(std::chrono::seconds(5));
  c.set_read_timeout(std::chrono::seconds(30));
  if (!api_key.empty()) c.set_bearer_token_auth(api_key);
  auto r = c.Get("/v1/models");
  if (!r) {
    why = fmt::format("GET {}/v1/models failed: {}", url, httplib::to_string(r.error()));
    return std::nullopt;
  }
  if (r->status != 200) {
    why = fmt::format("GET {}/v1/models answered {}: {}", url, r->status,
                      ErrorMessageFromBody(r->body));
    return std::nullopt;
  }
  const auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
      j["data"][0].is_object() && j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
    return j["data"][0]["id"].get<std::string>();
  }
  why = fmt::format("GET {}/v1/models listed no model id", url);
  return std::nullopt;
}

std::string WallClockIso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm = {};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int Run(const Flags& f, const CLI::App& app) {
  std::string why;
  const auto url = CheckUrl(f.url, why);
  if (!url) {
    fmt::print(stderr, "loadgen: {}\n", why);
    return 2;
  }
  const Endpoint endpoint = f.endpoint == "completions" ? Endpoint::kCompletions : Endpoint::kChat;
  const bool trace_mode = !f.trace.empty();
  const bool open_mode = !trace_mode && f.rate > 0;
  if (trace_mode && f.rate > 0) {
    fmt::print(stderr, "loadgen: --rate and --trace are different load modes; give one\n");
    return 2;
  }
  if (trace_mode && f.requests > 0) {
    fmt::print(stderr, "loadgen: with --trace, take a slice with --max-requests and --start\n");
    return 2;
  }
  if (!trace_mode && f.requests <= 0 && f.duration_s <= 0) {
    fmt::print(stderr, "loadgen: give --requests N or --duration SECONDS\n");
    return 2;
  }
  if (!f.extra_body.empty()) {
    const auto extra = nlohmann::json::parse(f.extra_body, nullptr, /*allow_exceptions=*/false);
    if (!extra.is_object()) {
      fmt::print(stderr, "loadgen: --extra-body '{}' is not a JSON object\n", f.extra_body);
      return 2;
    }
  }
  std::vector<std::string> file_prompts;  // --prompt-file: request i sends [i mod n]
  if (!f.prompt_file.empty()) {
    if (trace_mode) {
      fmt::print(stderr, "loadgen: --prompt-file and --trace both choose prompts; give one\n");
      return 2;
    }
    const auto text = ReadFile(f.prompt_file, why);
    if (!text) {
      fmt::print(stderr, "loadgen: {}\n", why);
      return 1;
    }
    auto parsed = ParsePromptFile(*text);
    if (!parsed.ok()) {
      fmt::print(stderr, "loadgen: {}: {}\n", f.prompt_file, parsed.status().message());
      return 1;
    }
    file_prompts = std::move(parsed).value();
  }

  // The requests to send.
  std::vector<RequestSpec> specs;  // trace mode only
  std::vector<double> arrivals;    // open loop and trace
  std::string mode_desc;
  if (trace_mode) {
    const std::string format_name =
        f.trace_format.empty() ? GuessTraceFormat(f.trace) : f.trace_format;
    if (format_name.empty()) {
      fmt::print(stderr, "loadgen: cannot tell the format of '{}'; give --trace-format\n", f.trace);
      return 2;
    }
    auto format = ParseTraceFormat(format_name);
    if (!format.ok()) {
      fmt::print(stderr, "loadgen: {}\n", format.status().message());
      return 2;
    }
    const auto text = ReadFile(f.trace, why);
    if (!text) {
      fmt::print(stderr, "loadgen: {}\n", why);
      return 1;
    }
    auto parsed = ParseTrace(*format, *text);
    if (!parsed.ok()) {
      fmt::print(stderr, "loadgen: {}: {}\n", f.trace, parsed.status().message());
      return 1;
    }
    specs = SliceTrace(parsed->requests, {.start_s = f.start_s,
                                          .max_requests = f.max_requests,
                                          .speedup = f.speedup,
                                          .max_prompt_tokens = f.max_prompt_tokens,
                                          .max_output_tokens = f.max_output_tokens,
                                          .block_scale = f.block_scale});
    if (specs.empty()) {
      fmt::print(stderr, "loadgen: {} has no requests at or after --start {} s\n", f.trace,
                 f.start_s);
      return 1;
    }
    for (const RequestSpec& s : specs) arrivals.push_back(s.arrival_s);
    mode_desc = fmt::format("trace {} ({}), {} requests over {:.1f} s, speedup {}", f.trace,
                            format_name, specs.size(), specs.back().arrival_s, f.speedup);
    if (parsed->skipped_rows > 0) {
      fmt::print(stderr, "[loadgen] {}: skipped {} rows that describe failed requests\n", f.trace,
                 parsed->skipped_rows);
    }
  } else if (open_mode) {
    arrivals = f.requests > 0 ? PoissonArrivals(f.rate, f.requests, f.seed)
                              : PoissonArrivalsUntil(f.rate, f.duration_s, f.seed);
    mode_desc = fmt::format("open loop, Poisson {} req/s, {} requests", f.rate, arrivals.size());
  } else {
    mode_desc = fmt::format("closed loop, {} clients, {}", f.concurrency,
                            f.requests > 0 ? fmt::format("{} requests", f.requests)
                                           : fmt::format("{} s", f.duration_s));
  }

  if (f.wait_ready_s > 0 && !WaitReady(*url, f.wait_ready_s)) {
    fmt::print(stderr, "loadgen: {}/health did not answer 200 within {} s\n", *url, f.wait_ready_s);
    return g_stop.load() ? 130 : 1;
  }
  std::string model = f.model;
  if (model.empty()) {
    auto m = DiscoverModel(*url, f.api_key, why);
    if (!m) {
      fmt::print(stderr, "loadgen: {}; pass --model\n", why);
      return 1;
    }
    model = *m;
  }

  const PromptBuilder prompts({.seed = f.seed, .words_per_token = f.words_per_token});
  // The system prompt has its own seed when asked, so runs with different
  // --seed (different questions) can share it byte for byte.
  const PromptBuilder system_prompts(
      {.seed = f.system_seed.value_or(f.seed), .words_per_token = f.words_per_token});
  std::vector<std::string> systems;  // request i sends systems[prompts.SystemIndex(i, n)]
  for (int64_t k = 0; k < f.system_prompts; ++k) {
    systems.push_back(system_prompts.System(f.system_prompt_tokens, k));
  }
  const BodyOptions body_options{.endpoint = endpoint,
                                 .model = model,
                                 .ignore_eos = f.ignore_eos,
                                 .temperature = f.temperature,
                                 .seed = std::nullopt,
                                 .extra_json = f.extra_body};
  const int64_t block_tokens =
      std::max<int64_t>(1, std::llround(static_cast<double>(kMooncakeBlockTokens) * f.block_scale));
  const bool max_tokens_given = app.count("--max-tokens") > 0;
  const RequestFactory factory = [&](int64_t i) {
    PreparedRequest p;
    std::string prompt;
    if (trace_mode) {
      const RequestSpec& s = specs[static_cast<size_t>(i)];
      prompt = s.hash_ids.empty() ? prompts.Unique(i, s.prompt_tokens)
                                  : prompts.Mooncake(s.hash_ids, s.prompt_tokens, block_tokens, i);
      p.base.target_prompt_tokens = s.prompt_tokens + f.system_prompt_tokens;
      p.base.max_tokens = std::max<int64_t>(1, max_tokens_given ? f.max_tokens : s.output_tokens);
    } else if (!file_prompts.empty()) {
      prompt = file_prompts[static_cast<size_t>(i) % file_prompts.size()];
      // No tokenizer here: the target is the prompt's words (the server's count is reported).
      const int64_t words =
          std::count(prompt.begin(), prompt.end(), ' ') + (prompt.empty() ? 0 : 1);
      p.base.target_prompt_tokens = words + f.system_prompt_tokens;
      p.base.max_tokens = f.max_tokens;
    } else {
      prompt = prompts.Unique(i, f.prompt_tokens);
      p.base.target_prompt_tokens = f.prompt_tokens + f.system_prompt_tokens;
      p.base.max_tokens = f.max_tokens;
    }
    const std::string& system =
        systems[static_cast<size_t>(prompts.SystemIndex(i, f.system_prompts))];
    p.body = BuildRequestBody(body_options, system, prompt, p.base.max_tokens);
    return p;
  };

  const RunOptions run_options{.session = {.base_url = *url,
                                           .path = std::string(EndpointPath(endpoint)),
                                           .api_key = f.api_key,
                                           .timeout_s = f.timeout_s},
                               .concurrency = f.concurrency,
                               .max_requests = f.requests,
                               .duration_s = f.duration_s,
                               .max_in_flight = f.max_in_flight,
                               .progress_every_s = f.quiet ? 0.0 : 10.0};
  const std::string title = fmt::format(
      "loadgen: {} -> {}{} (model {}{})", mode_desc, *url, EndpointPath(endpoint), model,
      f.system_prompt_tokens > 0
          ? fmt::format(", {}-token system prompt{}", f.system_prompt_tokens,
                        f.system_prompts > 1 ? fmt::format(" (one of {})", f.system_prompts) : "")
          : "");
  if (!f.quiet) fmt::print(stderr, "{}\n", title);
  const std::string started_at = WallClockIso();
  const RunResult result = (trace_mode || open_mode)
                               ? RunOpenLoop(run_options, arrivals, factory, g_stop)
                               : RunClosedLoop(run_options, factory, g_stop);

  const Summary summary = Summarize(result.samples, result.duration_s);
  fmt::print("{}", RenderTable(summary, title + (result.interrupted ? " [interrupted]" : "")));
  std::fflush(stdout);

  if (!f.json_path.empty()) {
    nlohmann::json config = {
        {"url", *url},
        {"endpoint", EndpointPath(endpoint)},
        {"model", model},
        {"mode", trace_mode  ? "trace"
                 : open_mode ? "open"
                             : "closed"},
        {"concurrency", f.concurrency},
        {"rate_per_s", f.rate},
        {"requests", f.requests},
        {"duration_s", f.duration_s},
        {"max_in_flight", f.max_in_flight},
        {"trace", f.trace},
        {"trace_format",
         trace_mode ? (f.trace_format.empty() ? GuessTraceFormat(f.trace) : f.trace_format) : ""},
        {"speedup", f.speedup},
        {"start_s", f.start_s},
        {"max_requests", f.max_requests},
        {"max_prompt_tokens", f.max_prompt_tokens},
        {"max_output_tokens", f.max_output_tokens},
        {"block_scale", f.block_scale},
        {"prompt_tokens", f.prompt_tokens},
        {"max_tokens", f.max_tokens},
        {"system_prompt_tokens", f.system_prompt_tokens},
        {"system_prompts", f.system_prompts},
        {"system_seed", f.system_seed ? nlohmann::json(*f.system_seed) : nlohmann::json()},
        {"prompt_file", f.prompt_file},
        {"prompts_in_file", file_prompts.size()},
        {"extra_body", f.extra_body},
        {"ignore_eos", f.ignore_eos},
        {"temperature", f.temperature ? nlohmann::json(*f.temperature) : nlohmann::json()},
        {"seed", f.seed},
        {"words_per_token", f.words_per_token},
        {"timeout_s", f.timeout_s},
        {"started_at", started_at}};
    nlohmann::json samples = nlohmann::json::array();
    for (const RequestSample& s : result.samples) samples.push_back(SampleJson(s));
    const nlohmann::json out = {{"tool", "strata loadgen"},
                                {"config", std::move(config)},
                                {"interrupted", result.interrupted},
                                {"summary", SummaryJson(summary)},
                                {"samples", std::move(samples)}};
    std::ofstream file(f.json_path);
    file << out.dump(2) << "\n";
    file.close();
    if (!file) {
      fmt::print(stderr, "loadgen: cannot write '{}'\n", f.json_path);
      return 1;
    }
  }
  if (result.interrupted) return 130;
  if (f.fail_on_error && summary.failed > 0) return 3;
  return 0;
}

}  // namespace

int Main(int argc, char** argv) {
  InstallSignalHandlers();
  Flags f;
  CLI::App app{
      "loadgen: load generator for OpenAI-compatible LLM servers (strata serve, "
      "llama-server). Streams every request to measure TTFT, TPOT and latency."};
  app.get_formatter()->column_width(34);

  app.add_option("--url", f.url, "Server base URL, http://host:port")->capture_default_str();
  app.add_option("--endpoint", f.endpoint,
                 "chat (/v1/chat/completions) or completions (/v1/completions)")
      ->check(CLI::IsMember({"chat", "completions"}))
      ->capture_default_str();
  app.add_option("--model", f.model, "Model id to send (default: the first of GET /v1/models)");
  app.add_option("--api-key", f.api_key, "Bearer token");

  app.add_option("-c,--concurrency", f.concurrency, "Closed loop: clients sending back to back")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("-n,--requests", f.requests, "Closed/open loop: requests to send")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--duration", f.duration_s,
                 "Closed/open loop: seconds to send for (if no --requests)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--rate", f.rate, "Open loop: Poisson arrivals per second")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-in-flight", f.max_in_flight,
                 "Open loop and trace: cap on concurrent requests")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  app.add_option("--trace", f.trace, "Replay this trace file (arrival times and token counts)");
  app.add_option("--trace-format", f.trace_format,
                 "azure, mooncake or burstgpt (default: from the file name)")
      ->check(CLI::IsMember({"azure", "mooncake", "burstgpt"}));
  app.add_option("--speedup", f.speedup, "Trace: divide arrival offsets by this")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--start", f.start_s, "Trace: start this many seconds into the trace")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-requests", f.max_requests,
                 "Trace: replay at most this many requests (0 = all)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-prompt-tokens", f.max_prompt_tokens, "Trace: cap prompt tokens (0 = none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-output-tokens", f.max_output_tokens, "Trace: cap output tokens (0 = none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--block-scale", f.block_scale,
                 "Mooncake: tokens per 512-token hash block are scaled by this")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  app.add_option("--prompt-tokens", f.prompt_tokens, "Closed/open loop: prompt length in tokens")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--max-tokens", f.max_tokens,
                 "Tokens to generate (with --trace: overrides the trace's counts)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--system-prompt-tokens", f.system_prompt_tokens,
                 "Prepend the same system prompt of this many tokens to every request")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--system-prompts", f.system_prompts,
                 "Distinct system prompts (of --system-prompt-tokens each); each request gets "
                 "one of them, drawn uniformly (fixed by --seed)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  app.add_option("--system-seed", f.system_seed,
                 "Seed of the system prompt's words (default: --seed); the same value gives a "
                 "byte-identical system prompt whatever --seed is");
  app.add_option("--prompt-file", f.prompt_file,
                 "Closed/open loop: user messages from this file (JSON lines: a string or "
                 "{\"prompt\": ...}); request i sends line i mod n, in place of --prompt-tokens");
  app.add_option("--extra-body", f.extra_body,
                 "A JSON object whose members are added to every request body, e.g. "
                 "'{\"cache\":{\"prefix\":false}}'");
  app.add_flag("--ignore-eos", f.ignore_eos, "Also send \"ignore_eos\": true (llama-server)");
  app.add_option("--temperature", f.temperature, "Sampling temperature to send (default: not sent)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", f.seed, "Fixes prompts and the Poisson schedule")->capture_default_str();
  app.add_option("--words-per-token", f.words_per_token,
                 "Prompt words per target token (the word list's words are 1 token each "
                 "in Llama/GPT vocabularies)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();

  app.add_option("--timeout", f.timeout_s, "Seconds one request may take")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--wait-ready", f.wait_ready_s,
                 "Wait up to this many seconds for GET /health = 200")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--json", f.json_path, "Write summary and per-request samples to this file");
  app.add_flag("--fail-on-error", f.fail_on_error, "Exit 3 when any request failed");
  app.add_flag("-q,--quiet", f.quiet, "No progress lines on stderr");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return Run(f, app);
  } catch (const std::exception& e) {  // a third-party throw must not end in std::terminate
    fmt::print(stderr, "loadgen: {}\n", e.what());
    return 1;
  }
}

}  // namespace strata::loadgen

int main(int argc, char** argv) { return strata::loadgen::Main(argc, argv); }
