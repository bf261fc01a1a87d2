// config/schema.h — what a configuration file may say: its knobs, each with
// a type, a default, a unit, a range and whether it can change while the
// server runs.
//
// Promise: a Schema is an immutable list of knobs, addressed by dotted keys
// ("l1.ttl" is key `ttl` of table [l1]). Lookup is exact; Suggest names the
// closest known key for a misspelt one (edit distance), so a message can
// say "did you mean 'l1.ttl'?". A knob of type kTables is an array of
// tables ([[backend]]) whose fields are knobs of their own (their keys
// relative to the table: "kind", "urls").
//
// Threading: immutable after construction; safe to share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata::config {

enum class Type {
  kBool,
  kInt,
  kFloat,       // an integer is accepted where a float is expected
  kString,      // with `choices`, one of them
  kStringList,  // an array of strings
  kTables,      // an array of tables; `fields` describe each table
};
// "boolean", "integer", "number", "string", "array of strings", "array of tables".
std::string_view TypeName(Type type);

// Whether a running server takes a new value on reload (SIGHUP,
// POST /admin/reload) or keeps the old one until it restarts.
enum class Reload { kLive, kRestart };

struct Knob {
  std::string key{};  // dotted: "l1.ttl"; a kTables knob's field: "kind"
  Type type = Type::kString;
  std::string unit{};  // "s", "ms", "bytes", "tokens", ...; "" for none
  // Inclusive bounds of a kInt or kFloat (nullopt: unbounded); an exclusive
  // bound is marked by its flag.
  std::optional<double> min{}, max{};
  bool min_exclusive = false, max_exclusive = false;
  std::vector<std::string> choices{};  // a kString's allowed values; empty = any
  Reload reload = Reload::kRestart;
  std::string help{};          // one line or a few, for `strata config defaults`
  std::string default_toml{};  // the default as TOML ("600", "\"opt-in\"", "[]"); "" = unset
  std::string flag{};          // the command-line flag it mirrors ("--l1-ttl"); "" = none
  std::vector<Knob> fields{};  // kTables: the fields of each table
  bool required = false;       // a kTables field every table must have
};

// "[0.001, 86400] s", "(0, 1]", ">= 1", "one of off, opt-in, on", "" (none).
std::string DescribeRange(const Knob& knob);

class Schema {
 public:
  explicit Schema(std::vector<Knob> knobs);

  const std::vector<Knob>& knobs() const { return knobs_; }
  // The knob of `key`; nullptr when there is none.
  const Knob* Find(std::string_view key) const;
  // The known key closest to `key` (within a third of its length, at least
  // 2 edits), or "" when nothing is close. `among` restricts the candidates
  // (a table's fields); empty = every top-level key and table name.
  std::string Suggest(std::string_view key, const std::vector<Knob>* among = nullptr) const;

 private:
  std::vector<Knob> knobs_;
};

// Levenshtein distance (insertions, deletions, substitutions; bytes).
size_t EditDistance(std::string_view a, std::string_view b);

// A complete configuration file of every knob at its default, each preceded
// by its help, unit, range and whether it reloads live; a knob with no
// default is written commented out. The text parses back to the defaults.
std::string RenderDefaults(const Schema& schema, std::string_view title);

}  // namespace strata::config
