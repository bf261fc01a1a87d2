// JSON Schema → GBNF (grammar/json_schema.h). One rule per schema that needs
// one; the JSON primitives (string, number, ...) are shared rules, so the
// mask's walk of a string body is done once for every string of a schema.
#include "grammar/json_schema.h"

#include <map>
#include <set>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "grammar/internal/schema_regex.h"

namespace strata::grammar {
namespace {

using Json = nlohmann::ordered_json;
using internal::GbnfLiteral;

constexpr uint32_t kMaxCount = 100000;
constexpr int kAnyDepth = 3;  // containers a value of any type nests

const std::set<std::string, std::less<>>& Annotations() {
  static const std::set<std::string, std::less<>> k = {
      "title", "description", "examples", "default", "$schema", "$id", "$comment", "deprecated"};
  return k;
}

// The keywords this compiler understands (others are errors).
const std::set<std::string, std::less<>>& Known() {
  static const std::set<std::string, std::less<>> k = {
      "type",  "enum",     "const",       "properties", "required",  "additionalProperties",
      "items", "minItems", "maxItems",    "anyOf",      "oneOf",     "allOf",
      "$ref",  "$defs",    "definitions", "minLength",  "maxLength", "pattern",
      "format"};
  return k;
}

const char* Family(std::string_view keyword) {
  if (keyword == "properties" || keyword == "required" || keyword == "additionalProperties") {
    return "object";
  }
  if (keyword == "items" || keyword == "minItems" || keyword == "maxItems") return "array";
  if (keyword == "minLength" || keyword == "maxLength" || keyword == "pattern" ||
      keyword == "format") {
    return "string";
  }
  return nullptr;
}

std::string JsonTypeOf(const Json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_string()) return "string";
  if (v.is_array()) return "array";
  return "object";
}

bool TypeAdmits(const std::vector<std::string>& types, const Json& v) {
  const std::string t = JsonTypeOf(v);
  for (const auto& want : types) {
    if (want == t || (want == "number" && t == "integer")) return true;
    // 1.0 is an integer to JSON Schema.
    if (want == "integer" && t == "number") {
      const double d = v.get<double>();
      if (d == static_cast<double>(static_cast<int64_t>(d))) return true;
    }
  }
  return false;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, std::string prefix, std::string& out,
                 const JsonSchemaOptions& options)
      : root_(root), prefix_(std::move(prefix)), out_(out), options_(options) {}

  util::StatusOr<std::string> Run() {
    STRATA_ASSIGN_OR_RETURN(std::string e, Compile(root_, "#", 0));
    const std::string name = Name("root");
    STRATA_RETURN_IF_ERROR(Emit(name, e));
    return name;
  }

 private:
  std::string Name(std::string_view local) const { return prefix_ + std::string(local); }

  util::Status Error(const std::string& path, std::string_view what) const {
    return util::InvalidArgumentError(fmt::format("json schema: {} at {}", what, path));
  }

  util::Status Emit(const std::string& name, const std::string& body) {
    out_ += name + " ::= " + body + "\n";
    if (out_.size() > options_.max_grammar_bytes) {
      return util::InvalidArgumentError(fmt::format(
          "json schema: the grammar it compiles to passes {} bytes", options_.max_grammar_bytes));
    }
    return util::OkStatus();
  }

  // A new rule for `body`; its name.
  util::StatusOr<std::string> NewRule(std::string_view kind, const std::string& body) {
    const std::string name = Name(fmt::format("{}{}", kind, next_++));
    STRATA_RETURN_IF_ERROR(Emit(name, body));
    return name;
  }

