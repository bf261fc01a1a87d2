// The configuration file reader: typed values with their lines, and every
// problem reported with its line, a did-you-mean, and secrets refused.
#include "config/document.h"

#include <gtest/gtest.h>

#include "config/schema.h"

namespace strata::config {
namespace {

Schema TestSchema() {
  Knob ttl{.key = "l1.ttl", .type = Type::kFloat, .unit = "s", .min = 0.001, .max = 3600};
  Knob bytes{.key = "l1.bytes", .type = Type::kInt, .unit = "bytes", .min = 0, .max = 1 << 30};
  Knob sim{.key = "l3.similarity", .type = Type::kFloat, .min = 0, .max = 1, .min_exclusive = true};
  Knob mode{.key = "l3.mode", .type = Type::kString, .choices = {"off", "opt-in", "on"}};
  Knob coalesce{.key = "cache.coalesce", .type = Type::kBool};
  Knob origins{.key = "server.cors_origins", .type = Type::kStringList};
  Knob keys{.key = "auth.api_keys_file", .type = Type::kString};
  Knob model{.key = "model", .type = Type::kString};
  Knob backend{.key = "backend", .type = Type::kTables};
  backend.fields = {
      Knob{.key = "kind",
           .type = Type::kString,
           .choices = {"openai", "anthropic"},
           .required = true},
      Knob{.key = "urls", .type = Type::kStringList, .required = true},
      Knob{.key = "name", .type = Type::kString},
      Knob{.key = "key_file", .type = Type::kString},
  };
  return Schema({ttl, bytes, sim, mode, coalesce, origins, keys, model, backend});
}

// The messages of `r`, one per line, for failure output.
std::string All(const ParseResult& r) {
  std::string out;
  for (const Diagnostic& d : r.errors) out += FormatDiagnostic("f.toml", d) + "\n";
  return out;
}

TEST(ConfigParse, ReadsEveryTypeWithItsLine) {
  const ParseResult r = Parse(R"(model = "m.gguf"

[l1]
ttl = 30        # an integer where a number is expected is fine
bytes = 1024

[l3]
similarity = 0.9
mode = "on"

[cache]
coalesce = false

[server]
cors_origins = ["https://a.example", "*"]
)",
                              TestSchema());
  ASSERT_TRUE(r.ok()) << All(r);
  EXPECT_EQ(r.document.Get("model")->s, "m.gguf");
  EXPECT_EQ(r.document.Get("model")->line, 1);
  EXPECT_DOUBLE_EQ(r.document.Get("l1.ttl")->f, 30);
  EXPECT_EQ(r.document.Get("l1.ttl")->line, 4);
  EXPECT_EQ(r.document.Get("l1.bytes")->i, 1024);
  EXPECT_DOUBLE_EQ(r.document.Get("l3.similarity")->f, 0.9);
  EXPECT_EQ(r.document.Get("l3.mode")->s, "on");
  EXPECT_FALSE(r.document.Get("cache.coalesce")->b);
  EXPECT_EQ(r.document.Get("server.cors_origins")->list,
            (std::vector<std::string>{"https://a.example", "*"}));
  EXPECT_EQ(r.document.Get("auth.api_keys_file"), nullptr);
}

TEST(ConfigParse, DottedKeysAndInlineTablesAreTheSameKnobs) {
  const ParseResult r = Parse("l1.ttl = 5\nl3 = { mode = \"off\" }\n", TestSchema());
  ASSERT_TRUE(r.ok()) << All(r);
  EXPECT_DOUBLE_EQ(r.document.Get("l1.ttl")->f, 5);
  EXPECT_EQ(r.document.Get("l3.mode")->s, "off");
}

TEST(ConfigParse, AnUnknownKeyNamesTheClosestKnob) {
  const ParseResult r = Parse("[l1]\ntll = 5\n\n[l11]\nbytes = 3\nttl = 1\n", TestSchema());
  ASSERT_EQ(r.errors.size(), 2u) << All(r);
  EXPECT_EQ(r.errors[0].line, 2);
  EXPECT_EQ(r.errors[0].key, "l1.tll");
  EXPECT_NE(r.errors[0].message.find("did you mean 'l1.ttl'?"), std::string::npos);
  // An unknown table is one problem, however many keys it has.
  EXPECT_EQ(r.errors[1].line, 4);
  EXPECT_EQ(r.errors[1].key, "l11");
  EXPECT_NE(r.errors[1].message.find("did you mean 'l1'?"), std::string::npos) << All(r);
}

TEST(ConfigParse, AKnobInTheWrongTableIsPointedToItsOwn) {
  const ParseResult r = Parse("ttl = 5\n", TestSchema());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_NE(r.errors[0].message.find("did you mean 'l1.ttl'?"), std::string::npos) << All(r);
}

TEST(ConfigParse, SomethingFarFromEveryKeyGetsNoSuggestion) {
  const ParseResult r = Parse("completely_unrelated_words = 1\n", TestSchema());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message.find("did you mean"), std::string::npos) << All(r);
}

