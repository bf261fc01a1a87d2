#include "config/document.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "config/internal/text_screen.h"

// toml++ compiled into this file alone, without exceptions: parse returns a
// result that says where the syntax is wrong instead of throwing, and the
// sanitizer and fuzzer builds see its code too.
#define TOML_HEADER_ONLY 1
#define TOML_EXCEPTIONS 0
#define TOML_ENABLE_FORMATTERS 0
#include <toml++/toml.h>

namespace strata::config {
namespace {

int LineOf(const toml::node& n) { return static_cast<int>(n.source().begin.line); }

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Whether a key the schema does not know would hold a secret by its name.
bool SecretName(std::string_view key) {
  const size_t dot = key.rfind('.');
  const std::string name = Lower(dot == std::string_view::npos ? key : key.substr(dot + 1));
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with("_file") || ends_with("_path") || ends_with("_env")) return false;
  for (std::string_view word : {"secret", "password", "passwd", "token", "credential", "apikey",
                                "api_key", "private_key", "bearer"}) {
    if (name.find(word) != std::string::npos) return true;
  }
  return name == "key" || name == "keys" || ends_with("_key") || ends_with("-key");
}

constexpr const char* kSecretName =
    "would hold a secret; secrets never go in the configuration file: name the file that holds "
    "it (a *_file knob) or use the environment";

class Reader {
 public:
  Reader(const Schema& schema, ParseResult& out) : schema_(schema), out_(out) {}

  void ReadTable(const toml::table& t, const std::string& prefix) {
    for (auto&& [k, node] : t) {
      const std::string key =
          prefix.empty() ? std::string(k.str()) : prefix + "." + std::string(k.str());
      const int line = static_cast<int>(k.source().begin.line);
      if (const Knob* knob = schema_.Find(key)) {
        ScanSecrets(node, key);
        if (seen_.insert(key).second) ReadKnob(*knob, node, key);
        continue;
      }
      if (node.is_table() && IsSection(key)) {
        ReadTable(*node.as_table(), key);
        continue;
      }
      Unknown(key, line, nullptr);
      ScanSecrets(node, key);
      ScanSecretNames(node, key);
    }
  }

 private:
  bool IsSection(const std::string& key) const {
    for (const Knob& k : schema_.knobs()) {
      if (k.key.size() > key.size() && k.key.compare(0, key.size(), key) == 0 &&
          k.key[key.size()] == '.') {
        return true;
      }
    }
    return false;
  }

  void Error(int line, const std::string& key, std::string message) {
    out_.errors.push_back({.line = line, .column = 0, .key = key, .message = std::move(message)});
  }

  void Unknown(const std::string& key, int line, const Knob* table) {
    if (SecretName(key)) {
      Error(line, table ? table->key + "." + key : key, kSecretName);
      return;
    }
    const std::string hint = table ? schema_.Suggest(key, &table->fields) : schema_.Suggest(key);
    std::string where = table ? fmt::format("a [[{}]] table", table->key) : "strata serve";
    Error(line, table ? table->key + "." + key : key,
          hint.empty()
              ? fmt::format("unknown key (not a knob of {})", where)
              : fmt::format("unknown key (not a knob of {}); did you mean '{}'?", where, hint));
  }

  // Refuses every string under `node` that looks like a credential (once
  // per key).
  void ScanSecrets(const toml::node& node, const std::string& key) {
    if (const auto* s = node.as_string()) {
      if (LooksLikeSecret(s->get()) && flagged_.insert(key).second) {
        Error(LineOf(node), key,
              "looks like a credential; secrets never go in the configuration file: name the "
              "file that holds it (a *_file knob) or use the environment");
      }
    } else if (const auto* a = node.as_array()) {
      for (const toml::node& el : *a) ScanSecrets(el, key);
    } else if (const auto* t = node.as_table()) {
      for (auto&& [k, v] : *t) ScanSecrets(v, key + "." + std::string(k.str()));
    }
  }

