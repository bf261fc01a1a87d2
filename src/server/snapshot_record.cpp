// The request snapshot's JSON record (server/snapshot_record.h).
#include "server/snapshot_record.h"

#include <charconv>
#include <limits>

#include <fmt/format.h>

#include "server/internal/wire.h"

namespace strata::server {
namespace {

using util::Status;
using util::StatusOr;
using wire::Json;

// Bounds on what a record may hold, far above anything the server writes
// (its own limits are smaller): a hostile record costs bounded memory.
constexpr size_t kMaxItems = 1u << 20;  // messages, tokens, choices, ...

constexpr const char* kFormats[] = {"text", "json_object", "json_schema"};
constexpr const char* kToolModes[] = {"auto", "none", "required", "named"};
constexpr gateway::FinishReason kFinishes[] = {
    gateway::FinishReason::kEndOfTurn, gateway::FinishReason::kStopString,
    gateway::FinishReason::kLength, gateway::FinishReason::kCancelled,
    gateway::FinishReason::kToolCalls};

std::string Hex64(uint64_t v) { return fmt::format("{:016x}", v); }

Json ToolCallsJson(const std::vector<gateway::ToolCall>& calls) {
  Json a = Json::array();
  for (const auto& c : calls)
    a.push_back({{"id", c.id}, {"name", c.name}, {"arguments", c.arguments}});
  return a;
}

Json RequestJson(const gateway::CompletionRequest& r) {
  const sampling::SamplingParams& s = r.sampling;
  Json bias = Json::array();
  for (const auto& [id, b] : s.logit_bias) bias.push_back({id, b});
  Json set = Json::array();
  const backend::SamplingFieldsSet& f = r.sampling_set;
  for (const auto& [name, on] :
       {std::pair{"temperature", f.temperature}, std::pair{"top_p", f.top_p},
        std::pair{"top_k", f.top_k}, std::pair{"min_p", f.min_p},
        std::pair{"presence_penalty", f.presence_penalty},
        std::pair{"frequency_penalty", f.frequency_penalty},
        std::pair{"repetition_penalty", f.repetition_penalty}, std::pair{"seed", f.seed},
        std::pair{"strata_sampler", f.strata_sampler}, std::pair{"logit_bias", f.logit_bias}}) {
    if (on) set.push_back(name);
  }
  Json messages = Json::array();
  for (const auto& m : r.messages) {
    Json j = {{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.empty()) j["tool_calls"] = ToolCallsJson(m.tool_calls);
    if (!m.tool_call_id.empty()) j["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) j["name"] = m.name;
    if (m.is_error) j["is_error"] = true;
    messages.push_back(std::move(j));
  }
  Json tools = Json::array();
  for (const auto& t : r.tools) {
    tools.push_back(
        {{"name", t.name}, {"description", t.description}, {"parameters", t.parameters}});
  }
  Json j = {
      {"model", r.model},
      {"session_id", r.session_id},
      {"stream", r.stream},
      {"messages", std::move(messages)},
      {"prompt", r.prompt ? Json(*r.prompt) : Json(nullptr)},
      {"prompt_ids", r.prompt_ids},
      {"cache_breakpoints", r.cache_breakpoints},
      {"max_tokens", r.max_tokens ? Json(*r.max_tokens) : Json(nullptr)},
      {"sampling",
       {{"temperature", s.temperature},
        {"top_k", s.top_k},
        {"top_p", s.top_p},
        {"min_p", s.min_p},
        {"presence_penalty", s.presence_penalty},
        {"frequency_penalty", s.frequency_penalty},
        {"repetition_penalty", s.repetition_penalty},
        {"seed", std::to_string(s.seed)},
        {"typical_p", s.typical_p},
        {"target_entropy", s.target_entropy},
        {"entropy_tail_nats", s.entropy_tail_nats},
        {"mirostat", s.mirostat},
        {"mirostat_tau_bits", s.mirostat_tau_bits},
        {"mirostat_eta", s.mirostat_eta},
        {"logit_bias", std::move(bias)}}},
      {"sampling_set", std::move(set)},
      {"stop", r.stop},
      {"response_format", kFormats[static_cast<int>(r.response_format)]},
      {"json_schema",
       {{"name", r.json_schema.name},
        {"description", r.json_schema.description},
        {"schema", r.json_schema.schema},
        {"strict", r.json_schema.strict}}},
      {"tools", std::move(tools)},
      {"tool_choice",
       {{"mode", kToolModes[static_cast<int>(r.tool_choice.mode)]}, {"name", r.tool_choice.name}}},
      {"parallel_tool_calls", r.parallel_tool_calls},
      {"grammar", r.grammar},
      {"n", r.n},
      {"top_logprobs", r.top_logprobs},
      {"prefix_cache", r.prefix_cache},
      {"ignore_eos", r.ignore_eos},
      {"fixed_seed", r.fixed_seed},
      {"response_cache", r.response_cache},
      {"l3", r.l3 ? Json(*r.l3) : Json(nullptr)},
      {"semantic", r.semantic ? Json(*r.semantic) : Json(nullptr)}};
  // A session's token hint (backend::Request::prefix_tokens): only when
  // set, so snapshots without it read as before.
  if (!r.prefix_tokens.empty()) j["prefix_tokens"] = r.prefix_tokens;
  return j;
}

Json UsageJson(const gateway::Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"cached_tokens", u.cached_tokens},
          {"cache_write_tokens", u.cache_write_tokens},
          {"completion_tokens", u.completion_tokens},
          {"preemptions", u.preemptions}};
}

// --- decoding -------------------------------------------------------------------

Status Bad(const std::string& field, std::string_view what) {
  return util::DataLossError(fmt::format("snapshot record: '{}' {}", field, what));
}

// Typed access to one object's members; `prefix` names it in errors.
class Reader {
 public:
  Reader(const Json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}
  std::string Name(const char* key) const { return prefix_ + key; }
  bool Has(const char* key) const { return obj_.contains(key) && !obj_.at(key).is_null(); }