TEST(ConfigParse, AWrongTypeSaysWhatWasExpectedAndWhatCame) {
  const ParseResult r = Parse(
      "[l1]\nttl = \"10s\"\nbytes = 1.5\n[cache]\ncoalesce = 1\n[server]\ncors_origins = "
      "5\n",
      TestSchema());
  ASSERT_EQ(r.errors.size(), 4u) << All(r);
  EXPECT_EQ(r.errors[0].line, 2);
  EXPECT_EQ(r.errors[0].message, "expected number, got a string");
  EXPECT_EQ(r.errors[1].message, "expected integer, got a number");
  EXPECT_EQ(r.errors[2].message, "expected boolean, got an integer");
  EXPECT_EQ(r.errors[3].message, "expected array of strings, got an integer");
  EXPECT_TRUE(r.document.values.empty());
}

// A single string where a list of strings goes is a list of one (a file
// written when the key took one string still reads).
TEST(ConfigParse, AStringWhereAListGoesIsAListOfOne) {
  const ParseResult r = Parse("[server]\ncors_origins = \"*\"\n", TestSchema());
  ASSERT_TRUE(r.ok()) << All(r);
  ASSERT_EQ(r.document.values.size(), 1u);
  EXPECT_EQ(r.document.values.begin()->second.list, std::vector<std::string>{"*"});
}

TEST(ConfigParse, ANumberOutOfRangeNamesTheRangeAndUnit) {
  const ParseResult r = Parse("[l1]\nttl = 0\nbytes = -1\n[l3]\nsimilarity = 0\n", TestSchema());
  ASSERT_EQ(r.errors.size(), 3u) << All(r);
  EXPECT_EQ(r.errors[0].message, "0 is outside [0.001, 3600] s");
  EXPECT_EQ(r.errors[1].message, "-1 is outside [0, 1073741824] bytes");
  EXPECT_EQ(r.errors[2].message, "0 is outside (0, 1]");
  const ParseResult edge = Parse("[l3]\nsimilarity = 1\n", TestSchema());
  EXPECT_TRUE(edge.ok()) << All(edge);
}

TEST(ConfigParse, NonFiniteNumbersAreOutOfEveryRange) {
  const ParseResult r = Parse("[l1]\nttl = nan\n", TestSchema());
  ASSERT_EQ(r.errors.size(), 1u) << All(r);
  EXPECT_NE(r.errors[0].message.find("is outside"), std::string::npos);
}

TEST(ConfigParse, AStringOutsideItsChoicesListsThem) {
  const ParseResult r = Parse("[l3]\nmode = \"always\"\n", TestSchema());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].message, "'always' is not one of off, opt-in, on");
}

TEST(ConfigParse, ASyntaxErrorHasLineAndColumn) {
  const ParseResult r = Parse("[l1]\nttl = 5\nbytes = = 3\n", TestSchema());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].line, 3);
  EXPECT_GT(r.errors[0].column, 0);
  EXPECT_TRUE(r.errors[0].key.empty());
  EXPECT_NE(FormatDiagnostic("f.toml", r.errors[0]).find("f.toml:3:"), std::string::npos);
}

