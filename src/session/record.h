// session/record.h — the keys and values of the session store
// (docs/formats/session.md is the byte layout; this is its one constants
// header).
//
// Promise: Decode* accept exactly what Encode* write, and return kDataLoss
// (naming what is wrong) for anything else, never reading past the input.
//
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "session/session.h"
#include "util/status.h"

namespace strata::session::record {

inline constexpr char kMetaPrefix = 'm';    // m tenant \0 session -> Meta
inline constexpr char kTurnPrefix = 't';    // t tenant \0 session \0 clock(8, BE) writer -> Turn
inline constexpr char kOpPrefix = 'o';      // o tenant \0 session \0 op_id -> clock(8, BE) writer
inline constexpr char kTenantPrefix = 'c';  // c tenant -> sessions (8, LE)
inline constexpr uint8_t kTurnTag = 'T';
inline constexpr uint8_t kMetaTag = 'M';
inline constexpr uint8_t kVersion = 1;      // the meta record's
inline constexpr uint8_t kTurnVersion = 2;  // the turn record's (1: without tokens_from)

struct Meta {
  uint64_t clock = 0;
  uint64_t turns = 0;
  uint64_t bytes = 0;
  int64_t created_ms = 0;
  int64_t updated_ms = 0;
};

std::string MetaKey(std::string_view tenant, std::string_view session);
// The prefix every meta key of `tenant` starts with.
std::string MetaPrefix(std::string_view tenant);
std::string TurnKey(std::string_view tenant, std::string_view session, uint64_t clock,
                    std::string_view writer);
// The prefix every turn key (or op key) of one session starts with.
std::string TurnPrefix(std::string_view tenant, std::string_view session);
std::string OpPrefix(std::string_view tenant, std::string_view session);
std::string OpKey(std::string_view tenant, std::string_view session, std::string_view op_id);
std::string TenantKey(std::string_view tenant);

// The op key's value: the stored turn's clock and writer (the tail of its
// turn key).
std::string EncodeTurnRef(uint64_t clock, std::string_view writer);

std::string EncodeTurn(const Turn& turn);
util::StatusOr<Turn> DecodeTurn(std::string_view bytes);
std::string EncodeMeta(const Meta& meta);
util::StatusOr<Meta> DecodeMeta(std::string_view bytes);
std::string EncodeCount(uint64_t n);
util::StatusOr<uint64_t> DecodeCount(std::string_view bytes);

// The bytes a turn counts against Limits::max_bytes: its messages, plus 4
// per token.
uint64_t TurnBytes(const Turn& turn);

}  // namespace strata::session::record
