// obs/watermark.h — the response watermark: an HMAC-SHA256 that proves a
// response came from this deployment, for this request, unchanged.
//
// Promise: Mark(request id, model, content) = "v1:" KEY_ID ":" HEX, where
// HEX is the lower-case hex HMAC-SHA256, under the secret, of
//   "strata-watermark-v1" || LP(request id) || LP(model) || LP(Canonical(content))
// and LP(x) is x's length as an 8-byte big-endian integer followed by x's
// bytes; KEY_ID is HmacKeyId(secret) (16 hex digits) so a verifier holding
// another key can say so. Canonical(content) (also what the audit log's
// response_sha256 hashes) is
//   U64(number of choices) || for each choice, in index order:
//     LP(text) || U64(number of tool calls) || for each call: LP(id) LP(name) LP(arguments)
// with U64 an 8-byte big-endian integer. docs/formats/audit_log.md has the
// same with test vectors. Verify compares in constant time.
//
// Threading: a Watermarker is immutable and thread-safe.
//
// Usage:
//   STRATA_ASSIGN_OR_RETURN(std::string secret, LoadHmacKey(fs, "watermark.key"));
//   Watermarker wm(secret);
//   ResponseContent c;
//   c.choices.push_back({.text = "Hello!"});
//   std::string header = wm.Mark("req-1", "llama", c);  // "v1:9f86d081884c7d65:3b1f..."
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "obs/crypto.h"

namespace strata::obs {

// What a response said, choice by choice.
struct ResponseContent {
  struct ToolCall {
    std::string id;
    std::string name;
    std::string arguments;  // the JSON text of the arguments, as the API carries it
  };
  struct Choice {
    std::string text;
    std::vector<ToolCall> tool_calls;
  };
  std::vector<Choice> choices;
};

// The unambiguous encoding of `content` (the file comment has it).
std::string CanonicalResponse(const ResponseContent& content);
// SHA-256 of CanonicalResponse: the audit log's response_sha256.
Sha256Digest ResponseDigest(const ResponseContent& content);

enum class WatermarkCheck {
  kValid,
  kInvalid,    // same key, different request id, model or content: tampered or mismatched
  kOtherKey,   // made with another key (its key id differs)
  kMalformed,  // not "v1:KEY_ID:HEX"
};
std::string_view WatermarkCheckName(WatermarkCheck check);  // "valid", "invalid", ...

class Watermarker {
 public:
  // `secret`: the HMAC key (LoadHmacKey); kept in memory, never shown.
  explicit Watermarker(std::string secret);

  const std::string& key_id() const { return key_id_; }
  // The header value for a response.
  std::string Mark(std::string_view request_id, std::string_view model,
                   const ResponseContent& content) const;
  // Whether `watermark` is this key's mark of (request id, model, content).
  WatermarkCheck Verify(std::string_view watermark, std::string_view request_id,
                        std::string_view model, const ResponseContent& content) const;

 private:
  std::string Mac(std::string_view request_id, std::string_view model,
                  const ResponseContent& content) const;
  const HmacSha256Key key_;
  const std::string key_id_;
};

}  // namespace strata::obs
