#include "cli/serve_config.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <fmt/format.h>

#include "util/utf8.h"

namespace strata::cli {
namespace {

using config::Reload;
using config::Type;

// What a knob says besides its key, flag and field.
struct Meta {
  std::string unit{};
  std::optional<double> min{}, max{};
  bool min_exclusive = false, max_exclusive = false;
  std::vector<std::string> choices{};
  Reload reload = Reload::kRestart;
};
constexpr Reload kLive = Reload::kLive;

// TOML's basic string: JSON's escapes are TOML's, but for DEL, which TOML
// escapes too. A value that is not UTF-8 (a flag can hold any bytes) is
// shown as such: TOML cannot carry it.
std::string TomlString(std::string_view s) {
  std::string out;
  if (!util::AppendJsonString(out, s)) return "\"(not UTF-8)\"";
  for (size_t at = out.find('\x7f'); at != std::string::npos; at = out.find('\x7f', at)) {
    out.replace(at, 1, "\\u007f");
  }
  return out;
}

std::string TomlList(const std::vector<std::string>& list) {
  std::string out = "[";
  for (size_t i = 0; i < list.size(); ++i) out += (i ? ", " : "") + TomlString(list[i]);
  return out + "]";
}

std::string TomlNumber(double v) {
  // Shortest text that reads back as the same double.
  return fmt::format("{}", v);
}

template <typename T>
constexpr Type TypeOf() {
  if constexpr (std::is_same_v<T, bool>) {
    return Type::kBool;
  } else if constexpr (std::is_integral_v<T>) {
    return Type::kInt;
  } else if constexpr (std::is_floating_point_v<T>) {
    return Type::kFloat;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return Type::kString;
  } else {
    static_assert(std::is_same_v<T, std::vector<std::string>>, "a knob's field type");
    return Type::kStringList;
  }
}

config::Knob MakeKnob(std::string key, Type type, std::string flag, Meta m) {
  config::Knob k;
  k.key = std::move(key);
  k.type = type;
  k.unit = std::move(m.unit);
  k.min = m.min;
  k.max = m.max;
  k.min_exclusive = m.min_exclusive;
  k.max_exclusive = m.max_exclusive;
  k.choices = std::move(m.choices);
  k.reload = m.reload;
  k.flag = std::move(flag);
  return k;
}

// A knob over one field; `access` maps a ServeFlags to the field (it is
// only read through `get`).
template <typename Access>
ServeKnob Bind(std::string key, std::string flag, Access access, Meta m = {}) {
  using T = std::remove_reference_t<std::invoke_result_t<Access, ServeFlags&>>;
  ServeKnob out;
  out.knob = MakeKnob(std::move(key), TypeOf<T>(), flag, std::move(m));
  out.flags = {flag};
  out.set = [access](ServeFlags& f, const config::Value& v) {
    T& field = access(f);
    if constexpr (std::is_same_v<T, bool>) {
      field = v.b;
    } else if constexpr (std::is_integral_v<T>) {
      field = static_cast<T>(v.i);  // in range: the schema bounds it
    } else if constexpr (std::is_floating_point_v<T>) {
      field = v.f;
    } else if constexpr (std::is_same_v<T, std::string>) {
      field = v.s;
    } else {
      field = v.list;
    }
  };
  out.copy = [access](const ServeFlags& from, ServeFlags& to) {
    access(to) = access(const_cast<ServeFlags&>(from));  // read only
  };
  out.get = [access](const ServeFlags& f) -> std::string {
    // `access` takes a mutable ServeFlags to serve `set` too; here it is only read.
    const T& field = access(const_cast<ServeFlags&>(f));
    if constexpr (std::is_same_v<T, bool>) {
      return field ? "true" : "false";
    } else if constexpr (std::is_integral_v<T>) {
      return fmt::format("{}", field);
    } else if constexpr (std::is_floating_point_v<T>) {
      return TomlNumber(field);
    } else if constexpr (std::is_same_v<T, std::string>) {
      return TomlString(field);
    } else {
      return TomlList(field);
    }
  };
  return out;
}

// A comma-separated flag (--l3-tenants, --snapshot-tenants) is an array in
// the file; `access` maps a ServeFlags to the flag's string.
template <typename Access>
ServeKnob CommaList(std::string key, std::string flag, Access access, Meta m = {}) {
  ServeKnob out;
  out.knob = MakeKnob(std::move(key), Type::kStringList, flag, std::move(m));
  out.flags = {flag};
  out.set = [access](ServeFlags& f, const config::Value& v) {
    std::string joined;
    for (const std::string& t : v.list) joined += (joined.empty() ? "" : ",") + t;
    access(f) = joined;
  };
  out.copy = [access](const ServeFlags& from, ServeFlags& to) {
    access(to) = access(const_cast<ServeFlags&>(from));  // read only
  };
  out.get = [access](const ServeFlags& f) {
    std::vector<std::string> list;
    const std::string& s = access(const_cast<ServeFlags&>(f));  // read only
    size_t start = 0;
    while (start < s.size()) {
      const size_t comma = s.find(',', start);
      const std::string t = s.substr(start, comma == std::string::npos ? comma : comma - start);
      if (!t.empty()) list.push_back(t);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return TomlList(list);
  };
  return out;
}

// [[backend]] tables: the paired --backend, --backend-name, --backend-model
// and --backend-key-file flags, one table per backend.
ServeKnob Backends() {
  ServeKnob out;
  out.knob = MakeKnob("backend", Type::kTables, "--backend", {});
  out.knob.help =
      "A model server to serve, with its replicas (--backend KIND:URL[,URL...] and the "
      "--backend-name, --backend-model and --backend-key-file of the same position). Without "
      "model.path only these are served. Changing them needs a restart.";
  auto field = [](std::string key, Type type, std::string help, bool required,
                  std::vector<std::string> choices = {}) {
    config::Knob k;
    k.key = std::move(key);
    k.type = type;
    k.help = std::move(help);
    k.required = required;
    k.choices = std::move(choices);
    return k;
  };
  out.knob.fields = {
      field("kind", Type::kString, "The upstream's API.", true, {"openai", "anthropic"}),
      field("urls", Type::kStringList, "Its replicas' base URLs (http:// or https://).", true),
      field("name", Type::kString,
            "The model id clients use for it (listed by /v1/models; default: model).", false),
      field("model", Type::kString, "The model id sent upstream (default: name).", false),
      field("key_file", Type::kString,
            "File whose first line is its API key (default: $STRATA_BACKEND_KEY).", false),
  };
  out.flags = {"--backend", "--backend-name", "--backend-model", "--backend-key-file"};
  out.set = [](ServeFlags& f, const config::Value& v) {
    BackendFlags& b = f.backends;
    b.specs.clear();
    b.names.clear();
    b.models.clear();
    b.key_files.clear();
    for (const config::Table& t : v.tables) {
      std::string spec = t.Get("kind") ? t.Get("kind")->s + ":" : ":";
      if (const config::Value* urls = t.Get("urls")) {
        for (size_t i = 0; i < urls->list.size(); ++i) spec += (i ? "," : "") + urls->list[i];
      }
      b.specs.push_back(spec);
      b.names.push_back(t.Get("name") ? t.Get("name")->s : "");
      b.models.push_back(t.Get("model") ? t.Get("model")->s : "");
      b.key_files.push_back(t.Get("key_file") ? t.Get("key_file")->s : "");
    }
  };
  out.copy = [](const ServeFlags& from, ServeFlags& to) {
    to.backends.specs = from.backends.specs;
    to.backends.names = from.backends.names;
    to.backends.models = from.backends.models;
    to.backends.key_files = from.backends.key_files;
  };
  out.get = [](const ServeFlags& f) {
    const BackendFlags& b = f.backends;
    std::string text;
    for (size_t i = 0; i < b.specs.size(); ++i) {
      auto at = [i](const std::vector<std::string>& v) { return i < v.size() ? v[i] : ""; };
      text += fmt::format("[[backend]] spec = {} name = {} model = {} key_file = {}\n",
                          TomlString(b.specs[i]), TomlString(at(b.names)), TomlString(at(b.models)),
                          TomlString(at(b.key_files)));
    }
    return text;
  };
  return out;
}

std::vector<ServeKnob> MakeServeKnobs() {
  const std::vector<std::string> kOnOff = {"on", "off"};
  std::vector<ServeKnob> k;
  // [model]
  k.push_back(Bind(
      "model.path", "--model", [](ServeFlags & f) -> auto& { return f.model; }));
  k.push_back(Bind(
      "model.dir", "--models", [](ServeFlags & f) -> auto& { return f.models_dir; }));
  k.push_back(Bind(
      "model.memory", "--models-memory", [](ServeFlags & f) -> auto& { return f.models_memory; }));
  k.push_back(Bind(
      "model.preload", "--preload", [](ServeFlags & f) -> auto& { return f.preload; }));
  k.push_back(Bind("model.numa", "--numa", [](ServeFlags & f) -> auto& { return f.numa; },
                   {.choices = {"auto", "off"}}));
  k.push_back(Bind(
      "model.topology", "--topology", [](ServeFlags & f) -> auto& { return f.topology; }));
  k.push_back(Bind(
      "model.aliases", "--alias", [](ServeFlags & f) -> auto& { return f.aliases; }));
  k.push_back(Bind(
      "model.accept_any_model", "--accept-any-model",
      [](ServeFlags & f) -> auto& { return f.accept_any_model; }));
  k.push_back(Bind("model.chat_format", "--chat-format",
                   [](ServeFlags & f) -> auto& { return f.chat_format; },
                   {.choices = {"", "plain", "chatml", "llama2", "llama3", "zephyr", "mistral",
                                "phi3", "gemma", "deepseek-r1"}}));
  k.push_back(Bind(
      "model.prompt_special_tokens", "--prompt-special-tokens",
      [](ServeFlags & f) -> auto& { return f.prompt_special_tokens; }));
  // [server]
  k.push_back(Bind(
      "server.host", "--host", [](ServeFlags & f) -> auto& { return f.host; }));
  k.push_back(Bind("server.port", "--port", [](ServeFlags & f) -> auto& { return f.port; },
                   {.min = 0, .max = 65535}));
  k.push_back(Bind(
      "server.reuse_port", "--reuse-port",
      [](ServeFlags & f) -> auto& { return f.http.reuse_port; }));
  k.push_back(Bind("server.io_threads", "--io-threads",
                   [](ServeFlags & f) -> auto& { return f.http.io_threads; },
                   {.unit = "threads", .min = 1, .max = 256}));
  k.push_back(Bind("server.http_threads", "--http-threads",
                   [](ServeFlags & f) -> auto& { return f.http.http_threads; },
                   {.unit = "threads", .min = 1, .max = 4096}));
  k.push_back(Bind("server.max_queued_requests", "--max-queued-requests",
                   [](ServeFlags & f) -> auto& { return f.http.max_queued_requests; },
                   {.unit = "requests", .min = 1, .max = 1e6}));
  k.push_back(Bind("server.timeout", "--timeout",
                   [](ServeFlags & f) -> auto& { return f.timeout_s; },
                   {.unit = "s", .min = 1, .max = 30 * 86400, .reload = kLive}));
  k.push_back(Bind("server.grace", "--grace", [](ServeFlags & f) -> auto& { return f.grace_s; },
                   {.unit = "s", .min = 0, .max = 86400}));
  k.push_back(Bind("server.policy_ramp", "--policy-ramp-s",
                   [](ServeFlags & f) -> auto& { return f.policy_ramp_s; },
                   {.unit = "s", .min = 0, .max = 86400, .reload = kLive}));
  k.push_back(Bind(
      "server.cors_origins", "--cors-origin",
      [](ServeFlags & f) -> auto& { return f.http.cors_origins; }));
  // [auth]
  k.push_back(Bind("auth.api_keys_file", "--api-keys",
                   [](ServeFlags & f) -> auto& { return f.api_keys; }, {.reload = kLive}));
  k.push_back(Bind(
      "cache.warm_from", "--warm-from", [](ServeFlags & f) -> auto& { return f.warm_from; }));
  k.push_back(Bind("auth.admin_key_file", "--admin-key-file",
                   [](ServeFlags & f) -> auto& { return f.admin_key_file; }, {.reload = kLive}));
  // [log]
  k.push_back(Bind("log.level", "--log-level", [](ServeFlags & f) -> auto& { return f.log_level; },
                   {.choices = {"debug", "info", "warn", "error", "off"}, .reload = kLive}));
  // [limits]
  k.push_back(Bind("limits.max_tokens_cap", "--max-tokens-cap",
                   [](ServeFlags & f) -> auto& { return f.max_tokens_cap; },
                   {.unit = "tokens", .min = 1, .max = 1 << 24, .reload = kLive}));
  k.push_back(Bind("limits.max_embedding_inputs", "--max-embedding-inputs",
                   [](ServeFlags & f) -> auto& { return f.max_embedding_inputs; },
                   {.unit = "inputs", .min = 1, .max = 65536, .reload = kLive}));
  k.push_back(Bind("limits.body_bytes", "--body-limit",
                   [](ServeFlags & f) -> auto& { return f.http.body_limit; },
                   {.unit = "bytes", .min = 1024, .max = 1 << 30}));
  k.push_back(Bind("limits.max_inflate_ratio", "--max-inflate-ratio",
                   [](ServeFlags & f) -> auto& { return f.http.max_inflate_ratio; },
                   {.min = 1, .max = 1e6}));
  k.push_back(Bind("limits.request_line_bytes", "--max-request-line",
                   [](ServeFlags & f) -> auto& { return f.http.max_request_line; },
                   {.unit = "bytes", .min = 64, .max = 1 << 20}));
  k.push_back(Bind("limits.header_bytes", "--max-header-bytes",
                   [](ServeFlags & f) -> auto& { return f.http.max_header_bytes; },
                   {.unit = "bytes", .min = 1024, .max = 16 << 20}));
  k.push_back(Bind("limits.header_fields", "--max-header-fields",
                   [](ServeFlags & f) -> auto& { return f.http.max_header_fields; },
                   {.unit = "fields", .min = 1, .max = 10000}));
  k.push_back(Bind("limits.header_timeout", "--header-timeout",
                   [](ServeFlags & f) -> auto& { return f.http.header_timeout_s; },
                   {.unit = "s", .min = 0.001, .max = 86400}));
  k.push_back(Bind("limits.body_timeout", "--body-timeout",
                   [](ServeFlags & f) -> auto& { return f.http.body_timeout_s; },
                   {.unit = "s", .min = 0.001, .max = 86400}));
  k.push_back(Bind("limits.idle_timeout", "--idle-timeout",
                   [](ServeFlags & f) -> auto& { return f.http.idle_timeout_s; },
                   {.unit = "s", .min = 0.001, .max = 86400}));
  k.push_back(Bind("limits.write_stall_timeout", "--write-stall-timeout",
                   [](ServeFlags & f) -> auto& { return f.http.write_stall_timeout_s; },
                   {.unit = "s", .min = 0.001, .max = 86400}));
  k.push_back(Bind("limits.buffered_output_bytes", "--max-buffered-output",
                   [](ServeFlags & f) -> auto& { return f.http.max_buffered_output; },
                   {.unit = "bytes", .min = 4096, .max = 1 << 30}));
  k.push_back(Bind("limits.connections", "--max-connections",
                   [](ServeFlags & f) -> auto& { return f.http.max_connections; },
                   {.unit = "connections", .min = 1, .max = 1e6}));
  k.push_back(Bind("limits.connections_per_client", "--max-connections-per-client",
                   [](ServeFlags & f) -> auto& { return f.http.max_connections_per_client; },
                   {.unit = "connections", .min = 1, .max = 1e6}));
  // [engine]
  k.push_back(Bind("engine.threads", "--threads", [](ServeFlags & f) -> auto& { return f.threads; },
                   {.unit = "threads", .min = 1, .max = 256}));
  k.push_back(Bind("engine.ctx", "--ctx", [](ServeFlags & f) -> auto& { return f.ctx; },
                   {.unit = "tokens", .min = 16, .max = 1 << 24}));
  k.push_back(Bind("engine.kv_tokens", "--kv-tokens",
                   [](ServeFlags & f) -> auto& { return f.kv_tokens; },
                   {.unit = "tokens", .min = 0, .max = 1 << 30}));
  k.push_back(Bind("engine.kv_type", "--kv-type", [](ServeFlags & f) -> auto& { return f.kv_type; },
                   {.choices = {"f32", "f16", "q8_0"}}));
  k.push_back(Bind("engine.kv_pressure", "--kv-pressure",
                   [](ServeFlags & f) -> auto& { return f.kv_pressure; },
                   {.min = 0, .max = 1, .max_exclusive = true}));
  k.push_back(Bind("engine.kv_min_grant", "--kv-min-grant",
                   [](ServeFlags & f) -> auto& { return f.kv_min_grant; },
                   {.unit = "tokens", .min = 1, .max = 1 << 20}));
  k.push_back(Bind("engine.repack", "--repack", [](ServeFlags & f) -> auto& { return f.repack; },
                   {.choices = {"auto", "on", "off"}}));
  k.push_back(Bind("engine.parallel", "--parallel",
                   [](ServeFlags & f) -> auto& { return f.parallel; },
                   {.unit = "requests", .min = 1, .max = 4096}));
  k.push_back(Bind("engine.queue", "--queue", [](ServeFlags & f) -> auto& { return f.queue; },
                   {.unit = "requests", .min = 0, .max = 1e6}));
  k.push_back(Bind("engine.batch_tokens", "--batch-tokens",
                   [](ServeFlags & f) -> auto& { return f.batch_tokens; },
                   {.unit = "tokens", .min = 1, .max = 65536}));
  // [l1] and the response tiers' shared switches
  k.push_back(Bind("l1.bytes", "--l1-bytes", [](ServeFlags & f) -> auto& { return f.l1_bytes; },
                   {.unit = "bytes", .min = 0, .max = std::ldexp(1.0, 40)}));
  k.push_back(Bind("l1.ttl", "--l1-ttl", [](ServeFlags & f) -> auto& { return f.l1_ttl_s; },
                   {.unit = "s", .min = 0.001, .max = 30 * 86400, .reload = kLive}));
  k.push_back(Bind("l1.ttl_jitter", "--l1-ttl-jitter",
                   [](ServeFlags & f) -> auto& { return f.l1_ttl_jitter; },
                   {.min = 0, .max = 0.9, .reload = kLive}));
  k.push_back(Bind("cache.coalesce", "--coalesce",
                   [](ServeFlags & f) -> auto& { return f.coalesce; }, {.reload = kLive}));
  k.push_back(Bind("cache.admission", "--admission",
                   [](ServeFlags & f) -> auto& { return f.cache.admission; },
                   {.choices = kOnOff, .reload = kLive}));
  // [l2]
  k.push_back(Bind("l2.policy", "--l2-policy", [](ServeFlags & f) -> auto& { return f.l2_policy; },
                   {.choices = {"lru", "dual-factor", "w-tinylfu"}}));
  // [l3]
  k.push_back(Bind("l3.mode", "--l3", [](ServeFlags & f) -> auto& { return f.cache.l3; },
                   {.choices = {"off", "opt-in", "on"}, .reload = kLive}));
  k.push_back(CommaList("l3.tenants", "--l3-tenants",
                        [](ServeFlags & f) -> auto& { return f.cache.l3_tenants; },
                        {.reload = kLive}));
  k.push_back(Bind("l3.bytes", "--l3-bytes",
                   [](ServeFlags & f) -> auto& { return f.cache.l3_bytes; },
                   {.unit = "bytes", .min = 4096, .max = std::ldexp(1.0, 40)}));
  k.push_back(Bind("l3.ttl", "--l3-ttl", [](ServeFlags & f) -> auto& { return f.cache.l3_ttl_s; },
                   {.unit = "s", .min = 1, .max = 30 * 86400, .reload = kLive}));
  k.push_back(Bind("l3.similarity", "--l3-similarity",
                   [](ServeFlags & f) -> auto& { return f.cache.l3_similarity; },
                   {.min = 0, .max = 1, .min_exclusive = true, .reload = kLive}));
  // [semantic]
  k.push_back(Bind("semantic.mode", "--semantic",
                   [](ServeFlags & f) -> auto& { return f.semantic.mode; },
                   {.choices = {"off", "opt-in", "on"}, .reload = kLive}));
  k.push_back(CommaList("semantic.tenants", "--semantic-tenants",
                        [](ServeFlags & f) -> auto& { return f.semantic.tenants; },
                        {.reload = kLive}));
  k.push_back(Bind(
      "semantic.encoder", "--encoder", [](ServeFlags & f) -> auto& { return f.semantic.encoder; }));
  k.push_back(Bind("semantic.similarity", "--semantic-similarity",
                   [](ServeFlags & f) -> auto& { return f.semantic.similarity; },
                   {.min = 0.65, .max = 1, .min_exclusive = true, .reload = kLive}));
  k.push_back(Bind("semantic.entries", "--semantic-entries",
                   [](ServeFlags & f) -> auto& { return f.semantic.entries; },
                   {.min = 1, .max = std::ldexp(1.0, 26)}));
  k.push_back(Bind("semantic.ttl", "--semantic-ttl",
                   [](ServeFlags & f) -> auto& { return f.semantic.ttl_s; },
                   {.unit = "s", .min = 1, .max = 30 * 86400}));
  k.push_back(Bind("semantic.ann", "--semantic-ann",
                   [](ServeFlags & f) -> auto& { return f.semantic.ann; },
                   {.choices = {"hnsw", "ivf", "lsh", "flat"}}));
  k.push_back(Bind(
      "semantic.file", "--semantic-file", [](ServeFlags & f) -> auto& { return f.semantic.file; }));
  k.push_back(Bind("semantic.max_false_hit", "--semantic-max-false-hit",
                   [](ServeFlags & f) -> auto& { return f.semantic.max_false_hit; },
                   {.min = 0, .max = 1, .min_exclusive = true, .max_exclusive = true}));
  k.push_back(Bind("semantic.verify", "--semantic-verify",
                   [](ServeFlags & f) -> auto& { return f.semantic.verify; },
                   {.min = 0, .max = 1}));
  k.push_back(Bind("semantic.verify_min", "--semantic-verify-min",
                   [](ServeFlags & f) -> auto& { return f.semantic.verify_min; },
                   {.min = 1, .max = 1 << 18}));
  k.push_back(Bind("semantic.hit_floor", "--semantic-hit-floor",
                   [](ServeFlags & f) -> auto& { return f.semantic.hit_floor; },
                   {.min = 0, .max = 1, .max_exclusive = true}));
  k.push_back(Bind("semantic.hit_window", "--semantic-hit-window",
                   [](ServeFlags & f) -> auto& { return f.semantic.hit_window; },
                   {.min = 10, .max = 10'000'000}));
  k.push_back(Bind("semantic.encode_timeout_ms", "--semantic-encode-timeout-ms",
                   [](ServeFlags & f) -> auto& { return f.semantic.encode_timeout_ms; },
                   {.unit = "ms", .min = 1, .max = 60000}));
  // [redis]
  k.push_back(Bind(
      "redis.address", "--redis", [](ServeFlags & f) -> auto& { return f.cache.redis; }));
  k.push_back(Bind("redis.timeout_ms", "--redis-timeout-ms",
                   [](ServeFlags & f) -> auto& { return f.cache.redis_timeout_ms; },
                   {.unit = "ms", .min = 1, .max = 10000}));
  // [canary]: restart to change (the ramp's state file carries it across)
  k.push_back(Bind(
      "canary.candidate", "--canary", [](ServeFlags & f) -> auto& { return f.canary.spec; }));
  k.push_back(Bind(
      "canary.baseline", "--canary-for", [](ServeFlags & f) -> auto& { return f.canary.of; }));
  k.push_back(Bind(
      "canary.model", "--canary-model", [](ServeFlags & f) -> auto& { return f.canary.model; }));
  k.push_back(Bind(
      "canary.key_file", "--canary-key-file",
      [](ServeFlags & f) -> auto& { return f.canary.key_file; }));
  k.push_back(CommaList("canary.steps", "--canary-steps",
                        [](ServeFlags & f) -> auto& { return f.canary.steps; }, {.unit = "%"}));
  k.push_back(Bind("canary.step_time", "--canary-step-s",
                   [](ServeFlags & f) -> auto& { return f.canary.step_s; },
                   {.unit = "s", .min = 1, .max = 7 * 86400}));
  k.push_back(Bind(
      "canary.state_file", "--canary-state",
      [](ServeFlags & f) -> auto& { return f.canary.state_file; }));
  k.push_back(Bind("canary.mirror", "--canary-mirror",
                   [](ServeFlags & f) -> auto& { return f.canary.mirror; }, {.min = 0, .max = 1}));
  k.push_back(Bind("canary.min_samples", "--canary-min-samples",
                   [](ServeFlags & f) -> auto& { return f.canary.min_samples; },
                   {.min = 1, .max = 1'000'000}));
  k.push_back(Bind("canary.max_error_rate", "--canary-max-error-rate",
                   [](ServeFlags & f) -> auto& { return f.canary.max_error_rate; },
                   {.min = 0, .max = 1, .max_exclusive = true}));
  k.push_back(Bind("canary.ttft_ratio", "--canary-ttft-ratio",
                   [](ServeFlags & f) -> auto& { return f.canary.ttft_ratio; },
                   {.min = 1, .max = 100}));
  k.push_back(Bind("canary.ttft_slo", "--canary-ttft-slo",
                   [](ServeFlags & f) -> auto& { return f.canary.ttft_slo_s; },
                   {.unit = "s", .min = 0.001, .max = 3600}));
  k.push_back(Bind("canary.min_agreement", "--canary-min-agreement",
                   [](ServeFlags & f) -> auto& { return f.canary.min_agreement; },
                   {.min = 0, .max = 1, .min_exclusive = true}));
  // [rt]
  k.push_back(Bind("rt.switcher", "--rt-switcher",
                   [](ServeFlags & f) -> auto& { return f.rt_switcher; }, {.choices = kOnOff}));
  k.push_back(Bind("rt.levels", "--rt-levels", [](ServeFlags & f) -> auto& { return f.rt_levels; },
                   {.reload = kLive}));
  k.push_back(Bind("rt.interval", "--rt-interval",
                   [](ServeFlags & f) -> auto& { return f.rt_interval_s; },
                   {.unit = "s", .min = 0.01, .max = 3600, .reload = kLive}));
  k.push_back(Bind("rt.window", "--rt-window", [](ServeFlags & f) -> auto& { return f.rt_window; },
                   {.unit = "intervals", .min = 2, .max = 100000, .reload = kLive}));
  k.push_back(Bind("rt.ttft_floor", "--rt-ttft-floor",
                   [](ServeFlags & f) -> auto& { return f.rt_ttft_floor_s; },
                   {.unit = "s", .min = 0, .max = 86400, .reload = kLive}));
  k.push_back(Bind("rt.ttft_slo", "--rt-ttft-slo",
                   [](ServeFlags & f) -> auto& { return f.rt_ttft_slo_s; },
                   {.unit = "s", .min = 0, .max = 86400, .reload = kLive}));
  k.push_back(Bind("rt.tpot_floor", "--rt-tpot-floor",
                   [](ServeFlags & f) -> auto& { return f.rt_tpot_floor_s; },
                   {.unit = "s", .min = 0, .max = 86400, .reload = kLive}));
  k.push_back(Bind("rt.tpot_slo", "--rt-tpot-slo",
                   [](ServeFlags & f) -> auto& { return f.rt_tpot_slo_s; },
                   {.unit = "s", .min = 0, .max = 86400, .reload = kLive}));
  k.push_back(Bind("rt.breach", "--rt-breach", [](ServeFlags & f) -> auto& { return f.rt_breach; },
                   {.unit = "intervals", .min = 1, .max = 1e6, .reload = kLive}));
  k.push_back(Bind("rt.calm", "--rt-calm", [](ServeFlags & f) -> auto& { return f.rt_calm; },
                   {.unit = "intervals", .min = 1, .max = 1e6, .reload = kLive}));
  k.push_back(Bind("rt.dwell", "--rt-dwell", [](ServeFlags & f) -> auto& { return f.rt_dwell_s; },
                   {.unit = "s", .min = 0, .max = 86400, .reload = kLive}));
  k.push_back(Bind("rt.kv_pressure", "--rt-kv-pressure",
                   [](ServeFlags & f) -> auto& { return f.rt_kv_pressure; },
                   {.min = 0, .max = 1, .max_exclusive = true, .reload = kLive}));
  k.push_back(Bind("rt.fallback", "--rt-fallback",
                   [](ServeFlags & f) -> auto& { return f.rt_fallback; }, {.reload = kLive}));
  // [upstream]: what every remote backend shares
  k.push_back(Bind("upstream.routing", "--backend-routing",
                   [](ServeFlags & f) -> auto& { return f.backends.routing; },
                   {.choices = {"affinity", "round-robin", "least-loaded"}, .reload = kLive}));
  k.push_back(Bind("upstream.max_concurrency", "--backend-max-concurrency",
                   [](ServeFlags & f) -> auto& { return f.backends.max_concurrency; },
                   {.unit = "requests", .min = 0, .max = 1 << 20, .reload = kLive}));
  k.push_back(Bind("upstream.retries", "--backend-retries",
                   [](ServeFlags & f) -> auto& { return f.backends.retries; },
                   {.min = 0, .max = 9, .reload = kLive}));
  k.push_back(Bind("upstream.connect_timeout", "--backend-connect-timeout",
                   [](ServeFlags & f) -> auto& { return f.backends.connect_timeout_s; },
                   {.unit = "s", .min = 0.001, .max = 86400}));
  k.push_back(Bind("upstream.first_byte_timeout", "--backend-first-byte-timeout",
                   [](ServeFlags & f) -> auto& { return f.backends.first_byte_timeout_s; },
                   {.unit = "s", .min = 0.001, .max = 86400, .reload = kLive}));
  k.push_back(Bind("upstream.idle_timeout", "--backend-idle-timeout",
                   [](ServeFlags & f) -> auto& { return f.backends.idle_timeout_s; },
                   {.unit = "s", .min = 0.001, .max = 86400}));
  k.push_back(Bind("upstream.total_timeout", "--backend-total-timeout",
                   [](ServeFlags & f) -> auto& { return f.backends.total_timeout_s; },
                   {.unit = "s", .min = 0.001, .max = 86400, .reload = kLive}));
  k.push_back(Bind("upstream.eject_after", "--backend-eject-after",
                   [](ServeFlags & f) -> auto& { return f.backends.eject_after; },
                   {.unit = "failures", .min = 1, .max = 1000, .reload = kLive}));
  k.push_back(Bind("upstream.eject_time", "--backend-eject-time",
                   [](ServeFlags & f) -> auto& { return f.backends.eject_s; },
                   {.unit = "s", .min = 0.001, .max = 120, .reload = kLive}));
  k.push_back(Bind(
      "upstream.health_path", "--backend-health-path",
      [](ServeFlags & f) -> auto& { return f.backends.health_path; }));
  k.push_back(Bind("upstream.health_interval", "--backend-health-interval",
                   [](ServeFlags & f) -> auto& { return f.backends.health_interval_s; },
                   {.unit = "s", .min = 0, .max = 3600}));
  k.push_back(Bind("upstream.affinity_bytes", "--backend-affinity-bytes",
                   [](ServeFlags & f) -> auto& { return f.backends.affinity_bytes; },
                   {.unit = "bytes", .min = 16, .max = 1 << 20, .reload = kLive}));
  k.push_back(Bind("upstream.load_bound", "--backend-load-bound",
                   [](ServeFlags & f) -> auto& { return f.backends.load_bound; },
                   {.min = 1, .max = 100, .reload = kLive}));
  k.push_back(Bind("upstream.affinity_floor", "--backend-affinity-floor",
                   [](ServeFlags & f) -> auto& { return f.backends.affinity_floor; },
                   {.unit = "requests", .min = 1, .max = 1 << 20, .reload = kLive}));
  k.push_back(Bind("upstream.max_answer_bytes", "--backend-max-answer-bytes",
                   [](ServeFlags & f) -> auto& { return f.backends.max_answer_bytes; },
                   {.unit = "bytes", .min = 65536, .max = 1 << 30, .reload = kLive}));
  k.push_back(Bind(
      "upstream.cache_system", "--backend-cache-system",
      [](ServeFlags & f) -> auto& { return f.backends.cache_system; }));
  k.push_back(Bind("upstream.io_threads", "--backend-io-threads",
                   [](ServeFlags & f) -> auto& { return f.backends.io_threads; },
                   {.unit = "threads", .min = 1, .max = 64}));
  k.push_back(Bind(
      "upstream.ca_file", "--backend-ca-file",
      [](ServeFlags & f) -> auto& { return f.backends.ca_file; }));
  k.push_back(Bind(
      "upstream.insecure_skip_verify", "--backend-insecure-skip-verify",
      [](ServeFlags & f) -> auto& { return f.backends.insecure_skip_verify; }));
  // [traces]: OpenTelemetry export
  k.push_back(Bind(
      "traces.otlp_endpoint", "--otlp-endpoint",
      [](ServeFlags & f) -> auto& { return f.trace.otlp_endpoint; }));
  k.push_back(Bind("traces.sample", "--trace-sample",
                   [](ServeFlags & f) -> auto& { return f.trace.trace_sample; },
                   {.min = 0, .max = 1, .reload = kLive}));
  k.push_back(Bind("traces.timeout_ms", "--otlp-timeout-ms",
                   [](ServeFlags & f) -> auto& { return f.trace.otlp_timeout_ms; },
                   {.unit = "ms", .min = 100, .max = 600000}));
  k.push_back(Bind("traces.interval_ms", "--otlp-interval-ms",
                   [](ServeFlags & f) -> auto& { return f.trace.otlp_interval_ms; },
                   {.unit = "ms", .min = 1, .max = 60000}));
  k.push_back(Bind("traces.batch_spans", "--otlp-batch-spans",
                   [](ServeFlags & f) -> auto& { return f.trace.otlp_batch_spans; },
                   {.unit = "spans", .min = 1, .max = 8192}));
  k.push_back(Bind("traces.queue_spans", "--otlp-queue-spans",
                   [](ServeFlags & f) -> auto& { return f.trace.otlp_queue_spans; },
                   {.unit = "spans", .min = 1, .max = 1 << 20}));
  k.push_back(Bind(
      "traces.headers_file", "--otlp-headers-file",
      [](ServeFlags & f) -> auto& { return f.trace.otlp_headers_file; }));
  k.push_back(Bind(
      "traces.service_name", "--otlp-service-name",
      [](ServeFlags & f) -> auto& { return f.trace.otlp_service_name; }));
  // [audit] and [watermark]: compliance (restart: the log is a file the
  // server holds open, its chain continued)
  k.push_back(Bind(
      "audit.log", "--audit-log", [](ServeFlags & f) -> auto& { return f.audit.audit_log; }));
  k.push_back(Bind(
      "audit.key_file", "--audit-key-file",
      [](ServeFlags & f) -> auto& { return f.audit.audit_key_file; }));
  k.push_back(Bind(
      "audit.tokens", "--audit-tokens",
      [](ServeFlags & f) -> auto& { return f.audit.audit_tokens; }));
  k.push_back(Bind(
      "audit.fail_closed", "--audit-fail-closed",
      [](ServeFlags & f) -> auto& { return f.audit.audit_fail_closed; }));
  k.push_back(Bind("audit.max_file_bytes", "--audit-max-file-bytes",
                   [](ServeFlags & f) -> auto& { return f.audit.audit_max_file_bytes; },
                   {.unit = "bytes", .min = 4096, .max = std::ldexp(1.0, 40)}));
  k.push_back(Bind("audit.sync_ms", "--audit-sync-ms",
                   [](ServeFlags & f) -> auto& { return f.audit.audit_sync_ms; },
                   {.unit = "ms", .min = 1, .max = 60000}));
  k.push_back(Bind("audit.sync_records", "--audit-sync-records",
                   [](ServeFlags & f) -> auto& { return f.audit.audit_sync_records; },
                   {.unit = "records", .min = 1, .max = 1e6}));
  k.push_back(Bind("audit.queue", "--audit-queue",
                   [](ServeFlags & f) -> auto& { return f.audit.audit_queue; },
                   {.unit = "records", .min = 16, .max = 1e7}));
  k.push_back(Bind("audit.checkpoint_records", "--audit-checkpoint-records",
                   [](ServeFlags & f) -> auto& { return f.audit.audit_checkpoint_records; },
                   {.unit = "records", .min = 1, .max = 1e9}));
  k.push_back(Bind("audit.checkpoint_s", "--audit-checkpoint-s",
                   [](ServeFlags & f) -> auto& { return f.audit.audit_checkpoint_s; },
                   {.unit = "s", .min = 1, .max = 86400}));
  k.push_back(Bind(
      "watermark.key_file", "--watermark-key-file",
      [](ServeFlags & f) -> auto& { return f.audit.watermark_key_file; }));
  // [snapshots]: encrypted request snapshots (restart: the store and its writer)
  k.push_back(Bind(
      "snapshots.dir", "--snapshots", [](ServeFlags & f) -> auto& { return f.snapshots.dir; }));
  k.push_back(Bind(
      "snapshots.key_file", "--snapshot-key-file",
      [](ServeFlags & f) -> auto& { return f.snapshots.key_file; }));
  k.push_back(Bind("snapshots.retention", "--snapshot-retention",
                   [](ServeFlags & f) -> auto& { return f.snapshots.retention; },
                   {.unit = "s, or a number with s, m, h or d"}));
  k.push_back(Bind("snapshots.max_bytes", "--snapshot-max-bytes",
                   [](ServeFlags & f) -> auto& { return f.snapshots.max_bytes; },
                   {.unit = "bytes", .min = std::ldexp(1.0, 20), .max = std::ldexp(1.0, 50)}));
  k.push_back(CommaList(
      "snapshots.tenants", "--snapshot-tenants",
      [](ServeFlags & f) -> auto& { return f.snapshots.tenants; }));
  k.push_back(Bind("snapshots.queue", "--snapshot-queue",
                   [](ServeFlags & f) -> auto& { return f.snapshots.queue; },
                   {.unit = "snapshots", .min = 1, .max = 65536}));
  // [sessions]: durable sessions (restart: the store)
  k.push_back(Bind(
      "sessions.store", "--sessions", [](ServeFlags & f) -> auto& { return f.sessions.store; }));
  k.push_back(Bind("sessions.max_turns", "--session-max-turns",
                   [](ServeFlags & f) -> auto& { return f.sessions.max_turns; },
                   {.unit = "turns", .min = 1, .max = 1e6}));
  k.push_back(Bind("sessions.max_bytes", "--session-max-bytes",
                   [](ServeFlags & f) -> auto& { return f.sessions.max_bytes; },
                   {.unit = "bytes", .min = 1024, .max = std::ldexp(1.0, 32)}));
  k.push_back(Bind("sessions.per_tenant", "--sessions-per-tenant",
                   [](ServeFlags & f) -> auto& { return f.sessions.max_per_tenant; },
                   {.unit = "sessions", .min = 1, .max = 1e9}));
  k.push_back(Bind("sessions.ttl", "--session-ttl",
                   [](ServeFlags & f) -> auto& { return f.sessions.ttl; },
                   {.unit = "s, or a number with s, m, h or d; 0 = never"}));
  k.push_back(Bind("sessions.dependency_wait_ms", "--session-dependency-wait-ms",
                   [](ServeFlags & f) -> auto& { return f.sessions.dependency_wait_ms; },
                   {.unit = "ms", .min = 0, .max = 60000}));
  k.push_back(Bind("sessions.replicas", "--session-replicas",
                   [](ServeFlags & f) -> auto& { return f.sessions.replicas; },
                   {.unit = "replicas; -1 = a majority", .min = -1, .max = 15}));
  k.push_back(Bind("sessions.replica_wait_ms", "--session-replica-wait-ms",
                   [](ServeFlags & f) -> auto& { return f.sessions.replica_wait_ms; },
                   {.unit = "ms", .min = 1, .max = 60000}));
  k.push_back(Bind("sessions.redis_timeout_ms", "--session-redis-timeout-ms",
                   [](ServeFlags & f) -> auto& { return f.sessions.redis_timeout_ms; },
                   {.unit = "ms", .min = 1, .max = 60000}));
  k.push_back(Backends());
  return k;
}

}  // namespace

const std::vector<ServeKnob>& ServeKnobs() {
  static const std::vector<ServeKnob> knobs = MakeServeKnobs();  // immutable once built
  return knobs;
}

config::Schema ServeSchema(const CLI::App& serve) {
  const ServeFlags defaults;
  std::vector<config::Knob> knobs;
  for (const ServeKnob& k : ServeKnobs()) {
    config::Knob knob = k.knob;
    if (knob.help.empty()) {
      if (const CLI::Option* o = serve.get_option_no_throw(k.flags.front())) {
        knob.help = o->get_description();
      }
    }
    if (knob.type != Type::kTables) {
      const std::string value = k.get(defaults);
      // A string or list with nothing in it is no default: written commented out.
      if (value != "\"\"" && value != "[]") knob.default_toml = value;
    }
    knobs.push_back(std::move(knob));
  }
  return config::Schema(std::move(knobs));
}

config::Schema ServeFileSchema() {
  std::vector<config::Knob> knobs;
  for (const ServeKnob& k : ServeKnobs()) knobs.push_back(k.knob);
  return config::Schema(std::move(knobs));
}

std::set<std::string> GivenFlags(const CLI::App& serve) {
  std::set<std::string> given;
  for (const ServeKnob& k : ServeKnobs()) {
    for (const std::string& flag : k.flags) {
      const CLI::Option* o = serve.get_option_no_throw(flag);
      if (o != nullptr && o->count() > 0) given.insert(flag);
    }
  }
  return given;
}

void ApplyConfig(const config::Document& doc, const std::set<std::string>& given,
                 ServeFlags& flags) {
  for (const ServeKnob& k : ServeKnobs()) {
    const config::Value* v = doc.Get(k.knob.key);
    if (v == nullptr) continue;
    const bool overridden = std::any_of(k.flags.begin(), k.flags.end(),
                                        [&](const std::string& f) { return given.count(f) > 0; });
    if (!overridden) k.set(flags, *v);
  }
}

std::vector<const ServeKnob*> ChangedKnobs(const ServeFlags& a, const ServeFlags& b) {
  std::vector<const ServeKnob*> out;
  for (const ServeKnob& k : ServeKnobs()) {
    if (k.get(a) != k.get(b)) out.push_back(&k);
  }
  return out;
}

std::string InConfigTerms(std::string message, const std::set<std::string>& keep) {
  // Longest flags first, so "--rt-ttft-slo" is not read as "--rt-ttft".
  std::vector<std::pair<std::string, std::string>> names;
  for (const ServeKnob& k : ServeKnobs()) {
    for (const std::string& flag : k.flags) {
      if (!keep.count(flag)) names.emplace_back(flag, k.knob.key);
    }
  }
  std::sort(names.begin(), names.end(),
            [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
  std::string out;
  size_t i = 0;
  while (i < message.size()) {
    bool replaced = false;
    if (message.compare(i, 2, "--") == 0) {
      for (const auto& [flag, key] : names) {
        if (message.compare(i, flag.size(), flag) != 0) continue;
        // A whole flag only: "--l1-ttl" is not the start of "--l1-ttl-jitter".
        const size_t end = i + flag.size();
        const bool boundary =
            end == message.size() ||
            !(std::isalnum(static_cast<unsigned char>(message[end])) || message[end] == '-');
        if (boundary) {
          out += key;
          i = end;
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out += message[i++];
  }
  return out;
}

util::StatusOr<config::Document> ReadConfigFile(const Env& env, const std::string& path,
                                                const config::Schema& schema) {
  auto text = env.fs->ReadFile(path);
  if (!text.ok()) {
    return util::InvalidArgumentError(
        fmt::format("config file '{}': {}", path, text.status().message()));
  }
  config::ParseResult r = config::Parse(*text, schema);
  if (!r.ok()) {
    std::string message = fmt::format("config file '{}' has {} problem{}:", path, r.errors.size(),
                                      r.errors.size() == 1 ? "" : "s");
    for (const config::Diagnostic& d : r.errors) {
      message += "\n  " + config::FormatDiagnostic(path, d);
    }
    return util::InvalidArgumentError(message);
  }
  return std::move(r.document);
}

}  // namespace strata::cli
