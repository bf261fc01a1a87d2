// The byte form of a prepared L3 text (near_dup.h), for the shared tier:
//   "L3T1", u32 n, n × u64 token hashes, n × f32 weights, n × u8 flags,
//   u64 fingerprint, u64 sequence hash, f64 total weight
// every integer and float little-endian (floats as their IEEE-754 bits).
#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "cache/near_dup.h"

namespace strata::cache {
namespace {

constexpr char kMagic[4] = {'L', '3', 'T', '1'};
constexpr size_t kMaxTokens = 65536;  // PrepareOptions::max_words can be at most this

void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

class Reader {
 public:
  explicit Reader(std::string_view b) : b_(b) {}
  bool Has(size_t n) const { return b_.size() - pos_ >= n; }
  uint64_t U64() { return Le(8); }
  uint32_t U32() { return static_cast<uint32_t>(Le(4)); }
  uint8_t U8() { return static_cast<uint8_t>(b_[pos_++]); }
  size_t left() const { return b_.size() - pos_; }

 private:
  uint64_t Le(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(b_[pos_ + i])} << (8 * i);
    pos_ += static_cast<size_t>(n);
    return v;
  }
  std::string_view b_;
  size_t pos_ = 0;
};

}  // namespace

std::string EncodeNearDupText(const NearDupText& t) {
  std::string out;
  const size_t n = t.tokens.size();
  out.reserve(4 + 4 + n * 13 + 24);
  out.append(kMagic, sizeof kMagic);
  PutU32(out, static_cast<uint32_t>(n));
  for (uint64_t h : t.tokens) PutU64(out, h);
  for (float w : t.weights) PutU32(out, std::bit_cast<uint32_t>(w));
  for (uint8_t f : t.flags) out.push_back(static_cast<char>(f));
  PutU64(out, t.fingerprint);
  PutU64(out, t.sequence_hash);
  PutU64(out, std::bit_cast<uint64_t>(t.total_weight));
  return out;
}

util::StatusOr<NearDupText> DecodeNearDupText(std::string_view bytes) {
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return util::DataLossError("l3 text: not an encoded text (bad magic or too short)");
  }
  Reader r(bytes.substr(4));
  const uint32_t n = r.U32();
  if (n == 0 || n > kMaxTokens) {
    return util::DataLossError(
        fmt::format("l3 text: token count {} is outside [1, {}]", n, kMaxTokens));
  }
  const size_t need = size_t{n} * 13 + 24;
  if (r.left() != need) {
    return util::DataLossError(fmt::format(
        "l3 text: {} tokens need {} bytes after the header, got {}", n, need, r.left()));
  }
  NearDupText t;
  t.tokens.resize(n);
  t.weights.resize(n);
  t.flags.resize(n);
  for (auto& h : t.tokens) h = r.U64();
  for (auto& w : t.weights) w = std::bit_cast<float>(r.U32());
  for (auto& f : t.flags) f = r.U8();
  t.fingerprint = r.U64();
  t.sequence_hash = r.U64();
  t.total_weight = std::bit_cast<double>(r.U64());
  for (float w : t.weights) {
    if (!(w > 0) || !std::isfinite(w))
      return util::DataLossError("l3 text: a token weight is not a positive number");
  }
  if (!(t.total_weight > 0) || !std::isfinite(t.total_weight)) {
    return util::DataLossError("l3 text: the total weight is not a positive number");
  }
  return t;
}

}  // namespace strata::cache
