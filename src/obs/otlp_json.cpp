// The OTLP/HTTP JSON encoding of spans (obs/otlp.h; the field list is in
// docs/formats/otlp_traces.md).
#include <cmath>

#include <fmt/format.h>

#include "obs/otlp.h"
#include "util/utf8.h"

namespace strata::obs {
namespace {

void AppendJsonText(std::string& out, std::string_view s) {
  if (!util::AppendJsonString(out, s)) util::AppendJsonString(out, util::SanitizeUtf8(s));
}

// An AnyValue.
void AppendAnyValue(std::string& out, const AttributeValue& value) {
  if (const auto* s = std::get_if<std::string>(&value)) {
    out += "{\"stringValue\":";
    AppendJsonText(out, *s);
    out += '}';
  } else if (const auto* i = std::get_if<int64_t>(&value)) {
    // int64 is a decimal string in the protobuf JSON mapping.
    fmt::format_to(std::back_inserter(out), "{{\"intValue\":\"{}\"}}", *i);
  } else if (const auto* d = std::get_if<double>(&value)) {
    if (std::isfinite(*d)) {
      fmt::format_to(std::back_inserter(out), "{{\"doubleValue\":{}}}", *d);
    } else {
      // JSON has no numbers for these; the mapping's strings do.
      fmt::format_to(std::back_inserter(out), "{{\"doubleValue\":\"{}\"}}",
                     std::isnan(*d) ? "NaN" : (*d > 0 ? "Infinity" : "-Infinity"));
    }
  } else if (const auto* b = std::get_if<bool>(&value)) {
    out += *b ? "{\"boolValue\":true}" : "{\"boolValue\":false}";
  } else if (const auto* list = std::get_if<std::vector<std::string>>(&value)) {
    out += "{\"arrayValue\":{\"values\":[";
    for (size_t k = 0; k < list->size(); ++k) {
      if (k > 0) out += ',';
      out += "{\"stringValue\":";
      AppendJsonText(out, (*list)[k]);
      out += '}';
    }
    out += "]}}";
  }
}

// A KeyValue.
void AppendKeyValue(std::string& out, std::string_view key, const AttributeValue& value) {
  out += "{\"key\":";
  AppendJsonText(out, key);
  out += ",\"value\":";
  AppendAnyValue(out, value);
  out += '}';
}

void AppendSpan(std::string& out, const SpanData& s) {
  out += "{\"traceId\":\"";
  out += s.trace_id.Hex();
  out += "\",\"spanId\":\"";
  out += s.span_id.Hex();
  out += '"';
  if (s.parent_span_id.valid()) {
    out += ",\"parentSpanId\":\"";
    out += s.parent_span_id.Hex();
    out += '"';
  }
  if (!s.trace_state.empty()) {
    out += ",\"traceState\":";
    AppendJsonText(out, s.trace_state);
  }
  out += ",\"name\":";
  AppendJsonText(out, s.name);
  fmt::format_to(std::back_inserter(out),
                 ",\"kind\":{},\"startTimeUnixNano\":\"{}\",\"endTimeUnixNano\":\"{}\"",
                 static_cast<int>(s.kind), s.start_unix_ns, s.end_unix_ns);
  out += ",\"attributes\":[";
  for (size_t i = 0; i < s.attributes.size(); ++i) {
    if (i > 0) out += ',';
    AppendKeyValue(out, s.attributes[i].key, s.attributes[i].value);
  }
  out += ']';
  if (s.dropped_attributes > 0) {
    fmt::format_to(std::back_inserter(out), ",\"droppedAttributesCount\":{}", s.dropped_attributes);
  }
  if (s.error) {
    out += ",\"status\":{\"code\":2,\"message\":";  // STATUS_CODE_ERROR
    AppendJsonText(out, s.status_message);
    out += '}';
  }
  out += '}';
}

}  // namespace

std::string EncodeOtlpJson(const OtlpResource& resource, std::span<const SpanData> spans) {
  std::string out;
  // A root span with its attributes is about 1 KiB: one allocation, no regrowth.
  out.reserve(512 + spans.size() * 1024);
  out += "{\"resourceSpans\":[{\"resource\":{\"attributes\":[";
  AppendKeyValue(out, "service.name", resource.service_name);
  if (!resource.service_version.empty()) {
    out += ',';
    AppendKeyValue(out, "service.version", resource.service_version);
  }
  if (!resource.instance_id.empty()) {
    out += ',';
    AppendKeyValue(out, "service.instance.id", resource.instance_id);
  }
  out += ',';
  AppendKeyValue(out, "telemetry.sdk.name", std::string("strata"));
  out += ',';
  AppendKeyValue(out, "telemetry.sdk.language", std::string("cpp"));
  out += "]},\"scopeSpans\":[{\"scope\":{\"name\":\"strata\"";
  if (!resource.service_version.empty()) {
    out += ",\"version\":";
    AppendJsonText(out, resource.service_version);
  }
  out += "},\"spans\":[";
  for (size_t i = 0; i < spans.size(); ++i) {
    if (i > 0) out += ',';
    AppendSpan(out, spans[i]);
  }
  out += "]}]}]}";
  return out;
}

}  // namespace strata::obs