  // Refuses every key under an unknown table whose name says it holds a secret.
  void ScanSecretNames(const toml::node& node, const std::string& key) {
    const auto* t = node.as_table();
    if (t == nullptr) return;
    for (auto&& [k, v] : *t) {
      const std::string inner = key + "." + std::string(k.str());
      if (SecretName(inner)) {
        Error(static_cast<int>(k.source().begin.line), inner, kSecretName);
      }
      ScanSecretNames(v, inner);
    }
  }

  void WrongType(const Knob& knob, const toml::node& node, const std::string& key) {
    Error(LineOf(node), key,
          fmt::format("expected {}, got {}", TypeName(knob.type), TypeOfNode(node)));
  }

  static std::string TypeOfNode(const toml::node& node) {
    switch (node.type()) {
      case toml::node_type::table:
        return "a table";
      case toml::node_type::array:
        return node.is_array_of_tables() ? "an array of tables" : "an array";
      case toml::node_type::string:
        return "a string";
      case toml::node_type::integer:
        return "an integer";
      case toml::node_type::floating_point:
        return "a number";
      case toml::node_type::boolean:
        return "a boolean";
      default:
        return "a date or time";
    }
  }

  // Checks a number against the knob's range; false (and an error) outside it.
  bool InRange(const Knob& knob, double v, const std::string& text, int line,
               const std::string& key) {
    const bool below = knob.min && (knob.min_exclusive ? v <= *knob.min : v < *knob.min);
    const bool above = knob.max && (knob.max_exclusive ? v >= *knob.max : v > *knob.max);
    if (!std::isfinite(v) || below || above) {
      Error(line, key,
            fmt::format("{} is outside {}{}", text, DescribeRange(knob),
                        knob.unit.empty() ? "" : " " + knob.unit));
      return false;
    }
    return true;
  }

  // Reads `node` as `knob` into `value`; false (with errors) when it is not one.
  bool Convert(const Knob& knob, const toml::node& node, const std::string& key, Value& value) {
    value.type = knob.type;
    value.line = LineOf(node);
    switch (knob.type) {
      case Type::kBool:
        if (!node.is_boolean()) return WrongType(knob, node, key), false;
        value.b = node.as_boolean()->get();
        return true;
      case Type::kInt:
        if (!node.is_integer()) return WrongType(knob, node, key), false;
        value.i = node.as_integer()->get();
        return InRange(knob, static_cast<double>(value.i), std::to_string(value.i), value.line,
                       key);
      case Type::kFloat:
        if (node.is_integer()) {
          value.f = static_cast<double>(node.as_integer()->get());
        } else if (node.is_floating_point()) {
          value.f = node.as_floating_point()->get();
        } else {
          return WrongType(knob, node, key), false;
        }
        return InRange(knob, value.f, fmt::format("{}", value.f), value.line, key);
      case Type::kString:
        if (!node.is_string()) return WrongType(knob, node, key), false;
        value.s = node.as_string()->get();
        if (!knob.choices.empty() &&
            std::find(knob.choices.begin(), knob.choices.end(), value.s) == knob.choices.end()) {
          Error(value.line, key, fmt::format("'{}' is not {}", value.s, DescribeRange(knob)));
          return false;
        }
        return true;
      case Type::kStringList: {
        if (node.is_string()) {  // one string: a list of one
          value.list.push_back(node.as_string()->get());
          return true;
        }
        const toml::array* a = node.as_array();
        if (a == nullptr) return WrongType(knob, node, key), false;
        for (const toml::node& el : *a) {
          if (!el.is_string()) {
            Error(
                LineOf(el), key,
                fmt::format("expected an array of strings, and one element is {}", TypeOfNode(el)));
            return false;
          }
          value.list.push_back(el.as_string()->get());
        }
        return true;
      }
      case Type::kTables:
        return ReadTables(knob, node, key, value);
    }
    return false;
  }

