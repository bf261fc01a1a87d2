// obs/span.h — the span model: one finished operation of a trace as it is
// exported (OpenTelemetry's data model, the subset strata records), and the
// interface a finished span is handed to.
//
// Promise: a SpanData is a plain value, bounded by its producer
// (obs/tracer.h: at most kMaxSpanAttributes attributes, each string at most
// kMaxAttributeBytes). Times are Unix nanoseconds; a root span has no
// parent id. Attribute keys follow the OpenTelemetry semantic conventions
// (docs/api.md lists every one strata sets); no value ever holds a prompt,
// an answer's text or a key.
//
// Threading: SpanData is a value type; a SpanExporter is thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "obs/trace_context.h"

namespace strata::obs {

// OTLP's Span.SpanKind numbers.
enum class SpanKind : uint8_t { kInternal = 1, kServer = 2, kClient = 3 };

using AttributeValue = std::variant<std::string, int64_t, double, bool, std::vector<std::string>>;

struct Attribute {
  std::string key;
  AttributeValue value;
};

inline constexpr size_t kMaxSpanAttributes = 64;    // more are dropped (and counted on the span)
inline constexpr size_t kMaxAttributeBytes = 1024;  // a longer string is cut at a character
inline constexpr size_t kMaxSpanNameBytes = 256;

struct SpanData {
  TraceId trace_id = {};
  SpanId span_id = {};
  SpanId parent_span_id = {};  // invalid: a root span (no parent, or a remote one's id)
  std::string trace_state;     // the trace's tracestate (W3C), "" = none
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  std::vector<Attribute> attributes;
  uint32_t dropped_attributes = 0;  // past kMaxSpanAttributes
  bool error = false;               // OTLP status code ERROR; else UNSET
  std::string status_message;       // with `error`
};

// Where finished spans go (the OTLP exporter, obs/otlp.h; a recorder in
// tests). Export never blocks: an implementation that cannot take a span
// drops it and counts the drop.
class SpanExporter {
 public:
  virtual ~SpanExporter() = default;
  virtual void Export(SpanData span) = 0;
};

}  // namespace strata::obs