// toml++ 3.3 reaches __builtin_unreachable when it asks whether many
// non-ASCII characters (Latin-1, Cyrillic, ...) are whitespace; the reader
// refuses them where TOML allows no such character, before toml++ looks.
TEST(ConfigParse, NonAsciiOutsideStringsIsASyntaxErrorWithItsLine) {
  for (const char* text : {"[l\xd0\xa2]\nttl = 5\n", "[l1]\nttl = 5\xc3\xa9\n",
                           "[l1]\n\xc2\xa1ttl = 5\n", "[l1]\nttl =\xe3\x80\x81 5\n"}) {
    const ParseResult r = Parse(text, TestSchema());
    ASSERT_EQ(r.errors.size(), 1u) << text;
    EXPECT_NE(r.errors[0].message.find("non-ASCII"), std::string::npos) << r.errors[0].message;
    EXPECT_GT(r.errors[0].column, 0);
  }
  EXPECT_EQ(Parse("[l1]\nttl = 5\xc3\xa9\n", TestSchema()).errors[0].line, 2);
}

TEST(ConfigParse, NonAsciiInStringsAndCommentsIsRead) {
  const ParseResult r = Parse(
      "# r\xc3\xa9glages \xd0\x96\n[l3]\nmode = \"on\" # \xe3\x80\x82\n"
      "[server]\ncors_origins = ['\xc3\xa9', \"\xd0\x96\\\"\xc2\xa1\", "
      "\"\"\"x\n\xc3\xa9\"\"\"\"\", "
      "\'\'\'\xc2\xa1\'\'\'\'\']\n",
      TestSchema());
  ASSERT_TRUE(r.ok()) << All(r);
  const Value* origins = r.document.Get("server.cors_origins");
  ASSERT_NE(origins, nullptr);
  EXPECT_EQ(origins->list, (std::vector<std::string>{"\xc3\xa9", "\xd0\x96\"\xc2\xa1",
                                                     "x\n\xc3\xa9\"\"", "\xc2\xa1\'\'"}));
}

TEST(ConfigParse, NonAsciiAfterABackslashInAMultiLineStringIsRefused) {
  const ParseResult escaped = Parse("model = \"\"\"a\\\xc3\xa9\"\"\"\n", TestSchema());
  ASSERT_EQ(escaped.errors.size(), 1u);
  EXPECT_NE(escaped.errors[0].message.find("backslash"), std::string::npos);
  const ParseResult continued = Parse("model = \"\"\"a \\\n   \xc3\xa9\"\"\"\n", TestSchema());
  ASSERT_EQ(continued.errors.size(), 1u);
  EXPECT_EQ(continued.errors[0].line, 2);
  // ASCII after the continuation is read as TOML says: the whitespace goes.
  const ParseResult ok = Parse("model = \"\"\"a \\\n   b\xc3\xa9\"\"\"\n", TestSchema());
  ASSERT_TRUE(ok.ok()) << All(ok);
  EXPECT_EQ(ok.document.Get("model")->s, "a b\xc3\xa9");
}

TEST(ConfigParse, UnclosedStringsEndingTheFileAreSyntaxErrors) {
  for (const char* text : {"model = \'\'\'\'", "model = \"\"\"\"\"", "model = \"\"\"a\\",
                           "model = \"a\\", "model = \'", "model = \'\'\'x\'\'"}) {
    const ParseResult r = Parse(text, TestSchema());
    EXPECT_EQ(r.errors.size(), 1u) << text;
  }
}

TEST(ConfigParse, InvalidUtf8IsRefusedWithItsLine) {
  const ParseResult r = Parse("[l1]\nttl = 5\nmode = \"\xff\"\n", TestSchema());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].line, 3);
  EXPECT_NE(r.errors[0].message.find("UTF-8"), std::string::npos);
}

