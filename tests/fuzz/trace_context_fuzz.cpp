// Fuzz target: the W3C Trace Context parsers (obs/trace_context.h). The
// input's lines are header field values: the first is a traceparent, the
// rest tracestate fields. Nothing crashes; a traceparent that parses has
// valid ids, formats to 55 characters and parses back to the same ids and
// sampled flag; a tracestate that survives is at most 512 bytes, has at
// most 32 members and is its own normal form (parsing it again changes
// nothing).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "obs/trace_context.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace obs = strata::obs;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> lines;
  while (true) {
    const size_t nl = in.find('\n');
    lines.push_back(in.substr(0, nl));
    if (nl == std::string_view::npos) break;
    in.remove_prefix(nl + 1);
  }
  if (const auto c = obs::ParseTraceparent(lines.front())) {
    if (!c->trace_id.valid() || !c->span_id.valid()) std::abort();
    const std::string formatted = obs::FormatTraceparent(*c);
    if (formatted.size() != 55) std::abort();
    const auto again = obs::ParseTraceparent(formatted);
    if (!again || again->trace_id != c->trace_id || again->span_id != c->span_id ||
        again->sampled() != c->sampled()) {
      std::abort();
    }
  }
  (void)obs::ParseTraceparentFields(lines);
  const std::vector<std::string_view> states(lines.begin() + 1, lines.end());
  const std::string state = obs::ParseTracestate(states);
  if (state.size() > obs::kMaxTracestateBytes) std::abort();
  if (!state.empty()) {
    size_t members = 1;
    for (char c : state) members += c == ',';
    if (members > obs::kMaxTracestateMembers) std::abort();
    const std::string_view one[] = {state};
    if (obs::ParseTracestate(one) != state) std::abort();
  }
  return 0;
}