  StatusOr<const Json*> Get(const char* key, bool (Json::*is)() const noexcept,
                            const char* what) const {
    if (!obj_.contains(key)) return Bad(Name(key), "is missing");
    const Json& v = obj_.at(key);
    if (!(v.*is)()) return Bad(Name(key), fmt::format("must be {}", what));
    return &v;
  }
  StatusOr<std::string> String(const char* key) const {
    STRATA_ASSIGN_OR_RETURN(const Json* v, Get(key, &Json::is_string, "a string"));
    return v->get<std::string>();
  }
  StatusOr<bool> Bool(const char* key) const {
    STRATA_ASSIGN_OR_RETURN(const Json* v, Get(key, &Json::is_boolean, "a boolean"));
    return v->get<bool>();
  }
  StatusOr<int64_t> Int(const char* key, int64_t lo, int64_t hi) const {
    STRATA_ASSIGN_OR_RETURN(const Json* v, Get(key, &Json::is_number_integer, "an integer"));
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
      return Bad(Name(key), fmt::format("must be in [{}, {}]", lo, hi));
    }
    const int64_t i = v->get<int64_t>();
    if (i < lo || i > hi) return Bad(Name(key), fmt::format("must be in [{}, {}]", lo, hi));
    return i;
  }
  StatusOr<int32_t> Int32(const char* key, int32_t lo, int32_t hi) const {
    STRATA_ASSIGN_OR_RETURN(const int64_t v, Int(key, lo, hi));
    return static_cast<int32_t>(v);
  }
  StatusOr<float> Float(const char* key) const {
    STRATA_ASSIGN_OR_RETURN(const Json* v, Get(key, &Json::is_number, "a number"));
    const double d = v->get<double>();
    if (!(d >= -std::numeric_limits<float>::max() && d <= std::numeric_limits<float>::max())) {
      return Bad(Name(key), "must be a finite float");
    }
    return static_cast<float>(d);
  }
  // A decimal (seed) or 16-hex-digit (fingerprint) 64-bit string.
  StatusOr<uint64_t> U64(const char* key, int base) const {
    STRATA_ASSIGN_OR_RETURN(const std::string s, String(key));
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
      return Bad(Name(key), base == 16 ? "must be a hex string of a 64-bit number"
                                       : "must be a decimal string of a 64-bit number");
    }
    return v;
  }
  StatusOr<const Json*> Array(const char* key) const {
    STRATA_ASSIGN_OR_RETURN(const Json* v, Get(key, &Json::is_array, "an array"));
    if (v->size() > kMaxItems) return Bad(Name(key), "has too many items");
    return v;
  }
  StatusOr<const Json*> Object(const char* key) const {
    return Get(key, &Json::is_object, "an object");
  }
  StatusOr<std::vector<int32_t>> Ints(const char* key) const {
    STRATA_ASSIGN_OR_RETURN(const Json* a, Array(key));
    std::vector<int32_t> out;
    out.reserve(a->size());
    for (size_t i = 0; i < a->size(); ++i) {
      const Json& v = (*a)[i];
      if (!v.is_number_integer() ||
          (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX)) ||
          v.get<int64_t>() < INT32_MIN || v.get<int64_t>() > INT32_MAX) {
        return Bad(fmt::format("{}[{}]", Name(key), i), "must be a 32-bit integer");
      }
      out.push_back(static_cast<int32_t>(v.get<int64_t>()));
    }
    return out;
  }
  StatusOr<std::vector<std::string>> Strings(const char* key) const {
    STRATA_ASSIGN_OR_RETURN(const Json* a, Array(key));
    std::vector<std::string> out;
    for (size_t i = 0; i < a->size(); ++i) {
      if (!(*a)[i].is_string()) return Bad(fmt::format("{}[{}]", Name(key), i), "must be a string");
      out.push_back((*a)[i].get<std::string>());
    }
    return out;
  }
  // One of `names`: its index.
  template <size_t N>
  StatusOr<int> OneOf(const char* key, const char* const (&names)[N]) const {
    STRATA_ASSIGN_OR_RETURN(const std::string s, String(key));
    for (size_t i = 0; i < N; ++i) {
      if (s == names[i]) return static_cast<int>(i);
    }
    return Bad(Name(key), fmt::format("'{}' is not a known value", s));
  }

 private:
  const Json& obj_;
  const std::string prefix_;
};

