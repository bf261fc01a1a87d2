#include "tune/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

namespace strata::tune {
namespace {

using util::InvalidArgumentError;
using util::StatusOr;

// Splits into lines, dropping a trailing '\r'; keeps 1-based line numbers.
struct Line {
  int64_t number = 0;
  std::string_view text;
};
std::vector<Line> Lines(std::string_view text) {
  std::vector<Line> out;
  int64_t number = 0;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out.push_back({number, line});
  }
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The trace files have no quoted fields; a plain split is exact for them.
std::vector<std::string_view> SplitCsv(std::string_view line) {
  std::vector<std::string_view> out;
  while (true) {
    const size_t comma = line.find(',');
    out.push_back(Trim(line.substr(0, comma)));
    if (comma == std::string_view::npos) break;
    line.remove_prefix(comma + 1);
  }
  return out;
}

StatusOr<int64_t> ParseInt(std::string_view s, std::string_view what, int64_t line) {
  int64_t v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) {
    return InvalidArgumentError(fmt::format("line {}: {} '{}' is not an integer", line, what, s));
  }
  return v;
}

StatusOr<double> ParseDouble(std::string_view s, std::string_view what, int64_t line) {
  double v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v)) {
    return InvalidArgumentError(fmt::format("line {}: {} '{}' is not a number", line, what, s));
  }
  return v;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

// Sorts by arrival (stable: equal times keep file order) and re-bases to 0.
ParsedTrace Finish(std::vector<std::pair<double, RequestSpec>> rows, int64_t skipped) {
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  ParsedTrace out;
  out.skipped_rows = skipped;
  out.requests.reserve(rows.size());
  const double t0 = rows.empty() ? 0 : rows.front().first;
  for (auto& [t, spec] : rows) {
    spec.arrival_s = t - t0;
    out.requests.push_back(std::move(spec));
  }
  return out;
}

util::Status CheckTokens(int64_t prompt, int64_t output, int64_t line) {
  if (prompt < 0 || output < 0) {
    return InvalidArgumentError(
        fmt::format("line {}: token counts {} and {} must be >= 0", line, prompt, output));
  }
  return {};
}

// Index of the column named `name` (exact match), or an error naming the header.
StatusOr<size_t> Column(const std::vector<std::string_view>& header, std::string_view name,
                        std::string_view format) {
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == name) return i;
  }
  return InvalidArgumentError(fmt::format("{}: the header has no '{}' column", format, name));
}

}  // namespace

StatusOr<TraceFormat> ParseTraceFormat(std::string_view name) {
  if (name == "azure") return TraceFormat::kAzure;
  if (name == "mooncake") return TraceFormat::kMooncake;
  if (name == "burstgpt") return TraceFormat::kBurstGpt;
  return InvalidArgumentError(
      fmt::format("trace format '{}' is not one of azure, mooncake, burstgpt", name));
}

StatusOr<double> ParseDateTimeSeconds(std::string_view text) {
  // YYYY-MM-DD HH:MM:SS[.fraction]
  text = Trim(text);
  auto bad = [&] {
    return InvalidArgumentError(
        fmt::format("timestamp '{}' is not 'YYYY-MM-DD HH:MM:SS[.fraction]'", text));
  };
  if (text.size() < 19 || text[4] != '-' || text[7] != '-' ||
      (text[10] != ' ' && text[10] != 'T') || text[13] != ':' || text[16] != ':') {
    return bad();
  }
  auto field = [&](size_t pos, size_t len, int64_t& out) {
    const auto [p, ec] = std::from_chars(text.data() + pos, text.data() + pos + len, out);
    return ec == std::errc() && p == text.data() + pos + len;
  };
  int64_t y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  if (!field(0, 4, y) || !field(5, 2, mo) || !field(8, 2, d) || !field(11, 2, h) ||
      !field(14, 2, mi) || !field(17, 2, s) || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 ||
      mi > 59 || s > 60) {
    return bad();
  }
  double frac = 0;
  if (text.size() > 19) {
    if (text[19] != '.' || text.size() == 20) return bad();
    double scale = 0.1;
    for (size_t i = 20; i < text.size(); ++i) {
      if (text[i] < '0' || text[i] > '9') return bad();
      frac += (text[i] - '0') * scale;
      scale /= 10;
    }
  }
  return static_cast<double>(DaysFromCivil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s) + frac;
}

