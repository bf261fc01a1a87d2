#include "server/api.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace strata::server {
namespace {

using nlohmann::json;
using util::InvalidArgumentError;
using util::Status;
using util::StatusOr;

std::string Dump(const json& j) {
  // Invalid UTF-8 cannot reach here (text is sanitized upstream); replace, never throw.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Typed access to the fields of one JSON object, with errors naming the field.
class Fields {
 public:
  Fields(const json& obj, std::string prefix) : obj_(obj), prefix_(std::move(prefix)) {}

  bool Has(const char* name) const { return obj_.contains(name) && !obj_.at(name).is_null(); }
  const json& Get(const char* name) const { return obj_.at(name); }
  std::string Name(const char* name) const { return prefix_ + name; }

  StatusOr<std::optional<double>> Number(const char* name, double lo, double hi) const {
    if (!Has(name)) return std::optional<double>();
    const json& v = obj_.at(name);
    if (!v.is_number()) return TypeError(name, fmt::format("a number in [{}, {}]", lo, hi));
    const double d = v.get<double>();
    if (!(d >= lo && d <= hi)) return TypeError(name, fmt::format("a number in [{}, {}]", lo, hi));
    return std::optional<double>(d);
  }
  StatusOr<std::optional<int64_t>> Integer(const char* name, int64_t lo, int64_t hi) const {
    if (!Has(name)) return std::optional<int64_t>();
    const json& v = obj_.at(name);
    if (!v.is_number_integer()) {
      return TypeError(name, fmt::format("an integer in [{}, {}]", lo, hi));
    }
    // Unsigned values beyond int64 are out of every range we accept.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
      return TypeError(name, fmt::format("an integer in [{}, {}]", lo, hi));
    }
    const int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) return TypeError(name, fmt::format("an integer in [{}, {}]", lo, hi));
    return std::optional<int64_t>(i);
  }
  StatusOr<std::optional<bool>> Bool(const char* name) const {
    if (!Has(name)) return std::optional<bool>();
    if (!obj_.at(name).is_boolean()) return TypeError(name, "a boolean");
    return std::optional<bool>(obj_.at(name).get<bool>());
  }
  StatusOr<std::optional<std::string>> String(const char* name) const {
    if (!Has(name)) return std::optional<std::string>();
    if (!obj_.at(name).is_string()) return TypeError(name, "a string");
    return std::optional<std::string>(obj_.at(name).get<std::string>());
  }
  // A string or an array of strings.
  StatusOr<std::vector<std::string>> Strings(const char* name) const {
    std::vector<std::string> out;
    if (!Has(name)) return out;
    const json& v = obj_.at(name);
    if (v.is_string()) {
      out.push_back(v.get<std::string>());
      return out;
    }
    if (!v.is_array()) return TypeError(name, "a string or an array of strings");
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) {
        return InvalidArgumentError(fmt::format("'{}[{}]' must be a string", Name(name), i));
      }
      out.push_back(v[i].get<std::string>());
    }
    return out;
  }
  Status Reject(const char* name, const char* why) const {
    if (!Has(name)) return util::OkStatus();
    const json& v = obj_.at(name);
    if ((v.is_array() || v.is_object()) && v.empty()) return util::OkStatus();
    if (v.is_boolean() && !v.get<bool>()) return util::OkStatus();
    return InvalidArgumentError(fmt::format("'{}' is not supported: {}", Name(name), why));
  }

 private:
  Status TypeError(const char* name, const std::string& what) const {
    return InvalidArgumentError(fmt::format("'{}' must be {}", Name(name), what));
  }
  const json& obj_;
  const std::string prefix_;
};

StatusOr<json> ParseJson(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again with exceptions only to learn where it failed.
    try {
      const json again = json::parse(body);
      (void)again;
    } catch (const json::parse_error& e) {
      return InvalidArgumentError(fmt::format("malformed JSON at byte {}: {}", e.byte, e.what()));
    } catch (const std::exception& e) {
      return InvalidArgumentError(fmt::format("malformed JSON: {}", e.what()));
    }
    return InvalidArgumentError("malformed JSON");
  }
  if (!j.is_object()) return InvalidArgumentError("the request body must be a JSON object");
  return j;
}

