#include "config/schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

namespace strata::config {
namespace {

// A number as a person writes it in a range: 600, 0.001, 1073741824.
std::string Number(double v) {
  if (std::nearbyint(v) == v && std::fabs(v) < 1e18) {
    return fmt::format("{}", static_cast<int64_t>(v));
  }
  return fmt::format("{}", v);
}

// The section of a dotted key ("l1" for "l1.ttl"; "" for "model").
std::string_view SectionOf(std::string_view key) {
  const size_t dot = key.rfind('.');
  return dot == std::string_view::npos ? std::string_view() : key.substr(0, dot);
}

std::string_view NameOf(std::string_view key) {
  const size_t dot = key.rfind('.');
  return dot == std::string_view::npos ? key : key.substr(dot + 1);
}

// "# " before every line of `text`, wrapped at about 90 columns.
std::string Comment(std::string_view text) {
  std::string out, line;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view word = text.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > 88) {
      out += "# " + line + "\n";
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += word;
    start = end + 1;
  }
  if (!line.empty()) out += "# " + line + "\n";
  return out;
}

// The comment line of facts under a knob's help: unit, range, reload, flag.
std::string Facts(const Knob& k) {
  std::vector<std::string> parts;
  parts.push_back(std::string(TypeName(k.type)));
  if (!k.unit.empty()) parts.push_back("unit: " + k.unit);
  if (const std::string range = DescribeRange(k); !range.empty()) parts.push_back(range);
  if (k.type != Type::kTables) {
    parts.push_back(k.reload == Reload::kLive ? "reloads live" : "needs a restart");
  }
  if (!k.flag.empty()) parts.push_back("flag " + k.flag);
  if (k.required) parts.push_back("required");
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

void RenderKnob(const Knob& k, std::string_view name, std::string& out) {
  if (!k.help.empty()) out += Comment(k.help);
  out += "#   (" + Facts(k) + ")\n";
  if (k.default_toml.empty()) {
    // Unset by default: commented out, with the shape of its value.
    const char* shape = k.type == Type::kStringList ? "[]" : k.type == Type::kString ? "\"\"" : "";
    out += fmt::format("# {} = {}\n", name, shape);
  } else {
    out += fmt::format("{} = {}\n", name, k.default_toml);
  }
}

}  // namespace

std::string_view TypeName(Type type) {
  switch (type) {
    case Type::kBool:
      return "boolean";
    case Type::kInt:
      return "integer";
    case Type::kFloat:
      return "number";
    case Type::kString:
      return "string";
    case Type::kStringList:
      return "array of strings";
    case Type::kTables:
      return "array of tables";
  }
  return "value";
}

std::string DescribeRange(const Knob& k) {
  if (!k.choices.empty()) {
    std::string out = "one of ";
    for (size_t i = 0; i < k.choices.size(); ++i) {
      out += (i ? ", " : "") + (k.choices[i].empty() ? std::string("\"\"") : k.choices[i]);
    }
    return out;
  }
  if (k.min && k.max) {
    return fmt::format("{}{}, {}{}", k.min_exclusive ? "(" : "[", Number(*k.min), Number(*k.max),
                       k.max_exclusive ? ")" : "]");
  }
  if (k.min) return fmt::format("{} {}", k.min_exclusive ? ">" : ">=", Number(*k.min));
  if (k.max) return fmt::format("{} {}", k.max_exclusive ? "<" : "<=", Number(*k.max));
  return "";
}

Schema::Schema(std::vector<Knob> knobs) : knobs_(std::move(knobs)) {}

const Knob* Schema::Find(std::string_view key) const {
  for (const Knob& k : knobs_) {
    if (k.key == key) return &k;
  }
  return nullptr;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

std::string Schema::Suggest(std::string_view key, const std::vector<Knob>* among) const {
  std::set<std::string> candidates;
  for (const Knob& k : among ? *among : knobs_) {
    candidates.insert(k.key);
    // A misspelt table name ("[l11]") is close to its section.
    for (std::string_view s = SectionOf(k.key); !s.empty(); s = SectionOf(s)) {
      candidates.insert(std::string(s));
    }
  }
  const size_t limit = std::max<size_t>(2, key.size() / 3);
  std::string best;
  size_t best_distance = limit + 1;
  for (const std::string& c : candidates) {
    size_t d = EditDistance(key, c);
    // The right name in the wrong table ("ttl" for "l1.ttl") is close too.
    if (NameOf(c) == NameOf(key) && SectionOf(key).empty()) d = std::min<size_t>(d, 1);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

std::string RenderDefaults(const Schema& schema, std::string_view title) {
  std::string out = Comment(title);
  out += Comment(
      "Every knob at its default, grouped by module. Each says its type, unit and range, and "
      "whether a running server takes a new value on reload (SIGHUP or POST /admin/reload) or "
      "keeps the old one until it restarts. Command-line flags override this file. Secrets "
      "(API keys, upstream credentials, signing keys) never go here: name the file that holds "
      "them (the *_file knobs) or use the environment.");
  // Top-level keys first, then each section in the order its first knob
  // comes, arrays of tables last (TOML puts a table's keys before any
  // [header] and an [[array]] closes the table before it).
  std::vector<std::string> sections;
  std::map<std::string, std::vector<const Knob*>> by_section;
  std::vector<const Knob*> arrays;
  for (const Knob& k : schema.knobs()) {
    if (k.type == Type::kTables) {
      arrays.push_back(&k);
      continue;
    }
    const std::string s(SectionOf(k.key));
    if (!by_section.count(s)) sections.push_back(s);
    by_section[s].push_back(&k);
  }
  std::stable_partition(sections.begin(), sections.end(),
                        [](const std::string& s) { return s.empty(); });
  for (const std::string& s : sections) {
    out += s.empty() ? "\n" : fmt::format("\n[{}]\n", s);
    for (const Knob* k : by_section[s]) {
      RenderKnob(*k, NameOf(k->key), out);
    }
  }
  for (const Knob* k : arrays) {
    out += "\n";
    if (!k->help.empty()) out += Comment(k->help);
    out += "# Repeat the table for each one; for example:\n";
    out += fmt::format("# [[{}]]\n", k->key);
    for (const Knob& field : k->fields) {
      std::string rendered;
      RenderKnob(field, field.key, rendered);
      // Commented out: the defaults have none of these tables.
      std::string line;
      for (char c : rendered) {
        line += c;
        if (c == '\n') {
          out += line.rfind("# ", 0) == 0 ? line : "# " + line;
          line.clear();
        }
      }
    }
  }
  return out;
}

}  // namespace strata::config
