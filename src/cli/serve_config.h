// cli/serve_config.h — `strata serve`'s knobs as a configuration file: the
// schema (key, type, unit, range, reload class) bound to the ServeFlags
// field each one sets, and the steps a start or a reload takes with a file.
//
// Precedence: a flag given on the command line wins over the file; the file
// wins over the defaults. A reload re-reads the file onto the command line
// as given at start, so a knob removed from the file goes back to its
// default (unless a flag sets it).
//
// Keys are the flags regrouped by module ([l1] ttl is --l1-ttl); docs/api.md
// ("Configuration file") lists them and `strata config defaults` prints them
// all with their help, units and ranges.
//
// Threading: pure functions (the table is immutable).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/serve_flags.h"
#include "config/config.h"
#include "util/status.h"

namespace strata::cli {

// One knob: its schema entry and the field of ServeFlags it reads and writes.
struct ServeKnob {
  config::Knob knob;  // help is empty here: ServeSchema takes it from the flag's
  // Sets the field from a value of the knob's type (checked by config::Parse).
  std::function<void(ServeFlags&, const config::Value&)> set;
  // The field's value as TOML ("600", "\"opt-in\"", "[\"a\"]"); for the
  // [[backend]] tables a text that differs when they differ.
  std::function<std::string(const ServeFlags&)> get;
  // Copies the field(s) from one ServeFlags to another.
  std::function<void(const ServeFlags& from, ServeFlags& to)> copy;
  // The flags that set the same field(s) (the knob's own first).
  std::vector<std::string> flags;
};

// Every knob of `strata serve`, in the order of the defaults file.
const std::vector<ServeKnob>& ServeKnobs();

// The schema, each knob's help being the description of its flag in
// `serve` (the serve subcommand, as RegisterServe built it) and its default
// the value a default ServeFlags holds.
config::Schema ServeSchema(const CLI::App& serve);

// The same knobs without their flags' help: enough to read a file (a
// canary file, the tuner's base configuration) where no serve command exists.
config::Schema ServeFileSchema();

// The flags of `serve` given on the command line (by the knob's flag names).
std::set<std::string> GivenFlags(const CLI::App& serve);

// Sets in `flags` every value of `doc`, except those of knobs whose flag is
// in `given`.
void ApplyConfig(const config::Document& doc, const std::set<std::string>& given,
                 ServeFlags& flags);

// The knobs whose values differ between `a` and `b`.
std::vector<const ServeKnob*> ChangedKnobs(const ServeFlags& a, const ServeFlags& b);

// `message` with every flag of a knob named as its key ("--l1-ttl" becomes
// "l1.ttl"), so a check of the whole configuration speaks the file's words;
// flags in `keep` (given on the command line) stay as they are.
std::string InConfigTerms(std::string message, const std::set<std::string>& keep = {});

// Reads and parses `path` against `schema`; InvalidArgument listing every
// diagnostic, one per line as "PATH:LINE: key: message".
util::StatusOr<config::Document> ReadConfigFile(const Env& env, const std::string& path,
                                                const config::Schema& schema);

}  // namespace strata::cli