// Message content: a string, or an array of text parts.
StatusOr<std::string> ContentText(const json& content, const std::string& where) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return InvalidArgumentError(
        fmt::format("'{}' must be a string or an array of content parts", where));
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return InvalidArgumentError(fmt::format("'{}' must be an object with a 'type'", at));
    }
    const std::string type = part["type"].get<std::string>();
    if (type != "text") {
      return InvalidArgumentError(
          fmt::format("'{}.type' is '{}': only text content is supported", at, type));
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return InvalidArgumentError(fmt::format("'{}.text' must be a string", at));
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

// Sampling fields shared by the three APIs; `temp_max` differs (OpenAI 2, Anthropic 1).
Status ParseSampling(const Fields& f, double temp_max, gateway::CompletionRequest& r) {
  sampling::SamplingParams& p = r.sampling;
  // API defaults: plain sampling from the model's distribution, as the OpenAI
  // and Anthropic APIs define it (strata's own truncations are opt-in).
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  STRATA_ASSIGN_OR_RETURN(auto t, f.Number("temperature", 0, temp_max));
  STRATA_ASSIGN_OR_RETURN(auto tp, f.Number("top_p", 0, 1));
  STRATA_ASSIGN_OR_RETURN(auto tk, f.Integer("top_k", 0, 1 << 20));
  STRATA_ASSIGN_OR_RETURN(auto mp, f.Number("min_p", 0, 0.999999));
  STRATA_ASSIGN_OR_RETURN(auto pp, f.Number("presence_penalty", -2, 2));
  STRATA_ASSIGN_OR_RETURN(auto fp, f.Number("frequency_penalty", -2, 2));
  STRATA_ASSIGN_OR_RETURN(auto rp, f.Number("repetition_penalty", 1e-6, 10));
  STRATA_ASSIGN_OR_RETURN(auto seed, f.Integer("seed", std::numeric_limits<int64_t>::min(),
                                               std::numeric_limits<int64_t>::max()));
  if (t) p.temperature = static_cast<float>(*t);
  if (tp) {
    if (*tp <= 0) return InvalidArgumentError("'top_p' must be a number in (0, 1]");
    p.top_p = static_cast<float>(*tp);
  }
  if (tk) p.top_k = static_cast<int32_t>(*tk);
  if (mp) p.min_p = static_cast<float>(*mp);
  if (pp) p.presence_penalty = static_cast<float>(*pp);
  if (fp) p.frequency_penalty = static_cast<float>(*fp);
  if (rp) p.repetition_penalty = static_cast<float>(*rp);
  if (seed) p.seed = static_cast<uint64_t>(*seed);
  // strata's own samplers (docs/api.md): entropy-targeted temperature,
  // locally typical sampling, Mirostat v2 (llama.cpp's field names).
  STRATA_ASSIGN_OR_RETURN(auto he, f.Number("target_entropy", 0, 100));
  STRATA_ASSIGN_OR_RETURN(auto tail, f.Number("entropy_tail_nats", 0.05, 20));
  STRATA_ASSIGN_OR_RETURN(auto typ, f.Number("typical_p", 0, 1));
  STRATA_ASSIGN_OR_RETURN(auto miro, f.Integer("mirostat", 0, 2));
  STRATA_ASSIGN_OR_RETURN(auto tau, f.Number("mirostat_tau", 1e-6, 40));
  STRATA_ASSIGN_OR_RETURN(auto eta, f.Number("mirostat_eta", 1e-6, 1));
  if (he) p.target_entropy = static_cast<float>(*he);
  if (tail) p.entropy_tail_nats = static_cast<float>(*tail);
  if (typ) {
    if (*typ <= 0) return InvalidArgumentError("'typical_p' must be a number in (0, 1]");
    p.typical_p = static_cast<float>(*typ);
  }
  if (miro && *miro == 1) {
    return InvalidArgumentError(
        "'mirostat' must be 0 (off) or 2 (Mirostat v2); version 1 is not supported");
  }
  if (miro) p.mirostat = *miro == 2;
  if (tau) p.mirostat_tau_bits = static_cast<float>(*tau);
  if (eta) p.mirostat_eta = static_cast<float>(*eta);
  if (p.mirostat && p.target_entropy >= 0) {
    return InvalidArgumentError("'target_entropy' and 'mirostat' cannot be used together");
  }
  // llama.cpp's field: generate max_tokens whatever the model emits (for
  // benchmarks that must compare equal amounts of work).
  STRATA_ASSIGN_OR_RETURN(auto ignore_eos, f.Bool("ignore_eos"));
  if (ignore_eos) r.ignore_eos = *ignore_eos;
  r.fixed_seed = seed.has_value();  // sampled output is reproducible, so cacheable
  return util::OkStatus();
}

// strata's cache controls: "no_cache": true turns every tier off for the
// request; "cache": {"prefix": false} the KV prefix cache (L2) only,
// "cache": {"l1": false} the response cache (L1) and single flight only;
// "cache": {"l3": true} asks for near-duplicate answers (L3), false refuses
// them whatever the tenant's default.
Status ParseCacheControls(const Fields& f, gateway::CompletionRequest& r) {
  STRATA_ASSIGN_OR_RETURN(auto no_cache, f.Bool("no_cache"));
  const bool none = no_cache && *no_cache;
  if (none) {
    r.prefix_cache = false;
    r.response_cache = false;
    r.l3 = false;
  }
  if (f.Has("cache")) {
    const json& c = f.Get("cache");
    if (!c.is_object()) return InvalidArgumentError("'cache' must be an object");
    Fields cf(c, "cache.");
    STRATA_ASSIGN_OR_RETURN(auto prefix, cf.Bool("prefix"));
    if (prefix) r.prefix_cache = *prefix && r.prefix_cache;
    STRATA_ASSIGN_OR_RETURN(auto l1, cf.Bool("l1"));
    if (l1) r.response_cache = *l1 && r.response_cache;
    STRATA_ASSIGN_OR_RETURN(auto l3, cf.Bool("l3"));
    if (l3 && !none) r.l3 = *l3;
  }
  return util::OkStatus();
}

// strata's "session_id": the conversation a request belongs to. 1-128
// characters of [A-Za-z0-9._:@-], so it is safe in a header and a log line.
Status ParseSessionId(const Fields& f, gateway::CompletionRequest& r) {
  STRATA_ASSIGN_OR_RETURN(auto id, f.String("session_id"));
  if (!id) return util::OkStatus();
  const bool valid_chars = std::all_of(id->begin(), id->end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '@' || c == '-';
  });
  if (id->empty() || id->size() > 128 || !valid_chars) {
    return InvalidArgumentError(
        "'session_id' must be 1-128 characters of letters, digits and . _ : @ -");
  }
  r.session_id = std::move(*id);
  return util::OkStatus();
}

