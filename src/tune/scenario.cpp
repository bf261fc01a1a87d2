#include "tune/scenario.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "config/config.h"
#include "util/hash.h"
#include "util/random.h"

namespace strata::tune {
namespace {

constexpr int64_t kMaxScenarioRequests = 1'000'000;

using config::Knob;
using config::Type;

Knob K(std::string key, Type type, std::string help, std::string def,
       std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt,
       std::vector<std::string> choices = {}) {
  Knob k;
  k.key = std::move(key);
  k.type = type;
  k.help = std::move(help);
  k.default_toml = std::move(def);
  k.min = min;
  k.max = max;
  k.choices = std::move(choices);
  return k;
}

const config::Schema& ScenarioSchema() {
  static const config::Schema* schema = new config::Schema({
      K("name", Type::kString, "The scenario's name (lower-case letters, digits, '-').", ""),
      K("description", Type::kString, "What the workload is and what it stresses.", ""),
      K("arrival.process", Type::kString,
        "poisson (a rate), closed (clients back to back) or trace (a real trace's timing).",
        "\"poisson\"", std::nullopt, std::nullopt, {"poisson", "closed", "trace"}),
      K("arrival.rate", Type::kFloat, "poisson: requests per second.", "2", 0.001, 10000),
      K("arrival.concurrency", Type::kInt, "closed: clients.", "4", 1, 4096),
      K("arrival.trace", Type::kString, "trace: the trace file, relative to the repository root.",
        ""),
      K("arrival.trace_format", Type::kString, "trace: azure, mooncake or burstgpt.", "\"azure\"",
        std::nullopt, std::nullopt, {"azure", "mooncake", "burstgpt"}),
      K("arrival.speedup", Type::kFloat, "trace: arrival offsets are divided by this.", "1", 0.001,
        10000),
      K("arrival.duration", Type::kFloat, "Seconds of arrivals.", "60", 1, 86400),
      K("arrival.max_prompt_tokens", Type::kInt,
        "trace: longer prompts are cut to this (0 = none).", "0", 0, 1 << 24),
      K("arrival.max_output_tokens", Type::kInt,
        "trace: longer answers are cut to this (0 = none).", "0", 0, 1 << 24),
      K("arrival.max_requests", Type::kInt, "At most this many requests (0 = the duration's).", "0",
        0, 1e7),
      K("prompts.tokens", Type::kInt, "Mean tokens of a question (a trace gives its own).", "200",
        1, 1 << 20),
      K("prompts.spread", Type::kFloat, "Log-normal sigma of the question lengths.", "0.3", 0, 3),
      K("prompts.system_tokens", Type::kInt, "Tokens of a shared system prompt (0 = none).", "0", 0,
        1 << 20),
      K("prompts.system_prompts", Type::kInt, "Distinct system prompts, picked uniformly.", "1", 1,
        1 << 20),
      K("prompts.repeat", Type::kFloat, "Share of requests repeating an earlier question exactly.",
        "0", 0, 1),
      K("prompts.reword", Type::kFloat, "Share of requests rewording an earlier question.", "0", 0,
        1),
      K("prompts.pool", Type::kInt, "Repeats draw from the last this many questions (0 = all).",
        "0", 0, 1e7),
      K("prompts.turns", Type::kInt, "Turns per session (1 = no sessions).", "1", 1, 1000),
      K("prompts.file", Type::kString,
        "Real runs: the questions' text (loadgen --prompt-file); relative to the repository root.",
        ""),
      K("output.tokens", Type::kInt, "Mean tokens of an answer.", "64", 1, 1 << 20),
      K("output.spread", Type::kFloat, "Log-normal sigma of the answer lengths.", "0.3", 0, 3),
      K("output.temperature", Type::kFloat, "0: greedy answers (deterministic, cacheable).", "0", 0,
        100),
      K("metrics.matter", Type::kStringList,
        "The metrics this workload is judged on: throughput, ttft_p95, quality.",
        "[\"throughput\", \"ttft_p95\", \"quality\"]"),
      K("metrics.first_seconds", Type::kFloat,
        "> 0: time to first token over the first seconds only (a cold start).", "0", 0, 86400),
      K("metrics.warmup", Type::kFloat,
        "Seconds at the start whose requests' TTFT is not counted (the steady state is judged; "
        "a cold start scenario sets first_seconds instead).",
        "0", 0, 86400),
      K("metrics.ttft_p99_slo", Type::kFloat,
        "> 0: seconds of P99 time to first token this workload must stay within (0 = the "
        "tuner's --ttft-p99-slo).",
        "0", 0, 86400),
  });
  return *schema;
}

bool ValidName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

// A log-normal length with mean `mean` and sigma `spread`, at least 1.
int32_t Length(util::Rng& rng, int32_t mean, double spread) {
  if (spread <= 0) return mean;
  const double mu = std::log(static_cast<double>(mean)) - spread * spread / 2;
  const double u1 = std::max(rng.Uniform(), 1e-12), u2 = rng.Uniform();
  const double z = std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
  const double v = std::exp(mu + spread * z);
  return static_cast<int32_t>(std::clamp(std::llround(v), 1LL, 1LL << 24));
}

}  // namespace

util::StatusOr<Scenario> ParseScenario(std::string_view text, std::string_view file) {
  const config::ParseResult r = config::Parse(text, ScenarioSchema());
  std::vector<std::string> problems;
  for (const config::Diagnostic& d : r.errors)
    problems.push_back(config::FormatDiagnostic(file, d));
  const config::Document& doc = r.document;
  Scenario s;
  auto str = [&](std::string_view key, std::string& out) {
    if (const config::Value* v = doc.Get(key)) out = v->s;
  };
  auto num = [&](std::string_view key, auto& out) {
    if (const config::Value* v = doc.Get(key)) {
      using T = std::remove_reference_t<decltype(out)>;
      out = v->type == Type::kInt ? static_cast<T>(v->i) : static_cast<T>(v->f);
    }
  };
  str("name", s.name);
  str("description", s.description);
  std::string process = "poisson", format = "azure";
  str("arrival.process", process);
  s.arrival = process == "closed"  ? ArrivalProcess::kClosed
              : process == "trace" ? ArrivalProcess::kTrace
                                   : ArrivalProcess::kPoisson;
  num("arrival.rate", s.rate);
  num("arrival.concurrency", s.concurrency);
  str("arrival.trace", s.trace);
  str("arrival.trace_format", format);
  if (auto f = ParseTraceFormat(format); f.ok()) s.trace_format = *f;
  num("arrival.speedup", s.speedup);
  num("arrival.duration", s.duration_s);
  num("arrival.max_requests", s.max_requests);
  num("arrival.max_prompt_tokens", s.max_prompt_tokens);
  num("arrival.max_output_tokens", s.max_output_tokens);
  num("prompts.tokens", s.prompt_tokens);
  num("prompts.spread", s.prompt_spread);
  num("prompts.system_tokens", s.system_tokens);
  num("prompts.system_prompts", s.system_prompts);
  num("prompts.repeat", s.repeat);
  num("prompts.reword", s.reword);
  num("prompts.pool", s.pool);
  num("prompts.turns", s.turns);
  str("prompts.file", s.prompt_file);
  num("output.tokens", s.output_tokens);
  num("output.spread", s.output_spread);
  num("output.temperature", s.temperature);
  if (const config::Value* v = doc.Get("metrics.matter")) s.metrics = v->list;
  num("metrics.first_seconds", s.measure_first_s);
  num("metrics.ttft_p99_slo", s.ttft_p99_slo_s);
  num("metrics.warmup", s.warmup_s);

  auto line = [&](std::string_view key) {
    const config::Value* v = doc.Get(key);
    return fmt::format("{}:{}: {}: ", file, v != nullptr ? v->line : 0, key);
  };
  if (!ValidName(s.name)) {
    problems.push_back(
        fmt::format("{}: name: give the scenario a name of lower-case letters, "
                    "digits and '-' (at most 64)",
                    file));
  }
  if (s.arrival == ArrivalProcess::kTrace && s.trace.empty()) {
    problems.push_back(line("arrival.process") + "a trace scenario needs arrival.trace");
  }
  // A bound on the work a scenario asks for (the simulator holds every request).
  const double expected = s.arrival == ArrivalProcess::kPoisson ? s.rate * s.duration_s
                          : s.max_requests > 0                  ? s.max_requests
                                                                : 64.0 * s.concurrency;
  if (expected > kMaxScenarioRequests) {
    problems.push_back(line("arrival.duration") +
                       fmt::format("about {:.0f} requests; a scenario makes at most {}", expected,
                                   kMaxScenarioRequests));
  }
  if (s.warmup_s >= s.duration_s) {
    problems.push_back(line("metrics.warmup") + "the warm-up must be shorter than the duration");
  }
  if (s.repeat + s.reword > 1) {
    problems.push_back(line("prompts.reword") + "repeat and reword together exceed 1");
  }
  for (const std::string& m : s.metrics) {
    if (m != "throughput" && m != "ttft_p95" && m != "quality") {
      problems.push_back(line("metrics.matter") +
                         fmt::format("'{}' is not a metric (throughput, ttft_p95, quality)", m));
    }
  }
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += (all.empty() ? "" : "\n") + p;
    return util::InvalidArgumentError(all);
  }
  return s;
}

