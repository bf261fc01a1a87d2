#include "obs/watermark.h"

#include <cctype>

namespace strata::obs {
namespace {

constexpr std::string_view kDomain = "strata-watermark-v1";
constexpr std::string_view kVersion = "v1";

void AppendU64(std::string& out, uint64_t v) {
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void AppendField(std::string& out, std::string_view field) {
  AppendU64(out, field.size());
  out.append(field);
}

}  // namespace

std::string CanonicalResponse(const ResponseContent& content) {
  std::string out;
  size_t size = 8;
  for (const auto& c : content.choices) {
    size += 16 + c.text.size();
    for (const auto& t : c.tool_calls)
      size += 24 + t.id.size() + t.name.size() + t.arguments.size();
  }
  out.reserve(size);
  AppendU64(out, content.choices.size());
  for (const auto& c : content.choices) {
    AppendField(out, c.text);
    AppendU64(out, c.tool_calls.size());
    for (const auto& t : c.tool_calls) {
      AppendField(out, t.id);
      AppendField(out, t.name);
      AppendField(out, t.arguments);
    }
  }
  return out;
}

Sha256Digest ResponseDigest(const ResponseContent& content) {
  return Sha256(CanonicalResponse(content));
}

std::string_view WatermarkCheckName(WatermarkCheck check) {
  switch (check) {
    case WatermarkCheck::kValid:
      return "valid";
    case WatermarkCheck::kInvalid:
      return "invalid";
    case WatermarkCheck::kOtherKey:
      return "other_key";
    case WatermarkCheck::kMalformed:
      return "malformed";
  }
  return "?";
}

Watermarker::Watermarker(std::string secret) : key_(secret), key_id_(HmacKeyId(secret)) {}

std::string Watermarker::Mac(std::string_view request_id, std::string_view model,
                             const ResponseContent& content) const {
  std::string message(kDomain);
  AppendField(message, request_id);
  AppendField(message, model);
  AppendField(message, CanonicalResponse(content));
  return Hex(key_.Mac(message));
}

std::string Watermarker::Mark(std::string_view request_id, std::string_view model,
                              const ResponseContent& content) const {
  std::string out(kVersion);
  out += ':';
  out += key_id_;
  out += ':';
  out += Mac(request_id, model, content);
  return out;
}

WatermarkCheck Watermarker::Verify(std::string_view watermark, std::string_view request_id,
                                   std::string_view model, const ResponseContent& content) const {
  // "v1:" + 16 hex + ":" + 64 hex.
  if (watermark.size() != 3 + 16 + 1 + 64 || watermark.substr(0, 3) != "v1:" ||
      watermark[19] != ':' || !Unhex(watermark.substr(3, 16)) || !Unhex(watermark.substr(20))) {
    return WatermarkCheck::kMalformed;
  }
  std::string kid(watermark.substr(3, 16));
  for (char& c : kid) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (kid != key_id_) return WatermarkCheck::kOtherKey;
  std::string mac(watermark.substr(20));
  for (char& c : mac) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ConstantTimeEqual(mac, Mac(request_id, model, content)) ? WatermarkCheck::kValid
                                                                 : WatermarkCheck::kInvalid;
}

}  // namespace strata::obs
