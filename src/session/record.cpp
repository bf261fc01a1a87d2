#include "session/record.h"

#include <limits>

namespace strata::session::record {
namespace {

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void PutString(std::string& out, std::string_view s) {
  PutVarint(out, s.size());
  out.append(s);
}

void PutBigEndian64(std::string& out, uint64_t v) {
  for (int shift = 56; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((v >> shift) & 0xFF));
}

uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
int64_t UnZigZag(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

// Reads the encoding back; every read checks the bytes left.
class Reader {
 public:
  Reader(std::string_view bytes, const char* what) : bytes_(bytes), what_(what) {}

  bool Varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) return Fail("ends inside a number");
      const auto b = static_cast<uint8_t>(bytes_[pos_++]);
      if (shift == 63 && b > 1) return Fail("a number overflows 64 bits");
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return Fail("a number is longer than 10 bytes");
  }
  bool String(std::string& s) {
    uint64_t n = 0;
    if (!Varint(n)) return false;
    if (n > bytes_.size() - pos_) return Fail("a string runs past the end");
    s.assign(bytes_.substr(pos_, n));
    pos_ += n;
    return true;
  }
  bool Byte(uint8_t& b) {
    if (pos_ >= bytes_.size()) return Fail("ends early");
    b = static_cast<uint8_t>(bytes_[pos_++]);
    return true;
  }
  // A count of items each at least one byte long: no more than the bytes left.
  bool Count(uint64_t& n) {
    if (!Varint(n)) return false;
    if (n > bytes_.size() - pos_) return Fail("a count exceeds the bytes left");
    return true;
  }
  // The record's tag and format version.
  // The tag, and a version in [1, newest] (then in version()).
  bool Header(uint8_t tag, uint8_t newest) {
    uint8_t t = 0;
    if (!Byte(t) || !Byte(version_)) return false;
    if (t != tag) return Fail("has the wrong tag");
    return version_ >= 1 && version_ <= newest ? true : Fail("has an unknown format version");
  }
  uint8_t version() const { return version_; }
  bool AtEnd() { return pos_ == bytes_.size() ? true : Fail("has bytes after its end"); }
  util::Status status() const {
    return util::DataLossError(std::string("session store: a ") + what_ + " record " + error_);
  }

 private:
  bool Fail(const char* why) {
    if (error_.empty()) error_ = why;
    return false;
  }
  std::string_view bytes_;
  size_t pos_ = 0;
  const char* what_;
  std::string error_;
  uint8_t version_ = 0;
};

std::string SessionKey(char prefix, std::string_view tenant, std::string_view session) {
  std::string k;
  k.reserve(2 + tenant.size() + session.size());
  k.push_back(prefix);
  k.append(tenant);
  k.push_back('\0');
  k.append(session);
  return k;
}

}  // namespace

std::string MetaKey(std::string_view tenant, std::string_view session) {
  return SessionKey(kMetaPrefix, tenant, session);
}

std::string MetaPrefix(std::string_view tenant) { return SessionKey(kMetaPrefix, tenant, ""); }

std::string TurnPrefix(std::string_view tenant, std::string_view session) {
  return SessionKey(kTurnPrefix, tenant, session) + '\0';
}

std::string OpPrefix(std::string_view tenant, std::string_view session) {
  return SessionKey(kOpPrefix, tenant, session) + '\0';
}

std::string TurnKey(std::string_view tenant, std::string_view session, uint64_t clock,
                    std::string_view writer) {
  std::string k = TurnPrefix(tenant, session);
  k += EncodeTurnRef(clock, writer);
  return k;
}

std::string OpKey(std::string_view tenant, std::string_view session, std::string_view op_id) {
  std::string k = OpPrefix(tenant, session);
  k.append(op_id);
  return k;
}

std::string TenantKey(std::string_view tenant) {
  std::string k(1, kTenantPrefix);
  k.append(tenant);
  return k;
}

std::string EncodeTurnRef(uint64_t clock, std::string_view writer) {
  std::string out;
  PutBigEndian64(out, clock);
  out.append(writer);
  return out;
}

std::string EncodeTurn(const Turn& turn) {
  std::string out;
  out.push_back(static_cast<char>(kTurnTag));
  out.push_back(static_cast<char>(kTurnVersion));
  PutVarint(out, turn.clock);
  PutVarint(out, turn.depends_on);
  PutVarint(out, ZigZag(turn.created_ms));
  PutString(out, turn.writer);
  PutVarint(out, turn.messages.size());
  for (const std::string& m : turn.messages) PutString(out, m);
  PutVarint(out, turn.tokens.size());
  for (int32_t t : turn.tokens) PutVarint(out, ZigZag(t));
  PutVarint(out, turn.tokens_from);
  return out;
}

util::StatusOr<Turn> DecodeTurn(std::string_view bytes) {
  Reader r(bytes, "turn");
  Turn t;
  uint64_t created = 0;
  uint64_t n = 0;
  if (!r.Header(kTurnTag, kTurnVersion) || !r.Varint(t.clock) || !r.Varint(t.depends_on) ||
      !r.Varint(created) || !r.String(t.writer) || !r.Count(n)) {
    return r.status();
  }
  t.created_ms = UnZigZag(created);
  t.messages.resize(n);
  for (std::string& m : t.messages) {
    if (!r.String(m)) return r.status();
  }
  if (!r.Count(n)) return r.status();
  t.tokens.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t z = 0;
    if (!r.Varint(z)) return r.status();
    const int64_t v = UnZigZag(z);
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      return util::DataLossError("session store: a turn record holds a token id out of range");
    }
    t.tokens.push_back(static_cast<int32_t>(v));
  }
  if (r.version() >= 2 && !r.Varint(t.tokens_from)) return r.status();
  if (!r.AtEnd()) return r.status();
  if (t.clock == 0) return util::DataLossError("session store: a turn record has clock 0");
  return t;
}

std::string EncodeMeta(const Meta& meta) {
  std::string out;
  out.push_back(static_cast<char>(kMetaTag));
  out.push_back(static_cast<char>(kVersion));
  PutVarint(out, meta.clock);
  PutVarint(out, meta.turns);
  PutVarint(out, meta.bytes);
  PutVarint(out, ZigZag(meta.created_ms));
  PutVarint(out, ZigZag(meta.updated_ms));
  return out;
}

util::StatusOr<Meta> DecodeMeta(std::string_view bytes) {
  Reader r(bytes, "session");
  Meta m;
  uint64_t created = 0;
  uint64_t updated = 0;
  if (!r.Header(kMetaTag, kVersion) || !r.Varint(m.clock) || !r.Varint(m.turns) ||
      !r.Varint(m.bytes) || !r.Varint(created) || !r.Varint(updated) || !r.AtEnd()) {
    return r.status();
  }
  m.created_ms = UnZigZag(created);
  m.updated_ms = UnZigZag(updated);
  return m;
}

std::string EncodeCount(uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out;
}

util::StatusOr<uint64_t> DecodeCount(std::string_view bytes) {
  if (bytes.size() != 8) return util::DataLossError("session store: a tenant count is not 8 bytes");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
  return n;
}

uint64_t TurnBytes(const Turn& turn) {
  uint64_t n = 4 * static_cast<uint64_t>(turn.tokens.size());
  for (const std::string& m : turn.messages) n += m.size();
  return n;
}

}  // namespace strata::session::record