StatusOr<ParsedRequest> ParseOpenAI(ApiKind kind, const json& j) {
  ParsedRequest out;
  gateway::CompletionRequest& r = out.request;
  Fields f(j, "");
  STRATA_ASSIGN_OR_RETURN(auto model, f.String("model"));
  if (!model) return InvalidArgumentError("'model' is required");
  out.model = *model;
  STRATA_RETURN_IF_ERROR(f.Reject("tools", "this server does not call tools"));
  STRATA_RETURN_IF_ERROR(f.Reject("functions", "this server does not call functions"));
  STRATA_RETURN_IF_ERROR(f.Reject("echo", "echoing the prompt"));
  STRATA_RETURN_IF_ERROR(f.Reject("suffix", "insertion with a suffix"));
  if (f.Has("response_format")) {
    const json& rf = f.Get("response_format");
    if (!rf.is_object() || !rf.contains("type") || rf["type"] != "text") {
      return InvalidArgumentError("'response_format' is not supported: only {\"type\": \"text\"}");
    }
  }
  if (kind == ApiKind::kOpenAIChat) {
    if (!f.Has("messages")) return InvalidArgumentError("'messages' is required");
    const json& msgs = f.Get("messages");
    if (!msgs.is_array() || msgs.empty()) {
      return InvalidArgumentError("'messages' must be a non-empty array");
    }
    for (size_t i = 0; i < msgs.size(); ++i) {
      const json& m = msgs[i];
      const std::string at = fmt::format("messages[{}]", i);
      if (!m.is_object()) return InvalidArgumentError(fmt::format("'{}' must be an object", at));
      if (!m.contains("role") || !m["role"].is_string()) {
        return InvalidArgumentError(fmt::format("'{}.role' must be a string", at));
      }
      std::string role = m["role"].get<std::string>();
      if (role == "developer") role = "system";  // OpenAI's newer name for system
      if (!m.contains("content")) {
        return InvalidArgumentError(fmt::format("'{}.content' is required", at));
      }
      STRATA_ASSIGN_OR_RETURN(std::string content, ContentText(m["content"], at + ".content"));
      r.messages.push_back({std::move(role), std::move(content)});
    }
  } else {
    if (!f.Has("prompt")) return InvalidArgumentError("'prompt' is required");
    const json& p = f.Get("prompt");
    if (p.is_string()) {
      r.prompt = p.get<std::string>();
    } else if (p.is_array() && p.size() == 1 && p[0].is_string()) {
      r.prompt = p[0].get<std::string>();
    } else {
      return InvalidArgumentError("'prompt' must be a string (or an array of one string)");
    }
  }
  STRATA_ASSIGN_OR_RETURN(auto max_tokens, f.Integer("max_tokens", 1, 1 << 24));
  STRATA_ASSIGN_OR_RETURN(auto max_completion, f.Integer("max_completion_tokens", 1, 1 << 24));
  if (max_completion) max_tokens = max_completion;
  if (max_tokens) r.max_tokens = static_cast<int32_t>(*max_tokens);
  STRATA_RETURN_IF_ERROR(ParseSampling(f, 2.0, r));
  STRATA_ASSIGN_OR_RETURN(r.stop, f.Strings("stop"));
  STRATA_ASSIGN_OR_RETURN(auto n, f.Integer("n", 1, 128));
  if (n) r.n = static_cast<int32_t>(*n);
  STRATA_ASSIGN_OR_RETURN(auto stream, f.Bool("stream"));
  out.stream = stream.value_or(false);
  if (f.Has("stream_options")) {
    const json& so = f.Get("stream_options");
    if (!so.is_object()) return InvalidArgumentError("'stream_options' must be an object");
    Fields sf(so, "stream_options.");
    STRATA_ASSIGN_OR_RETURN(auto iu, sf.Bool("include_usage"));
    out.include_usage = iu.value_or(false);
  }
  if (kind == ApiKind::kOpenAIChat) {
    STRATA_ASSIGN_OR_RETURN(auto lp, f.Bool("logprobs"));
    STRATA_ASSIGN_OR_RETURN(auto top, f.Integer("top_logprobs", 0, 20));
    out.logprobs = lp.value_or(false);
    if (top && !out.logprobs) {
      return InvalidArgumentError("'top_logprobs' needs 'logprobs' to be true");
    }
    if (out.logprobs) r.top_logprobs = static_cast<int32_t>(top.value_or(0));
  } else {
    STRATA_ASSIGN_OR_RETURN(auto lp, f.Integer("logprobs", 0, 5));
    out.logprobs = lp.has_value();
    if (lp) r.top_logprobs = static_cast<int32_t>(*lp);
  }
  STRATA_ASSIGN_OR_RETURN(auto user, f.String("user"));
  (void)user;  // accepted for compatibility; not used
  STRATA_RETURN_IF_ERROR(ParseSessionId(f, r));
  STRATA_RETURN_IF_ERROR(ParseCacheControls(f, r));
  return out;
}

