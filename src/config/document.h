// config/document.h — a TOML configuration file read against a Schema.
//
// Promise: Parse never throws and never stops at the first problem: it
// returns every value the schema knows, typed and with the line it came
// from, and one Diagnostic per problem, each with its line (and column for
// a syntax error): a TOML syntax error (then nothing else is read), an
// unknown key or table (with the closest known key, "did you mean ..."), a
// value of the wrong type, a number out of its range, a string not among
// its choices, a missing required field of a table, and anything that looks
// like a secret. Secrets (API keys, upstream credentials, signing keys)
// never belong in a configuration file: a key whose name says it holds one
// (`api_key`, `password`, `token`, `secret`, a `*_key` that is not a
// `*_key_file`) and a string that looks like a credential (`sk-...`,
// `Bearer ...`, a PEM private key, ...) are refused, pointing at the
// `*_file` knob or environment variable to use instead. The message of a
// secret never repeats the value.
//
// Threading: pure functions over their arguments.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config/schema.h"

namespace strata::config {

struct Table;

// One value of the file, as its knob's type says.
struct Value {
  Type type = Type::kString;
  bool b = false;                 // kBool
  int64_t i = 0;                  // kInt
  double f = 0;                   // kFloat
  std::string s;                  // kString
  std::vector<std::string> list;  // kStringList
  std::vector<Table> tables;      // kTables
  int line = 0;                   // 1-based line of the value in the file
};

// One table of a kTables knob: its fields by their keys.
struct Table {
  std::map<std::string, Value> fields;
  int line = 0;  // the line of its [[header]]
  const Value* Get(std::string_view key) const;
};

struct Diagnostic {
  int line = 0;  // 1-based; 0 when the problem has no line (a missing table field has its table's)
  int column = 0;   // 1-based, syntax errors only; 0 otherwise
  std::string key;  // the dotted key at fault; "" for a syntax error
  std::string message;
};
// "FILE:LINE: KEY: MESSAGE" (the parts that are set).
std::string FormatDiagnostic(std::string_view file, const Diagnostic& d);

struct Document {
  std::map<std::string, Value> values;  // by dotted key; only keys of the schema
  // The value of `key`; nullptr when the file does not set it.
  const Value* Get(std::string_view key) const;
};

struct ParseResult {
  Document document;               // every valid value (even when errors is not empty)
  std::vector<Diagnostic> errors;  // in the order of the file
  bool ok() const { return errors.empty(); }
};

ParseResult Parse(std::string_view text, const Schema& schema);

// Whether `value` looks like a credential (a provider API key, a bearer
// token, a PEM private key); what Parse refuses in any string.
bool LooksLikeSecret(std::string_view value);

}  // namespace strata::config
