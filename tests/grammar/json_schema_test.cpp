#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "grammar/grammar_mask.h"
#include "testing/tiny_model.h"
#include "util/random.h"

namespace strata::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const Grammar> SchemaGrammar(const std::string& schema) {
  auto text = CompileJsonSchema(schema);
  EXPECT_TRUE(text.ok()) << schema << ": " << text.status().message();
  if (!text.ok()) return nullptr;
  auto g = Grammar::Parse(*text);
  EXPECT_TRUE(g.ok()) << g.status().message() << "\n" << *text;
  return g.ok() ? *g : nullptr;
}

bool DocMatches(const Grammar& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.FeedAll(text) && m.accepting();
}

std::string SchemaError(const std::string& schema) {
  auto text = CompileJsonSchema(schema);
  return text.ok() ? "" : std::string(text.status().message());
}

size_t CodePoints(const std::string& s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<uint8_t>(c) & 0xC0) != 0x80;
  return n;
}

// A validator for the subset the compiler supports (and the generator below
// uses): JSON Schema semantics, so it checks what the grammar must ensure.
class Validator {
 public:
  explicit Validator(const Json& root) : root_(root) {}

  bool Valid(const Json& v, const Json& s, std::string& why) const {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) {
      const std::string r = s["$ref"].get<std::string>();
      if (r == "#") return Valid(v, root_, why);
      const std::string name = r.substr(r.rfind('/') + 1);
      const char* section = r.rfind("#/$defs/", 0) == 0 ? "$defs" : "definitions";
      return Valid(v, root_[section][name], why);
    }
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s.contains(k)) continue;
      for (const auto& alt : s[k]) {
        std::string ignored;
        if (Valid(v, alt, ignored)) return true;
      }
      why = fmt::format("{} matches no alternative of {}", v.dump(), k);
      return false;
    }
    if (s.contains("allOf")) {
      for (const auto& sub : s["allOf"]) {
        if (!Valid(v, sub, why)) return false;
      }
    }
    if (s.contains("const") && v != s["const"]) {
      why = v.dump() + " is not the const";
      return false;
    }
    if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) {
      why = v.dump() + " is not in the enum";
      return false;
    }
    if (s.contains("type")) {
      std::vector<std::string> types;
      if (s["type"].is_string()) {
        types.push_back(s["type"].get<std::string>());
      } else {
        for (const auto& t : s["type"]) types.push_back(t.get<std::string>());
      }
      bool any = false;
      for (const auto& t : types) any = any || IsType(v, t);
      if (!any) {
        why = v.dump() + " is not of type " + s["type"].dump();
        return false;
      }
    }
    if (v.is_string()) {
      const std::string str = v.get<std::string>();
      if (s.contains("minLength") && CodePoints(str) < s["minLength"].get<size_t>()) {
        why = "too short: " + v.dump();
        return false;
      }
      if (s.contains("maxLength") && CodePoints(str) > s["maxLength"].get<size_t>()) {
        why = "too long: " + v.dump();
        return false;
      }
      if (s.contains("pattern") &&
          !std::regex_search(str, std::regex(s["pattern"].get<std::string>()))) {
        why = v.dump() + " does not match " + s["pattern"].dump();
        return false;
      }
      if (s.contains("format") && !Format(str, s["format"].get<std::string>())) {
        why = v.dump() + " is not a " + s["format"].dump();
        return false;
      }
    }
    if (v.is_object() && s.contains("properties")) {
      for (const auto& [k, sub] : s["properties"].items()) {
        if (v.contains(k) && !Valid(v[k], sub, why)) return false;
      }
      if (s.contains("additionalProperties") && !s["additionalProperties"].get<bool>()) {
        for (const auto& [k, x] : v.items()) {
          if (!s["properties"].contains(k)) {
            why = "extra property " + k;
            return false;
          }
        }
      }
    }
    if (v.is_object() && s.contains("required")) {
      for (const auto& r : s["required"]) {
        if (!v.contains(r.get<std::string>())) {
          why = "missing " + r.dump();
          return false;
        }
      }
    }
    if (v.is_array()) {
      if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) {
        why = "too few items";
        return false;
      }
      if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) {
        why = "too many items";
        return false;
      }
      if (s.contains("items")) {
        for (const auto& x : v) {
          if (!Valid(x, s["items"], why)) return false;
        }
      }
    }
    return true;
  }

 private:
  static bool IsType(const Json& v, const std::string& t) {
    if (t == "null") return v.is_null();
    if (t == "boolean") return v.is_boolean();
    if (t == "integer") return v.is_number_integer() || v.is_number_unsigned();
    if (t == "number") return v.is_number();
    if (t == "string") return v.is_string();
    if (t == "array") return v.is_array();
    return v.is_object();
  }

  static bool Format(const std::string& s, const std::string& f) {
    static const std::regex kDate(R"(^(\d{4})-(\d{2})-(\d{2})$)");
    static const std::regex kTime(
        R"(^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$)");
    static const std::regex kUuid(
        R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)");
    static const std::regex kEmail(R"(^[^@\s]+@[^@\s]+\.[a-z]{2,}$)");
    auto date = [](const std::string& d) {
      std::smatch m;
      if (!std::regex_match(d, m, kDate)) return false;
      const int y = std::stoi(m[1]), mo = std::stoi(m[2]), day = std::stoi(m[3]);
      static const int kDays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
      if (mo < 1 || mo > 12 || day < 1 || day > kDays[mo - 1]) return false;
      const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
      return !(mo == 2 && day == 29 && !leap) && y > 0;
    };
    if (f == "date") return date(s);
    if (f == "time") return std::regex_match(s, kTime);
    if (f == "date-time") {
      const size_t t = s.find('T');
      return t != std::string::npos && date(s.substr(0, t)) &&
             std::regex_match(s.substr(t + 1), kTime);
    }
    if (f == "uuid") return std::regex_match(s, kUuid);
    if (f == "email") return std::regex_match(s, kEmail);
    return false;
  }

  const Json& root_;
};