StatusOr<ParsedRequest> ParseAnthropic(const json& j) {
  ParsedRequest out;
  gateway::CompletionRequest& r = out.request;
  Fields f(j, "");
  STRATA_ASSIGN_OR_RETURN(auto model, f.String("model"));
  if (!model) return InvalidArgumentError("'model' is required");
  out.model = *model;
  STRATA_ASSIGN_OR_RETURN(auto max_tokens, f.Integer("max_tokens", 1, 1 << 24));
  if (!max_tokens) return InvalidArgumentError("'max_tokens' is required");
  r.max_tokens = static_cast<int32_t>(*max_tokens);
  STRATA_RETURN_IF_ERROR(f.Reject("tools", "this server does not call tools"));
  if (f.Has("system")) {
    STRATA_ASSIGN_OR_RETURN(std::string system, ContentText(f.Get("system"), "system"));
    r.messages.push_back({"system", std::move(system)});
  }
  if (!f.Has("messages")) return InvalidArgumentError("'messages' is required");
  const json& msgs = f.Get("messages");
  if (!msgs.is_array() || msgs.empty()) {
    return InvalidArgumentError("'messages' must be a non-empty array");
  }
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& m = msgs[i];
    const std::string at = fmt::format("messages[{}]", i);
    if (!m.is_object()) return InvalidArgumentError(fmt::format("'{}' must be an object", at));
    if (!m.contains("role") || !m["role"].is_string()) {
      return InvalidArgumentError(fmt::format("'{}.role' must be a string", at));
    }
    const std::string role = m["role"].get<std::string>();
    if (role != "user" && role != "assistant") {
      return InvalidArgumentError(
          fmt::format("'{}.role' is '{}': must be 'user' or 'assistant'", at, role));
    }
    if (!m.contains("content"))
      return InvalidArgumentError(fmt::format("'{}.content' is required", at));
    STRATA_ASSIGN_OR_RETURN(std::string content, ContentText(m["content"], at + ".content"));
    r.messages.push_back({role, std::move(content)});
  }
  STRATA_RETURN_IF_ERROR(ParseSampling(f, 1.0, r));
  STRATA_ASSIGN_OR_RETURN(r.stop, f.Strings("stop_sequences"));
  STRATA_ASSIGN_OR_RETURN(auto stream, f.Bool("stream"));
  out.stream = stream.value_or(false);
  if (f.Has("metadata") && !f.Get("metadata").is_object()) {
    return InvalidArgumentError("'metadata' must be an object");
  }
  STRATA_RETURN_IF_ERROR(ParseSessionId(f, r));
  STRATA_RETURN_IF_ERROR(ParseCacheControls(f, r));
  return out;
}