StatusOr<std::vector<gateway::ToolCall>> DecodeToolCalls(const Json& a, const std::string& where) {
  std::vector<gateway::ToolCall> out;
  if (!a.is_array() || a.size() > kMaxItems) return Bad(where, "must be an array");
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!a[i].is_object()) return Bad(at, "must be an object");
    Reader c(a[i], at + ".");
    gateway::ToolCall call;
    STRATA_ASSIGN_OR_RETURN(call.id, c.String("id"));
    STRATA_ASSIGN_OR_RETURN(call.name, c.String("name"));
    STRATA_ASSIGN_OR_RETURN(call.arguments, c.String("arguments"));
    out.push_back(std::move(call));
  }
  return out;
}

Status DecodeSampling(const Reader& q, gateway::CompletionRequest& r) {
  STRATA_ASSIGN_OR_RETURN(const Json* sj, q.Object("sampling"));
  Reader s(*sj, "request.sampling.");
  sampling::SamplingParams& p = r.sampling;
  STRATA_ASSIGN_OR_RETURN(p.temperature, s.Float("temperature"));
  STRATA_ASSIGN_OR_RETURN(p.top_k, s.Int32("top_k", 0, INT32_MAX));
  STRATA_ASSIGN_OR_RETURN(p.top_p, s.Float("top_p"));
  STRATA_ASSIGN_OR_RETURN(p.min_p, s.Float("min_p"));
  STRATA_ASSIGN_OR_RETURN(p.presence_penalty, s.Float("presence_penalty"));
  STRATA_ASSIGN_OR_RETURN(p.frequency_penalty, s.Float("frequency_penalty"));
  STRATA_ASSIGN_OR_RETURN(p.repetition_penalty, s.Float("repetition_penalty"));
  STRATA_ASSIGN_OR_RETURN(p.seed, s.U64("seed", 10));
  STRATA_ASSIGN_OR_RETURN(p.typical_p, s.Float("typical_p"));
  STRATA_ASSIGN_OR_RETURN(p.target_entropy, s.Float("target_entropy"));
  STRATA_ASSIGN_OR_RETURN(p.entropy_tail_nats, s.Float("entropy_tail_nats"));
  STRATA_ASSIGN_OR_RETURN(p.mirostat, s.Bool("mirostat"));
  STRATA_ASSIGN_OR_RETURN(p.mirostat_tau_bits, s.Float("mirostat_tau_bits"));
  STRATA_ASSIGN_OR_RETURN(p.mirostat_eta, s.Float("mirostat_eta"));
  STRATA_ASSIGN_OR_RETURN(const Json* bias, s.Array("logit_bias"));
  for (size_t i = 0; i < bias->size(); ++i) {
    const Json& b = (*bias)[i];
    const std::string at = fmt::format("request.sampling.logit_bias[{}]", i);
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number() ||
        b[0].get<int64_t>() < 0 || b[0].get<int64_t>() > INT32_MAX) {
      return Bad(at, "must be [token id, bias]");
    }
    p.logit_bias.emplace_back(static_cast<int32_t>(b[0].get<int64_t>()), b[1].get<float>());
  }
  STRATA_ASSIGN_OR_RETURN(const std::vector<std::string> set, q.Strings("sampling_set"));
  backend::SamplingFieldsSet& f = r.sampling_set;
  for (const std::string& name : set) {
    bool* flag = name == "temperature"          ? &f.temperature
                 : name == "top_p"              ? &f.top_p
                 : name == "top_k"              ? &f.top_k
                 : name == "min_p"              ? &f.min_p
                 : name == "presence_penalty"   ? &f.presence_penalty
                 : name == "frequency_penalty"  ? &f.frequency_penalty
                 : name == "repetition_penalty" ? &f.repetition_penalty
                 : name == "seed"               ? &f.seed
                 : name == "strata_sampler"     ? &f.strata_sampler
                 : name == "logit_bias"         ? &f.logit_bias
                                                : nullptr;
    if (flag == nullptr) return Bad("request.sampling_set", fmt::format("names '{}'", name));
    *flag = true;
  }
  return util::OkStatus();
}

