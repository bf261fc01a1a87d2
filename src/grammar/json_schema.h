// grammar/json_schema.h — a JSON Schema compiled to a grammar (GBNF text,
// grammar/grammar.h) whose every sentence is a JSON document that validates
// against the schema.
//
// Promise: the generated documents are compact JSON (no whitespace at all,
// so a model cannot spend its tokens on it), properties in the schema's
// order. The supported subset (docs/api.md lists it with its details):
// type (one or an array), properties and required (optional properties may
// be left out; an object has only the listed properties, whatever
// additionalProperties says, unless it lists none and does not say false,
// when it is any object), additionalProperties true/false, enum, const,
// items, minItems, maxItems, anyOf, oneOf (as anyOf), allOf of one schema,
// $ref to #, #/$defs/NAME and #/definitions/NAME (recursion included),
// minLength and maxLength (strings without escapes then), pattern (a regex
// subset, generated as a whole match), format date, time, date-time, uuid
// and email (each a strict subset of what the format allows). Every other
// keyword is an error naming it and where it is ("json schema: unsupported
// keyword 'minimum' at #/properties/age"), except the annotations title,
// description, examples, default, $schema, $id, $comment and deprecated,
// which are ignored. Bounds: schemas nested at most max_depth deep, the
// grammar text at most max_grammar_bytes, counts at most 100,000; a value
// of any type nests at most 3 containers deep.
//
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "util/status.h"

namespace strata::grammar {

struct JsonSchemaOptions {
  int32_t max_depth = 32;                      // [1, 256] schemas inside schemas
  size_t max_grammar_bytes = size_t{1} << 20;  // [1 Ki, 64 Mi] of GBNF text
};

// Appends the rules of `schema_json` (a JSON Schema as JSON text) to `out`,
// every rule named `prefix` + a name of the compiler's ([a-z0-9-]), and
// returns the name of the rule of the whole document, so a caller can
// compose it with text around it ("root ::= \"Answer: \" " + name). `prefix`
// is [A-Za-z0-9_-]*; two schemas in one grammar need distinct prefixes.
util::StatusOr<std::string> JsonSchemaRules(std::string_view schema_json, std::string_view prefix,
                                            std::string& out,
                                            const JsonSchemaOptions& options = {});

// A whole grammar (its `root` is the document) for Grammar::Parse.
util::StatusOr<std::string> CompileJsonSchema(std::string_view schema_json,
                                              const JsonSchemaOptions& options = {});

}  // namespace strata::grammar