StatusOr<ParsedTrace> ParseAzureCsv(std::string_view text) {
  const std::vector<Line> lines = Lines(text);
  if (lines.empty()) return InvalidArgumentError("azure: the trace is empty");
  const auto header = SplitCsv(lines[0].text);
  STRATA_ASSIGN_OR_RETURN(const size_t c_time, Column(header, "TIMESTAMP", "azure"));
  STRATA_ASSIGN_OR_RETURN(const size_t c_in, Column(header, "ContextTokens", "azure"));
  STRATA_ASSIGN_OR_RETURN(const size_t c_out, Column(header, "GeneratedTokens", "azure"));
  const size_t need = std::max({c_time, c_in, c_out}) + 1;
  std::vector<std::pair<double, RequestSpec>> rows;
  rows.reserve(lines.size());
  for (size_t i = 1; i < lines.size(); ++i) {
    const Line& l = lines[i];
    if (Trim(l.text).empty()) continue;
    const auto f = SplitCsv(l.text);
    if (f.size() < need) {
      return InvalidArgumentError(
          fmt::format("azure: line {} has {} fields, want {}", l.number, f.size(), header.size()));
    }
    auto t = ParseDateTimeSeconds(f[c_time]);
    if (!t.ok()) return t.status().WithContext(fmt::format("azure: line {}", l.number));
    RequestSpec spec;
    STRATA_ASSIGN_OR_RETURN(spec.prompt_tokens, ParseInt(f[c_in], "ContextTokens", l.number));
    STRATA_ASSIGN_OR_RETURN(spec.output_tokens, ParseInt(f[c_out], "GeneratedTokens", l.number));
    STRATA_RETURN_IF_ERROR(CheckTokens(spec.prompt_tokens, spec.output_tokens, l.number));
    rows.emplace_back(*t, std::move(spec));
  }
  return Finish(std::move(rows), 0);
}

StatusOr<ParsedTrace> ParseMooncakeJsonl(std::string_view text) {
  using nlohmann::json;
  std::vector<std::pair<double, RequestSpec>> rows;
  for (const Line& l : Lines(text)) {
    if (Trim(l.text).empty()) continue;
    const json j = json::parse(l.text, nullptr, /*allow_exceptions=*/false);
    auto bad = [&](std::string_view why) {
      return InvalidArgumentError(fmt::format("mooncake: line {}: {}", l.number, why));
    };
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    auto number = [&](const char* key) -> const json* {
      auto it = j.find(key);
      return it != j.end() && it->is_number() ? &*it : nullptr;
    };
    const json* ts = number("timestamp");
    const json* in = number("input_length");
    const json* out = number("output_length");
    if (ts == nullptr) return bad("'timestamp' is missing or not a number");
    if (in == nullptr || !in->is_number_integer()) return bad("'input_length' is not an integer");
    if (out == nullptr || !out->is_number_integer())
      return bad("'output_length' is not an integer");
    RequestSpec spec;
    spec.prompt_tokens = in->get<int64_t>();
    spec.output_tokens = out->get<int64_t>();
    STRATA_RETURN_IF_ERROR(CheckTokens(spec.prompt_tokens, spec.output_tokens, l.number));
    if (auto it = j.find("hash_ids"); it != j.end()) {
      if (!it->is_array()) return bad("'hash_ids' is not an array");
      for (const json& h : *it) {
        if (!h.is_number_integer()) return bad("'hash_ids' holds a non-integer");
        spec.hash_ids.push_back(h.get<int64_t>());
      }
    }
    rows.emplace_back(ts->get<double>() / 1000.0, std::move(spec));
  }
  if (rows.empty()) return InvalidArgumentError("mooncake: the trace has no requests");
  return Finish(std::move(rows), 0);
}

