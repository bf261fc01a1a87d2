// The parts of the wire formats both APIs share (internal/wire.h), and the
// ApiKind dispatch behind server/api.h.
#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "server/api.h"
#include "server/internal/wire.h"
#include "session/session.h"

namespace strata::server {
namespace wire {

using util::Status;
using util::StatusOr;

std::string Dump(const Json& j) {
  // Invalid UTF-8 cannot reach here (text is sanitized upstream); replace, never throw.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string Sse(const Json& j) { return "data: " + Dump(j) + "\n\n"; }
std::string SseEvent(const char* event, const Json& j) {
  return std::string("event: ") + event + "\ndata: " + Dump(j) + "\n\n";
}

Status FieldError(const std::string& field, std::string_view what) {
  return util::InvalidFieldError(field, fmt::format("'{}' {}", field, what));
}

namespace {

// What nlohmann says went wrong, without its "last read: '...'" echo (which
// can be the whole rest of a hostile body) and without its exception tag.
std::string ParseErrorKind(std::string_view what) {
  if (const size_t tag = what.find("] ");
      what.rfind("[json.exception", 0) == 0 && tag != std::string_view::npos) {
    what.remove_prefix(tag + 2);
  }
  if (const size_t echo = what.find("; last read"); echo != std::string_view::npos) {
    what = what.substr(0, echo);
  }
  return std::string(what.substr(0, 160));
}

// At most 24 bytes of `body` ending at the 1-based byte `at`, printable
// ASCII kept and everything else as '?'.
std::string Excerpt(std::string_view body, size_t at) {
  const size_t end = std::min(at, body.size());
  const size_t begin = end > 24 ? end - 24 : 0;
  std::string out;
  for (char c : body.substr(begin, end - begin)) {
    out += (c >= 0x20 && c < 0x7f && c != '\'') ? c : '?';
  }
  return out;
}

}  // namespace

StatusOr<Json> ParseJson(std::string_view body) {
  auto malformed = [](std::string message) {
    return util::InvalidArgumentError(std::move(message))
        .WithReason(util::ErrorReason::kMalformedJson);
  };
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    // Parse again with exceptions only to learn where it failed.
    try {
      const Json again = Json::parse(body);
      (void)again;
    } catch (const Json::parse_error& e) {
      return malformed(fmt::format("malformed JSON at byte {}: {} (near '{}')", e.byte,
                                   ParseErrorKind(e.what()), Excerpt(body, e.byte)));
    } catch (const std::exception& e) {
      return malformed(fmt::format("malformed JSON: {}", ParseErrorKind(e.what())));
    }
    return malformed("malformed JSON");
  }
  if (!j.is_object()) return malformed("the request body must be a JSON object");
  return j;
}

StatusOr<std::optional<double>> Fields::Number(const char* name, double lo, double hi) const {
  if (!Has(name)) return std::optional<double>();
  const Json& v = obj_.at(name);
  const double d = v.is_number() ? v.get<double>() : 0.0;
  if (!v.is_number() || !(d >= lo && d <= hi)) {
    return Error(name, fmt::format("must be a number in [{}, {}]", lo, hi));
  }
  return std::optional<double>(d);
}

StatusOr<std::optional<int64_t>> Fields::Integer(const char* name, int64_t lo, int64_t hi) const {
  if (!Has(name)) return std::optional<int64_t>();
  const Json& v = obj_.at(name);
  auto out_of_range = [&] {
    return Error(name, fmt::format("must be an integer in [{}, {}]", lo, hi));
  };
  if (!v.is_number_integer()) return out_of_range();
  // Unsigned values beyond int64 are out of every range we accept.
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return out_of_range();
  }
  const int64_t i = v.get<int64_t>();
  if (i < lo || i > hi) return out_of_range();
  return std::optional<int64_t>(i);
}

StatusOr<std::optional<bool>> Fields::Bool(const char* name) const {
  if (!Has(name)) return std::optional<bool>();
  if (!obj_.at(name).is_boolean()) return Error(name, "must be a boolean");
  return std::optional<bool>(obj_.at(name).get<bool>());
}

StatusOr<std::optional<std::string>> Fields::String(const char* name) const {
  if (!Has(name)) return std::optional<std::string>();
  if (!obj_.at(name).is_string()) return Error(name, "must be a string");
  return std::optional<std::string>(obj_.at(name).get<std::string>());
}

StatusOr<std::vector<std::string>> Fields::Strings(const char* name) const {
  std::vector<std::string> out;
  if (!Has(name)) return out;
  const Json& v = obj_.at(name);
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
    return out;
  }
  if (!v.is_array()) return Error(name, "must be a string or an array of strings");
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string())
      return FieldError(fmt::format("{}[{}]", Name(name), i), "must be a string");
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

