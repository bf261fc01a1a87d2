// The parts of the upstream wire both APIs share (internal/upstream_json.h)
// and the Api dispatch behind backend/upstream_wire.h.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "backend/internal/upstream_json.h"
#include "util/utf8.h"

namespace strata::backend::upstream {
namespace internal {

using util::ErrorReason;
using util::Status;
using util::StatusOr;

Status ProtocolError(std::string_view message) {
  return util::InternalError(fmt::format("upstream protocol error: {}", message))
      .WithReason(ErrorReason::kUpstreamProtocol);
}

namespace {

// Nesting depth of a JSON text, outside strings; stops counting past `limit`.
bool NestsDeeperThan(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

StatusOr<Json> ParseJson(std::string_view text, std::string_view what) {
  if (NestsDeeperThan(text, 64)) {
    return ProtocolError(fmt::format("the {} nests deeper than 64 levels", what));
  }
  // nlohmann refuses invalid UTF-8 in strings; an upstream that sends some
  // (a token split mid-character) gets U+FFFD instead of a failed run.
  // (Checked first: a valid text, nearly every one, is parsed uncopied.)
  std::string cleaned;
  std::string_view clean = text;
  if (!util::IsValidUtf8(text)) {
    cleaned = util::SanitizeUtf8(text);
    clean = cleaned;
  }
  try {
    return Json::parse(clean);
  } catch (const Json::parse_error& e) {
    return ProtocolError(
        fmt::format("the {} is not JSON (at byte {} of {})", what, e.byte, clean.size()));
  } catch (const std::exception& e) {
    return ProtocolError(fmt::format("the {} is not JSON", what));
  }
}

const Json* Member(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

StatusOr<std::optional<std::string>> OptString(const Json& obj, const char* key,
                                               std::string_view where) {
  const Json* v = Member(obj, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) {
    return ProtocolError(fmt::format("'{}{}' is not a string", where, key));
  }
  return std::optional<std::string>(v->get<std::string>());
}

StatusOr<std::optional<int32_t>> OptCount(const Json& obj, const char* key,
                                          std::string_view where) {
  const Json* v = Member(obj, key);
  if (v == nullptr) return std::optional<int32_t>();
  constexpr int32_t kMax = std::numeric_limits<int32_t>::max();
  if (v->is_number_unsigned()) {
    return std::optional<int32_t>(
        static_cast<int32_t>(std::min<uint64_t>(v->get<uint64_t>(), kMax)));
  }
  if (v->is_number_integer() && v->get<int64_t>() >= 0) {
    return std::optional<int32_t>(static_cast<int32_t>(std::min<int64_t>(v->get<int64_t>(), kMax)));
  }
  return ProtocolError(fmt::format("'{}{}' is not a token count", where, key));
}

StatusOr<float> Logprob(const Json& v, std::string_view where) {
  if (v.is_null()) return -std::numeric_limits<float>::infinity();
  if (!v.is_number()) return ProtocolError(fmt::format("'{}' is not a number", where));
  return static_cast<float>(v.get<double>());
}

std::string Quote(std::string_view text, size_t max_bytes) {
  std::string clean = util::SanitizeUtf8(text);
  for (char& c : clean) {
    if ((static_cast<unsigned char>(c) < 0x20) || c == 0x7f) c = ' ';
  }
  if (clean.size() <= max_bytes) return clean;
  // The longest prefix that ends on a character boundary.
  std::string cut = util::SplitCompleteUtf8(std::string_view(clean).substr(0, max_bytes)).complete;
  return fmt::format("{}...", cut);
}

Failure FailureOfHttp(int s) {
  switch (s) {
    case 400:
    case 404:
    case 413:
    case 422:
      return Failure::kRejected;
    case 401:
    case 403:
      return Failure::kCredential;
    case 408:
    case 504:
      return Failure::kTimeout;
    case 429:
      return Failure::kRateLimited;
    case 503:
    case 529:
      return Failure::kOverloaded;
    default:
      return s >= 500 && s <= 599 ? Failure::kServer : Failure::kOther;
  }
}

Failure FailureOfType(std::string_view t) {
  // Anthropic's types, OpenAI's, and vLLM's exception names.
  if (t == "invalid_request_error" || t == "not_found_error" || t == "request_too_large" ||
      t == "BadRequestError" || t == "NotFoundError") {
    return Failure::kRejected;
  }
  if (t == "authentication_error" || t == "permission_error") return Failure::kCredential;
  if (t == "rate_limit_error") return Failure::kRateLimited;
  if (t == "overloaded_error") return Failure::kOverloaded;
  if (t == "timeout_error") return Failure::kTimeout;
  return Failure::kServer;
}

Status FailureStatus(Failure f, std::string message) {
  switch (f) {
    case Failure::kRejected:
      return util::InvalidArgumentError(std::move(message))
          .WithReason(ErrorReason::kUpstreamRejected);
    case Failure::kCredential:
      return util::PermissionDeniedError(std::move(message))
          .WithReason(ErrorReason::kUpstreamError);
    case Failure::kTimeout:
      return util::DeadlineExceededError(std::move(message))
          .WithReason(ErrorReason::kUpstreamTimeout);
    case Failure::kRateLimited:
      return util::ResourceExhaustedError(std::move(message))
          .WithReason(ErrorReason::kUpstreamRateLimited);
    case Failure::kOverloaded:
      return util::UnavailableError(std::move(message))
          .WithReason(ErrorReason::kUpstreamOverloaded);
    case Failure::kServer:
      return util::UnavailableError(std::move(message)).WithReason(ErrorReason::kUpstreamError);
    case Failure::kOther:
      break;
  }
  return util::Status(util::StatusCode::kUnknown, std::move(message))
      .WithReason(ErrorReason::kUpstreamError);
}

Status MidStreamError(Api api, const Json& error) {
  std::string message, type, code;
  std::optional<int> http;
  if (error.is_string()) {
    message = error.get<std::string>();
  } else if (error.is_object()) {
    if (const Json* m = Member(error, "message"); m != nullptr && m->is_string()) {
      message = m->get<std::string>();
    }
    if (const Json* t = Member(error, "type"); t != nullptr && t->is_string()) {
      type = t->get<std::string>();
    }
    if (const Json* c = Member(error, "code"); c != nullptr) {
      if (c->is_string()) code = c->get<std::string>();
      if (c->is_number_integer() && c->get<int64_t>() >= 100 && c->get<int64_t>() <= 599) {
        http = static_cast<int>(c->get<int64_t>());
      }
    }
  }
  Failure f = FailureOfType(type);
  if (http) {
    f = FailureOfHttp(*http);
  } else if (code == "timeout" || code == "upstream_timeout") {
    f = Failure::kTimeout;
  } else if (code == "upstream_overloaded" || code == "upstream_unavailable" ||
             code == "shutting_down" || code == "model_loading" || code == "too_many_connections") {
    f = Failure::kOverloaded;
  }
  std::string label = type.empty() ? code : type;
  if (f == Failure::kCredential) {
    // Never quote it: a refused key's message may echo (part of) the key.
    return FailureStatus(
        f, fmt::format("the {} upstream refused strata's credential mid-stream{}", ApiName(api),
                       label.empty() ? "" : fmt::format(" ({})", label)));
  }
  return FailureStatus(f, fmt::format("the {} upstream failed mid-stream{}{}{}", ApiName(api),
                                      label.empty() ? "" : fmt::format(" ({})", Quote(label, 64)),
                                      message.empty() ? "" : ": ", Quote(message)));
}

// --- Finishes ----------------------------------------------------------------

Finishes::Finishes(int32_t n) : choices_(static_cast<size_t>(std::clamp(n, 1, kMaxChoices))) {}

int32_t Finishes::first_unfinished() const {
  for (int32_t i = 0; i < n(); ++i) {
    if (!choices_[i].finished) return i;
  }
  return n();
}

void Finishes::Finish(int32_t i, FinishReason reason, std::string stop_sequence) {
  Choice& c = choices_[i];
  if (c.finished) return;
  c.finished = true;
  c.reason = reason;
  c.stop_sequence = std::move(stop_sequence);
  ++n_finished_;
}

void Finishes::Emit(int32_t i, FinishReason reason, std::string stop_sequence, Status status,
                    std::vector<Event>* out) {
  Choice& c = choices_[i];
  c.emitted = true;
  ++n_emitted_;
  Event e;
  e.kind = Event::Kind::kFinish;
  e.index = i;
  e.finish = reason;
  e.stop_sequence = std::move(stop_sequence);
  e.status = std::move(status);
  e.usage.prompt_tokens = usage_.prompt_tokens;
  e.usage.cached_tokens = std::min(usage_.cached_tokens, usage_.prompt_tokens);
  e.usage.cache_write_tokens = usage_.cache_write_tokens;
  // The upstream reports one total: an even split, the first choices taking
  // the remainder, so the choices' sum is the total.
  const int32_t total = usage_.completion_tokens;
  e.usage.completion_tokens = total / n() + (i < total % n() ? 1 : 0);
  e.timing.tokens = e.usage.completion_tokens;
  out->push_back(std::move(e));
}

void Finishes::Flush(std::vector<Event>* out) {
  for (int32_t i = 0; i < n(); ++i) {
    Choice& c = choices_[i];
    if (c.finished && !c.emitted) Emit(i, c.reason, std::move(c.stop_sequence), Status(), out);
  }
}

void Finishes::Fail(const Status& status, std::vector<Event>* out) {
  Flush(out);
  for (int32_t i = 0; i < n(); ++i) {
    Choice& c = choices_[i];
    if (c.emitted) continue;
    c.finished = true;
    ++n_finished_;
    Emit(i, FinishReason::kCancelled, "", status, out);
  }
}

// --- DecoderCore -------------------------------------------------------------

DecoderCore::DecoderCore(int32_t n_choices, size_t max_event_bytes)
    : finishes_(n_choices), max_event_bytes_(max_event_bytes), parser_(max_event_bytes) {}

Status DecoderCore::Decode(std::string_view bytes, std::vector<Event>* out) {
  // The events complete before a framing error still count (as they would
  // have, had the bytes come in smaller pieces).
  const size_t before = out->size();
  Status event_error;
  const Status parsed = parser_.Feed(bytes, [&](const net::SseEventView& e) {
    if (complete()) return Status();  // the rest is ignored
    started_ = started_ || out->size() > before;
    event_error = OnEvent(e, out);
    return event_error.ok() ? Status() : util::CancelledError("stop");
  });
  STRATA_RETURN_IF_ERROR(event_error);
  started_ = started_ || out->size() > before;
  if (complete()) return Status();
  if (!parsed.ok()) {
    return ProtocolError(fmt::format("an event of the stream exceeds {} bytes", max_event_bytes_));
  }
  return Status();
}

Status DecoderCore::UpstreamFailed(Status status, std::vector<Event>* out) {
  if (!started_) return status;
  finishes_.Fail(status, out);
  return Status();
}

Status DecoderCore::Feed(std::string_view bytes, std::vector<Event>* out) {
  if (!error_.ok()) return error_;
  if (complete()) return Status();
  const size_t before = out->size();
  error_ = Decode(bytes, out);
  started_ = started_ || out->size() > before;
  return error_;
}

Status DecoderCore::End(std::vector<Event>* out) {
  if (!error_.ok()) return error_;
  if (complete()) return Status();
  const size_t before = out->size();
  // A last event without its blank line (or even its line end) still counts.
  error_ = Decode("\n\n", out);
  if (error_.ok() && !complete()) error_ = OnEnd(out);
  started_ = started_ || out->size() > before;
  return error_;
}

void DecoderCore::Fail(const Status& status, std::vector<Event>* out) {
  if (complete()) return;
  const size_t before = out->size();
  finishes_.Fail(status.ok() ? ProtocolError("the run failed without a reason") : status, out);
  started_ = started_ || out->size() > before;
}

// --- shared rendering bits ---------------------------------------------------

std::string StrataSamplerField(const sampling::SamplingParams& p) {
  const sampling::SamplingParams d;
  if (p.mirostat) return "mirostat";
  if (p.target_entropy >= 0) return "target_entropy";
  if (p.typical_p != d.typical_p) return "typical_p";
  if (p.entropy_tail_nats != d.entropy_tail_nats) return "entropy_tail_nats";
  if (p.mirostat_tau_bits != d.mirostat_tau_bits) return "mirostat_tau";
  if (p.mirostat_eta != d.mirostat_eta) return "mirostat_eta";
  return "target_entropy";
}

Status Unsupported(Api api, std::string field, std::string_view why) {
  std::string message =
      fmt::format("'{}' is not supported by the {} backend: {}", field, ApiName(api), why);
  return util::InvalidFieldError(std::move(field), std::move(message))
      .WithReason(ErrorReason::kUnsupportedByBackend);
}

double CleanNumber(float f) {
  if (!std::isfinite(f)) return static_cast<double>(f);
  const std::string shortest = fmt::format("{}", f);
  double d = static_cast<double>(f);
  std::from_chars(shortest.data(), shortest.data() + shortest.size(), d);
  return d;
}

}  // namespace internal

// --- backend/upstream_wire.h ---------------------------------------------------

using util::Status;
using util::StatusOr;

std::string_view ApiName(Api api) { return api == Api::kAnthropic ? "anthropic" : "openai"; }

std::optional<Api> ParseApi(std::string_view name) {
  if (name == "openai") return Api::kOpenAI;
  if (name == "anthropic") return Api::kAnthropic;
  return std::nullopt;
}

StatusOr<Call> RenderRequest(Api api, const Request& r, const RenderOptions& o) {
  if (api == Api::kAnthropic) return internal::RenderAnthropic(r, o);
  return internal::RenderOpenAI(r, o);
}

StreamDecoder::StreamDecoder(Api api, bool chat, int32_t n_choices, std::vector<std::string> stops,
                             size_t max_event_bytes)
    : core_(api == Api::kAnthropic
                ? internal::NewAnthropicDecoder(max_event_bytes)
                : internal::NewOpenAIDecoder(chat, n_choices, std::move(stops), max_event_bytes)) {}
StreamDecoder::~StreamDecoder() = default;
StreamDecoder::StreamDecoder(StreamDecoder&&) noexcept = default;
StreamDecoder& StreamDecoder::operator=(StreamDecoder&&) noexcept = default;

Status StreamDecoder::Feed(std::string_view body_bytes, std::vector<Event>* out) {
  return core_->Feed(body_bytes, out);
}
Status StreamDecoder::End(std::vector<Event>* out) { return core_->End(out); }
void StreamDecoder::Fail(const Status& status, std::vector<Event>* out) {
  core_->Fail(status, out);
}
bool StreamDecoder::started() const { return core_->started(); }
bool StreamDecoder::complete() const { return core_->complete(); }

Status DecodeWholeResponse(Api api, bool chat, int32_t n_choices,
                           const std::vector<std::string>& stops, std::string_view body,
                           std::vector<Event>* out) {
  std::vector<Event> events;
  if (api == Api::kOpenAI) {
    if (std::optional<Status> s =
            internal::DecodeOpenAIWholePlain(chat, n_choices, stops, body, &events)) {
      if (s->ok()) out->insert(out->end(), events.begin(), events.end());
      return *s;
    }
  }
  STRATA_ASSIGN_OR_RETURN(const internal::Json j, internal::ParseJson(body, "response body"));
  if (!j.is_object()) return internal::ProtocolError("the response body is not a JSON object");
  const Status s = api == Api::kAnthropic
                       ? internal::DecodeAnthropicWhole(j, &events)
                       : internal::DecodeOpenAIWhole(chat, n_choices, stops, j, &events);
  // All or nothing: a body that fails half-way produced no events.
  if (s.ok()) out->insert(out->end(), events.begin(), events.end());
  return s;
}

namespace {

// Whether a rejection says the prompt does not fit the upstream model's
// context. OpenAI (and strata) answer with code "context_length_exceeded";
// the Anthropic API has no code, its message says "prompt is too long";
// strata's message in either API starts "context length exceeded"; vLLM's
// (OpenAI's older one) says "maximum context length".
bool IsContextOverflow(std::string_view code, std::string_view message) {
  return code == "context_length_exceeded" || message.rfind("prompt is too long", 0) == 0 ||
         message.rfind("context length exceeded", 0) == 0 ||
         message.find("maximum context length") != std::string_view::npos;
}

}  // namespace

Status UpstreamError(Api api, int http_status, std::string_view body) {
  using internal::Json;
  using internal::Member;
  std::string message, type, code, param;
  // Error bodies are small; a large one is not an API's error JSON.
  if (body.size() <= (64u << 10)) {
    auto parsed = internal::ParseJson(body, "error body");
    if (parsed.ok() && parsed->is_object()) {
      const Json& j = *parsed;
      const Json* err = Member(j, "error");
      const Json* holder = err != nullptr && err->is_object() ? err : &j;
      if (err != nullptr && err->is_string()) {
        message = err->get<std::string>();
      } else if (const Json* m = Member(*holder, "message"); m != nullptr && m->is_string()) {
        message = m->get<std::string>();  // {"error": {"message"}}, or vLLM's flat shape
      }
      if (const Json* t = Member(*holder, "type"); t != nullptr && t->is_string()) {
        type = t->get<std::string>();
      }
      if (const Json* c = Member(*holder, "code"); c != nullptr && c->is_string()) {
        code = c->get<std::string>();
      }
      // OpenAI names the field it refused; a client's SDK reports it.
      if (const Json* pa = Member(*holder, "param"); pa != nullptr && pa->is_string()) {
        param = internal::Quote(pa->get<std::string>(), 128);
      }
    }
  }
  const internal::Failure f = internal::FailureOfHttp(http_status);
  const std::string label = type.empty() ? "" : fmt::format(" {}", internal::Quote(type, 64));
  if (f == internal::Failure::kCredential) {
    // Never quote it: a refused key's message may echo (part of) the key.
    return internal::FailureStatus(
        f, fmt::format("the {} upstream refused strata's credential (HTTP {}{})", ApiName(api),
                       http_status, label));
  }
  std::string what;
  if (!message.empty()) {
    what = fmt::format(": {}", internal::Quote(message));
  } else if (!body.empty()) {
    what = fmt::format(" (a body of {} bytes that is not its API's error JSON)", body.size());
  }
  std::string text =
      fmt::format("the {} upstream answered HTTP {}{}{}", ApiName(api), http_status, label, what);
  if (f == internal::Failure::kRejected && IsContextOverflow(code, message)) {
    // The client's own error, whichever server found it: the code it acts on.
    return util::InvalidArgumentError(std::move(text))
        .WithReason(util::ErrorReason::kContextLengthExceeded);
  }
  Status st = internal::FailureStatus(f, std::move(text));
  if (f == internal::Failure::kRejected && !param.empty()) st = std::move(st).WithField(param);
  return st;
}

}  // namespace strata::backend::upstream
