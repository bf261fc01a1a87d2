// grammar/internal/schema_regex.h — a JSON Schema `pattern` (an ECMA-262
// regex, a subset of it) as a GBNF expression for the inside of a JSON
// string: the text it matches is what the regex matches in full, JSON-
// escaped (a quote as \", a backslash as \\, control characters as their
// escapes). Classes lose the quote, the backslash and the control
// characters (a subset of the strings, each still a match).
//
// Supported: literals, escapes of metacharacters, \d \w \s \D \W \S, \n \t
// \r \f \v, \uHHHH, classes with ranges ([^...] too), `.`, groups ( ) and
// (?: ), |, * + ? {n} {n,} {n,m} (lazy forms too: the same strings), ^ at the
// start and $ at the end. Anything else (backreferences, lookaround, \b,
// named groups, flags) is an InvalidArgument naming it and its offset.
//
// Threading: pure function.
#pragma once

#include <string>
#include <string_view>

#include "util/status.h"

namespace strata::grammar::internal {

util::StatusOr<std::string> PatternToGbnf(std::string_view pattern, uint32_t max_repeat);

// A GBNF literal ("...") of the bytes `text` (valid UTF-8).
std::string GbnfLiteral(std::string_view text);

}  // namespace strata::grammar::internal
