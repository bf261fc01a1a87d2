#include "obs/trace_context.h"

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace strata::obs {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

void AppendHex64(std::string& out, uint64_t v) {
  for (int shift = 60; shift >= 0; shift -= 4) out.push_back(kHexDigits[(v >> shift) & 0xf]);
}

// The value of a lowercase hex digit, or -1 (uppercase is not HEXDIGLC).
int LowerHexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// `s` (at most 16 digits) as a number; false on any non-HEXDIGLC character.
bool ParseLowerHex(std::string_view s, uint64_t* out) {
  uint64_t v = 0;
  for (char c : s) {
    const int d = LowerHexValue(c);
    if (d < 0) return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

bool IsOws(char c) { return c == ' ' || c == '\t'; }

std::string_view TrimOws(std::string_view s) {
  while (!s.empty() && IsOws(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsOws(s.back())) s.remove_suffix(1);
  return s;
}

bool IsLcAlpha(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
// lcalpha / DIGIT / "_" / "-" / "*" / "/"
bool IsKeyChar(char c) {
  return IsLcAlpha(c) || IsDigit(c) || c == '_' || c == '-' || c == '*' || c == '/';
}

// Level 1's key: simple-key = lcalpha 0*255(keychar), or multi-tenant-key =
// tenant-id "@" system-id with tenant-id = (lcalpha / DIGIT) 0*240(keychar)
// and system-id = lcalpha 0*13(keychar).
bool ValidTracestateKey(std::string_view key) {
  const size_t at = key.find('@');
  const auto all_key_chars = [](std::string_view s) {
    return std::all_of(s.begin(), s.end(), IsKeyChar);
  };
  if (at == std::string_view::npos) {
    return !key.empty() && key.size() <= 256 && IsLcAlpha(key.front()) && all_key_chars(key);
  }
  const std::string_view tenant = key.substr(0, at);
  const std::string_view system = key.substr(at + 1);
  return !tenant.empty() && tenant.size() <= 241 &&
         (IsLcAlpha(tenant.front()) || IsDigit(tenant.front())) && all_key_chars(tenant) &&
         !system.empty() && system.size() <= 14 && IsLcAlpha(system.front()) &&
         all_key_chars(system);
}

// value = 0*255(chr) nblk-chr; chr = %x20 / nblk-chr; nblk-chr = %x21-2B /
// %x2D-3C / %x3E-7E (printable ASCII but "," and "=").
bool ValidTracestateValue(std::string_view value) {
  if (value.empty() || value.size() > 256 || value.back() == ' ') return false;
  return std::all_of(value.begin(), value.end(),
                     [](char c) { return c >= 0x20 && c <= 0x7e && c != ',' && c != '='; });
}

}  // namespace

std::string TraceId::Hex() const {
  std::string out;
  out.reserve(32);
  AppendHex64(out, hi);
  AppendHex64(out, lo);
  return out;
}

std::string SpanId::Hex() const {
  std::string out;
  out.reserve(16);
  AppendHex64(out, value);
  return out;
}

std::optional<SpanContext> ParseTraceparent(std::string_view value) {
  const std::string_view s = TrimOws(value);
  // version "-": two lowercase hex digits and a dash, else the trace restarts.
  if (s.size() < 3 || s[2] != '-') return std::nullopt;
  uint64_t version = 0;
  if (!ParseLowerHex(s.substr(0, 2), &version) || version == 0xff) return std::nullopt;
  constexpr size_t kV00Size = 55;  // 2 + 1 + 32 + 1 + 16 + 1 + 2
  if (version == 0) {
    if (s.size() != kV00Size) return std::nullopt;
  } else {
    // A higher version is read as 00's fields; what follows them is its
    // own and must start with a dash.
    if (s.size() < kV00Size || (s.size() > kV00Size && s[kV00Size] != '-')) return std::nullopt;
  }
  if (s[35] != '-' || s[52] != '-') return std::nullopt;
  SpanContext c;
  uint64_t flags = 0;
  if (!ParseLowerHex(s.substr(3, 16), &c.trace_id.hi) ||
      !ParseLowerHex(s.substr(19, 16), &c.trace_id.lo) ||
      !ParseLowerHex(s.substr(36, 16), &c.span_id.value) ||
      !ParseLowerHex(s.substr(53, 2), &flags)) {
    return std::nullopt;
  }
  if (!c.trace_id.valid() || !c.span_id.valid()) return std::nullopt;
  c.flags = static_cast<uint8_t>(version == 0 ? flags : (flags & kSampledFlag));
  return c;
}

std::optional<SpanContext> ParseTraceparentFields(std::span<const std::string_view> values) {
  if (values.size() != 1) return std::nullopt;  // none, or ambiguous
  return ParseTraceparent(values.front());
}

std::string FormatTraceparent(const SpanContext& c) {
  std::string out;
  out.reserve(55);
  out += "00-";
  AppendHex64(out, c.trace_id.hi);
  AppendHex64(out, c.trace_id.lo);
  out += '-';
  AppendHex64(out, c.span_id.value);
  out += c.sampled() ? "-01" : "-00";
  return out;
}

std::string ParseTracestate(std::span<const std::string_view> values) {
  std::vector<std::string_view> members;
  std::unordered_set<std::string_view> keys;
  for (std::string_view field : values) {
    while (true) {
      const size_t comma = field.find(',');
      const std::string_view member = TrimOws(field.substr(0, comma));
      if (!member.empty()) {
        if (members.size() == kMaxTracestateMembers) return "";
        const size_t eq = member.find('=');
        if (eq == std::string_view::npos) return "";
        const std::string_view key = member.substr(0, eq);
        if (!ValidTracestateKey(key) || !ValidTracestateValue(member.substr(eq + 1))) return "";
        if (!keys.insert(key).second) return "";  // one entry per key
        members.push_back(member);
      }
      if (comma == std::string_view::npos) break;
      field.remove_prefix(comma + 1);
    }
  }
  const auto combined = [&members] {
    size_t n = members.empty() ? 0 : members.size() - 1;  // the commas
    for (std::string_view m : members) n += m.size();
    return n;
  };
  // Too long: whole members go, the long ones first (the last of them first).
  while (combined() > kMaxTracestateBytes) {
    auto longest = std::find_if(members.rbegin(), members.rend(), [](std::string_view m) {
      return m.size() > kTracestateLongMemberBytes;
    });
    if (longest != members.rend()) {
      members.erase(std::next(longest).base());
    } else {
      members.pop_back();
    }
  }
  std::string out;
  for (std::string_view m : members) {
    if (!out.empty()) out += ',';
    out += m;
  }
  return out;
}

}  // namespace strata::obs