TEST(ConfigParse, ADuplicateKeyIsASyntaxError) {
  const ParseResult r = Parse("[l1]\nttl = 5\nttl = 6\n", TestSchema());
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].line, 3);
}

TEST(ConfigParse, EveryProblemIsReportedInFileOrder) {
  const ParseResult r =
      Parse("[l3]\nmode = \"x\"\n[l1]\nttl = -1\nbogus = 2\n[server]\nport = 1\n", TestSchema());
  ASSERT_EQ(r.errors.size(), 4u) << All(r);
  for (size_t i = 1; i < r.errors.size(); ++i) EXPECT_LE(r.errors[i - 1].line, r.errors[i].line);
}

TEST(ConfigParse, AKeyNamedLikeASecretIsRefusedWithoutEchoingIt) {
  const ParseResult r = Parse(
      "[auth]\napi_key = \"hunter2hunter2\"\n[backend_opts]\npassword = \"x\"\n", TestSchema());
  // [backend_opts] is unknown, and the secret in it is refused on its own.
  ASSERT_EQ(r.errors.size(), 3u) << All(r);
  EXPECT_EQ(r.errors[0].key, "auth.api_key");
  EXPECT_EQ(r.errors[2].key, "backend_opts.password");
  for (const Diagnostic& d : r.errors) EXPECT_EQ(d.message.find("hunter2"), std::string::npos);
  EXPECT_NE(r.errors[0].message.find("secret"), std::string::npos);
  EXPECT_NE(r.errors[2].message.find("secret"), std::string::npos);
  EXPECT_NE(r.errors[0].message.find("*_file"), std::string::npos);
}

TEST(ConfigParse, AValueThatLooksLikeACredentialIsRefusedAnywhere) {
  const std::string key = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789";
  const ParseResult r = Parse("model = \"" + key + "\"\n[server]\ncors_origins = [\"" + key +
                                  "\"]\n[auth]\napi_keys_file = \"keys.txt\"\n",
                              TestSchema());
  ASSERT_EQ(r.errors.size(), 2u) << All(r);
  for (const Diagnostic& d : r.errors) {
    EXPECT_NE(d.message.find("credential"), std::string::npos);
    EXPECT_EQ(d.message.find("abcdef"), std::string::npos);
  }
  EXPECT_EQ(r.document.Get("model"), nullptr);
  EXPECT_EQ(r.document.Get("auth.api_keys_file")->s, "keys.txt");
}

TEST(ConfigParse, CredentialShapes) {
  EXPECT_TRUE(LooksLikeSecret("sk-proj-0123456789abcdefghij"));
  EXPECT_TRUE(LooksLikeSecret("Bearer eyJhbGciOiJIUzI1NiJ9"));
  EXPECT_TRUE(LooksLikeSecret("-----BEGIN PRIVATE KEY-----\nMIIE"));
  EXPECT_TRUE(LooksLikeSecret("ghp_0123456789abcdefghijABCD"));
  EXPECT_TRUE(LooksLikeSecret("AKIAIOSFODNN7EXAMPLE"));
  EXPECT_FALSE(LooksLikeSecret("sk-"));
  EXPECT_FALSE(LooksLikeSecret("keys.txt"));
  EXPECT_FALSE(LooksLikeSecret("https://api.anthropic.com"));
  EXPECT_FALSE(LooksLikeSecret("skeleton-model.gguf"));
}

TEST(ConfigParse, ArraysOfTablesCheckEachTable) {
  const ParseResult r = Parse(R"([[backend]]
kind = "openai"
urls = ["http://a:1", "http://b:1"]
name = "big"

[[backend]]
kind = "anthropc"
urlz = ["http://c:1"]
)",
                              TestSchema());
  ASSERT_EQ(r.errors.size(), 3u) << All(r);
  EXPECT_EQ(r.errors[0].line, 6);  // the missing urls: the table's header
  EXPECT_NE(r.errors[0].message.find("needs 'urls'"), std::string::npos);
  EXPECT_EQ(r.errors[1].line, 7);
  EXPECT_NE(r.errors[1].message.find("'anthropc' is not one of openai, anthropic"),
            std::string::npos);
  EXPECT_EQ(r.errors[2].line, 8);
  EXPECT_NE(r.errors[2].message.find("did you mean 'urls'?"), std::string::npos) << All(r);
}