StatusOr<gateway::CompletionRequest> DecodeRequest(const Json& j) {
  gateway::CompletionRequest r;
  Reader q(j, "request.");
  STRATA_ASSIGN_OR_RETURN(r.model, q.String("model"));
  STRATA_ASSIGN_OR_RETURN(r.session_id, q.String("session_id"));
  STRATA_ASSIGN_OR_RETURN(r.stream, q.Bool("stream"));
  STRATA_ASSIGN_OR_RETURN(const Json* messages, q.Array("messages"));
  for (size_t i = 0; i < messages->size(); ++i) {
    const std::string at = fmt::format("request.messages[{}]", i);
    if (!(*messages)[i].is_object()) return Bad(at, "must be an object");
    Reader m((*messages)[i], at + ".");
    gateway::ChatMessage msg;
    STRATA_ASSIGN_OR_RETURN(msg.role, m.String("role"));
    STRATA_ASSIGN_OR_RETURN(msg.content, m.String("content"));
    if (m.Has("tool_calls")) {
      STRATA_ASSIGN_OR_RETURN(msg.tool_calls,
                              DecodeToolCalls((*messages)[i].at("tool_calls"), at + ".tool_calls"));
    }
    if (m.Has("tool_call_id")) {
      STRATA_ASSIGN_OR_RETURN(msg.tool_call_id, m.String("tool_call_id"));
    }
    if (m.Has("name")) {
      STRATA_ASSIGN_OR_RETURN(msg.name, m.String("name"));
    }
    if (m.Has("is_error")) {
      STRATA_ASSIGN_OR_RETURN(msg.is_error, m.Bool("is_error"));
    }
    r.messages.push_back(std::move(msg));
  }
  if (q.Has("prompt")) {
    STRATA_ASSIGN_OR_RETURN(r.prompt, q.String("prompt"));
  }
  STRATA_ASSIGN_OR_RETURN(r.prompt_ids, q.Ints("prompt_ids"));
  if (q.Has("prefix_tokens")) {
    STRATA_ASSIGN_OR_RETURN(r.prefix_tokens, q.Ints("prefix_tokens"));
  }
  STRATA_ASSIGN_OR_RETURN(r.cache_breakpoints, q.Ints("cache_breakpoints"));
  if (q.Has("max_tokens")) {
    STRATA_ASSIGN_OR_RETURN(r.max_tokens, q.Int32("max_tokens", 1, INT32_MAX));
  }
  STRATA_RETURN_IF_ERROR(DecodeSampling(q, r));
  STRATA_ASSIGN_OR_RETURN(r.stop, q.Strings("stop"));
  STRATA_ASSIGN_OR_RETURN(const int format, q.OneOf("response_format", kFormats));
  r.response_format = static_cast<gateway::ResponseFormat>(format);
  STRATA_ASSIGN_OR_RETURN(const Json* schema, q.Object("json_schema"));
  Reader js(*schema, "request.json_schema.");
  STRATA_ASSIGN_OR_RETURN(r.json_schema.name, js.String("name"));
  STRATA_ASSIGN_OR_RETURN(r.json_schema.description, js.String("description"));
  STRATA_ASSIGN_OR_RETURN(r.json_schema.schema, js.String("schema"));
  STRATA_ASSIGN_OR_RETURN(r.json_schema.strict, js.Bool("strict"));
  STRATA_ASSIGN_OR_RETURN(const Json* tools, q.Array("tools"));
  for (size_t i = 0; i < tools->size(); ++i) {
    const std::string at = fmt::format("request.tools[{}]", i);
    if (!(*tools)[i].is_object()) return Bad(at, "must be an object");
    Reader t((*tools)[i], at + ".");
    gateway::ToolDefinition def;
    STRATA_ASSIGN_OR_RETURN(def.name, t.String("name"));
    STRATA_ASSIGN_OR_RETURN(def.description, t.String("description"));
    STRATA_ASSIGN_OR_RETURN(def.parameters, t.String("parameters"));
    r.tools.push_back(std::move(def));
  }
  STRATA_ASSIGN_OR_RETURN(const Json* choice, q.Object("tool_choice"));
  Reader tc(*choice, "request.tool_choice.");
  STRATA_ASSIGN_OR_RETURN(const int mode, tc.OneOf("mode", kToolModes));
  r.tool_choice.mode = static_cast<gateway::ToolChoice::Mode>(mode);
  STRATA_ASSIGN_OR_RETURN(r.tool_choice.name, tc.String("name"));
  STRATA_ASSIGN_OR_RETURN(r.parallel_tool_calls, q.Bool("parallel_tool_calls"));
  STRATA_ASSIGN_OR_RETURN(r.grammar, q.String("grammar"));
  STRATA_ASSIGN_OR_RETURN(r.n, q.Int32("n", 1, 1 << 16));
  STRATA_ASSIGN_OR_RETURN(r.top_logprobs, q.Int32("top_logprobs", -1, 1 << 16));
  STRATA_ASSIGN_OR_RETURN(r.prefix_cache, q.Bool("prefix_cache"));
  STRATA_ASSIGN_OR_RETURN(r.ignore_eos, q.Bool("ignore_eos"));
  STRATA_ASSIGN_OR_RETURN(r.fixed_seed, q.Bool("fixed_seed"));
  STRATA_ASSIGN_OR_RETURN(r.response_cache, q.Bool("response_cache"));
  if (q.Has("l3")) {
    STRATA_ASSIGN_OR_RETURN(r.l3, q.Bool("l3"));
  }
  if (q.Has("semantic")) {
    STRATA_ASSIGN_OR_RETURN(r.semantic, q.Bool("semantic"));
  }
  return r;
}