Status Fields::Reject(const char* name, const char* why) const {
  if (!Has(name)) return util::OkStatus();
  const Json& v = obj_.at(name);
  if ((v.is_array() || v.is_object()) && v.empty()) return util::OkStatus();
  if (v.is_boolean() && !v.get<bool>()) return util::OkStatus();
  return Error(name, fmt::format("is not supported: {}", why));
}

StatusOr<std::string> ContentText(const Json& content, const std::string& where) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return FieldError(where, "must be a string or an array of content parts");
  }
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string at = fmt::format("{}[{}]", where, i);
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return FieldError(at, "must be an object with a 'type'");
    }
    const std::string type = part["type"].get<std::string>();
    if (type != "text") {
      return FieldError(at + ".type", fmt::format("is '{}': only text content is supported", type));
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return FieldError(at + ".text", "must be a string");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

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
    if (*tp <= 0) return f.Error("top_p", "must be a number in (0, 1]");
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
    if (*typ <= 0) return f.Error("typical_p", "must be a number in (0, 1]");
    p.typical_p = static_cast<float>(*typ);
  }
  if (miro && *miro == 1) {
    return f.Error("mirostat", "must be 0 (off) or 2 (Mirostat v2); version 1 is not supported");
  }
  if (miro) p.mirostat = *miro == 2;
  if (tau) p.mirostat_tau_bits = static_cast<float>(*tau);
  if (eta) p.mirostat_eta = static_cast<float>(*eta);
  // What the client set itself: a remote backend sends only these.
  r.sampling_set = {.temperature = t.has_value(),
                    .top_p = tp.has_value(),
                    .top_k = tk.has_value(),
                    .min_p = mp.has_value(),
                    .presence_penalty = pp.has_value(),
                    .frequency_penalty = fp.has_value(),
                    .repetition_penalty = rp.has_value(),
                    .seed = seed.has_value(),
                    .strata_sampler = he.has_value() || tail.has_value() || typ.has_value() ||
                                      (miro && *miro != 0) || tau.has_value() || eta.has_value()};
  if (p.mirostat && p.target_entropy >= 0) {
    return f.Error("target_entropy", "and 'mirostat' cannot be used together");
  }
  // llama.cpp's field: generate max_tokens whatever the model emits (for
  // benchmarks that must compare equal amounts of work).
  STRATA_ASSIGN_OR_RETURN(auto ignore_eos, f.Bool("ignore_eos"));
  if (ignore_eos) r.ignore_eos = *ignore_eos;
  r.fixed_seed = seed.has_value();  // sampled output is reproducible, so cacheable
  return util::OkStatus();
}

