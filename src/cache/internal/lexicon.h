// cache/internal/lexicon.h — the English word lists the L3 tier weighs words by.
//
// Inputs are case-folded tokens (text_normalize.h). The lists are constant
// tables compiled into the binary.
//
// Threading: pure functions.
#pragma once

#include <string_view>

namespace strata::cache::internal {

// Function words that carry little of a request's meaning ("the", "of", "is").
// Negations and question words are not in this list.
bool IsStopWord(std::string_view token);

// Words that negate ("not", "no", "never", "without", ...).
bool IsNegation(std::string_view token);

// Question words ("what", "why", "how", ...): they decide what is being asked.
bool IsQuestionWord(std::string_view token);

}  // namespace strata::cache::internal
