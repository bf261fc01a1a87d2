#include "obs/tracer.h"

#include <algorithm>

#include <fmt/format.h>

#include "util/random.h"

namespace strata::obs {
namespace {

// `s` cut to at most `max` bytes without splitting a UTF-8 character.
std::string_view CutAtCharacter(std::string_view s, size_t max) {
  if (s.size() <= max) return s;
  size_t end = max;
  // Back off continuation bytes (10xxxxxx) to the start of the character.
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xc0) == 0x80) --end;
  return s.substr(0, end);
}

}  // namespace

std::string_view SampledByName(SampledBy by) {
  return by == SampledBy::kParent ? "parent" : "rate";
}

SamplingDecision DecideSampling(const std::optional<SpanContext>& parent, double rate, double u) {
  if (parent) return {.sampled = parent->sampled(), .by = SampledBy::kParent, .rate = rate};
  return {.sampled = u < rate, .by = SampledBy::kRate, .rate = rate};
}

// --- Tracer -------------------------------------------------------------------

Tracer::Tracer(const TracerOptions& options, std::shared_ptr<SpanExporter> exporter,
               MetricsRegistry& metrics, const util::Clock& clock)
    : options_(options),
      sample_rate_(options.sample_rate),
      exporter_(std::move(exporter)),
      clock_(clock),
      state_(options.seed) {
  auto& family = metrics.Counter("strata_trace_requests_total",
                                 "API requests by trace sampling decision (sampled: recorded) and "
                                 "who made it (parent: the incoming traceparent; rate: the draw).",
                                 {"sampled", "by"});
  for (int s = 0; s < 2; ++s) {
    for (int b = 0; b < 2; ++b) {
      decisions_[s][b] = &family.With({s == 1 ? "true" : "false", b == 0 ? "parent" : "rate"});
    }
  }
  by_cache_ = &metrics.Counter("strata_requests_traced_total",
                               "Generation requests by how the cache served them (miss, l1, l3, "
                               "coalesced) and whether they were traced (recorded as spans).",
                               {"cache", "traced"});
}

util::StatusOr<std::shared_ptr<Tracer>> Tracer::Create(const TracerOptions& options,
                                                       std::shared_ptr<SpanExporter> exporter,
                                                       MetricsRegistry& metrics,
                                                       const util::Clock& clock) {
  if (!(options.sample_rate >= 0 && options.sample_rate <= 1)) {
    return util::InvalidArgumentError(
        fmt::format("the trace sample rate {} is outside [0, 1]", options.sample_rate));
  }
  if (exporter == nullptr) return util::InvalidArgumentError("a tracer needs an exporter");
  return std::shared_ptr<Tracer>(new Tracer(options, std::move(exporter), metrics, clock));
}

void Tracer::CountByCache(std::string_view cache, bool traced) {
  by_cache_->With({std::string(cache), traced ? "true" : "false"}).Inc();
}

util::Status Tracer::SetSampleRate(double rate) {
  if (!(rate >= 0 && rate <= 1)) {
    return util::InvalidArgumentError(
        fmt::format("the trace sample rate {} is outside [0, 1]", rate));
  }
  sample_rate_.store(rate);
  return util::OkStatus();
}

uint64_t Tracer::NextRandom() {
  uint64_t x = state_.fetch_add(0x9e3779b97f4a7c15ULL, std::memory_order_relaxed);
  return util::Rng::SplitMix64(x);
}

SpanId Tracer::NewSpanId() {
  SpanId id;
  while (!id.valid()) id.value = NextRandom();
  return id;
}

TraceId Tracer::NewTraceId() {
  TraceId id;
  while (!id.valid()) id = {NextRandom(), NextRandom()};
  return id;
}

std::shared_ptr<RequestTrace> Tracer::StartRequest(const std::optional<SpanContext>& parent,
                                                   std::string tracestate, double rate_factor) {
  const double rate = std::clamp(sample_rate() * rate_factor, 0.0, 1.0);
  // A draw only where it decides (no parent), in [0, 1) with 53 bits.
  const double u = parent ? 0.0 : static_cast<double>(NextRandom() >> 11) * 0x1.0p-53;
  RequestTrace::Init init;
  init.decision = DecideSampling(parent, rate, u);
  decisions_[init.decision.sampled ? 1 : 0][init.decision.by == SampledBy::kParent ? 0 : 1]->Inc();
  init.tracer = shared_from_this();
  init.trace_id = parent ? parent->trace_id : NewTraceId();
  init.root_id = NewSpanId();
  init.parent = parent;
  // A tracestate belongs to its traceparent: without one it is dropped.
  if (parent) init.tracestate = std::move(tracestate);
  if (init.decision.sampled) {  // only a recorded request's spans need times
    init.steady_anchor = clock_.Now();
    init.unix_anchor_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(clock_.WallNow().time_since_epoch())
            .count();
  }
  return std::make_shared<RequestTrace>(std::move(init));
}

// --- RequestTrace ---------------------------------------------------------------

RequestTrace::RequestTrace(Init init)
    : tracer_(std::move(init.tracer)),
      trace_id_(init.trace_id),
      root_id_(init.root_id),
      parent_(init.parent),
      tracestate_(std::move(init.tracestate)),
      decision_(init.decision),
      steady_anchor_(init.steady_anchor),
      unix_anchor_ns_(init.unix_anchor_ns) {}