// OpenAI's "logit_bias": {"<token id>": bias in [-100, 100], ...}, at most
// sampling::kMaxLogitBias entries; null or {} is none.
Status ParseLogitBias(const Fields& f, gateway::CompletionRequest& r) {
  if (!f.Has("logit_bias")) return util::OkStatus();
  const Json& v = f.Get("logit_bias");
  if (v.is_null()) return util::OkStatus();
  if (!v.is_object()) {
    return f.Error("logit_bias", "must be an object of token ids to numbers in [-100, 100]");
  }
  if (v.size() > sampling::kMaxLogitBias) {
    return f.Error("logit_bias", fmt::format("has {} entries, at most {} are allowed", v.size(),
                                             sampling::kMaxLogitBias));
  }
  std::vector<std::pair<int32_t, float>> bias;
  bias.reserve(v.size());
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string& key = it.key();
    int64_t id = 0;
    const bool digits =
        !key.empty() && key.size() <= 10 &&
        std::all_of(key.begin(), key.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (digits) id = std::stoll(key);
    if (!digits || id > std::numeric_limits<int32_t>::max()) {
      return f.Error(
          "logit_bias",
          fmt::format("has the key '{}', which is not a token id (a non-negative integer)",
                      key.substr(0, 32)));
    }
    if (!it.value().is_number() || !(it.value().get<double>() >= -100) ||
        !(it.value().get<double>() <= 100)) {
      return f.Error("logit_bias", fmt::format("of token {} must be a number in [-100, 100]", id));
    }
    bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(it.value().get<double>()));
  }
  std::sort(bias.begin(), bias.end());
  for (size_t i = 1; i < bias.size(); ++i) {
    if (bias[i].first == bias[i - 1].first) {  // "7" and "07"
      return f.Error("logit_bias", fmt::format("names token {} twice", bias[i].first));
    }
  }
  r.sampling.logit_bias = std::move(bias);
  r.sampling_set.logit_bias = !r.sampling.logit_bias.empty();
  return util::OkStatus();
}

// strata's cache controls: "no_cache": true turns every tier off for the
// request; "cache": {"prefix": false} the KV prefix cache (L2) only,
// "cache": {"l1": false} the response cache (L1) and single flight only;
// "cache": {"l3": true} asks for near-duplicate answers (L3), false refuses
// them whatever the tenant's default; "cache": {"semantic": ...} the same for
// answers of similar meaning (L4/L5).
Status ParseCacheControls(const Fields& f, gateway::CompletionRequest& r) {
  STRATA_ASSIGN_OR_RETURN(auto no_cache, f.Bool("no_cache"));
  const bool none = no_cache && *no_cache;
  if (none) {
    r.prefix_cache = false;
    r.response_cache = false;
    r.l3 = false;
    r.semantic = false;
  }
  if (f.Has("cache")) {
    const Json& c = f.Get("cache");
    if (!c.is_object()) return f.Error("cache", "must be an object");
    Fields cf(c, "cache.");
    for (auto it = c.begin(); it != c.end(); ++it) {
      if (it.key() != "prefix" && it.key() != "l1" && it.key() != "l3" && it.key() != "semantic") {
        return FieldError("cache." + it.key().substr(0, 64),
                          "is not a cache control: 'cache' takes prefix, l1, l3 and semantic");
      }
    }
    STRATA_ASSIGN_OR_RETURN(auto prefix, cf.Bool("prefix"));
    if (prefix) r.prefix_cache = *prefix && r.prefix_cache;
    STRATA_ASSIGN_OR_RETURN(auto l1, cf.Bool("l1"));
    if (l1) r.response_cache = *l1 && r.response_cache;
    STRATA_ASSIGN_OR_RETURN(auto l3, cf.Bool("l3"));
    if (l3 && !none) r.l3 = *l3;
    STRATA_ASSIGN_OR_RETURN(auto semantic, cf.Bool("semantic"));
    if (semantic && !none) r.semantic = *semantic;
  }
  return util::OkStatus();
}

Status ParseGrammar(const Fields& f, gateway::CompletionRequest& r) {
  STRATA_ASSIGN_OR_RETURN(auto grammar, f.String("grammar"));
  if (!grammar) return util::OkStatus();
  if (grammar->empty()) return f.Error("grammar", "must not be empty");
  if (r.response_format != gateway::ResponseFormat::kText) {
    return f.Error("grammar", "cannot be combined with a JSON 'response_format'");
  }
  r.grammar = std::move(*grammar);
  return util::OkStatus();
}