TEST(ConfigParse, ValidTablesKeepTheirOrder) {
  const ParseResult r = Parse(
      "[[backend]]\nkind = \"openai\"\nurls = [\"http://a:1\"]\n[[backend]]\nkind = "
      "\"anthropic\"\nurls = [\"https://b\"]\nkey_file = \"b.key\"\n",
      TestSchema());
  ASSERT_TRUE(r.ok()) << All(r);
  const Value* v = r.document.Get("backend");
  ASSERT_NE(v, nullptr);
  ASSERT_EQ(v->tables.size(), 2u);
  EXPECT_EQ(v->tables[0].Get("kind")->s, "openai");
  EXPECT_EQ(v->tables[1].Get("key_file")->s, "b.key");
  EXPECT_EQ(v->tables[1].Get("name"), nullptr);
}

TEST(ConfigParse, ATableWhereAValueBelongsIsAWrongType) {
  const ParseResult r = Parse("[backend]\nkind = \"openai\"\n", TestSchema());
  ASSERT_EQ(r.errors.size(), 1u) << All(r);
  EXPECT_EQ(r.errors[0].message, "expected array of tables, got a table");
}

TEST(ConfigSchema, DescribesRanges) {
  EXPECT_EQ(DescribeRange(
                Knob{.key = "a", .type = Type::kFloat, .min = 0, .max = 1, .max_exclusive = true}),
            "[0, 1)");
  EXPECT_EQ(DescribeRange(Knob{.key = "a", .type = Type::kInt, .min = 16}), ">= 16");
  EXPECT_EQ(DescribeRange(Knob{.key = "a", .type = Type::kString, .choices = {"", "x"}}),
            "one of \"\", x");
  EXPECT_EQ(DescribeRange(Knob{.key = "a", .type = Type::kString}), "");
}

TEST(ConfigSchema, EditDistanceCountsEdits) {
  EXPECT_EQ(EditDistance("ttl", "ttl"), 0u);
  EXPECT_EQ(EditDistance("tll", "ttl"), 1u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
}

TEST(ConfigSchema, TheDefaultsFileParsesBackToTheDefaults) {
  std::vector<Knob> knobs = TestSchema().knobs();
  for (Knob& k : knobs) {
    if (k.key == "l1.ttl") k.default_toml = "600";
    if (k.key == "l3.mode") k.default_toml = "\"opt-in\"";
    if (k.key == "cache.coalesce") k.default_toml = "true";
    if (k.key == "server.cors_origins") k.default_toml = "[\"*\"]";
    k.help = "What " + k.key +
             " does, in a sentence long enough to be wrapped onto a second "
             "line of the comment that precedes it in the file.";
  }
  const Schema schema(knobs);
  const std::string text = RenderDefaults(schema, "test defaults");
  const ParseResult r = Parse(text, schema);
  ASSERT_TRUE(r.ok()) << All(r) << text;
  EXPECT_DOUBLE_EQ(r.document.Get("l1.ttl")->f, 600);
  EXPECT_EQ(r.document.Get("l3.mode")->s, "opt-in");
  EXPECT_TRUE(r.document.Get("cache.coalesce")->b);
  EXPECT_EQ(r.document.Get("server.cors_origins")->list, std::vector<std::string>{"*"});
  EXPECT_EQ(r.document.Get("l1.bytes"), nullptr);  // no default: commented out
  EXPECT_EQ(r.document.Get("backend"), nullptr);   // an example, commented out
  EXPECT_NE(text.find("# [[backend]]"), std::string::npos);
  EXPECT_NE(text.find("unit: s; [0.001, 3600]"), std::string::npos) << text;
}

}  // namespace
}  // namespace strata::config