const char* OpenAIFinish(gateway::FinishReason r) {
  return r == gateway::FinishReason::kLength ? "length" : "stop";
}
const char* AnthropicStop(gateway::FinishReason r) {
  switch (r) {
    case gateway::FinishReason::kLength:
      return "max_tokens";
    case gateway::FinishReason::kStopString:
      return "stop_sequence";
    default:
      return "end_turn";
  }
}

json Bytes(const std::vector<uint8_t>& b) {
  json a = json::array();
  for (uint8_t x : b) a.push_back(x);
  return a;
}

json ChatLogprobs(const std::vector<gateway::TokenLogprob>& lps) {
  json content = json::array();
  for (const auto& lp : lps) {
    json top = json::array();
    for (const auto& [text, l] : lp.top) {
      top.push_back({{"token", text},
                     {"logprob", l},
                     {"bytes", Bytes(std::vector<uint8_t>(text.begin(), text.end()))}});
    }
    content.push_back({{"token", lp.text},
                       {"logprob", lp.logprob},
                       {"bytes", Bytes(lp.bytes)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

json CompletionLogprobs(const std::vector<gateway::TokenLogprob>& lps, size_t text_offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  size_t off = text_offset;
  for (const auto& lp : lps) {
    tokens.push_back(lp.text);
    token_lps.push_back(lp.logprob);
    json top = json::object();
    for (const auto& [text, l] : lp.top) top[text] = l;
    tops.push_back(top);
    offsets.push_back(off);
    off += lp.text.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

json OpenAIUsage(const ResponseMeta& m, int32_t completion) {
  return {{"prompt_tokens", m.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", m.prompt_tokens + completion},
          {"prompt_tokens_details", {{"cached_tokens", m.cached_tokens}}}};
}

json AnthropicUsage(const ResponseMeta& m, int32_t output) {
  return {{"input_tokens", m.prompt_tokens - m.cached_tokens},
          {"output_tokens", output},
          {"cache_read_input_tokens", m.cached_tokens},
          {"cache_creation_input_tokens", 0}};
}

std::string Sse(const json& j) { return "data: " + Dump(j) + "\n\n"; }
std::string SseEvent(const char* event, const json& j) {
  return std::string("event: ") + event + "\ndata: " + Dump(j) + "\n\n";
}

json ChunkBase(ApiKind kind, const ResponseMeta& m) {
  json c = {{"id", m.id},
            {"object", kind == ApiKind::kOpenAIChat ? "chat.completion.chunk" : "text_completion"},
            {"created", m.created},
            {"model", m.model}};
  if (!m.fingerprint.empty()) c["system_fingerprint"] = m.fingerprint;
  return c;
}

std::string Base64(const uint8_t* p, size_t n) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t v = (static_cast<uint32_t>(p[i]) << 16) |
                       (i + 1 < n ? static_cast<uint32_t>(p[i + 1]) << 8 : 0) |
                       (i + 2 < n ? static_cast<uint32_t>(p[i + 2]) : 0);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=';
    out += i + 2 < n ? kAlphabet[v & 63] : '=';
  }
  return out;
}

StatusOr<std::vector<int32_t>> TokenArray(const json& a, const std::string& where) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number_integer() || a[i].get<int64_t>() < 0 || a[i].get<int64_t>() > INT32_MAX) {
      return InvalidArgumentError(
          fmt::format("'{}[{}]' must be a token id (a non-negative integer)", where, i));
    }
    ids.push_back(static_cast<int32_t>(a[i].get<int64_t>()));
  }
  return ids;
}

}  // namespace

StatusOr<ParsedEmbeddingRequest> ParseEmbeddingRequest(std::string_view body) {
  STRATA_ASSIGN_OR_RETURN(json j, ParseJson(body));
  try {
    ParsedEmbeddingRequest out;
    Fields f(j, "");
    STRATA_ASSIGN_OR_RETURN(auto model, f.String("model"));
    if (!model) return InvalidArgumentError("'model' is required");
    out.model = *model;
    if (!f.Has("input")) return InvalidArgumentError("'input' is required");
    const json& in = f.Get("input");
    if (in.is_string()) {
      out.request.texts.push_back(in.get<std::string>());
    } else if (in.is_array() && !in.empty() && in[0].is_number_integer()) {
      STRATA_ASSIGN_OR_RETURN(auto ids, TokenArray(in, "input"));
      out.request.token_ids.push_back(std::move(ids));
    } else if (in.is_array()) {
      for (size_t i = 0; i < in.size(); ++i) {
        const std::string at = fmt::format("input[{}]", i);
        if (in[i].is_string()) {
          out.request.texts.push_back(in[i].get<std::string>());
        } else if (in[i].is_array()) {
          STRATA_ASSIGN_OR_RETURN(auto ids, TokenArray(in[i], at));
          out.request.token_ids.push_back(std::move(ids));
        } else {
          return InvalidArgumentError(
              fmt::format("'{}' must be a string or an array of token ids", at));
        }
      }
      if (!out.request.texts.empty() && !out.request.token_ids.empty()) {
        return InvalidArgumentError("'input' must not mix strings and token arrays");
      }
    } else {
      return InvalidArgumentError("'input' must be a string, an array of strings or token ids");
    }
    STRATA_ASSIGN_OR_RETURN(auto fmt_name, f.String("encoding_format"));
    if (fmt_name && *fmt_name != "float" && *fmt_name != "base64") {
      return InvalidArgumentError("'encoding_format' must be 'float' or 'base64'");
    }
    out.base64 = fmt_name && *fmt_name == "base64";
    STRATA_RETURN_IF_ERROR(f.Reject("dimensions", "this model's embeddings have a fixed size"));
    return out;
  } catch (const std::exception& e) {
    return InvalidArgumentError(fmt::format("invalid request: {}", e.what()));
  }
}

std::string RenderEmbeddings(const std::string& model, const gateway::EmbeddingResult& r,
                             bool base64) {
  json data = json::array();
  for (size_t i = 0; i < r.embeddings.size(); ++i) {
    const auto& e = r.embeddings[i];
    json item = {{"object", "embedding"}, {"index", i}};
    if (base64) {
      item["embedding"] =
          Base64(reinterpret_cast<const uint8_t*>(e.data()), e.size() * sizeof(float));
    } else {
      item["embedding"] = e;
    }
    data.push_back(std::move(item));
  }
  return Dump({{"object", "list"},
               {"data", data},
               {"model", model},
               {"usage", {{"prompt_tokens", r.prompt_tokens}, {"total_tokens", r.prompt_tokens}}}});
}

StatusOr<ParsedRequest> ParseRequest(ApiKind kind, std::string_view body) {
  STRATA_ASSIGN_OR_RETURN(json j, ParseJson(body));
  // nlohmann may throw on exotic input (e.g. number conversions); contain it here.
  try {
    if (kind == ApiKind::kAnthropicMessages) return ParseAnthropic(j);
    return ParseOpenAI(kind, j);
  } catch (const std::exception& e) {
    return InvalidArgumentError(fmt::format("invalid request: {}", e.what()));
  }
}

std::string RenderResponse(ApiKind kind, const ResponseMeta& m,
                           const std::vector<ChoiceResult>& choices, bool logprobs) {
  int32_t completion = 0;
  for (const auto& c : choices) completion += c.completion_tokens;
  if (kind == ApiKind::kAnthropicMessages) {
    const ChoiceResult& c = choices.at(0);
    json j = {{"id", m.id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", m.model},
              {"content", json::array({{{"type", "text"}, {"text", c.text}}})},
              {"stop_reason", AnthropicStop(c.finish)},
              {"stop_sequence", c.stop_sequence.empty() ? json(nullptr) : json(c.stop_sequence)},
              {"usage", AnthropicUsage(m, completion)}};
    return Dump(j);
  }
  json out_choices = json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    json choice = {{"index", i}, {"finish_reason", OpenAIFinish(c.finish)}};
    if (kind == ApiKind::kOpenAIChat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}};
      choice["logprobs"] = logprobs ? ChatLogprobs(c.logprobs) : json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = logprobs ? CompletionLogprobs(c.logprobs, 0) : json(nullptr);
    }
    out_choices.push_back(choice);
  }
  json j = {{"id", m.id},
            {"object", kind == ApiKind::kOpenAIChat ? "chat.completion" : "text_completion"},
            {"created", m.created},
            {"model", m.model},
            {"choices", out_choices},
            {"usage", OpenAIUsage(m, completion)}};
  if (!m.fingerprint.empty()) j["system_fingerprint"] = m.fingerprint;
  return Dump(j);
}