// strata's "session_id": the conversation a request belongs to. 1-128
// characters of [A-Za-z0-9._:@-], so it is safe in a header and a log line.
Status ParseSessionId(const Fields& f, gateway::CompletionRequest& r) {
  STRATA_ASSIGN_OR_RETURN(auto id, f.String("session_id"));
  if (!id) return util::OkStatus();
  if (!session::ValidSessionId(*id)) {
    return f.Error("session_id", "must be 1-128 characters of letters, digits and . _ : @ -");
  }
  r.session_id = std::move(*id);
  return util::OkStatus();
}

Status CheckToolName(const Json& name, const std::string& where) {
  const bool ok = name.is_string() && !name.get_ref<const std::string&>().empty() &&
                  name.get_ref<const std::string&>().size() <= 64 &&
                  std::all_of(name.get_ref<const std::string&>().begin(),
                              name.get_ref<const std::string&>().end(), [](char c) {
                                return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                                       (c >= '0' && c <= '9') || c == '_' || c == '-';
                              });
  if (!ok) return FieldError(where, "must be 1-64 characters of letters, digits, _ and -");
  return util::OkStatus();
}

StatusOr<std::string> ToolSchema(const Fields& f, const char* name) {
  if (!f.Has(name)) return std::string();
  const Json& v = f.Get(name);
  if (!v.is_object()) return f.Error(name, "must be a JSON schema (an object)");
  return Dump(v);
}

Status CheckTools(const gateway::CompletionRequest& r, const char* tools_field,
                  const char* choice_field) {
  using Mode = gateway::ToolChoice::Mode;
  if (r.tools.size() > kMaxTools) {
    return FieldError(tools_field, fmt::format("has {} tools; at most {} are allowed",
                                               r.tools.size(), kMaxTools));
  }
  size_t bytes = 0;
  for (size_t i = 0; i < r.tools.size(); ++i) {
    const auto& t = r.tools[i];
    bytes += t.name.size() + t.description.size() + t.parameters.size();
    for (size_t k = 0; k < i; ++k) {
      if (r.tools[k].name == t.name) {
        return FieldError(fmt::format("{}[{}]", tools_field, i),
                          fmt::format("repeats the name '{}' of {}[{}]", t.name, tools_field, k));
      }
    }
  }
  if (bytes > kMaxToolBytes) {
    return FieldError(tools_field, fmt::format("holds {} bytes of definitions; at most {} are "
                                               "allowed",
                                               bytes, kMaxToolBytes));
  }
  const Mode mode = r.tool_choice.mode;
  if (r.tools.empty() && (mode == Mode::kRequired || mode == Mode::kNamed)) {
    return FieldError(choice_field, "asks for a tool call, but the request offers no tools");
  }
  if (mode == Mode::kNamed && std::none_of(r.tools.begin(), r.tools.end(), [&](const auto& t) {
        return t.name == r.tool_choice.name;
      })) {
    return FieldError(choice_field, fmt::format("names '{}', which is not one of the tools",
                                                r.tool_choice.name.substr(0, 64)));
  }
  return util::OkStatus();
}

StatusOr<std::string> CompactArguments(const Json& v, const std::string& where) {
  if (v.is_object()) return Dump(v);
  if (!v.is_string()) return FieldError(where, "must be a JSON object");
  const Json parsed = Json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return FieldError(where, "must be the JSON text of an object");
  }
  return Dump(parsed);
}

}  // namespace wire

// --- server/api.h: one entry point per step, dispatched by API -------------

