// obs/trace_context.h — W3C Trace Context (Level 1): trace and span ids, the
// `traceparent` and `tracestate` request headers, and the `traceresponse`
// response header.
//
// Promise: parsing follows the specification to the letter and never fails
// loudly: a value it does not accept is nullopt (traceparent) or "" (tracestate),
// which means "start a new trace" or "no tracestate" — never an error for
// the client.
//
//   traceparent  version "-" trace-id "-" parent-id "-" trace-flags, lowercase
//                hex only, OWS (spaces, tabs) around the value ignored. Version
//                00 is exactly 55 characters; version ff is invalid; a higher
//                version is read as 00 (at least 55 characters, and the flags
//                end the value or are followed by "-"), only its sampled flag
//                kept. All-zero trace or parent ids are invalid. A request
//                with more than one traceparent field has none.
//   tracestate   the fields combined in order (RFC 9110 list rules), members
//                "key=value" with Level 1's key and value grammar, empty
//                members skipped. Any malformed member, a key seen twice or
//                more than 32 members discards the whole header. Longer than
//                512 bytes, whole members are removed: those over 128 bytes
//                first (last first), then from the end.
//
// Formatting writes version 00 with only the sampled flag (every other flag
// is reserved and must be sent as zero).
//
// Threading: value types and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace strata::obs {

// 16 bytes; all zero is invalid ("no trace").
struct TraceId {
  uint64_t hi = 0;  // the first 8 bytes, big-endian
  uint64_t lo = 0;  // the last 8 bytes
  bool valid() const { return hi != 0 || lo != 0; }
  std::string Hex() const;  // 32 lowercase hex digits
  bool operator==(const TraceId&) const = default;
};

// 8 bytes; all zero is invalid ("no span", e.g. a root span's parent).
struct SpanId {
  uint64_t value = 0;
  bool valid() const { return value != 0; }
  std::string Hex() const;  // 16 lowercase hex digits
  bool operator==(const SpanId&) const = default;
};

inline constexpr uint8_t kSampledFlag = 0x01;

// What a traceparent says: the trace, the caller's span and its flags.
struct SpanContext {
  TraceId trace_id = {};
  SpanId span_id = {};
  uint8_t flags = 0;  // as received (version 00) or the sampled flag alone (higher versions)
  bool sampled() const { return (flags & kSampledFlag) != 0; }
  bool operator==(const SpanContext&) const = default;
};

// One traceparent field value; nullopt when the specification says to
// ignore it (and start a new trace).
std::optional<SpanContext> ParseTraceparent(std::string_view value);
// Every traceparent field of a request, in order: the context when there is
// exactly one and it is valid.
std::optional<SpanContext> ParseTraceparentFields(std::span<const std::string_view> values);
// "00-{trace-id}-{span-id}-{flags}", flags reduced to the sampled flag.
// Precondition: both ids valid. Also the value of a traceresponse header.
std::string FormatTraceparent(const SpanContext& context);

inline constexpr size_t kMaxTracestateMembers = 32;
inline constexpr size_t kMaxTracestateBytes = 512;
inline constexpr size_t kTracestateLongMemberBytes = 128;  // removed first when truncating

// The tracestate of a request from its tracestate field values (in order),
// checked and normalised: members joined by "," without OWS, at most
// kMaxTracestateBytes long. "" when there is none, or when it is invalid.
std::string ParseTracestate(std::span<const std::string_view> values);

}  // namespace strata::obs
