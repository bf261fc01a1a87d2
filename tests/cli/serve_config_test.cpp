// `strata serve`'s knob table: every flag has a key, the defaults file is
// complete and clean, each knob's range is the one the flags enforce, and a
// file's values land in the fields the flags set.
#include "cli/serve_config.h"

#include <gtest/gtest.h>

#include <cmath>

#include "testing/mem_file_system.h"

namespace strata::cli {
namespace {

struct Fixture {
  CLI::App app;
  Command serve = RegisterServe(app);
  testing::MemFileSystem fs;
  Env env{.fs = &fs, .exe_dir = ".", .env_var = [](const std::string&) { return std::string(); }};
  config::Schema schema = ServeSchema(*serve.app);
};

const ServeKnob& KnobOf(const std::string& key) {
  for (const ServeKnob& k : ServeKnobs()) {
    if (k.knob.key == key) return k;
  }
  ADD_FAILURE() << "no knob " << key;
  return ServeKnobs().front();
}

TEST(ServeConfig, EveryFlagOfServeHasExactlyOneKnob) {
  Fixture fx;
  std::map<std::string, int> owners;
  for (const ServeKnob& k : ServeKnobs()) {
    for (const std::string& flag : k.flags) ++owners[flag];
  }
  for (const CLI::Option* o : fx.serve.app->get_options()) {
    const std::vector<std::string>& names = o->get_lnames();
    if (names.empty() || names.front() == "help" || names.front() == "config") continue;
    const std::string flag = "--" + names.front();
    EXPECT_EQ(owners[flag], 1) << flag << " has no knob (or several): add it to ServeKnobs";
  }
  for (const auto& [flag, n] : owners) {
    EXPECT_NE(fx.serve.app->get_option_no_throw(flag), nullptr) << flag << " is not a flag";
  }
}

TEST(ServeConfig, EveryKnobHasHelpAndATypedDefault) {
  Fixture fx;
  for (const config::Knob& k : fx.schema.knobs()) {
    EXPECT_FALSE(k.help.empty()) << k.key;
    EXPECT_NE(k.key.find('.') == std::string::npos && k.type != config::Type::kTables, true)
        << k.key << " should sit in a table";
  }
}

TEST(ServeConfig, TheDefaultsFileChecksCleanAndChangesNothing) {
  Fixture fx;
  const std::string text = config::RenderDefaults(fx.schema, "defaults");
  const config::ParseResult r = config::Parse(text, fx.schema);
  ASSERT_TRUE(r.ok()) << config::FormatDiagnostic("defaults", r.errors.front()) << "\n" << text;
  ServeFlags flags;
  ApplyConfig(r.document, {}, flags);
  EXPECT_TRUE(ChangedKnobs(ServeFlags(), flags).empty());
  EXPECT_TRUE(CheckServeFlags(fx.env, flags).ok());
  // Every knob with a default is set in the file, uncommented.
  for (const config::Knob& k : fx.schema.knobs()) {
    if (!k.default_toml.empty()) {
      EXPECT_NE(r.document.Get(k.key), nullptr) << k.key;
    }
  }
}

// Each knob's range is exactly what the flags accept: its bounds pass the
// whole check, one step outside fails it.
TEST(ServeConfig, KnobRangesAreTheRangesTheFlagsEnforce) {
  Fixture fx;
  for (const ServeKnob& k : ServeKnobs()) {
    const config::Knob& knob = k.knob;
    if (knob.type != config::Type::kInt && knob.type != config::Type::kFloat) continue;
    auto check = [&](double v) {
      ServeFlags flags;
      // The request line may only be as long as the header block.
      if (knob.key == "limits.request_line_bytes") flags.http.max_header_bytes = 16 << 20;
      if (knob.key == "limits.header_bytes") flags.http.max_request_line = 64;
      // Tracing knobs mean something only with a collector; a batch fits the queue.
      if (knob.key.rfind("traces.", 0) == 0) flags.trace.otlp_endpoint = "http://127.0.0.1:4318";
      if (knob.key == "traces.batch_spans") flags.trace.otlp_queue_spans = 1 << 20;
      if (knob.key == "traces.queue_spans") flags.trace.otlp_batch_spans = 1;
      if (knob.key.rfind("audit.", 0) == 0) flags.audit.audit_log = "audit.log";
      if (knob.key.rfind("snapshots.", 0) == 0) {
        flags.snapshots.dir = "snapshots";
        flags.snapshots.key_file = "snapshot.key";
      }
      config::Value value;
      value.type = knob.type;
      value.i = static_cast<int64_t>(v);
      value.f = v;
      k.set(flags, value);
      return CheckServeFlags(fx.env, flags);
    };
    const bool is_int = knob.type == config::Type::kInt;
    if (knob.min) {
      if (!knob.min_exclusive) {
        EXPECT_TRUE(check(*knob.min).ok()) << knob.key << " at its min";
      }
      const double below = knob.min_exclusive
                               ? *knob.min
                               : (is_int ? *knob.min - 1 : std::nextafter(*knob.min, -INFINITY));
      // An unsigned field cannot hold a value below 0 (the file's own check refuses it).
      if (!(below < 0 && knob.min == 0.0 && k.get(ServeFlags()).find('-') == std::string::npos &&
            knob.key.find("bytes") != std::string::npos)) {
        EXPECT_FALSE(check(below).ok()) << knob.key << " below its min (" << below << ")";
      }
    }
    if (knob.max) {
      if (!knob.max_exclusive) {
        EXPECT_TRUE(check(*knob.max).ok()) << knob.key << " at its max";
      }
      const double above = knob.max_exclusive
                               ? *knob.max
                               : (is_int ? *knob.max + 1 : std::nextafter(*knob.max, INFINITY));
      EXPECT_FALSE(check(above).ok()) << knob.key << " above its max (" << above << ")";
    }
  }
}

TEST(ServeConfig, TheFileSetsTheFlagsFields) {
  Fixture fx;
  const config::ParseResult r = config::Parse(R"(
[l1]
ttl = 12.5
[l3]
mode = "on"
tenants = ["a", "b"]
[engine]
parallel = 3
[server]
cors_origins = ["*"]
[cache]
coalesce = false
[[backend]]
kind = "openai"
urls = ["http://x:1", "http://y:1"]
name = "big"
[[backend]]
kind = "anthropic"
urls = ["https://api.example"]
key_file = "a.key"
)",
                                              fx.schema);
  ASSERT_TRUE(r.ok()) << config::FormatDiagnostic("f", r.errors.front());
  ServeFlags f;
  ApplyConfig(r.document, {}, f);
  EXPECT_DOUBLE_EQ(f.l1_ttl_s, 12.5);
  EXPECT_EQ(f.cache.l3, "on");
  EXPECT_EQ(f.cache.l3_tenants, "a,b");
  EXPECT_EQ(f.parallel, 3);
  EXPECT_EQ(f.http.cors_origins, std::vector<std::string>{"*"});
  EXPECT_FALSE(f.coalesce);
  EXPECT_EQ(f.backends.specs, (std::vector<std::string>{"openai:http://x:1,http://y:1",
                                                        "anthropic:https://api.example"}));
  EXPECT_EQ(f.backends.names, (std::vector<std::string>{"big", ""}));
  EXPECT_EQ(f.backends.key_files, (std::vector<std::string>{"", "a.key"}));
  EXPECT_EQ(KnobOf("l3.tenants").get(f), "[\"a\", \"b\"]");
}

TEST(ServeConfig, AFlagGivenOnTheCommandLineWinsOverTheFile) {
  Fixture fx;
  const config::ParseResult r = config::Parse(
      "[l1]\nttl = 5\nttl_jitter = 0.5\n[[backend]]\nkind = \"openai\"\n"
      "urls = [\"http://x:1\"]\nname = \"n\"\n",
      fx.schema);
  ASSERT_TRUE(r.ok());
  ServeFlags f;
  f.l1_ttl_s = 99;
  f.backends.specs = {"anthropic:http://z:1"};
  ApplyConfig(r.document, {"--l1-ttl", "--backend-name"}, f);
  EXPECT_DOUBLE_EQ(f.l1_ttl_s, 99);
  EXPECT_DOUBLE_EQ(f.l1_ttl_jitter, 0.5);
  // Any of the paired flags keeps the file's [[backend]] tables out.
  EXPECT_EQ(f.backends.specs, std::vector<std::string>{"anthropic:http://z:1"});
}

TEST(ServeConfig, GivenFlagsAreTheOnesOnTheCommandLine) {
  Fixture fx;
  std::vector<std::string> args = {"--l1-ttl", "5", "--no-coalesce", "-t", "3"};
  std::reverse(args.begin(), args.end());
  fx.serve.app->parse(args);
  const std::set<std::string> given = GivenFlags(*fx.serve.app);
  EXPECT_EQ(given, (std::set<std::string>{"--l1-ttl", "--coalesce", "--threads"}));
}

TEST(ServeConfig, ChangedKnobsNamesWhatDiffers) {
  ServeFlags a, b;
  b.l1_ttl_s = 1;
  b.backends.specs = {"openai:http://x:1"};
  std::vector<std::string> keys;
  for (const ServeKnob* k : ChangedKnobs(a, b)) keys.push_back(k->knob.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"l1.ttl", "backend"}));
  ServeFlags c;
  KnobOf("l1.ttl").copy(b, c);
  EXPECT_DOUBLE_EQ(c.l1_ttl_s, 1);
}