std::string RenderStreamStart(ApiKind kind, const ResponseMeta& m, int32_t n_choices) {
  if (kind == ApiKind::kAnthropicMessages) {
    json msg = {{"id", m.id},
                {"type", "message"},
                {"role", "assistant"},
                {"model", m.model},
                {"content", json::array()},
                {"stop_reason", nullptr},
                {"stop_sequence", nullptr},
                {"usage", AnthropicUsage(m, 0)}};
    return SseEvent("message_start", {{"type", "message_start"}, {"message", msg}}) +
           SseEvent("content_block_start", {{"type", "content_block_start"},
                                            {"index", 0},
                                            {"content_block", {{"type", "text"}, {"text", ""}}}}) +
           SseEvent("ping", {{"type", "ping"}});
  }
  if (kind == ApiKind::kOpenAICompletion) return "";
  std::string out;
  for (int32_t i = 0; i < n_choices; ++i) {
    json c = ChunkBase(kind, m);
    c["choices"] = json::array({{{"index", i},
                                 {"delta", {{"role", "assistant"}, {"content", ""}}},
                                 {"logprobs", nullptr},
                                 {"finish_reason", nullptr}}});
    out += Sse(c);
  }
  return out;
}

std::string RenderStreamDelta(ApiKind kind, const ResponseMeta& m, const gateway::Event& e,
                              bool logprobs) {
  if (kind == ApiKind::kAnthropicMessages) {
    if (e.text.empty()) return "";
    return SseEvent("content_block_delta", {{"type", "content_block_delta"},
                                            {"index", 0},
                                            {"delta", {{"type", "text_delta"}, {"text", e.text}}}});
  }
  json c = ChunkBase(kind, m);
  json choice = {{"index", e.index}, {"finish_reason", nullptr}};
  if (kind == ApiKind::kOpenAIChat) {
    choice["delta"] = {{"content", e.text}};
    choice["logprobs"] = logprobs ? ChatLogprobs(e.logprobs) : json(nullptr);
  } else {
    choice["text"] = e.text;
    choice["logprobs"] = logprobs ? CompletionLogprobs(e.logprobs, 0) : json(nullptr);
  }
  c["choices"] = json::array({choice});
  return Sse(c);
}

