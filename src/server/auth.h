// server/auth.h — API keys and the tenants they belong to.
//
// Promise: Authenticate compares the presented key with every configured key
// in time that depends only on the lengths involved, never on how many
// leading bytes match, so keys cannot be guessed byte by byte. The tenant it
// returns travels with the request: every cache keys its entries by it.
//
// Key file format: one "KEY TENANT" pair per line, separated by whitespace;
// blank lines and lines starting with '#' are ignored. Tenants match
// [A-Za-z0-9_.-]{1,64}; keys are at least 8 printable ASCII characters.
//
// Threading: immutable after loading; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "util/file_system.h"
#include "util/status.h"

namespace strata::server {

class ApiKeys {
 public:
  // InvalidArgument naming the line for a malformed entry or duplicate key.
  static util::StatusOr<ApiKeys> Parse(std::string_view text, std::string_view source);
  static util::StatusOr<ApiKeys> Load(util::FileSystem& fs, const std::string& path);

  bool empty() const { return keys_.empty(); }
  size_t size() const { return keys_.size(); }
  // The tenant of `presented`, or Unauthenticated.
  util::StatusOr<std::string> Authenticate(std::string_view presented) const;

 private:
  std::vector<std::pair<std::string, std::string>> keys_;  // key, tenant
};

// Equality of two byte strings in time independent of their contents.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// The secret an Authorization header value presents: a Bearer token, or
// the password of HTTP Basic credentials (base64 "user:password"; a browser
// asked for a login sends these). "" when it presents none or is malformed.
std::string PresentedSecret(std::string_view authorization);

}  // namespace strata::server
