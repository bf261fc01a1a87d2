// config — configuration as code: the knobs of `strata serve` in one TOML
// file, read with line numbers and checked against a schema of types, units,
// ranges and reload classes.
//
// Promise: nothing here changes a running server. The module reads text
// into typed values and says precisely what is wrong with it (every problem,
// each with its line); it renders a complete commented file of defaults; it
// refuses secrets. What the values mean, and which component takes a live
// one, is the composition root's business (cli/serve_config.h).
//
//   config/schema.h    Knob, Schema: keys, types, units, ranges, reload classes
//   config/document.h  Parse: TOML text -> typed values + diagnostics
//
// Usage:
//   config::Schema schema(ServeKnobs());
//   config::ParseResult r = config::Parse(text, schema);
//   for (const auto& d : r.errors) fmt::print("{}\n", config::FormatDiagnostic(path, d));
//   if (const config::Value* v = r.document.Get("l1.ttl")) ttl_s = v->f;
#pragma once

#include "config/document.h"
#include "config/schema.h"