namespace {

// Parses `body` and hands the object to `parse`; nlohmann may throw on exotic
// input (e.g. number conversions), which is contained here.
template <typename Parse>
auto ParseBody(std::string_view body, Parse parse) -> decltype(parse(wire::Json())) {
  STRATA_ASSIGN_OR_RETURN(wire::Json j, wire::ParseJson(body));
  try {
    return parse(j);
  } catch (const std::exception& e) {
    return util::InvalidArgumentError(fmt::format("invalid request: {}", e.what()))
        .WithReason(util::ErrorReason::kInvalidField);
  }
}

}  // namespace

util::StatusOr<ParsedRequest> ParseRequest(ApiKind kind, std::string_view body) {
  return ParseBody(body, [kind](const wire::Json& j) {
    if (kind == ApiKind::kAnthropicMessages) return wire::anthropic::ParseRequest(j);
    return wire::openai::ParseRequest(kind, j);
  });
}

util::StatusOr<ParsedEmbeddingRequest> ParseEmbeddingRequest(std::string_view body) {
  return ParseBody(body,
                   [](const wire::Json& j) { return wire::openai::ParseEmbeddingRequest(j); });
}

std::string RenderEmbeddings(const std::string& model, const gateway::EmbeddingResult& result,
                             bool base64) {
  return wire::openai::RenderEmbeddings(model, result, base64);
}

std::string RenderResponse(ApiKind kind, const ResponseMeta& meta,
                           const std::vector<ChoiceResult>& choices, bool logprobs) {
  if (kind != ApiKind::kAnthropicMessages) {
    return wire::openai::RenderResponse(kind, meta, choices, logprobs);
  }
  int32_t completion = 0;
  for (const auto& c : choices) completion += c.completion_tokens;
  return wire::anthropic::RenderResponse(meta, choices.at(0), completion);
}

namespace {

// Without a state of its own, a call sees text block 0 open since the start.
StreamState OpenedText() {
  StreamState s;
  s.blocks = 1;
  s.open = true;
  s.open_text = true;
  return s;
}

}  // namespace

std::string RenderStreamStart(ApiKind kind, const ResponseMeta& meta, int32_t n_choices,
                              StreamState* state) {
  if (kind == ApiKind::kAnthropicMessages) {
    StreamState local;
    return wire::anthropic::RenderStreamStart(meta, state != nullptr ? *state : local);
  }
  return wire::openai::RenderStreamStart(kind, meta, n_choices);
}

std::string RenderStreamDelta(ApiKind kind, const ResponseMeta& meta, const gateway::Event& delta,
                              bool logprobs, StreamState* state) {
  if (kind == ApiKind::kAnthropicMessages) {
    StreamState local = OpenedText();
    return wire::anthropic::RenderStreamDelta(delta, state != nullptr ? *state : local);
  }
  return wire::openai::RenderStreamDelta(kind, meta, delta, logprobs);
}

void AppendStreamDelta(std::string& out, ApiKind kind, const ResponseMeta& meta,
                       const gateway::Event& delta, bool logprobs, StreamState* state) {
  if (kind == ApiKind::kAnthropicMessages) {
    out += RenderStreamDelta(kind, meta, delta, logprobs, state);
    return;
  }
  wire::openai::AppendStreamDelta(out, kind, meta, delta, logprobs,
                                  state != nullptr ? &state->chunk_head : nullptr);
}

std::string RenderStreamFinish(ApiKind kind, const ResponseMeta& meta, const gateway::Event& finish,
                               StreamState* state) {
  if (kind == ApiKind::kAnthropicMessages) {
    StreamState local = OpenedText();
    return wire::anthropic::RenderStreamFinish(meta, finish, state != nullptr ? *state : local);
  }
  return wire::openai::RenderStreamFinish(kind, meta, finish);
}

std::string RenderStreamEnd(ApiKind kind, const ResponseMeta& meta, int32_t completion_tokens,
                            bool include_usage) {
  if (kind == ApiKind::kAnthropicMessages) return "";
  return wire::openai::RenderStreamEnd(kind, meta, completion_tokens, include_usage);
}

}  // namespace strata::server