util::StatusOr<std::vector<Scenario>> LoadScenarios(util::FileSystem& fs, const std::string& dir,
                                                    const std::vector<std::string>& only) {
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.ListDir(dir));
  std::sort(names.begin(), names.end());
  std::map<std::string, Scenario> by_name;
  std::vector<std::string> order;
  for (const std::string& n : names) {
    if (n.size() < 6 || n.compare(n.size() - 5, 5, ".toml") != 0) continue;
    const std::string path = dir + "/" + n;
    STRATA_ASSIGN_OR_RETURN(std::string text, fs.ReadFile(path));
    STRATA_ASSIGN_OR_RETURN(Scenario s, ParseScenario(text, path));
    if (by_name.count(s.name) > 0) {
      return util::InvalidArgumentError(
          fmt::format("{}: scenario '{}' is named twice in {}", path, s.name, dir));
    }
    order.push_back(s.name);
    by_name.emplace(s.name, std::move(s));
  }
  std::vector<Scenario> out;
  for (const std::string& n : only.empty() ? order : only) {
    auto it = by_name.find(n);
    if (it == by_name.end()) {
      std::string known;
      for (const std::string& k : order) known += (known.empty() ? "" : ", ") + k;
      return util::InvalidArgumentError(
          fmt::format("no scenario '{}' in {} (there are: {})", n, dir, known));
    }
    out.push_back(it->second);
  }
  if (out.empty()) return util::InvalidArgumentError(fmt::format("no scenario files in {}", dir));
  return out;
}