StatusOr<ParsedTrace> ParseBurstGptCsv(std::string_view text) {
  const std::vector<Line> lines = Lines(text);
  if (lines.empty()) return InvalidArgumentError("burstgpt: the trace is empty");
  const auto header = SplitCsv(lines[0].text);
  STRATA_ASSIGN_OR_RETURN(const size_t c_time, Column(header, "Timestamp", "burstgpt"));
  STRATA_ASSIGN_OR_RETURN(const size_t c_in, Column(header, "Request tokens", "burstgpt"));
  STRATA_ASSIGN_OR_RETURN(const size_t c_out, Column(header, "Response tokens", "burstgpt"));
  const size_t need = std::max({c_time, c_in, c_out}) + 1;
  std::vector<std::pair<double, RequestSpec>> rows;
  int64_t skipped = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    const Line& l = lines[i];
    if (Trim(l.text).empty()) continue;
    const auto f = SplitCsv(l.text);
    if (f.size() < need) {
      return InvalidArgumentError(fmt::format("burstgpt: line {} has {} fields, want {}", l.number,
                                              f.size(), header.size()));
    }
    STRATA_ASSIGN_OR_RETURN(const double t, ParseDouble(f[c_time], "Timestamp", l.number));
    RequestSpec spec;
    STRATA_ASSIGN_OR_RETURN(spec.prompt_tokens, ParseInt(f[c_in], "Request tokens", l.number));
    STRATA_ASSIGN_OR_RETURN(spec.output_tokens, ParseInt(f[c_out], "Response tokens", l.number));
    STRATA_RETURN_IF_ERROR(CheckTokens(spec.prompt_tokens, spec.output_tokens, l.number));
    if (spec.prompt_tokens == 0) {  // a failed request in the original log
      ++skipped;
      continue;
    }
    rows.emplace_back(t, std::move(spec));
  }
  return Finish(std::move(rows), skipped);
}

StatusOr<ParsedTrace> ParseTrace(TraceFormat format, std::string_view text) {
  switch (format) {
    case TraceFormat::kAzure:
      return ParseAzureCsv(text);
    case TraceFormat::kMooncake:
      return ParseMooncakeJsonl(text);
    case TraceFormat::kBurstGpt:
      return ParseBurstGptCsv(text);
  }
  return InvalidArgumentError("unknown trace format");
}

std::vector<RequestSpec> SliceTrace(const std::vector<RequestSpec>& requests,
                                    const TraceSlice& slice) {
  std::vector<RequestSpec> out;
  const double speedup = slice.speedup > 0 ? slice.speedup : 1;
  const double block_scale = slice.block_scale > 0 ? slice.block_scale : 1;
  double t0 = -1;
  for (const RequestSpec& r : requests) {
    if (r.arrival_s < slice.start_s) continue;
    if (slice.max_requests > 0 && static_cast<int64_t>(out.size()) >= slice.max_requests) break;
    if (t0 < 0) t0 = r.arrival_s;
    RequestSpec s = r;
    s.arrival_s = (r.arrival_s - t0) / speedup;
    if (!s.hash_ids.empty() && block_scale != 1 && s.prompt_tokens > 0) {
      s.prompt_tokens =
          std::max<int64_t>(1, std::llround(static_cast<double>(s.prompt_tokens) * block_scale));
    }
    if (slice.max_prompt_tokens > 0)
      s.prompt_tokens = std::min(s.prompt_tokens, slice.max_prompt_tokens);
    if (slice.max_output_tokens > 0)
      s.output_tokens = std::min(s.output_tokens, slice.max_output_tokens);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace strata::tune
