#include "server/auth.h"

#include <cctype>
#include <optional>

#include <fmt/format.h>

namespace strata::server {
namespace {

bool ValidTenant(std::string_view t) {
  if (t.empty() || t.size() > 64) return false;
  for (char c : t) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

bool ValidKey(std::string_view k) {
  if (k.size() < 8 || k.size() > 512) return false;
  for (char c : k) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

}  // namespace

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  const size_t n = a.size() > b.size() ? a.size() : b.size();
  volatile unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = static_cast<unsigned char>(diff | (x ^ y));
  }
  return diff == 0;
}

util::StatusOr<ApiKeys> ApiKeys::Parse(std::string_view text, std::string_view source) {
  ApiKeys keys;
  size_t line_no = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    line = line.substr(first);
    const size_t gap = line.find_first_of(" \t");
    if (gap == std::string_view::npos) {
      return util::InvalidArgumentError(
          fmt::format("{}:{}: expected 'KEY TENANT'", source, line_no));
    }
    const std::string_view key = line.substr(0, gap);
    std::string_view tenant = line.substr(gap);
    tenant.remove_prefix(tenant.find_first_not_of(" \t"));
    while (!tenant.empty() && (tenant.back() == ' ' || tenant.back() == '\t'))
      tenant.remove_suffix(1);
    if (!ValidKey(key)) {
      return util::InvalidArgumentError(
          fmt::format("{}:{}: keys must be 8 to 512 printable ASCII characters", source, line_no));
    }
    if (!ValidTenant(tenant)) {
      return util::InvalidArgumentError(fmt::format(
          "{}:{}: tenant '{}' must match [A-Za-z0-9_.-]{{1,64}}", source, line_no, tenant));
    }
    for (const auto& [k, t] : keys.keys_) {
      if (k == key) {
        return util::InvalidArgumentError(fmt::format("{}:{}: duplicate key", source, line_no));
      }
    }
    keys.keys_.emplace_back(std::string(key), std::string(tenant));
  }
  return keys;
}

util::StatusOr<ApiKeys> ApiKeys::Load(util::FileSystem& fs, const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::string text, fs.ReadFile(path));
  STRATA_ASSIGN_OR_RETURN(ApiKeys keys, Parse(text, path));
  if (keys.empty()) return util::InvalidArgumentError(fmt::format("{}: no keys", path));
  return keys;
}

util::StatusOr<std::string> ApiKeys::Authenticate(std::string_view presented) const {
  // Compare with every key, always: which one matched is chosen without an
  // early exit.
  size_t match = keys_.size();
  for (size_t i = 0; i < keys_.size(); ++i) {
    const bool eq = ConstantTimeEquals(presented, keys_[i].first);
    match = eq ? i : match;
  }
  if (match == keys_.size()) {
    return util::UnauthenticatedError("invalid API key")
        .WithReason(util::ErrorReason::kInvalidApiKey);
  }
  return keys_[match].second;
}

namespace {

// Standard base64 (RFC 4648 §4, padding optional); nullopt on any other byte.
std::optional<std::string> DecodeBase64(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  if (in.size() % 4 == 1) return std::nullopt;
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) !=
        std::tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string PresentedSecret(std::string_view authorization) {
  while (!authorization.empty() && authorization.back() == ' ') authorization.remove_suffix(1);
  if (StartsWithNoCase(authorization, "Bearer ")) {
    return std::string(authorization.substr(7));
  }
  if (StartsWithNoCase(authorization, "Basic ")) {
    std::string_view encoded = authorization.substr(6);
    while (!encoded.empty() && encoded.front() == ' ') encoded.remove_prefix(1);
    const std::optional<std::string> decoded = DecodeBase64(encoded);
    if (!decoded) return "";
    const size_t colon = decoded->find(':');
    return colon == std::string::npos ? "" : decoded->substr(colon + 1);
  }
  return "";
}

}  // namespace strata::server
