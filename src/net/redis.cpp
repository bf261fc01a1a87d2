#include "net/redis.h"

#include <hiredis/hiredis.h>
#include <sys/time.h>

#include <charconv>

#include <fmt/format.h>

namespace strata::net {
namespace {

timeval ToTimeval(std::chrono::milliseconds d) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(d.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((d.count() % 1000) * 1000);
  return tv;
}

RedisReply Copy(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_STRING:
      out.type = RedisReply::Type::kString;
      break;
    case REDIS_REPLY_STATUS:
      out.type = RedisReply::Type::kStatus;
      break;
    case REDIS_REPLY_ERROR:
      out.type = RedisReply::Type::kError;
      break;
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::kInteger;
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::kArray;
      break;
    default:
      out.type = RedisReply::Type::kNil;
      break;
  }
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
      r->type == REDIS_REPLY_ERROR) {
    out.str.assign(r->str, r->len);
  }
  if (r->type == REDIS_REPLY_INTEGER) out.integer = r->integer;
  if (r->type == REDIS_REPLY_ARRAY) {
    out.elements.reserve(r->elements);
    for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(Copy(r->element[i]));
  }
  return out;
}

redisContext* Ctx(void* p) { return static_cast<redisContext*>(p); }

}  // namespace

std::string RedisKeyPart(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    const bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                       c == '_' || c == '.' || c == '-';
    if (plain) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

util::StatusOr<std::pair<std::string, int>> ParseRedisAddress(std::string_view text) {
  std::string_view t = text;
  if (t.rfind("redis://", 0) == 0) t.remove_prefix(8);
  if (!t.empty() && t.back() == '/') t.remove_suffix(1);
  auto bad = [&] {
    return util::InvalidArgumentError(
        fmt::format("redis address '{}' is not HOST:PORT or redis://HOST:PORT", text));
  };
  if (t.empty() || t.find_first_of(" /@?") != std::string_view::npos) return bad();
  const size_t colon = t.rfind(':');
  if (colon == std::string_view::npos) return std::pair<std::string, int>(std::string(t), 6379);
  const std::string_view host = t.substr(0, colon), port_text = t.substr(colon + 1);
  int port = 0;
  const auto r = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (host.empty() || r.ec != std::errc() || r.ptr != port_text.data() + port_text.size() ||
      port < 1 || port > 65535) {
    return bad();
  }
  return std::pair<std::string, int>(std::string(host), port);
}

util::StatusOr<std::unique_ptr<RedisConn>> RedisConn::Connect(const std::string& host, int port,
                                                              std::chrono::milliseconds timeout) {
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, ToTimeval(timeout));
  if (c == nullptr) {
    return util::UnavailableError(
        fmt::format("redis {}:{}: cannot allocate a connection", host, port));
  }
  if (c->err != 0) {
    util::Status st = util::UnavailableError(fmt::format("redis {}:{}: {}", host, port, c->errstr));
    redisFree(c);
    return st;
  }
  if (redisSetTimeout(c, ToTimeval(timeout)) != REDIS_OK) {
    util::Status st =
        util::UnavailableError(fmt::format("redis {}:{}: cannot set the timeout", host, port));
    redisFree(c);
    return st;
  }
  redisEnableKeepAlive(c);
  return std::unique_ptr<RedisConn>(new RedisConn(c));
}

RedisConn::~RedisConn() { redisFree(Ctx(ctx_)); }

util::Status RedisConn::SetTimeout(std::chrono::milliseconds timeout) {
  if (broken_) return util::UnavailableError("redis: the connection is broken");
  if (redisSetTimeout(Ctx(ctx_), ToTimeval(timeout)) != REDIS_OK) return Fail("set the timeout");
  return util::OkStatus();
}

util::Status RedisConn::Fail(const char* what) {
  broken_ = true;
  const redisContext* c = Ctx(ctx_);
  return util::UnavailableError(
      fmt::format("redis {}: {}", what, c->err != 0 ? c->errstr : "no reply"));
}

util::StatusOr<RedisReply> RedisConn::Command(const RedisCommand& argv) {
  STRATA_ASSIGN_OR_RETURN(std::vector<RedisReply> replies, Pipeline({argv}));
  return std::move(replies.front());
}

util::StatusOr<std::vector<RedisReply>> RedisConn::Pipeline(
    const std::vector<RedisCommand>& commands) {
  if (broken_) return util::UnavailableError("redis: the connection is broken");
  std::vector<const char*> args;
  std::vector<size_t> lens;
  for (const RedisCommand& cmd : commands) {
    args.clear();
    lens.clear();
    for (const std::string& a : cmd) {
      args.push_back(a.data());
      lens.push_back(a.size());
    }
    if (redisAppendCommandArgv(Ctx(ctx_), static_cast<int>(args.size()), args.data(),
                               lens.data()) != REDIS_OK) {
      return Fail("send");
    }
  }
  std::vector<RedisReply> out;
  out.reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(Ctx(ctx_), &raw) != REDIS_OK || raw == nullptr) return Fail("receive");
    redisReply* r = static_cast<redisReply*>(raw);
    out.push_back(Copy(r));
    freeReplyObject(r);
  }
  return out;
}

}  // namespace strata::net
