#include "loadgen/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace strata::loadgen {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

nlohmann::json Num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

nlohmann::json DistributionJson(const Distribution& d) {
  return {{"count", d.count},  {"mean", Num(d.mean)}, {"min", Num(d.min)}, {"p50", Num(d.p50)},
          {"p90", Num(d.p90)}, {"p95", Num(d.p95)},   {"p99", Num(d.p99)}, {"max", Num(d.max)}};
}

std::string Ms(double v) { return std::isfinite(v) ? fmt::format("{:.1f}", v) : "-"; }

std::string DistributionRow(const char* name, const Distribution& d) {
  return fmt::format("  {:<14}{:>6}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}\n", name, d.count,
                     Ms(d.mean), Ms(d.p50), Ms(d.p90), Ms(d.p95), Ms(d.p99), Ms(d.max));
}

}  // namespace

double Percentile(std::span<const double> sorted, double p) {
  if (sorted.empty()) return kNaN;
  const double n = static_cast<double>(sorted.size());
  // p * n / 100 in that order keeps whole ranks exact (95 * 20 / 100 == 19);
  // the small slack absorbs rounding of fractional p.
  const double rank = std::ceil(p * n / 100.0 - 1e-9);
  const size_t r = static_cast<size_t>(std::clamp(rank, 1.0, n));
  return sorted[r - 1];
}

Distribution Describe(std::vector<double> values) {
  Distribution d;
  d.count = static_cast<int64_t>(values.size());
  if (values.empty()) {
    d.mean = d.min = d.p50 = d.p90 = d.p95 = d.p99 = d.max = kNaN;
    return d;
  }
  std::sort(values.begin(), values.end());
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  d.min = values.front();
  d.max = values.back();
  d.p50 = Percentile(values, 50);
  d.p90 = Percentile(values, 90);
  d.p95 = Percentile(values, 95);
  d.p99 = Percentile(values, 99);
  return d;
}

Summary Summarize(std::span<const RequestSample> samples, double duration_s) {
  Summary s;
  s.requests = static_cast<int64_t>(samples.size());
  s.duration_s = duration_s;
  std::vector<double> ttft, tpot, e2e, lag;
  double target_prompt = 0, reported_prompt = 0, max_tokens = 0;
  for (const RequestSample& r : samples) {
    lag.push_back((r.sent_s - r.scheduled_s) * 1e3);
    if (r.outcome == Outcome::kInterrupted) {
      ++s.interrupted;
      continue;
    }
    if (r.outcome == Outcome::kFailed) {
      ++s.failed;
      ++s.errors[r.error_kind];
      s.error_examples.try_emplace(r.error_kind, r.error_message);
      continue;
    }
    ++s.ok;
    if (!r.cache.empty()) ++s.cache[r.cache];
    if (auto t = r.TtftS()) ttft.push_back(*t * 1e3);
    if (auto t = r.TpotS()) tpot.push_back(*t * 1e3);
    e2e.push_back(r.E2eS() * 1e3);
    s.output_tokens += r.OutputTokens();
    max_tokens += static_cast<double>(r.max_tokens);
    if (r.prompt_tokens >= 0) {
      ++s.usage_reported;
      s.prompt_tokens += r.prompt_tokens;
      reported_prompt += static_cast<double>(r.prompt_tokens);
      target_prompt += static_cast<double>(r.target_prompt_tokens);
    }
  }
  s.ttft_ms = Describe(std::move(ttft));
  s.tpot_ms = Describe(std::move(tpot));
  s.e2e_ms = Describe(std::move(e2e));
  s.send_lag_ms = Describe(std::move(lag));
  if (duration_s > 0) {
    s.request_rate = static_cast<double>(s.ok) / duration_s;
    s.output_token_rate = static_cast<double>(s.output_tokens) / duration_s;
    s.prompt_token_rate = static_cast<double>(s.prompt_tokens) / duration_s;
  }
  if (s.usage_reported > 0) {
    s.target_prompt_tokens_mean = target_prompt / static_cast<double>(s.usage_reported);
    s.reported_prompt_tokens_mean = reported_prompt / static_cast<double>(s.usage_reported);
  }
  if (s.ok > 0) {
    s.max_tokens_mean = max_tokens / static_cast<double>(s.ok);
    s.output_tokens_mean = static_cast<double>(s.output_tokens) / static_cast<double>(s.ok);
  }
  return s;
}