std::string RenderStreamFinish(ApiKind kind, const ResponseMeta& m, const gateway::Event& e) {
  if (kind == ApiKind::kAnthropicMessages) {
    return SseEvent("content_block_stop", {{"type", "content_block_stop"}, {"index", 0}}) +
           SseEvent("message_delta",
                    {{"type", "message_delta"},
                     {"delta",
                      {{"stop_reason", AnthropicStop(e.finish)},
                       {"stop_sequence",
                        e.stop_sequence.empty() ? json(nullptr) : json(e.stop_sequence)}}},
                     {"usage",
                      {{"output_tokens", e.usage.completion_tokens},
                       {"input_tokens", m.prompt_tokens - e.usage.cached_tokens},
                       {"cache_read_input_tokens", e.usage.cached_tokens}}}}) +
           SseEvent("message_stop", {{"type", "message_stop"}});
  }
  json c = ChunkBase(kind, m);
  json choice = {
      {"index", e.index}, {"finish_reason", OpenAIFinish(e.finish)}, {"logprobs", nullptr}};
  if (kind == ApiKind::kOpenAIChat) {
    choice["delta"] = json::object();
  } else {
    choice["text"] = "";
  }
  c["choices"] = json::array({choice});
  return Sse(c);
}

std::string RenderStreamEnd(ApiKind kind, const ResponseMeta& m, int32_t completion_tokens,
                            bool include_usage) {
  if (kind == ApiKind::kAnthropicMessages) return "";
  std::string out;
  if (include_usage) {
    json c = ChunkBase(kind, m);
    c["choices"] = json::array();
    c["usage"] = OpenAIUsage(m, completion_tokens);
    out += Sse(c);
  }
  return out + "data: [DONE]\n\n";
}

