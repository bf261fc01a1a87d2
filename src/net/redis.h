// net/redis.h — one Redis connection (hiredis): the shared cache tier's
// and the replicated session store's client.
//
// Promise: Connect and every command are bounded by the timeout given at
// Connect (connect, send and receive each); a command never throws and never
// blocks longer. Commands are argument vectors (binary-safe). Pipeline sends
// several commands in one round trip and returns their replies in order. Any
// transport error (refused, reset, timeout, protocol) leaves the connection
// unusable: broken() turns true and the caller drops it; a Redis error reply
// ("-ERR ...") is a reply, not a broken connection.
//
// Threading: thread-compatible; one thread uses a connection at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <utility>

#include "util/status.h"

namespace strata::net {

// A reply, copied out of hiredis's tree.
struct RedisReply {
  enum class Type { kNil, kString, kInteger, kArray, kStatus, kError };
  Type type = Type::kNil;
  std::string str;                   // kString, kStatus, kError
  int64_t integer = 0;               // kInteger
  std::vector<RedisReply> elements;  // kArray
};

using RedisCommand = std::vector<std::string>;

// "HOST:PORT", "redis://HOST:PORT" or "HOST" (port 6379). InvalidArgument
// naming the text otherwise.
util::StatusOr<std::pair<std::string, int>> ParseRedisAddress(std::string_view text);

// `text` as a part of a Redis key: bytes outside [A-Za-z0-9_.-] percent-
// encoded (%XX), so no tenant name can reach into another's keys.
std::string RedisKeyPart(std::string_view text);

class RedisConn {
 public:
  // Unavailable naming the address and hiredis's reason.
  static util::StatusOr<std::unique_ptr<RedisConn>> Connect(const std::string& host, int port,
                                                            std::chrono::milliseconds timeout);
  ~RedisConn();
  RedisConn(const RedisConn&) = delete;
  RedisConn& operator=(const RedisConn&) = delete;

  // Unavailable (and broken() from then on) on a transport error.
  util::StatusOr<RedisReply> Command(const RedisCommand& argv);
  util::StatusOr<std::vector<RedisReply>> Pipeline(const std::vector<RedisCommand>& commands);
  // Replaces the timeout of each send and receive from now on (a command
  // known to wait on the server, as WAIT, needs a longer one). Unavailable
  // (and broken) when the socket refuses it.
  util::Status SetTimeout(std::chrono::milliseconds timeout);
  bool broken() const { return broken_; }

 private:
  explicit RedisConn(void* ctx) : ctx_(ctx) {}
  util::Status Fail(const char* what);
  void* ctx_;  // redisContext*, owned
  bool broken_ = false;
};

}  // namespace strata::net