StatusOr<gateway::Usage> DecodeUsage(const Json& j, const std::string& where) {
  if (!j.is_object()) return Bad(where, "must be an object");
  Reader u(j, where + ".");
  gateway::Usage out;
  STRATA_ASSIGN_OR_RETURN(out.prompt_tokens, u.Int32("prompt_tokens", 0, INT32_MAX));
  STRATA_ASSIGN_OR_RETURN(out.cached_tokens, u.Int32("cached_tokens", 0, INT32_MAX));
  STRATA_ASSIGN_OR_RETURN(out.cache_write_tokens, u.Int32("cache_write_tokens", 0, INT32_MAX));
  STRATA_ASSIGN_OR_RETURN(out.completion_tokens, u.Int32("completion_tokens", 0, INT32_MAX));
  STRATA_ASSIGN_OR_RETURN(out.preemptions, u.Int32("preemptions", 0, INT32_MAX));
  return out;
}

StatusOr<SnapshotRecord> Decode(const Json& j) {
  Reader top(j, "");
  STRATA_ASSIGN_OR_RETURN(const int64_t format, top.Int("format", 0, INT32_MAX));
  if (format != kSnapshotRecordVersion) {
    return util::DataLossError(
        fmt::format("snapshot record format {} is not supported (this strata reads format {})",
                    format, kSnapshotRecordVersion));
  }
  SnapshotRecord r;
  STRATA_ASSIGN_OR_RETURN(r.request_id, top.String("request_id"));
  STRATA_ASSIGN_OR_RETURN(r.tenant, top.String("tenant"));
  STRATA_ASSIGN_OR_RETURN(r.created_ms, top.Int("created_ms", 0, INT64_MAX));
  STRATA_ASSIGN_OR_RETURN(r.api, top.String("api"));
  STRATA_ASSIGN_OR_RETURN(r.endpoint, top.String("endpoint"));
  STRATA_ASSIGN_OR_RETURN(r.stream, top.Bool("stream"));
  STRATA_ASSIGN_OR_RETURN(r.strata_version, top.String("strata_version"));
  STRATA_ASSIGN_OR_RETURN(const Json* bj, top.Object("backend"));
  Reader b(*bj, "backend.");
  STRATA_ASSIGN_OR_RETURN(r.backend.name, b.String("name"));
  STRATA_ASSIGN_OR_RETURN(r.backend.kind, b.String("kind"));
  STRATA_ASSIGN_OR_RETURN(r.backend.fingerprint, b.U64("fingerprint", 16));
  STRATA_ASSIGN_OR_RETURN(r.backend.n_ctx, b.Int32("n_ctx", 0, INT32_MAX));
  if (b.Has("model")) {
    Reader m(bj->at("model"), "backend.model.");
    if (!bj->at("model").is_object()) return Bad("backend.model", "must be an object");
    if (m.Has("path")) {  // left out of what the read API shows a tenant
      STRATA_ASSIGN_OR_RETURN(r.backend.model_path, m.String("path"));
    }
    if (m.Has("sha256")) {
      STRATA_ASSIGN_OR_RETURN(r.backend.model_sha256, m.String("sha256"));
    }
    STRATA_ASSIGN_OR_RETURN(r.backend.chat_format, m.String("chat_format"));
    STRATA_ASSIGN_OR_RETURN(r.backend.prompt_special_tokens, m.Bool("prompt_special_tokens"));
    STRATA_ASSIGN_OR_RETURN(r.backend.max_tokens_cap, m.Int32("max_tokens_cap", 0, INT32_MAX));
    if (m.Has("kv_type")) {
      STRATA_ASSIGN_OR_RETURN(r.backend.kv_type, m.String("kv_type"));
    }
    if (m.Has("repack")) {
      STRATA_ASSIGN_OR_RETURN(r.backend.repack, m.String("repack"));
    }
  }
  STRATA_ASSIGN_OR_RETURN(const Json* cj, top.Object("cache"));
  Reader c(*cj, "cache.");
  STRATA_ASSIGN_OR_RETURN(r.cache, c.String("outcome"));
  if (c.Has("similarity")) {
    STRATA_ASSIGN_OR_RETURN(const Json* s, c.Get("similarity", &Json::is_number, "a number"));
    r.similarity = s->get<double>();
  }
  STRATA_ASSIGN_OR_RETURN(const Json* rj, top.Object("request"));
  STRATA_ASSIGN_OR_RETURN(r.request, DecodeRequest(*rj));
  r.request.request_id = r.request_id;
  r.request.tenant = r.tenant;
  STRATA_ASSIGN_OR_RETURN(const Json* prompts, top.Array("prompts"));
  if (prompts->empty()) return Bad("prompts", "must not be empty");
  for (size_t i = 0; i < prompts->size(); ++i) {
    const std::string at = fmt::format("prompts[{}]", i);
    if (!(*prompts)[i].is_object()) return Bad(at, "must be an object");
    Reader p((*prompts)[i], at + ".");
    SnapshotPrompt sp;
    if (p.Has("prompt")) {
      STRATA_ASSIGN_OR_RETURN(sp.prompt, p.String("prompt"));
    }
    if (p.Has("prompt_ids")) {
      STRATA_ASSIGN_OR_RETURN(sp.prompt_ids, p.Ints("prompt_ids"));
    }
    STRATA_ASSIGN_OR_RETURN(sp.tokens, p.Ints("tokens"));
    STRATA_ASSIGN_OR_RETURN(sp.text, p.String("text"));
    STRATA_ASSIGN_OR_RETURN(sp.max_tokens, p.Int32("max_tokens", 0, INT32_MAX));
    STRATA_ASSIGN_OR_RETURN(sp.stops, p.Strings("stops"));
    r.prompts.push_back(std::move(sp));
  }
  STRATA_ASSIGN_OR_RETURN(const Json* choices, top.Array("choices"));
  const int64_t expected = static_cast<int64_t>(r.prompts.size()) * r.request.n;
  if (static_cast<int64_t>(choices->size()) != expected) {
    return Bad("choices", fmt::format("has {} items; {} prompt(s) of n = {} make {}",
                                      choices->size(), r.prompts.size(), r.request.n, expected));
  }
  for (size_t i = 0; i < choices->size(); ++i) {
    const std::string at = fmt::format("choices[{}]", i);
    if (!(*choices)[i].is_object()) return Bad(at, "must be an object");
    const Json& cjson = (*choices)[i];
    Reader ch(cjson, at + ".");
    SnapshotChoice sc;
    STRATA_ASSIGN_OR_RETURN(sc.index, ch.Int32("index", 0, INT32_MAX));
    if (sc.index != static_cast<int32_t>(i)) return Bad(at + ".index", "is out of order");
    if (ch.Has("seed")) {
      STRATA_ASSIGN_OR_RETURN(sc.seed, ch.U64("seed", 10));
    }
    STRATA_ASSIGN_OR_RETURN(sc.text, ch.String("text"));
    if (ch.Has("tool_calls")) {
      STRATA_ASSIGN_OR_RETURN(sc.tool_calls,
                              DecodeToolCalls(cjson.at("tool_calls"), at + ".tool_calls"));
    }
    STRATA_ASSIGN_OR_RETURN(sc.tokens, ch.Ints("tokens"));
    STRATA_ASSIGN_OR_RETURN(const std::string finish, ch.String("finish"));
    const auto reason = ParseFinishReason(finish);
    if (!reason) return Bad(at + ".finish", fmt::format("'{}' is not a finish reason", finish));
    sc.finish = *reason;
    STRATA_ASSIGN_OR_RETURN(sc.stop_sequence, ch.String("stop_sequence"));
    if (!cjson.contains("usage")) return Bad(at + ".usage", "is missing");
    STRATA_ASSIGN_OR_RETURN(sc.usage, DecodeUsage(cjson.at("usage"), at + ".usage"));
    STRATA_ASSIGN_OR_RETURN(sc.terms, ch.String("terms"));
    if (ch.Has("replica")) {  // left out of what the read API shows a tenant
      STRATA_ASSIGN_OR_RETURN(sc.replica, ch.String("replica"));
    }
    r.choices.push_back(std::move(sc));
  }
  return r;
}

}  // namespace