int HttpStatus(const Status& s) {
  switch (s.code()) {
    case util::StatusCode::kOk:
      return 200;
    case util::StatusCode::kInvalidArgument:
    case util::StatusCode::kOutOfRange:
    case util::StatusCode::kFailedPrecondition:
    case util::StatusCode::kUnimplemented:
      return 400;
    case util::StatusCode::kUnauthenticated:
      return 401;
    case util::StatusCode::kPermissionDenied:
      return 403;
    case util::StatusCode::kNotFound:
      return 404;
    case util::StatusCode::kResourceExhausted:
      return 429;
    case util::StatusCode::kCancelled:
      return 499;
    case util::StatusCode::kUnavailable:
      return 503;
    case util::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

std::string RenderError(ApiKind kind, const Status& s) {
  const int http = HttpStatus(s);
  if (kind == ApiKind::kAnthropicMessages) {
    const char* type = http == 400   ? "invalid_request_error"
                       : http == 401 ? "authentication_error"
                       : http == 403 ? "permission_error"
                       : http == 404 ? "not_found_error"
                       : http == 413 ? "request_too_large"
                       : http == 429 ? "rate_limit_error"
                       : http == 503 ? "overloaded_error"
                                     : "api_error";
    return Dump({{"type", "error"}, {"error", {{"type", type}, {"message", s.message()}}}});
  }
  const char* type = http == 401   ? "authentication_error"
                     : http == 403 ? "permission_error"
                     : http == 429 ? "rate_limit_error"
                     : http >= 500 ? "server_error"
                                   : "invalid_request_error";
  json code = nullptr;
  if (s.code() == util::StatusCode::kOutOfRange &&
      s.message().find("context length exceeded") != std::string::npos) {
    code = "context_length_exceeded";
  } else if (http == 404) {
    code = "model_not_found";
  } else if (http == 401) {
    code = "invalid_api_key";
  } else if (http == 429) {
    code = "rate_limit_exceeded";
  }
  // A message that opens with a quoted field names the parameter.
  json param = nullptr;
  if (s.message().size() > 2 && s.message()[0] == '\'') {
    const size_t end = s.message().find('\'', 1);
    if (end != std::string::npos) param = s.message().substr(1, end - 1);
  }
  return Dump(
      {{"error", {{"message", s.message()}, {"type", type}, {"param", param}, {"code", code}}}});
}

std::string RenderStreamError(ApiKind kind, const Status& s) {
  const std::string body = RenderError(kind, s);
  if (kind == ApiKind::kAnthropicMessages) return "event: error\ndata: " + body + "\n\n";
  return "data: " + body + "\n\n";
}

}  // namespace strata::server
