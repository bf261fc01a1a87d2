#include "tune/prompt_text.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tune/internal/json_lines.h"
#include "util/random.h"

namespace strata::tune {
namespace {

// Common English words, lowercase ASCII, each a single token after a space in
// the Llama SentencePiece vocabulary (and in GPT-2-style BPE vocabularies).
// Changing this list changes every prompt: treat it as part of the benchmark.
constexpr std::array<std::string_view, 256> kWords = {
    "the",      "of",      "and",    "to",      "in",       "is",     "that",    "for",    "it",
    "as",       "was",     "with",   "be",      "by",       "on",     "not",     "he",     "this",
    "are",      "or",      "his",    "from",    "at",       "which",  "but",     "have",   "an",
    "had",      "they",    "you",    "were",    "their",    "one",    "all",     "we",     "can",
    "her",      "has",     "there",  "been",    "if",       "more",   "when",    "will",   "would",
    "who",      "so",      "no",     "she",     "other",    "its",    "may",     "these",  "about",
    "into",     "them",    "than",   "some",    "only",     "time",   "out",     "could",  "also",
    "two",      "then",    "first",  "what",    "him",      "new",    "like",    "over",   "such",
    "our",      "man",     "any",    "well",    "made",     "after",  "most",    "should", "very",
    "must",     "before",  "years",  "where",   "even",     "many",   "through", "back",   "much",
    "your",     "way",     "down",   "how",     "did",      "each",   "those",   "people", "just",
    "state",    "because", "great",  "same",    "day",      "own",    "good",    "still",  "used",
    "old",      "world",   "last",   "work",    "life",     "see",    "under",   "long",   "place",
    "while",    "get",     "both",   "between", "three",    "house",  "water",   "part",   "little",
    "number",   "without", "found",  "know",    "school",   "high",   "never",   "every",  "small",
    "name",     "city",    "next",   "take",    "large",    "point",  "hand",    "light",  "case",
    "power",    "family",  "given",  "order",   "system",   "group",  "head",    "year",   "open",
    "second",   "body",    "form",   "land",    "end",      "line",   "party",   "war",    "today",
    "night",    "country", "book",   "area",    "church",   "music",  "story",   "play",   "field",
    "money",    "market",  "table",  "river",   "heart",    "road",   "game",    "paper",  "door",
    "tree",     "voice",   "room",   "south",   "north",    "west",   "east",    "color",  "paint",
    "bird",     "horse",   "girl",   "boy",     "child",    "friend", "father",  "mother", "king",
    "ship",     "sea",     "sun",    "moon",    "star",     "fire",   "wind",    "rain",   "snow",
    "stone",    "wood",    "glass",  "bread",   "milk",     "apple",  "garden",  "window", "street",
    "town",     "village", "island", "forest",  "mountain", "valley", "bridge",  "train",  "car",
    "plane",    "letter",  "word",   "news",    "song",     "dance",  "picture", "camera", "phone",
    "computer", "data",    "model",  "test",    "level",    "rate",   "price",   "value",  "cost",
    "energy",   "health",  "class",  "team",    "club",     "player", "season",  "match",  "goal",
    "score",    "lake",    "ocean",  "cloud",
};

constexpr uint64_t kUniqueDomain = 1;
constexpr uint64_t kSystemDomain = 2;
constexpr uint64_t kBlockDomain = 3;
constexpr uint64_t kTailDomain = 4;
constexpr uint64_t kSystemPickDomain = 5;

}  // namespace

std::span<const std::string_view> PromptBuilder::Words() { return kWords; }

int64_t PromptBuilder::WordsFor(int64_t tokens) const {
  if (tokens <= 0) return 0;
  const double wpt = options_.words_per_token > 0 ? options_.words_per_token : 1.0;
  return std::max<int64_t>(1, std::llround(static_cast<double>(tokens) * wpt));
}

void PromptBuilder::AppendWords(uint64_t domain, uint64_t key, int64_t n_words,
                                std::string& out) const {
  // Each (seed, domain, key) names its own stream; the mixing is splitmix64.
  uint64_t x = options_.seed;
  uint64_t mixed = util::Rng::SplitMix64(x);
  x = mixed ^ domain;
  mixed = util::Rng::SplitMix64(x);
  x = mixed ^ key;
  util::Rng rng(util::Rng::SplitMix64(x));
  for (int64_t i = 0; i < n_words; ++i) {
    if (!out.empty()) out += ' ';
    out += kWords[rng.Below(kWords.size())];
  }
}

std::string PromptBuilder::Unique(int64_t request, int64_t tokens) const {
  std::string out;
  AppendWords(kUniqueDomain, static_cast<uint64_t>(request), WordsFor(tokens), out);
  return out;
}

std::string PromptBuilder::System(int64_t tokens, int64_t which) const {
  std::string out;
  AppendWords(kSystemDomain, static_cast<uint64_t>(which), WordsFor(tokens), out);
  return out;
}

int64_t PromptBuilder::SystemIndex(int64_t request, int64_t n) const {
  if (n <= 1) return 0;
  uint64_t x = options_.seed ^ (kSystemPickDomain * 0x9e3779b97f4a7c15ULL);
  uint64_t mixed = util::Rng::SplitMix64(x);
  x = mixed ^ static_cast<uint64_t>(request);
  util::Rng rng(util::Rng::SplitMix64(x));
  return static_cast<int64_t>(rng.Below(static_cast<uint64_t>(n)));
}

std::string PromptBuilder::Block(int64_t hash_id, int64_t tokens) const {
  std::string out;
  AppendWords(kBlockDomain, static_cast<uint64_t>(hash_id), WordsFor(tokens), out);
  return out;
}

std::string PromptBuilder::Mooncake(std::span<const int64_t> hash_ids, int64_t tokens,
                                    int64_t block_tokens, int64_t request) const {
  std::string out;
  int64_t remaining = WordsFor(tokens);
  const int64_t block_words = std::max<int64_t>(1, WordsFor(block_tokens));
  for (const int64_t h : hash_ids) {
    if (remaining <= 0) break;
    const int64_t take = std::min(block_words, remaining);
    AppendWords(kBlockDomain, static_cast<uint64_t>(h), take, out);
    remaining -= take;
  }
  if (remaining > 0) AppendWords(kTailDomain, static_cast<uint64_t>(request), remaining, out);
  return out;
}

util::StatusOr<std::vector<std::string>> ParsePromptFile(std::string_view text) {
  std::vector<std::string> out;
  STRATA_RETURN_IF_ERROR(
      internal::ForEachJsonLine(text, [&](const nlohmann::json& j, int64_t line_no) {
        if (j.is_string()) {
          out.push_back(j.get<std::string>());
        } else if (j.is_object() && j.contains("prompt") && j["prompt"].is_string()) {
          out.push_back(j["prompt"].get<std::string>());
        } else {
          return util::InvalidArgumentError(
              "line " + std::to_string(line_no) +
              ": expected a JSON string or an object with a string \"prompt\"");
        }
        return util::OkStatus();
      }));
  if (out.empty()) return util::InvalidArgumentError("no prompts");
  return out;
}

}  // namespace strata::tune