std::optional<gateway::FinishReason> ParseFinishReason(std::string_view label) {
  for (const gateway::FinishReason f : kFinishes) {
    if (backend::FinishReasonLabel(f) == label) return f;
  }
  return std::nullopt;
}

std::string EncodeSnapshotRecord(const SnapshotRecord& r) {
  Json backend = {{"name", r.backend.name},
                  {"kind", r.backend.kind},
                  {"fingerprint", Hex64(r.backend.fingerprint)},
                  {"n_ctx", r.backend.n_ctx}};
  if (r.backend.kind == "local") {
    Json model = {{"path", r.backend.model_path}};
    if (!r.backend.model_sha256.empty()) model["sha256"] = r.backend.model_sha256;
    model["chat_format"] = r.backend.chat_format;
    model["prompt_special_tokens"] = r.backend.prompt_special_tokens;
    model["max_tokens_cap"] = r.backend.max_tokens_cap;
    if (!r.backend.kv_type.empty()) model["kv_type"] = r.backend.kv_type;
    if (!r.backend.repack.empty()) model["repack"] = r.backend.repack;
    backend["model"] = std::move(model);
  }
  Json cache = {{"outcome", r.cache}};
  if (r.similarity) cache["similarity"] = *r.similarity;
  Json prompts = Json::array();
  for (const SnapshotPrompt& p : r.prompts) {
    Json j = Json::object();
    if (p.prompt) j["prompt"] = *p.prompt;
    if (!p.prompt_ids.empty()) j["prompt_ids"] = p.prompt_ids;
    j["tokens"] = p.tokens;
    j["text"] = p.text;
    j["max_tokens"] = p.max_tokens;
    j["stops"] = p.stops;
    prompts.push_back(std::move(j));
  }
  Json choices = Json::array();
  for (const SnapshotChoice& c : r.choices) {
    Json j = {{"index", c.index}};
    if (c.seed) j["seed"] = std::to_string(*c.seed);
    j["text"] = c.text;
    if (!c.tool_calls.empty()) j["tool_calls"] = ToolCallsJson(c.tool_calls);
    j["tokens"] = c.tokens;
    j["finish"] = backend::FinishReasonLabel(c.finish);
    j["stop_sequence"] = c.stop_sequence;
    j["usage"] = UsageJson(c.usage);
    j["terms"] = c.terms;
    j["replica"] = c.replica;
    choices.push_back(std::move(j));
  }
  const Json j = {{"format", kSnapshotRecordVersion},
                  {"request_id", r.request_id},
                  {"tenant", r.tenant},
                  {"created_ms", r.created_ms},
                  {"api", r.api},
                  {"endpoint", r.endpoint},
                  {"stream", r.stream},
                  {"strata_version", r.strata_version},
                  {"backend", std::move(backend)},
                  {"cache", std::move(cache)},
                  {"request", RequestJson(r.request)},
                  {"prompts", std::move(prompts)},
                  {"choices", std::move(choices)}};
  return wire::Dump(j);
}