std::shared_ptr<RequestTrace> RequestTrace::PassThrough(const SpanContext& parent,
                                                        std::string tracestate) {
  Init init;
  init.trace_id = parent.trace_id;
  init.root_id = parent.span_id;
  init.parent = parent;
  init.tracestate = std::move(tracestate);
  init.decision = {.sampled = parent.sampled(), .by = SampledBy::kParent, .rate = 0};
  return std::make_shared<RequestTrace>(std::move(init));
}

std::string RequestTrace::OutgoingTraceparent(SpanId caller) const {
  if (!participating()) return FormatTraceparent(*parent_);
  return FormatTraceparent({.trace_id = trace_id_,
                            .span_id = caller.valid() ? caller : root_id_,
                            .flags = decision_.sampled ? kSampledFlag : uint8_t{0}});
}

std::string RequestTrace::Traceresponse() const {
  if (!participating()) return "";
  return OutgoingTraceparent();
}

int64_t RequestTrace::UnixNanos(std::chrono::steady_clock::time_point t) const {
  return unix_anchor_ns_ +
         std::chrono::duration_cast<std::chrono::nanoseconds>(t - steady_anchor_).count();
}

Span RequestTrace::StartRoot(std::string name, SpanKind kind,
                             std::chrono::steady_clock::time_point start) const {
  return Begin(std::move(name), kind, start, root_id_, parent_ ? parent_->span_id : SpanId{});
}

Span RequestTrace::StartSpan(std::string name, SpanKind kind,
                             std::chrono::steady_clock::time_point start, SpanId parent) const {
  if (!recording()) return Span();
  return Begin(std::move(name), kind, start, tracer_->NewSpanId(),
               parent.valid() ? parent : root_id_);
}

Span RequestTrace::Begin(std::string name, SpanKind kind,
                         std::chrono::steady_clock::time_point start, SpanId id,
                         SpanId parent) const {
  Span s;
  if (!recording()) return s;
  s.trace_ = shared_from_this();
  s.tracer_ = tracer_;
  SpanData& d = s.data_;
  d.trace_id = trace_id_;
  d.span_id = id;
  d.parent_span_id = parent;
  d.trace_state = tracestate_;
  d.name = std::move(name);
  d.name.resize(CutAtCharacter(d.name, kMaxSpanNameBytes).size());
  d.kind = kind;
  d.start_unix_ns = UnixNanos(start);
  return s;
}

// --- Span ---------------------------------------------------------------------------

Span::Span(Span&& other) noexcept
    : trace_(std::move(other.trace_)),
      tracer_(std::move(other.tracer_)),
      data_(std::move(other.data_)) {
  other.trace_.reset();
}

Span& Span::operator=(Span&& other) noexcept {
  if (this != &other) {
    End();
    trace_ = std::move(other.trace_);
    tracer_ = std::move(other.tracer_);
    data_ = std::move(other.data_);
    other.trace_.reset();
  }
  return *this;
}

Span::~Span() { End(); }

void Span::Put(std::string_view key, AttributeValue value) {
  for (Attribute& a : data_.attributes) {
    if (a.key == key) {
      a.value = std::move(value);
      return;
    }
  }
  if (data_.attributes.size() >= kMaxSpanAttributes) {
    ++data_.dropped_attributes;
    return;
  }
  data_.attributes.push_back({std::string(key), std::move(value)});
}

void Span::SetName(std::string_view name) {
  if (trace_ != nullptr) data_.name = std::string(CutAtCharacter(name, kMaxSpanNameBytes));
}

void Span::SetString(std::string_view key, std::string_view value) {
  if (trace_ == nullptr) return;
  Put(key, std::string(CutAtCharacter(value, kMaxAttributeBytes)));
}

void Span::SetInt(std::string_view key, int64_t value) {
  if (trace_ != nullptr) Put(key, value);
}

void Span::SetDouble(std::string_view key, double value) {
  if (trace_ != nullptr) Put(key, value);
}

void Span::SetBool(std::string_view key, bool value) {
  if (trace_ != nullptr) Put(key, value);
}

void Span::SetStrings(std::string_view key, std::vector<std::string> values) {
  if (trace_ == nullptr) return;
  if (values.size() > kMaxSpanAttributes) values.resize(kMaxSpanAttributes);
  for (std::string& v : values) v.resize(CutAtCharacter(v, kMaxAttributeBytes).size());
  Put(key, std::move(values));
}

void Span::SetError(std::string_view message) {
  if (trace_ == nullptr) return;
  data_.error = true;
  data_.status_message = std::string(CutAtCharacter(message, kMaxAttributeBytes));
}

void Span::End(std::chrono::steady_clock::time_point end) {
  if (trace_ == nullptr) return;
  data_.end_unix_ns = std::max(trace_->UnixNanos(end), data_.start_unix_ns);
  tracer_->exporter_->Export(std::move(data_));
  data_ = SpanData{};
  trace_.reset();
  tracer_.reset();
}

void Span::End() {
  if (trace_ == nullptr) return;
  End(tracer_->clock_.Now());
}

}  // namespace strata::obs