  // A shared rule, emitted on first use.
  util::StatusOr<std::string> Shared(const std::string& local) {
    const std::string name = Name(local);
    if (!shared_.insert(local).second) return name;
    std::string body;
    if (local == "string") {
      STRATA_ASSIGN_OR_RETURN(const std::string chars, Shared("chars"));
      body = "\"\\\"\" " + chars + " \"\\\"\"";
    } else if (local == "chars") {
      STRATA_ASSIGN_OR_RETURN(const std::string esc, Shared("escape"));
      body = R"([^"\\\x00-\x1F]* ("\\" )" + esc + R"( [^"\\\x00-\x1F]*)*)";
    } else if (local == "escape") {
      // \u escapes of surrogates are left out (a lone half fails strict parsers).
      body = R"(["\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2}))";
    } else if (local == "integer") {
      // At most 16 digits: every parser reads it exactly as a double.
      body = R"("-"? ("0" | [1-9] [0-9]{0,15}))";
    } else if (local == "number") {
      STRATA_ASSIGN_OR_RETURN(const std::string integer, Shared("integer"));
      body = integer + R"( ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,2})?)";
    } else if (local == "boolean") {
      body = R"("true" | "false")";
    } else if (local == "null") {
      body = R"("null")";
    } else if (local == "date") {
      body =
          R"([1-9] [0-9]{3} "-" (("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | ("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])))";
    } else if (local == "time") {
      body =
          R"(([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? ("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9]))";
    } else if (local == "date-time") {
      STRATA_ASSIGN_OR_RETURN(const std::string date, Shared("date"));
      STRATA_ASSIGN_OR_RETURN(const std::string time, Shared("time"));
      body = date + " \"T\" " + time;
    } else if (local == "uuid") {
      body = R"([0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12})";
    } else if (local == "email") {
      body =
          R"([a-z0-9]{1,30} ([._-] [a-z0-9]{1,30}){0,3} "@" ([a-z0-9]{1,30} "."){1,3} [a-z]{2,8})";
    } else if (local.rfind("any", 0) == 0) {
      const int level = std::stoi(local.substr(3));
      STRATA_ASSIGN_OR_RETURN(const std::string s, Shared("string"));
      STRATA_ASSIGN_OR_RETURN(const std::string n, Shared("number"));
      STRATA_ASSIGN_OR_RETURN(const std::string b, Shared("boolean"));
      STRATA_ASSIGN_OR_RETURN(const std::string z, Shared("null"));
      body = fmt::format("{} | {} | {} | {}", s, n, b, z);
      if (level > 0) {
        STRATA_ASSIGN_OR_RETURN(const std::string inner, Shared(fmt::format("any{}", level - 1)));
        body += fmt::format(R"( | "{{" ({0} ":" {1} ("," {0} ":" {1})*)? "}}")", s, inner);
        body += fmt::format(R"( | "[" ({0} ("," {0})*)? "]")", inner);
      }
    }
    STRATA_RETURN_IF_ERROR(Emit(name, body));
    return name;
  }

  util::StatusOr<std::string> Any() { return Shared(fmt::format("any{}", kAnyDepth)); }

  // Checks every keyword of `s`: annotations pass, known ones pass, any
  // other is an error naming it.
  util::Status CheckKeywords(const Json& s, const std::string& path) const {
    for (const auto& [k, v] : s.items()) {
      if (Annotations().count(k) != 0 || Known().count(k) != 0) continue;
      return Error(path, fmt::format("unsupported keyword '{}'", k));
    }
    return util::OkStatus();
  }

  // Only annotations and definitions may stand beside `keyword`.
  util::Status Alone(const Json& s, const char* keyword, const std::string& path) const {
    for (const auto& [k, v] : s.items()) {
      if (k == keyword || Annotations().count(k) != 0 || k == "$defs" || k == "definitions") {
        continue;
      }
      return Error(path, fmt::format("'{}' beside '{}' is not supported", k, keyword));
    }
    return util::OkStatus();
  }

  util::StatusOr<std::string> Compile(const Json& s, const std::string& path, int depth) {
    if (depth > options_.max_depth) {
      return Error(path, fmt::format("schemas nest deeper than {}", options_.max_depth));
    }
    if (s.is_boolean()) {
      if (s.get<bool>()) return Any();
      return Error(path, "the schema 'false' matches nothing");
    }
    if (!s.is_object()) return Error(path, "a schema must be an object or a boolean");
    STRATA_RETURN_IF_ERROR(CheckKeywords(s, path));
    if (s.contains("$ref")) {
      STRATA_RETURN_IF_ERROR(Alone(s, "$ref", path));
      return Ref(s["$ref"], path + "/$ref", depth);
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s.contains(k)) continue;
      STRATA_RETURN_IF_ERROR(Alone(s, k, path));
      const Json& list = s[k];
      if (!list.is_array() || list.empty()) {
        return Error(path, fmt::format("'{}' must be a non-empty array", k));
      }
      std::string body;
      for (size_t i = 0; i < list.size(); ++i) {
        STRATA_ASSIGN_OR_RETURN(std::string e,
                                Compile(list[i], fmt::format("{}/{}/{}", path, k, i), depth + 1));
        body += (i ? " | " : "") + e;
      }
      return NewRule("alt", body);
    }
    if (s.contains("allOf")) {
      STRATA_RETURN_IF_ERROR(Alone(s, "allOf", path));
      const Json& list = s["allOf"];
      if (!list.is_array() || list.size() != 1) {
        return Error(path, "'allOf' of more than one schema is not supported");
      }
      return Compile(list[0], path + "/allOf/0", depth + 1);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const auto& x : t) {
          if (!x.is_string()) return Error(path, "'type' must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        return Error(path, "'type' must be a string or an array of strings");
      }
      for (const auto& x : types) {
        static const std::set<std::string, std::less<>> kTypes = {
            "object", "array", "string", "number", "integer", "boolean", "null"};
        if (kTypes.count(x) == 0) return Error(path, fmt::format("unknown type '{}'", x));
      }
    }
    if (s.contains("const") || s.contains("enum")) {
      return Values(s, types, path);
    }
    // Without a type, the keywords say which (none: any value).
    if (types.empty()) {
      std::set<std::string> families;
      for (const auto& [k, v] : s.items()) {
        if (const char* f = Family(k)) families.insert(f);
      }
      if (families.empty()) return Any();
      types.assign(families.begin(), families.end());
    }
    for (const auto& [k, v] : s.items()) {
      const char* f = Family(k);
      if (f == nullptr) continue;
      if (std::find(types.begin(), types.end(), f) == types.end()) {
        return Error(path,
                     fmt::format("'{}' applies to type '{}', which 'type' does not allow", k, f));
      }
    }
    std::vector<std::string> alts;
    for (const auto& t : types) {
      std::string e;
      if (t == "string") {
        STRATA_ASSIGN_OR_RETURN(e, String(s, path));
      } else if (t == "object") {
        STRATA_ASSIGN_OR_RETURN(e, Object(s, path, depth));
      } else if (t == "array") {
        STRATA_ASSIGN_OR_RETURN(e, Array(s, path, depth));
      } else if (t == "number" || t == "integer" || t == "boolean" || t == "null") {
        if (t == "integer" && std::find(types.begin(), types.end(), "number") != types.end()) {
          continue;  // number already has them
        }
        STRATA_ASSIGN_OR_RETURN(e, Shared(t));
      }
      alts.push_back(e);
    }
    if (alts.size() == 1) return alts[0];
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    return NewRule("type", body);
  }

  util::StatusOr<std::string> Values(const Json& s, const std::vector<std::string>& types,
                                     const std::string& path) {
    for (const auto& [k, v] : s.items()) {
      if (k == "const" || k == "enum" || k == "type" || Annotations().count(k) != 0 ||
          k == "$defs" || k == "definitions") {
        continue;
      }
      return Error(path, fmt::format("'{}' beside '{}' is not supported", k,
                                     s.contains("const") ? "const" : "enum"));
    }
    std::vector<Json> values;
    if (s.contains("const")) {
      if (s.contains("enum")) return Error(path, "'const' beside 'enum' is not supported");
      values.push_back(s["const"]);
    } else {
      const Json& e = s["enum"];
      if (!e.is_array() || e.empty()) return Error(path, "'enum' must be a non-empty array");
      values.assign(e.begin(), e.end());
    }
    std::string body;
    for (const Json& v : values) {
      if (!types.empty() && !TypeAdmits(types, v)) continue;
      if (!body.empty()) body += " | ";
      body += GbnfLiteral(v.dump(-1, ' ', false, Json::error_handler_t::replace));
    }
    if (body.empty()) return Error(path, "no value of 'enum'/'const' has a type 'type' allows");
    return NewRule("enum", body);
  }

  util::StatusOr<std::optional<uint32_t>> Count(const Json& s, const char* k,
                                                const std::string& path) const {
    if (!s.contains(k)) return std::optional<uint32_t>();
    const Json& v = s[k];
    if (!v.is_number_integer() && !v.is_number_unsigned()) {
      return Error(path, fmt::format("'{}' must be a non-negative integer", k));
    }
    const int64_t n = v.get<int64_t>();
    if (n < 0) return Error(path, fmt::format("'{}' must be a non-negative integer", k));
    if (n > static_cast<int64_t>(kMaxCount)) {
      return Error(path, fmt::format("'{}' is {}; at most {} is supported", k, n, kMaxCount));
    }
    return std::optional<uint32_t>(static_cast<uint32_t>(n));
  }

  static std::string Repeat(uint32_t lo, std::optional<uint32_t> hi) {
    if (!hi) return lo == 0 ? "*" : lo == 1 ? "+" : fmt::format("{{{},}}", lo);
    return fmt::format("{{{},{}}}", lo, *hi);
  }

  util::StatusOr<std::string> String(const Json& s, const std::string& path) {
    STRATA_ASSIGN_OR_RETURN(auto min_len, Count(s, "minLength", path));
    STRATA_ASSIGN_OR_RETURN(auto max_len, Count(s, "maxLength", path));
    const bool lengths = min_len || max_len;
    if (s.contains("pattern")) {
      if (lengths) return Error(path, "'minLength'/'maxLength' beside 'pattern' is not supported");
      if (s.contains("format")) return Error(path, "'format' beside 'pattern' is not supported");
      if (!s["pattern"].is_string()) return Error(path, "'pattern' must be a string");
      STRATA_ASSIGN_OR_RETURN(std::string re,
                              internal::PatternToGbnf(s["pattern"].get<std::string>(), kMaxCount));
      return NewRule("pattern", "\"\\\"\" " + re + " \"\\\"\"");
    }
    if (s.contains("format")) {
      if (lengths) return Error(path, "'minLength'/'maxLength' beside 'format' is not supported");
      if (!s["format"].is_string()) return Error(path, "'format' must be a string");
      const std::string f = s["format"].get<std::string>();
      if (f != "date" && f != "time" && f != "date-time" && f != "uuid" && f != "email") {
        return Error(path, fmt::format("unsupported format '{}' (supported: date, time, "
                                       "date-time, uuid, email)",
                                       f.substr(0, 40)));
      }
      STRATA_ASSIGN_OR_RETURN(const std::string inner, Shared(f));
      return NewRule("format", "\"\\\"\" " + inner + " \"\\\"\"");
    }
    if (!lengths) return Shared("string");
    const uint32_t lo = min_len.value_or(0);
    if (max_len && *max_len < lo) return Error(path, "'maxLength' is below 'minLength'");
    // No escapes: then the length in code points is the length of the text.
    return NewRule("string", R"("\"" [^"\\\x00-\x1F])" + Repeat(lo, max_len) + R"( "\"")");
  }

  util::StatusOr<std::string> Object(const Json& s, const std::string& path, int depth) {
    bool extra_false = false;
    if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      if (!a.is_boolean()) {
        return Error(path,
                     "'additionalProperties' as a schema is not supported (only true or "
                     "false)");
      }
      extra_false = !a.get<bool>();
    }
    std::set<std::string, std::less<>> required;
    if (s.contains("required")) {
      const Json& r = s["required"];
      if (!r.is_array()) return Error(path, "'required' must be an array of strings");
      for (const auto& x : r) {
        if (!x.is_string()) return Error(path, "'required' must be an array of strings");
        required.insert(x.get<std::string>());
      }
    }
    if (!s.contains("properties")) {
      if (!required.empty()) {
        return Error(path, "'required' names properties that 'properties' does not define");
      }
      if (extra_false) return "\"{}\"";
      return AnyObject();
    }
    const Json& props = s["properties"];
    if (!props.is_object()) return Error(path, "'properties' must be an object");
    for (const auto& r : required) {
      if (!props.contains(r)) {
        return Error(path, fmt::format("required property '{}' is not in 'properties'", r));
      }
    }
    struct Prop {
      std::string kv;  // "\"key\":" value
      bool required;
    };
    std::vector<Prop> list;
    for (const auto& [k, v] : props.items()) {
      STRATA_ASSIGN_OR_RETURN(std::string value, Compile(v, path + "/properties/" + k, depth + 1));
      list.push_back(
          {GbnfLiteral(Json(k).dump(-1, ' ', false, Json::error_handler_t::replace) + ":") + " " +
               value,
           required.count(k) != 0});
    }
    if (list.empty()) return "\"{}\"";
    const int id = next_++;
    // After the first property written, each next one starts with ','.
    // rest[i]: properties i.. after at least one was written.
    const size_t n = list.size();
    std::vector<std::string> rest(n + 1);
    for (size_t i = n; i-- > 0;) {
      const std::string part =
          list[i].required ? "\",\" " + list[i].kv : "(\",\" " + list[i].kv + ")?";
      const std::string body = rest[i + 1].empty() ? part : part + " " + rest[i + 1];
      rest[i] = Name(fmt::format("obj{}-rest{}", id, i));
      STRATA_RETURN_IF_ERROR(Emit(rest[i], body));
    }
    // first[i]: properties i.. before any was written.
    std::string first;
    for (size_t i = n; i-- > 0;) {
      const std::string tail = rest[i + 1].empty() ? "" : " " + rest[i + 1];
      std::string body = list[i].kv + tail;
      if (!list[i].required) body += " | " + (first.empty() ? std::string("\"\"") : first);
      first = Name(fmt::format("obj{}-first{}", id, i));
      STRATA_RETURN_IF_ERROR(Emit(first, body));
    }
    return NewRule("object", "\"{\" " + first + " \"}\"");
  }

  util::StatusOr<std::string> AnyObject() {
    STRATA_ASSIGN_OR_RETURN(const std::string s, Shared("string"));
    STRATA_ASSIGN_OR_RETURN(const std::string v, Shared(fmt::format("any{}", kAnyDepth - 1)));
    return NewRule("object", fmt::format(R"("{{" ({0} ":" {1} ("," {0} ":" {1})*)? "}}")", s, v));
  }

  util::StatusOr<std::string> Array(const Json& s, const std::string& path, int depth) {
    std::string item;
    if (s.contains("items")) {
      if (s["items"].is_array()) {
        return Error(path, "'items' as an array (tuples) is not supported");
      }
      STRATA_ASSIGN_OR_RETURN(item, Compile(s["items"], path + "/items", depth + 1));
    } else {
      STRATA_ASSIGN_OR_RETURN(item, Shared(fmt::format("any{}", kAnyDepth - 1)));
    }
    STRATA_ASSIGN_OR_RETURN(auto min_items, Count(s, "minItems", path));
    STRATA_ASSIGN_OR_RETURN(auto max_items, Count(s, "maxItems", path));
    const uint32_t lo = min_items.value_or(0);
    if (max_items && *max_items < lo) return Error(path, "'maxItems' is below 'minItems'");
    if (max_items && *max_items == 0) return "\"[]\"";
    // The items after the first: lo - 1 to max - 1 of them.
    const uint32_t more_lo = lo == 0 ? 0 : lo - 1;
    const std::optional<uint32_t> more_hi =
        max_items ? std::optional<uint32_t>(*max_items - 1) : std::nullopt;
    std::string more;
    if (!more_hi || *more_hi > 0) more = " (\",\" " + item + ")" + Repeat(more_lo, more_hi);
    const std::string items = item + more;
    return NewRule("array", lo == 0 ? "\"[\" (" + items + ")? \"]\"" : "\"[\" " + items + " \"]\"");
  }

  util::StatusOr<std::string> Ref(const Json& ref, const std::string& path, int depth) {
    if (!ref.is_string()) return Error(path, "'$ref' must be a string");
    const std::string r = ref.get<std::string>();
    if (auto it = refs_.find(r); it != refs_.end()) return it->second;
    const Json* target = nullptr;
    std::string local;
    if (r == "#") {
      target = &root_;
      local = "root-ref";
    } else {
      for (const char* base : {"#/$defs/", "#/definitions/"}) {
        const std::string b = base;
        if (r.rfind(b, 0) != 0) continue;
        std::string key = r.substr(b.size());
        // JSON pointer escapes; only one level of names is supported.
        if (key.find('/') != std::string::npos) break;
        for (size_t at = 0; (at = key.find('~', at)) != std::string::npos; ++at) {
          if (at + 1 < key.size() && key[at + 1] == '1')
            key.replace(at, 2, "/");
          else if (at + 1 < key.size() && key[at + 1] == '0')
            key.replace(at, 2, "~");
        }
        const std::string section = b.substr(2, b.size() - 3);
        if (root_.contains(section) && root_[section].is_object() && root_[section].contains(key)) {
          target = &root_[section][key];
        }
        local = "ref";
        break;
      }
      if (local.empty()) {
        return Error(path, fmt::format("unsupported $ref '{}' (only '#', '#/$defs/NAME' and "
                                       "'#/definitions/NAME')",
                                       r.substr(0, 80)));
      }
      if (target == nullptr)
        return Error(path, fmt::format("$ref '{}' names no definition", r.substr(0, 80)));
    }
    const std::string name = Name(fmt::format("{}{}", local, next_++));
    refs_.emplace(r, name);
    STRATA_ASSIGN_OR_RETURN(std::string e, Compile(*target, r, depth + 1));
    STRATA_RETURN_IF_ERROR(Emit(name, e));
    return name;
  }

  const Json& root_;
  const std::string prefix_;
  std::string& out_;
  const JsonSchemaOptions options_;
  int next_ = 0;
  std::set<std::string> shared_;
  std::map<std::string, std::string> refs_;  // $ref → its rule
};

}  // namespace

util::StatusOr<std::string> JsonSchemaRules(std::string_view schema_json, std::string_view prefix,
                                            std::string& out, const JsonSchemaOptions& options) {
  for (const char c : prefix) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    if (!ok) return util::InvalidArgumentError("json schema: a rule prefix is [A-Za-z0-9_-]*");
  }
  Json schema = Json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return util::InvalidArgumentError("json schema: not valid JSON");
  std::string rules;
  SchemaCompiler c(schema, std::string(prefix), rules, options);
  STRATA_ASSIGN_OR_RETURN(std::string root, c.Run());
  out += rules;
  return root;
}

util::StatusOr<std::string> CompileJsonSchema(std::string_view schema_json,
                                              const JsonSchemaOptions& options) {
  std::string rules;
  STRATA_ASSIGN_OR_RETURN(std::string root, JsonSchemaRules(schema_json, "js-", rules, options));
  return "root ::= " + root + "\n" + rules;
}

}  // namespace strata::grammar