util::StatusOr<SnapshotRecord> DecodeSnapshotRecord(std::string_view json) {
  auto j = wire::ParseJson(json);
  if (!j.ok()) return util::DataLossError("snapshot record: " + j.status().message());
  try {
    return Decode(*j);
  } catch (const std::exception& e) {
    // nlohmann's accessors are all guarded above; this is a last fence.
    return util::DataLossError(fmt::format("snapshot record: {}", e.what()));
  }
}

size_t EstimateSnapshotBytes(const SnapshotRecord& r) {
  // Text as itself (plus escapes), token ids at ~7 bytes each, ~2 KiB of
  // fields; an estimate for the queue's bound, checked again when written.
  size_t n = 2048 + r.request.grammar.size() + r.request.json_schema.schema.size() +
             (r.request.prompt ? r.request.prompt->size() : 0) + 7 * r.request.prompt_ids.size();
  for (const auto& m : r.request.messages) n += 64 + m.content.size();
  for (const auto& t : r.request.tools) n += 64 + t.description.size() + t.parameters.size();
  for (const auto& p : r.prompts) {
    n += 128 + p.text.size() + 7 * p.tokens.size() + (p.prompt ? p.prompt->size() : 0);
  }
  for (const auto& c : r.choices) {
    n += 256 + c.text.size() + 7 * c.tokens.size();
    for (const auto& t : c.tool_calls) n += 64 + t.arguments.size();
  }
  return n;
}

}  // namespace strata::server