  bool ReadTables(const Knob& knob, const toml::node& node, const std::string& key, Value& value) {
    if (!node.is_array_of_tables()) return WrongType(knob, node, key), false;
    bool ok = true;
    for (const toml::node& el : *node.as_array()) {
      Table table;
      table.line = LineOf(el);
      std::set<std::string> present;  // fields written, valid or not
      for (auto&& [k, field_node] : *el.as_table()) {
        const std::string name(k.str());
        present.insert(name);
        const Knob* field = nullptr;
        for (const Knob& f : knob.fields) {
          if (f.key == name) field = &f;
        }
        if (field == nullptr) {
          Unknown(name, static_cast<int>(k.source().begin.line), &knob);
          ok = false;
          continue;
        }
        Value v;
        if (Convert(*field, field_node, key + "." + name, v)) {
          table.fields.emplace(name, std::move(v));
        } else {
          ok = false;
        }
      }
      for (const Knob& f : knob.fields) {
        if (f.required && !present.count(f.key)) {
          Error(table.line, key + "." + f.key,
                fmt::format("missing: every [[{}]] table needs '{}'", key, f.key));
          ok = false;
        }
      }
      value.tables.push_back(std::move(table));
    }
    return ok;
  }

  void ReadKnob(const Knob& knob, const toml::node& node, const std::string& key) {
    Value v;
    if (Convert(knob, node, key, v) && !flagged_.count(key)) {
      out_.document.values.emplace(key, std::move(v));
    }
  }

  const Schema& schema_;
  ParseResult& out_;
  std::set<std::string> seen_;     // knobs read (TOML itself refuses duplicates)
  std::set<std::string> flagged_;  // keys whose value looked like a secret
};

}  // namespace

const Value* Table::Get(std::string_view key) const {
  auto it = fields.find(std::string(key));
  return it == fields.end() ? nullptr : &it->second;
}

const Value* Document::Get(std::string_view key) const {
  auto it = values.find(std::string(key));
  return it == values.end() ? nullptr : &it->second;
}

std::string FormatDiagnostic(std::string_view file, const Diagnostic& d) {
  std::string out(file);
  if (d.line > 0) out += fmt::format(":{}", d.line);
  if (d.column > 0) out += fmt::format(":{}", d.column);
  out += ": ";
  if (!d.key.empty()) out += d.key + ": ";
  return out + d.message;
}

bool LooksLikeSecret(std::string_view v) {
  auto starts = [&](std::string_view p) { return v.substr(0, p.size()) == p; };
  if (v.find("-----BEGIN") != std::string_view::npos &&
      v.find("PRIVATE KEY") != std::string_view::npos) {
    return true;
  }
  // Provider key shapes: OpenAI and Anthropic (sk-...), GitHub, Slack, AWS
  // access keys, and a bearer credential written out.
  auto long_token = [&](size_t prefix) {
    if (v.size() < prefix + 16) return false;
    return std::all_of(v.begin() + static_cast<std::ptrdiff_t>(prefix), v.end(), [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
    });
  };
  if (starts("sk-") && long_token(3)) return true;
  for (std::string_view p : {"ghp_", "gho_", "github_pat_", "xoxb-", "xoxp-", "xoxa-"}) {
    if (starts(p) && long_token(p.size())) return true;
  }
  if (starts("AKIA") && v.size() == 20) return true;
  return (starts("Bearer ") || starts("bearer ")) && v.size() > 7 + 8;
}

ParseResult Parse(std::string_view text, const Schema& schema) {
  ParseResult out;
  if (auto problem = internal::ScreenText(text)) {
    out.errors.push_back({.line = problem->line,
                          .column = problem->column,
                          .key = "",
                          .message = std::move(problem->message)});
    return out;
  }
  toml::parse_result parsed = toml::parse(text);
  if (!parsed) {
    const toml::parse_error& e = parsed.error();
    out.errors.push_back({.line = static_cast<int>(e.source().begin.line),
                          .column = static_cast<int>(e.source().begin.column),
                          .key = "",
                          .message = std::string(e.description())});
    return out;
  }
  Reader(schema, out).ReadTable(parsed.table(), "");
  std::stable_sort(out.errors.begin(), out.errors.end(),
                   [](const Diagnostic& a, const Diagnostic& b) { return a.line < b.line; });
  return out;
}

}  // namespace strata::config
