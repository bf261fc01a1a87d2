#include "gateway/invalidation_message.h"

#include <charconv>

#include <fmt/format.h>

namespace strata::gateway {
namespace {

std::string Hex(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
  return out;
}

std::optional<std::string> Unhex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    unsigned v = 0;
    const auto r = std::from_chars(hex.data() + i, hex.data() + i + 2, v, 16);
    if (r.ec != std::errc() || r.ptr != hex.data() + i + 2) return std::nullopt;
    out.push_back(static_cast<char>(v));
  }
  return out;
}

}  // namespace

std::string EncodeInvalidationMessage(const InvalidationMessage& m) {
  const InvalidationMessage& s = m;
  std::string out = "v=01\n";
  auto field = [&out](std::string_view name, std::string_view value) {
    out += fmt::format("{}={}\n", name, Hex(value));
  };
  if (s.tenant) field("tenant", *s.tenant);
  if (s.model) field("model", *s.model);
  if (s.fingerprint) field("version", fmt::format("{:016x}", *s.fingerprint));
  if (s.prefix) field("prefix", *s.prefix);
  if (s.key) {
    field("key", s.key->bytes);
    field("key_hash", fmt::format("{:016x}", s.key->hash));
  }
  if (m.prompt_tokens) {
    std::string ids;
    for (int32_t t : *m.prompt_tokens) ids += fmt::format("{}{}", ids.empty() ? "" : ",", t);
    field("tokens", ids);
  }
  field("reason", m.reason);
  return out;
}

namespace {

std::optional<uint64_t> ParseHex64(std::string_view s) {
  uint64_t v = 0;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

util::StatusOr<InvalidationMessage> DecodeInvalidationMessage(std::string_view text) {
  InvalidationMessage m;
  bool versioned = false;
  std::optional<std::string> key_bytes;
  std::optional<uint64_t> key_hash;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    const size_t eq = line.find('=');
    if (eq == std::string_view::npos) return util::DataLossError("invalidation: a line has no '='");
    const std::string_view name = line.substr(0, eq), raw = line.substr(eq + 1);
    if (name == "v") {
      if (raw != "01") return util::DataLossError(fmt::format("invalidation: version {}", raw));
      versioned = true;
      continue;
    }
    const std::optional<std::string> value = Unhex(raw);
    if (!value) return util::DataLossError(fmt::format("invalidation: '{}' is not hex", name));
    InvalidationMessage& s = m;
    if (name == "tenant") {
      s.tenant = *value;
    } else if (name == "model") {
      s.model = *value;
    } else if (name == "version") {
      s.fingerprint = ParseHex64(*value);
      if (!s.fingerprint) return util::DataLossError("invalidation: a bad model version");
    } else if (name == "prefix") {
      s.prefix = *value;
    } else if (name == "key") {
      key_bytes = *value;
    } else if (name == "key_hash") {
      key_hash = ParseHex64(*value);
      if (!key_hash) return util::DataLossError("invalidation: a bad key hash");
    } else if (name == "tokens") {
      std::vector<int32_t> ids;
      std::string_view rest = *value;
      while (!rest.empty()) {
        const size_t comma = rest.find(',');
        const std::string_view t = rest.substr(0, comma);
        int32_t id = 0;
        const auto r = std::from_chars(t.data(), t.data() + t.size(), id);
        if (t.empty() || r.ec != std::errc() || r.ptr != t.data() + t.size()) {
          return util::DataLossError("invalidation: a bad token id");
        }
        ids.push_back(id);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
      m.prompt_tokens = std::move(ids);
    } else if (name == "reason") {
      m.reason = *value;
    }  // a field of a later release: ignored
  }
  if (!versioned) return util::DataLossError("invalidation: no version line");
  if (key_bytes.has_value() != key_hash.has_value()) {
    return util::DataLossError("invalidation: a key without its hash");
  }
  if (key_bytes) m.key = cache::CacheKey{std::move(*key_bytes), *key_hash};
  if (!m.tenant && !m.model && !m.fingerprint && !m.prefix && !m.key) {
    return util::DataLossError("invalidation: selects nothing");
  }
  return m;
}

}  // namespace strata::gateway
