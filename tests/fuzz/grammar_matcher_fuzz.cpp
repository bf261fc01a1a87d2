// Fuzz target: the grammar matcher on fixed grammars (grammar/grammar.h):
// a JSON Schema's, an ambiguous one and a recursive one, chosen by the
// first byte, fed the rest. Whenever the matcher is accepting, what it took
// is a sentence: for the schema's grammar, a JSON document that parses.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"

namespace {

std::shared_ptr<const strata::grammar::Grammar> Build(int which) {
  std::string text;
  if (which == 0) {
    text = *strata::grammar::CompileJsonSchema(R"({"type": "object", "properties": {
        "name": {"type": "string"}, "n": {"type": "number"},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        "kid": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["name"]})");
  } else if (which == 1) {
    text = R"(root ::= (x | y)+
              x ::= [a-z]+ "!"?
              y ::= [a-c] [a-c]* | "é"{1,2})";
  } else {
    text = R"g(root ::= "(" root* ")" | [0-9]{1,3})g";
  }
  return *strata::grammar::Grammar::Parse(text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int which = data[0] % 3;
  const auto g = Build(which);
  strata::grammar::GrammarMatcher m(*g);
  std::string taken;
  for (size_t i = 1; i < size; ++i) {
    if (m.Feed(data[i])) taken += static_cast<char>(data[i]);
    if (which == 0 && m.accepting()) {
      const auto j = nlohmann::json::parse(taken, nullptr, /*allow_exceptions=*/false);
      if (j.is_discarded() || !j.is_object()) std::abort();
    }
  }
  return 0;
}