TEST(JsonSchema, CompilesEachSupportedKeyword) {
  struct Case {
    const char* schema;
    std::vector<const char*> good, bad;
  };
  const std::vector<Case> cases = {
      {R"({"type": "string"})", {R"("")", R"("a \"b\" \\ \u00e9 é")"}, {R"("a)", "1", R"("\u)"}},
      {R"({"type": "integer"})", {"0", "-12", "1234567890123456"}, {"01", "1.5", "-", "1e3"}},
      {R"({"type": "number"})", {"0", "-1.25", "3e10", "2.5E-3"}, {"1.", ".5", "1e"}},
      {R"({"type": "boolean"})", {"true", "false"}, {"null", "1"}},
      {R"({"type": "null"})", {"null"}, {"nul", "0"}},
      {R"({"type": ["string", "null"]})", {"null", R"("x")"}, {"1"}},
      {R"({"enum": ["a", 1, null, {"k": [true]}]})",
       {R"("a")", "1", "null", R"({"k":[true]})"},
       {R"("b")", "2"}},
      {R"({"const": "only"})", {R"("only")"}, {R"("other")"}},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
          "required": ["b"], "additionalProperties": false})",
       {R"({"b":"x"})", R"({"a":1,"b":""})"},
       {R"({})", R"({"a":1})", R"({"b":"x","a":1})", R"({"b":"x","c":1})", R"({ "b":"x"})"}},
      {R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"},
          "c": {"type": "integer"}}})",
       {"{}", R"({"a":1})", R"({"b":1})", R"({"a":1,"c":2})", R"({"a":1,"b":2,"c":3})"},
       {R"({,"a":1})", R"({"a":1,})", R"({"c":1,"a":2})"}},
      {R"({"type": "object"})", {"{}", R"({"x":[1,{"y":null}]})"}, {"[]"}},
      {R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3})",
       {"[1]", "[1,2,3]"},
       {"[]", "[1,2,3,4]", R"(["a"])"}},
      {R"({"type": "array"})", {"[]", R"([1,"a",[null]])"}, {"{}"}},
      {R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 2}]})",
       {"1", R"("ab")"},
       {R"("abc")"}},
      {R"({"oneOf": [{"const": 1}, {"const": 2}]})", {"1", "2"}, {"3"}},
      {R"({"allOf": [{"type": "boolean"}]})", {"true"}, {"1"}},
      {R"({"type": "string", "minLength": 2, "maxLength": 3})",
       {R"("ab")", R"("abé")"},
       {R"("a")", R"("abcd")", R"("a\n")"}},
      {R"({"type": "string", "pattern": "^[a-z]+-\\d{2}$"})",
       {R"("ab-12")"},
       {R"("ab-1")", R"("AB-12")"}},
      {R"({"type": "string", "pattern": "a\"b|(c\\\\)+"})",
       {R"("a\"b")", R"("c\\c\\")"},
       {R"("ab")"}},
      {R"({"type": "string", "format": "date"})",
       {R"("2024-02-28")", R"("1999-12-31")"},
       {R"("2024-02-30")", R"("2024-13-01")", R"("0000-01-01")"}},
      {R"({"type": "string", "format": "time"})",
       {R"("23:59:59Z")", R"("01:02:03.5+05:30")"},
       {R"("24:00:00Z")", R"("12:00:00")"}},
      {R"({"type": "string", "format": "date-time"})",
       {R"("2024-01-31T10:00:00Z")"},
       {R"("2024-01-31 10:00:00Z")"}},
      {R"({"type": "string", "format": "uuid"})",
       {R"("123e4567-e89b-12d3-a456-426614174000")"},
       {R"("123e4567-e89b-12d3-a456-42661417400")"}},
      {R"({"type": "string", "format": "email"})",
       {R"("ada.l@example.com")"},
       {R"("ada@example")", R"("@x.com")"}},
      {R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
          "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
          "required": ["v", "next"]}}, "$ref": "#/$defs/node"})",
       {R"({"v":1,"next":null})", R"({"v":1,"next":{"v":2,"next":null}})"},
       {R"({"v":1})"}},
      {R"({"definitions": {"x": {"type": "boolean"}}, "type": "array",
          "items": {"$ref": "#/definitions/x"}})",
       {"[true,false]"},
       {"[1]"}},
      {R"({"title": "t", "description": "d", "examples": [1], "default": 1, "$comment": "c",
          "$schema": "https://json-schema.org/draft/2020-12/schema", "type": "integer"})",
       {"7"},
       {"x"}},
      {"true", {"1", R"({"a":[]})"}, {""}},
  };
  for (const auto& c : cases) {
    const auto g = SchemaGrammar(c.schema);
    ASSERT_TRUE(g) << c.schema;
    for (const char* doc : c.good) EXPECT_TRUE(DocMatches(*g, doc)) << c.schema << " / " << doc;
    for (const char* doc : c.bad) EXPECT_FALSE(DocMatches(*g, doc)) << c.schema << " / " << doc;
  }
}