std::string ScenarioDefaults() {
  return config::RenderDefaults(ScenarioSchema(), "a strata tune scenario");
}

util::StatusOr<std::vector<WorkloadRequest>> Requests(const Scenario& s, uint64_t seed,
                                                      const std::vector<RequestSpec>* trace) {
  util::Rng rng(seed ^ util::Hash64(s.name));
  std::vector<WorkloadRequest> out;
  // Arrivals and, for a trace, sizes.
  std::vector<double> arrivals;
  std::vector<RequestSpec> sliced;
  const size_t cap = s.max_requests > 0 ? static_cast<size_t>(s.max_requests) : size_t{1} << 22;
  switch (s.arrival) {
    case ArrivalProcess::kPoisson: {
      // Sessions start as a Poisson process; a session's later turns follow
      // its first, a few seconds apart (a person reading, then asking).
      const double session_rate = s.rate / s.turns;
      for (double t = 0; arrivals.size() < cap;) {
        t += -std::log(std::max(rng.Uniform(), 1e-12)) / session_rate;
        if (t >= s.duration_s) break;
        for (int32_t turn = 0; turn < s.turns && arrivals.size() < cap; ++turn) {
          arrivals.push_back(t + 4.0 * turn);
        }
      }
      break;
    }
    case ArrivalProcess::kClosed: {
      const size_t n = s.max_requests > 0 ? cap : static_cast<size_t>(s.concurrency) * 64;
      arrivals.assign(n, -1.0);
      break;
    }
    case ArrivalProcess::kTrace: {
      if (trace == nullptr || trace->empty()) {
        return util::FailedPreconditionError(
            fmt::format("scenario '{}' replays {}, which was not read", s.name, s.trace));
      }
      sliced = SliceTrace(*trace, {.max_requests = s.max_requests,
                                   .speedup = s.speedup,
                                   .max_prompt_tokens = s.max_prompt_tokens,
                                   .max_output_tokens = s.max_output_tokens});
      while (!sliced.empty() && sliced.back().arrival_s >= s.duration_s) sliced.pop_back();
      for (const RequestSpec& r : sliced) arrivals.push_back(r.arrival_s);
      break;
    }
  }
  // Contents.
  struct Asked {
    uint64_t question, meaning;
    int32_t tokens;
    int32_t output_tokens;  // an exact repeat asks for the same answer
  };
  std::vector<Asked> asked;  // every question asked so far
  uint64_t next_id = 1;
  std::set<uint64_t> seen_blocks;       // Mooncake prefix chains seen
  std::map<uint64_t, int32_t> history;  // session -> tokens of its conversation so far
  for (size_t i = 0; i < arrivals.size(); ++i) {
    WorkloadRequest w;
    w.arrival_s = arrivals[i];
    if (s.arrival == ArrivalProcess::kClosed) w.client = static_cast<int32_t>(i % s.concurrency);
    w.greedy = s.temperature <= 0;
    w.output_tokens = Length(rng, s.output_tokens, s.output_spread);
    int32_t question_tokens = Length(rng, s.prompt_tokens, s.prompt_spread);
    if (s.arrival == ArrivalProcess::kTrace) {
      const RequestSpec& r = sliced[i];
      question_tokens = static_cast<int32_t>(std::clamp<int64_t>(r.prompt_tokens, 1, 1 << 24));
      w.output_tokens = static_cast<int32_t>(std::clamp<int64_t>(r.output_tokens, 1, 1 << 24));
      // Mooncake: the leading 512-token blocks an earlier request also had.
      uint64_t chain = 0;
      int32_t shared_blocks = 0;
      bool prefix = true;
      for (int64_t id : r.hash_ids) {
        chain = util::Hash64(fmt::format("{}", id), chain);
        if (prefix && seen_blocks.count(chain) > 0) {
          ++shared_blocks;
          w.prefix_id = chain;
        } else {
          prefix = false;
        }
        seen_blocks.insert(chain);
      }
      w.shared_tokens = std::min<int32_t>(
          question_tokens, shared_blocks * static_cast<int32_t>(kMooncakeBlockTokens));
    }
    // The question: new, repeated or reworded.
    const double u = rng.Uniform();
    const size_t lo = s.pool > 0 && asked.size() > static_cast<size_t>(s.pool)
                          ? asked.size() - static_cast<size_t>(s.pool)
                          : 0;
    if (!asked.empty() && u < s.repeat + s.reword) {
      const Asked& a = asked[lo + static_cast<size_t>(rng.Uniform() * (asked.size() - lo)) %
                                      (asked.size() - lo)];
      w.meaning = a.meaning;
      if (u < s.repeat) {
        w.question = a.question;
        question_tokens = a.tokens;
        w.output_tokens = a.output_tokens;
      } else {
        w.question = next_id++;
        question_tokens = std::max(1, static_cast<int32_t>(a.tokens * (0.9 + 0.2 * rng.Uniform())));
      }
    } else {
      w.question = next_id++;
      w.meaning = next_id++;
    }
    asked.push_back({w.question, w.meaning, question_tokens, w.output_tokens});
    // The system prompt and the conversation so far come first.
    int32_t lead = 0;
    if (s.system_tokens > 0) {
      const auto sp = static_cast<uint64_t>(rng.Uniform() * s.system_prompts) %
                      static_cast<uint64_t>(s.system_prompts);
      w.prefix_id = util::Hash64(fmt::format("system {}", sp));
      lead = s.system_tokens;
    }
    if (s.turns > 1) {
      const size_t session = i / static_cast<size_t>(s.turns);
      w.session = session + 1;
      w.turn = static_cast<int32_t>(i % static_cast<size_t>(s.turns));
      int32_t& h = history[w.session];
      if (w.turn > 0) {
        // The previous turn's prompt and answer: the same leading tokens.
        w.prefix_id = util::Hash64(fmt::format("session {} turn {}", w.session, w.turn - 1));
        lead += h;
      }
      h += question_tokens + w.output_tokens;
      w.publishes = util::Hash64(fmt::format("session {} turn {}", w.session, w.turn));
      // Repeats within a session would not be one: every turn is new.
      if (w.turn > 0) w.question = next_id++;
    }
    w.shared_tokens = std::max(w.shared_tokens, lead);
    w.prompt_tokens = lead + question_tokens;
    out.push_back(w);
  }
  return out;
}

}  // namespace strata::tune
