#include "cli/prompt_sets.h"

#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/tar_gz.h"

namespace strata::cli {
namespace {

util::Status Missing(const std::string& path) {
  return util::NotFoundError(
      fmt::format("{} is not present (the prompt sets live under ../shared/data/prompts; see "
                  "PROVENANCE.md there)",
                  path));
}

util::StatusOr<std::string> Read(util::FileSystem& fs, const std::string& path) {
  if (!fs.Exists(path)) return Missing(path);
  return fs.ReadFile(path);
}

util::StatusOr<nlohmann::json> ParseJson(const std::string& text, const std::string& what) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return util::InvalidArgumentError(fmt::format("{}: not valid JSON", what));
  return j;
}

}  // namespace

// PAWS TSV without a header: id, sentence1, sentence2, label.
util::StatusOr<std::vector<Pair>> LoadPaws(util::FileSystem& fs, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, Read(fs, path));
  std::vector<Pair> out;
  std::istringstream in(text);
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> cols;
    size_t start = 0;
    while (true) {
      const size_t tab = line.find('\t', start);
      cols.push_back(
          line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    if (cols.size() != 4 || (cols[3] != "0" && cols[3] != "1")) {
      return util::InvalidArgumentError(
          fmt::format("{}:{}: expected 'id<TAB>sentence1<TAB>sentence2<TAB>0|1'", path, line_no));
    }
    out.push_back({cols[1], cols[2], cols[3] == "1" ? 1 : 0});
  }
  if (out.empty()) return util::InvalidArgumentError(fmt::format("{}: no pairs", path));
  return out;
}

// GPTCache's similiar_qqp_full.json: [{"text_a", "text_b", "label"}], either
// plain or as the one member of a .tar.gz.
util::StatusOr<std::vector<Pair>> LoadQqp(util::FileSystem& fs, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string bytes, Read(fs, path));
  std::string json_text;
  if (path.ends_with(".json")) {
    json_text = std::move(bytes);
  } else {
    STRATA_ASSIGN_OR_RETURN(std::string tar, Gunzip(bytes, path));
    STRATA_ASSIGN_OR_RETURN(json_text, TarMember(tar, ".json", path));
  }
  STRATA_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(json_text, path));
  if (!j.is_array()) return util::InvalidArgumentError(fmt::format("{}: not a JSON list", path));
  std::vector<Pair> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    if (!e.is_object() || !e.contains("text_a") || !e.contains("text_b") || !e.contains("label") ||
        !e["text_a"].is_string() || !e["text_b"].is_string() || !e["label"].is_number_integer()) {
      return util::InvalidArgumentError(
          fmt::format("{}: item {} is not {{text_a, text_b, label}}", path, i));
    }
    out.push_back({e["text_a"].get<std::string>(), e["text_b"].get<std::string>(),
                   e["label"].get<int>() == 1 ? 1 : 0});
  }
  return out;
}

// GPTCache mock_data.json: [{"origin", "similar"}], every pair a paraphrase.
util::StatusOr<std::vector<Pair>> LoadMock(util::FileSystem& fs, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, Read(fs, path));
  STRATA_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, path));
  if (!j.is_array()) return util::InvalidArgumentError(fmt::format("{}: not a JSON list", path));
  std::vector<Pair> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    if (!e.is_object() || !e.contains("origin") || !e.contains("similar") ||
        !e["origin"].is_string() || !e["similar"].is_string()) {
      return util::InvalidArgumentError(
          fmt::format("{}: item {} is not {{origin, similar}}", path, i));
    }
    out.push_back({e["origin"].get<std::string>(), e["similar"].get<std::string>(), 1});
  }
  return out;
}

// Arena-Hard question.jsonl: one {"prompt", "cluster"?} per line.
util::StatusOr<std::vector<ArenaPrompt>> LoadArena(util::FileSystem& fs, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, Read(fs, path));
  std::vector<ArenaPrompt> out;
  std::istringstream in(text);
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    STRATA_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(line, fmt::format("{}:{}", path, line_no)));
    if (!j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
      return util::InvalidArgumentError(fmt::format("{}:{}: no \"prompt\" string", path, line_no));
    }
    ArenaPrompt p;
    p.prompt = j["prompt"].get<std::string>();
    if (j.contains("cluster") && j["cluster"].is_string())
      p.cluster = j["cluster"].get<std::string>();
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Pair> MockPairs(const std::vector<Pair>& mock, const std::vector<ArenaPrompt>& arena1) {
  std::vector<Pair> out = mock;
  for (size_t i = 0; i < mock.size(); ++i) {
    out.push_back({mock[i].b, mock[(i + 1) % mock.size()].a, 0});
  }
  for (size_t i = 0; i + 1 < arena1.size(); ++i) {
    if (!arena1[i].cluster.empty() && arena1[i].cluster == arena1[i + 1].cluster) {
      out.push_back({arena1[i].prompt, arena1[i + 1].prompt, 0});
      ++i;
    }
  }
  return out;
}

}  // namespace strata::cli