TEST(JsonSchema, PropertiesComeInTheSchemasOrder) {
  const auto g = SchemaGrammar(R"({"type": "object", "properties": {"zeta": {"type": "integer"},
      "alpha": {"type": "integer"}}, "required": ["zeta", "alpha"]})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(DocMatches(*g, R"({"zeta":1,"alpha":2})"));
  EXPECT_FALSE(DocMatches(*g, R"({"alpha":2,"zeta":1})"));
}

TEST(JsonSchema, UnsupportedKeywordsAreErrorsNamingThem) {
  for (
      const auto& [schema, word] : std::vector<std::pair<std::string, std::string>>{
          {R"({"type": "integer", "minimum": 0})", "'minimum'"},
          {R"({"type": "number", "maximum": 10})", "'maximum'"},
          {R"({"type": "number", "multipleOf": 2})", "'multipleOf'"},
          {R"({"type": "object", "patternProperties": {}})", "'patternProperties'"},
          {R"({"type": "object", "minProperties": 1})", "'minProperties'"},
          {R"({"type": "array", "uniqueItems": true})", "'uniqueItems'"},
          {R"({"type": "array", "prefixItems": []})", "'prefixItems'"},
          {R"({"not": {}})", "'not'"},
          {R"({"if": {}})", "'if'"},
          {R"({"type": "object", "properties": {"a": {"type": "integer", "exclusiveMinimum": 1}}})",
           "'exclusiveMinimum' at #/properties/a"},
          {R"({"type": "string", "format": "hostname"})", "format 'hostname'"},
          {R"j({"type": "string", "pattern": "(?=a)"})j", "'(?'"},
          {R"({"type": "string", "pattern": "a\\1"})", "'\\1'"},
          {R"({"type": "string", "pattern": "\\bx"})", "'\\b'"},
          {R"({"type": "object", "additionalProperties": {"type": "integer"}})",
           "'additionalProperties' as a schema"},
          {R"({"type": "array", "items": [{"type": "integer"}]})", "'items' as an array"},
          {R"({"allOf": [{"type": "integer"}, {"type": "number"}]})", "'allOf'"},
          {R"({"$ref": "http://example.com/s.json"})", "unsupported $ref"},
          {R"({"$ref": "#/$defs/missing"})", "names no definition"},
          {R"({"type": "strng"})", "unknown type 'strng'"},
          {R"({"type": "string", "properties": {}})", "'properties' applies to type 'object'"},
          {R"({"type": "string", "minLength": 1, "pattern": "a"})", "beside 'pattern'"},
          {R"({"enum": []})", "non-empty"},
          {R"({"type": "object", "required": ["x"], "properties": {}})", "'x'"},
          {"false", "matches nothing"},
          {"[1]", "must be an object"},
          {"{", "not valid JSON"},
          {R"({"type": "array", "maxItems": 1000001})", "at most 100000"},
      }) {
    const std::string e = SchemaError(schema);
    EXPECT_NE(e.find(word), std::string::npos) << schema << " -> " << e;
  }
}

TEST(JsonSchema, BoundsDepthAndSize) {
  std::string deep = R"({"type": "integer"})";
  for (int i = 0; i < 40; ++i) deep = R"({"type": "array", "items": )" + deep + "}";
  EXPECT_NE(SchemaError(deep).find("nest deeper than 32"), std::string::npos);
  std::string wide = R"({"type": "object", "properties": {)";
  for (int i = 0; i < 20000; ++i)
    wide += fmt::format(R"({}"p{}": {{"type": "integer"}})", i ? "," : "", i);
  wide += "}}";
  EXPECT_NE(SchemaError(wide).find("passes 1048576 bytes"), std::string::npos);
}

TEST(JsonSchema, RulesComposeUnderAPrefix) {
  std::string rules;
  auto name = JsonSchemaRules(R"({"type": "integer"})", "ans-", rules);
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(*name, "ans-root");
  auto g = Grammar::Parse("root ::= \"Answer: \" " + *name + " \".\"\n" + rules);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_TRUE(DocMatches(**g, "Answer: 42."));
  EXPECT_FALSE(JsonSchemaRules("{}", "bad prefix", rules).ok());
}

// Random schemas of the supported subset (seeded).
class SchemaGenerator {
 public:
  explicit SchemaGenerator(uint64_t seed) : rng_(seed) {}

  Json Make(int depth) {
    const int kind = static_cast<int>(rng_.Below(depth <= 0 ? 7 : 11));
    switch (kind) {
      case 0:
        return {{"type", "integer"}};
      case 1:
        return {{"type", "number"}};
      case 2:
        return {{"type", "boolean"}};
      case 3:
        return String();
      case 4:
        return {{"enum", Json::array({"red", "green", 3, nullptr})}};
      case 5:
        return {{"type", Json::array({"string", "null"})}, {"maxLength", 4}};
      case 6:
        return {{"const", "k"}};
      case 7:
      case 8:
        return Object(depth - 1);
      case 9: {
        Json a = {{"type", "array"}, {"items", Make(depth - 1)}};
        if (rng_.Below(2)) a["minItems"] = rng_.Below(2);
        a["maxItems"] = 1 + rng_.Below(3);
        return a;
      }
      default:
        return {{"anyOf", Json::array({Make(depth - 1), Make(depth - 1)})}};
    }
  }

  Json Object(int depth) {
    Json props = Json::object();
    Json required = Json::array();
    const int n = 1 + static_cast<int>(rng_.Below(4));
    for (int i = 0; i < n; ++i) {
      const std::string name = fmt::format("p{}", i);
      props[name] = Make(depth);
      if (rng_.Below(2)) required.push_back(name);
    }
    Json o = {{"type", "object"}, {"properties", props}, {"required", required}};
    if (rng_.Below(2)) o["additionalProperties"] = false;
    return o;
  }

 private:
  Json String() {
    switch (rng_.Below(5)) {
      case 0:
        return {{"type", "string"}, {"maxLength", 6}};
      case 1:
        return {{"type", "string"}, {"minLength", 1}, {"maxLength", 3}};
      case 2:
        return {{"type", "string"}, {"pattern", "^[a-c]{2}(x|yz)?$"}};
      case 3: {
        const char* const formats[] = {"date", "time", "date-time", "uuid", "email"};
        return {{"type", "string"}, {"format", formats[rng_.Below(5)]}};
      }
      default:
        return {{"type", "string"}};
    }
  }

  util::Rng rng_;
};

// The property: a random model (random logits, sampling at temperature 1)
// under the mask writes documents that parse and validate against their
// schema, and the mask never allows nothing where the document is unfinished.
TEST(JsonSchema, RandomModelsWriteValidDocumentsOfRandomSchemas) {
  const testing::TinyModel tiny = testing::MakeTinyModel();
  const text::Tokenizer& tok = tiny.model->tokenizer();
  auto vocab = std::make_shared<const VocabIndex>(tok);
  SchemaGenerator gen(2024);
  util::Rng rng(99);
  int finished = 0, total = 0;
  std::vector<float> logits(static_cast<size_t>(tok.n_vocab()));
  for (int s = 0; s < 60; ++s) {
    Json schema = gen.Make(3);
    if (s % 7 == 0) {  // a recursive one through $defs
      schema = {{"$defs",
                 {{"t",
                   {{"type", "object"},
                    {"properties",
                     {{"v", {{"type", "integer"}}},
                      {"kids",
                       {{"type", "array"}, {"maxItems", 2}, {"items", {{"$ref", "#/$defs/t"}}}}}}},
                    {"required", Json::array({"v"})}}}}},
                {"$ref", "#/$defs/t"}};
    }
    const std::string text = schema.dump();
    const auto g = SchemaGrammar(text);
    ASSERT_TRUE(g) << text;
    const GrammarTokenMask mask(g, vocab);
    const Validator validator(schema);
    for (int doc = 0; doc < 3; ++doc) {
      ++total;
      GrammarMatcher m(*g);
      std::string out;
      bool ended = false;
      for (int step = 0; step < 3000 && !ended; ++step) {
        const auto allowed = mask.AllowedCached(m);
        ASSERT_TRUE(!allowed->empty() || m.accepting())
            << "dead state after " << out << " of " << text;
        if (m.accepting() && !m.can_continue()) break;
        // Temperature 1 over random logits, end-of-generation allowed when accepting.
        double total_w = 0;
        for (const int32_t id : *allowed) {
          logits[static_cast<size_t>(id)] = static_cast<float>(rng.Uniform() * 4.0);
          total_w += std::exp(logits[static_cast<size_t>(id)]);
        }
        const double eog_w = m.accepting() ? std::exp(rng.Uniform() * 4.0) : 0.0;
        double r = rng.Uniform() * (total_w + eog_w);
        int32_t pick = -1;
        for (const int32_t id : *allowed) {
          r -= std::exp(logits[static_cast<size_t>(id)]);
          if (r <= 0) {
            pick = id;
            break;
          }
        }
        if (pick < 0) {
          if (m.accepting()) {
            ended = true;
            break;
          }
          pick = allowed->back();
        }
        ASSERT_TRUE(m.FeedAll(tok.Piece(pick))) << out << " + " << tok.Piece(pick);
        out += tok.Piece(pick);
      }
      if (!m.accepting()) continue;  // cut by the step budget: a prefix, as checked
      ++finished;
      const Json parsed = Json::parse(out, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(parsed.is_discarded()) << out << " of " << text;
      std::string why;
      EXPECT_TRUE(validator.Valid(parsed, schema, why)) << out << " of " << text << ": " << why;
    }
  }
  RecordProperty("finished", finished);
  RecordProperty("documents", total);
  EXPECT_GT(finished, total / 2) << finished << " of " << total << " documents finished";
}

}  // namespace
}  // namespace strata::grammar