TEST(ServeConfig, MessagesSpeakTheFilesKeys) {
  EXPECT_EQ(InConfigTerms("--rt-ttft-slo 1 is below --rt-ttft-floor 2"),
            "rt.ttft_slo 1 is below rt.ttft_floor 2");
  EXPECT_EQ(InConfigTerms("--l1-ttl 0 is bad; --l1-ttl-jitter too", {"--l1-ttl"}),
            "--l1-ttl 0 is bad; l1.ttl_jitter too");
  EXPECT_EQ(InConfigTerms("--backend 'x' needs a --backend-name"), "backend 'x' needs a backend");
  EXPECT_EQ(InConfigTerms("no flags -- here"), "no flags -- here");
}

TEST(ServeConfig, ReadConfigFileListsEveryProblemWithItsLine) {
  Fixture fx;
  fx.fs.Put("c.toml", "[l1]\nttl = 0\nbogus = 1\n");
  auto doc = ReadConfigFile(fx.env, "c.toml", fx.schema);
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("has 2 problems"), std::string::npos);
  EXPECT_NE(doc.status().message().find("c.toml:2: l1.ttl: 0 is outside"), std::string::npos);
  EXPECT_NE(doc.status().message().find("c.toml:3: l1.bogus"), std::string::npos);
  auto missing = ReadConfigFile(fx.env, "absent.toml", fx.schema);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("absent.toml"), std::string::npos);
}

TEST(ServeConfig, TheCheckReadsTheFilesTheKnobsName) {
  Fixture fx;
  ServeFlags f;
  f.api_keys = "keys.txt";
  EXPECT_FALSE(CheckServeFlags(fx.env, f).ok());
  fx.fs.Put("keys.txt", "sk-tenant-key-1 a\n");
  EXPECT_TRUE(CheckServeFlags(fx.env, f).ok());
  f.admin_key_file = "admin.key";
  fx.fs.Put("admin.key", "short\n");
  const util::Status st = CheckServeFlags(fx.env, f);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("at least 16"), std::string::npos);
  EXPECT_EQ(st.message().find("short"), std::string::npos);  // the key is never echoed
  fx.fs.Put("admin.key", "a-long-enough-admin-key\n");
  EXPECT_TRUE(CheckServeFlags(fx.env, f).ok());
}

}  // namespace
}  // namespace strata::cli