std::string RenderTable(const Summary& s, const std::string& title) {
  std::string out = title + "\n";
  out += fmt::format("  requests      {} ok, {} failed", s.ok, s.failed);
  if (s.interrupted > 0) out += fmt::format(", {} interrupted", s.interrupted);
  out += fmt::format(" (of {})\n", s.requests);
  out += fmt::format("  duration      {:.2f} s\n", s.duration_s);
  out += fmt::format("  throughput    {:.3f} req/s, {:.1f} output tok/s, {:.1f} prompt tok/s\n",
                     s.request_rate, s.output_token_rate, s.prompt_token_rate);
  if (s.usage_reported > 0) {
    out += fmt::format("  prompt tok    target mean {:.1f}, server-reported mean {:.1f}\n",
                       s.target_prompt_tokens_mean, s.reported_prompt_tokens_mean);
  } else if (s.ok > 0) {
    out += "  prompt tok    the server reported no usage\n";
  }
  out += fmt::format("  output tok    asked mean {:.1f}, received mean {:.1f}, total {}\n",
                     s.max_tokens_mean, s.output_tokens_mean, s.output_tokens);
  out += fmt::format("  {:<14}{:>6}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}\n", "(ms)", "n", "mean",
                     "P50", "P90", "P95", "P99", "max");
  out += DistributionRow("TTFT", s.ttft_ms);
  out += DistributionRow("TPOT", s.tpot_ms);
  out += DistributionRow("end-to-end", s.e2e_ms);
  out += DistributionRow("send lag", s.send_lag_ms);
  if (!s.cache.empty()) {
    std::string served;
    for (const auto& [value, n] : s.cache) {
      served += fmt::format("{}{} {}", served.empty() ? "" : ", ", value, n);
    }
    out += "  x-strata-cache " + served + "\n";
  }
  if (s.errors.empty()) {
    out += "  errors        none\n";
  } else {
    out += "  errors\n";
    for (const auto& [kind, n] : s.errors) {
      const auto ex = s.error_examples.find(kind);
      out += fmt::format("    {:<18}{:>6}  e.g. {}\n", kind, n,
                         ex == s.error_examples.end() ? "" : ex->second);
    }
  }
  return out;
}

nlohmann::json SummaryJson(const Summary& s) {
  nlohmann::json errors = nlohmann::json::object();
  for (const auto& [kind, n] : s.errors) {
    const auto ex = s.error_examples.find(kind);
    errors[kind] = {{"count", n}, {"example", ex == s.error_examples.end() ? "" : ex->second}};
  }
  return {{"requests", s.requests},
          {"ok", s.ok},
          {"failed", s.failed},
          {"interrupted", s.interrupted},
          {"duration_s", s.duration_s},
          {"request_rate_per_s", s.request_rate},
          {"output_token_rate_per_s", s.output_token_rate},
          {"prompt_token_rate_per_s", s.prompt_token_rate},
          {"output_tokens", s.output_tokens},
          {"prompt_tokens", s.prompt_tokens},
          {"ttft_ms", DistributionJson(s.ttft_ms)},
          {"tpot_ms", DistributionJson(s.tpot_ms)},
          {"e2e_ms", DistributionJson(s.e2e_ms)},
          {"send_lag_ms", DistributionJson(s.send_lag_ms)},
          {"target_prompt_tokens_mean", s.target_prompt_tokens_mean},
          {"reported_prompt_tokens_mean", s.reported_prompt_tokens_mean},
          {"usage_reported", s.usage_reported},
          {"max_tokens_mean", s.max_tokens_mean},
          {"output_tokens_mean", s.output_tokens_mean},
          {"errors", std::move(errors)},
          {"cache", s.cache},
          {"percentile_method", "nearest-rank: sorted[ceil(p/100*n)-1]"}};
}

nlohmann::json SampleJson(const RequestSample& r) {
  auto opt_ms = [](std::optional<double> v) { return v ? Num(*v * 1e3) : nlohmann::json(); };
  nlohmann::json j = {
      {"index", r.index},
      {"outcome", OutcomeName(r.outcome)},
      {"scheduled_s", r.scheduled_s},
      {"sent_s", r.sent_s},
      {"first_token_s", r.first_token_s >= 0 ? Num(r.first_token_s) : nlohmann::json()},
      {"last_token_s", r.last_token_s >= 0 ? Num(r.last_token_s) : nlohmann::json()},
      {"end_s", r.end_s},
      {"ttft_ms", opt_ms(r.TtftS())},
      {"tpot_ms", opt_ms(r.TpotS())},
      {"e2e_ms", Num(r.E2eS() * 1e3)},
      {"target_prompt_tokens", r.target_prompt_tokens},
      {"max_tokens", r.max_tokens},
      {"prompt_tokens", r.prompt_tokens >= 0 ? nlohmann::json(r.prompt_tokens) : nlohmann::json()},
      {"completion_tokens",
       r.completion_tokens >= 0 ? nlohmann::json(r.completion_tokens) : nlohmann::json()},
      {"content_chunks", r.content_chunks},
      {"http_status", r.http_status},
      {"finish_reason", r.finish_reason},
      {"cache", r.cache.empty() ? nlohmann::json() : nlohmann::json(r.cache)}};
  if (r.outcome != Outcome::kOk) {
    j["error_kind"] = r.error_kind;
    j["error_message"] = r.error_message;
  }
  return j;
}

}  // namespace strata::loadgen
