#include "cache/internal/lexicon.h"

#include <algorithm>
#include <array>

namespace strata::cache::internal {
namespace {

// Sorted (checked by IsSorted below), so lookups are binary searches.
// Directional and comparative words ("before", "after", "more", "under") are
// deliberately absent: swapping them changes what is asked.
constexpr std::array<std::string_view, 101> kStopWords = {
    "a",       "about",  "again",   "also",  "am",    "an",      "and",  "are",        "as",
    "at",      "be",     "because", "been",  "being", "but",     "by",   "can",        "could",
    "d",       "did",    "do",      "does",  "doing", "during",  "for",  "from",       "had",
    "has",     "have",   "having",  "he",    "her",   "here",    "hers", "herself",    "him",
    "himself", "his",    "i",       "if",    "in",    "into",    "is",   "it",         "its",
    "itself",  "just",   "let",     "ll",    "m",     "may",     "me",   "might",      "must",
    "my",      "myself", "of",      "on",    "once",  "or",      "our",  "ours",       "ourselves",
    "own",     "re",     "s",       "shall", "she",   "should",  "so",   "some",       "such",
    "t",       "than",   "that",    "the",   "their", "theirs",  "them", "themselves", "then",
    "there",   "these",  "they",    "this",  "those", "through", "to",   "too",        "us",
    "ve",      "very",   "was",     "we",    "were",  "will",    "with", "would",      "you",
    "your",    "yours",
};

constexpr std::array<std::string_view, 10> kNegations = {
    "neither", "never", "no", "nobody", "none", "nor", "not", "nothing", "nowhere", "without",
};

constexpr std::array<std::string_view, 9> kQuestionWords = {
    "how", "what", "when", "where", "whether", "which", "who", "whom", "why",
};

template <size_t N>
constexpr bool IsSorted(const std::array<std::string_view, N>& a) {
  for (size_t i = 1; i < N; ++i) {
    if (!(a[i - 1] < a[i])) return false;
  }
  return true;
}
static_assert(IsSorted(kStopWords), "kStopWords must be sorted and unique");
static_assert(IsSorted(kNegations), "kNegations must be sorted and unique");
static_assert(IsSorted(kQuestionWords), "kQuestionWords must be sorted and unique");

template <size_t N>
bool Contains(const std::array<std::string_view, N>& a, std::string_view w) {
  return std::binary_search(a.begin(), a.end(), w);
}

}  // namespace

bool IsStopWord(std::string_view token) { return Contains(kStopWords, token); }
bool IsNegation(std::string_view token) { return Contains(kNegations, token); }
bool IsQuestionWord(std::string_view token) { return Contains(kQuestionWords, token); }

}  // namespace strata::cache::internal
