// Fuzz target: JSON Schema → GBNF (grammar/json_schema.h). Arbitrary bytes
// as a schema compile to grammar text or a Status, never a crash; compiled
// text parses as a grammar (or fails with the grammar's own error, as a
// schema that refers to itself before any text can), and its matcher takes
// bytes without crashing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using strata::grammar::Grammar;
  using strata::grammar::GrammarMatcher;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto text =
      strata::grammar::CompileJsonSchema(in, {.max_depth = 16, .max_grammar_bytes = 1 << 18});
  if (!text.ok()) {
    if (text.status().message().find("json schema:") == std::string_view::npos) std::abort();
    return 0;
  }
  auto g = Grammar::Parse(*text);
  if (!g.ok()) {
    // Only a loop the schema itself made (a $ref that reaches itself first).
    if (g.status().message().find("left-recursive") == std::string_view::npos &&
        g.status().message().find("repeats a group") == std::string_view::npos) {
      std::abort();
    }
    return 0;
  }
  GrammarMatcher m(**g);
  for (const char c : in) m.Feed(static_cast<uint8_t>(c));
  return 0;
}
