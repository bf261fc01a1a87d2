// net/http.h — the HTTP/1.1 vocabulary the server and the client share:
// header lists, responses, status reason phrases.
//
// Promise: plain values. Header names compare case-insensitively (RFC 9110
// §5.1); values are kept byte for byte. Nothing here does I/O.
//
// Threading: value types; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::net {

// Header fields in the order received or to be sent. Repeated names are kept.
class Headers {
 public:
  Headers() = default;
  Headers(std::initializer_list<std::pair<std::string, std::string>> fields) : fields_(fields) {}

  void Add(std::string name, std::string value) {
    fields_.emplace_back(std::move(name), std::move(value));
  }
  // Replaces every field named `name` with one.
  void Set(std::string name, std::string value);
  // The first value of `name` (case-insensitive), or nullopt.
  std::optional<std::string_view> Get(std::string_view name) const;
  // The first value of `name`, or "" when absent.
  std::string_view GetOr(std::string_view name, std::string_view fallback = {}) const;
  bool Has(std::string_view name) const { return Get(name).has_value(); }
  void Remove(std::string_view name);

  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }
  size_t size() const { return fields_.size(); }
  bool empty() const { return fields_.empty(); }

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

// ASCII case-insensitive equality (header names, tokens such as "chunked").
bool EqualsIgnoreCase(std::string_view a, std::string_view b);
// Appends the field line "name: value\r\n" with every CR and LF of the name
// and value dropped: a field can neither end the head early nor start
// another.
void AppendField(std::string& out, std::string_view name, std::string_view value);
// True when the comma-separated list `value` holds `token` (case-insensitive),
// as in "Connection: keep-alive, Upgrade".
bool HasToken(std::string_view value, std::string_view token);

// A whole response (status, fields, body). The server adds Content-Length,
// Connection and Date; a body must not be sent for 1xx, 204 and 304.
struct Response {
  int status = 200;
  Headers headers;
  std::string body;
};

// "OK", "Request Header Fields Too Large", ...; "Unknown" for codes without one.
std::string_view ReasonPhrase(int status);

// A response with a JSON body.
Response JsonResponse(int status, std::string body);

}  // namespace strata::net
