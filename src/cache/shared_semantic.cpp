// The semantic tier's entries in Redis (SharedStore::PutSemantic,
// GetSemantic, SemanticKeys): shared by replication, see shared_store.h.
#include <fmt/format.h>

#include "cache/internal/shared_store_state.h"
#include "cache/shared_store.h"

namespace strata::cache {
namespace {

// <prefix>:<model>:<tenant>:sem:<encoder>:<namespace hash><payload>
std::string SemanticKey(const std::string& prefix, const SharedScope& scope, uint64_t encoder,
                        std::string_view ns, uint64_t payload) {
  return fmt::format("{}:sem:{:016x}:{:016x}{:016x}", Base(prefix, scope), encoder,
                     util::Hash64(ns, 0x5345'4d4e'5321ULL), payload);  // "SEMNS!"
}

// Whether `key` is a semantic entry of this store's prefix made by `encoder`.
bool IsSemanticKeyOf(std::string_view key, const std::string& prefix, uint64_t encoder) {
  if (key.size() <= prefix.size() || key.substr(0, prefix.size()) != prefix ||
      key[prefix.size()] != ':') {
    return false;
  }
  return key.find(fmt::format(":sem:{:016x}:", encoder)) != std::string_view::npos;
}

}  // namespace

const std::string& SharedStore::id() const { return state_->instance_id; }

void SharedStore::PutSemantic(const SharedScope& scope, uint64_t encoder, SharedSemanticEntry entry,
                              std::chrono::nanoseconds ttl) {
  State& s = *state_;
  State::Job job;
  job.kind = State::Job::Kind::kSemantic;
  job.key = SemanticKey(s.options.prefix, scope, encoder, entry.ns, entry.payload);
  job.ns = std::move(entry.ns);
  job.vector = std::move(entry.vector);
  job.text = std::move(entry.text);
  job.value = std::move(entry.value);
  {
    std::lock_guard lock(s.mu);
    job.ttl = TtlMs(ttl, s.options.ttl_jitter, s.rng);
  }
  s.Enqueue(std::move(job));
}

std::optional<SharedSemanticEntry> SharedStore::GetSemantic(std::string_view key,
                                                            uint64_t encoder) {
  State& s = *state_;
  if (!IsSemanticKeyOf(key, s.options.prefix, encoder)) return std::nullopt;
  const std::string k(key);
  auto replies = s.Run({{"HMGET", k, "n", "v", "t", "a"}, {"PTTL", k}});
  if (!replies) return std::nullopt;
  const RedisReply& fields = (*replies)[0];
  const RedisReply& ttl = (*replies)[1];
  auto count = [&s](bool hit, bool error) { s.CountLookup(hit, error ? 1 : 0); };
  if (fields.type != RedisReply::Type::kArray || fields.elements.size() != 4 ||
      fields.elements[0].type != RedisReply::Type::kString) {
    count(false, false);  // expired or deleted since it was announced
    return std::nullopt;
  }
  SharedSemanticEntry e;
  e.ns = fields.elements[0].str;
  auto vector = shared_internal::VectorFromBytes(fields.elements[1].str);
  auto value = s.codec.Decode(fields.elements[3].str);
  const int64_t ttl_ms = ttl.type == RedisReply::Type::kInteger ? ttl.integer : -1;
  if (!vector || vector->empty() || !value.ok() || ttl_ms <= 0) {
    count(false, true);
    return std::nullopt;
  }
  if (!fields.elements[2].str.empty()) {
    auto text = DecodeNearDupText(fields.elements[2].str);
    if (!text.ok()) {
      count(false, true);
      return std::nullopt;
    }
    e.text = std::make_shared<const NearDupText>(std::move(text).value());
  }
  // The payload is the key's last 16 hex digits.
  if (!ParseHex64(key.substr(key.size() - 16), &e.payload)) {
    count(false, true);
    return std::nullopt;
  }
  e.vector = std::move(*vector);
  e.value = std::move(value).value();
  e.ttl_left = std::chrono::milliseconds(ttl_ms);
  count(true, false);
  return e;
}

std::vector<std::string> SharedStore::SemanticKeys(uint64_t model, uint64_t encoder, size_t max,
                                                   std::chrono::steady_clock::time_point deadline) {
  State& s = *state_;
  const std::string pattern =
      fmt::format("{}:{:016x}:*:sem:{:016x}:*", s.options.prefix, model, encoder);
  std::vector<std::string> keys;
  std::string cursor = "0";
  do {
    if (std::chrono::steady_clock::now() >= deadline) break;
    auto page = s.Run({{"SCAN", cursor, "MATCH", pattern, "COUNT", "500"}});
    if (!page || (*page)[0].type != RedisReply::Type::kArray || (*page)[0].elements.size() != 2) {
      break;
    }
    cursor = (*page)[0].elements[0].str;
    for (const RedisReply& k : (*page)[0].elements[1].elements) {
      if (keys.size() >= max) return keys;
      keys.push_back(k.str);
    }
  } while (cursor != "0");
  return keys;
}

}  // namespace strata::cache
