#include "gateway/cache_snapshot.h"

#include <cstring>

#include <fmt/format.h>

namespace strata::gateway {
namespace {

constexpr char kSnapshotMagic[4] = {'S', 'C', 'S', '1'};
constexpr uint32_t kSnapshotVersion = 1;

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutStr(std::string& out, std::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

// Reads one record's body; every read checks what is left.
class SnapshotReader {
 public:
  SnapshotReader(std::string_view b, size_t record) : b_(b), record_(record) {}
  util::StatusOr<uint64_t> U(int bytes) {
    if (b_.size() - pos_ < static_cast<size_t>(bytes)) return Short();
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) {
      v |= uint64_t{static_cast<uint8_t>(b_[pos_ + static_cast<size_t>(i)])} << (8 * i);
    }
    pos_ += static_cast<size_t>(bytes);
    return v;
  }
  util::StatusOr<std::string> Str() {
    STRATA_ASSIGN_OR_RETURN(uint64_t n, U(4));
    if (b_.size() - pos_ < n) return Short();
    std::string s(b_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  util::Status Short() const {
    return util::DataLossError(
        fmt::format("cache snapshot: record {} is cut short at byte {}", record_, pos_));
  }
  std::string_view b_;
  size_t record_;
  size_t pos_ = 0;
};

}  // namespace

std::string EncodeCacheSnapshot(const std::vector<CacheSnapshotRecord>& records) {
  std::string out(kSnapshotMagic, sizeof kSnapshotMagic);
  PutU32(out, kSnapshotVersion);
  for (const CacheSnapshotRecord& r : records) {
    std::string body;
    switch (r.kind) {
      case CacheSnapshotRecord::Kind::kL1:
      case CacheSnapshotRecord::Kind::kL3:
        PutStr(body, r.key);
        PutU64(body, r.hash);
        PutStr(body, r.text);
        PutU64(body, static_cast<uint64_t>(r.ttl_ms.value_or(-1)));
        PutStr(body, r.value);
        break;
      case CacheSnapshotRecord::Kind::kSemantic:
        PutStr(body, r.value);
        break;
      case CacheSnapshotRecord::Kind::kL2:
        PutStr(body, r.model);
        PutU64(body, r.fingerprint);
        PutU64(body, r.cache_namespace);
        PutU32(body, static_cast<uint32_t>(r.tokens.size()));
        for (int32_t t : r.tokens) PutU32(body, static_cast<uint32_t>(t));
        break;
    }
    out.push_back(static_cast<char>(r.kind));
    PutU32(out, static_cast<uint32_t>(body.size()));
    out += body;
  }
  return out;
}

util::StatusOr<std::vector<CacheSnapshotRecord>> DecodeCacheSnapshot(std::string_view bytes) {
  if (bytes.size() < 8 || std::memcmp(bytes.data(), kSnapshotMagic, 4) != 0) {
    return util::DataLossError("not a strata cache snapshot (bad magic)");
  }
  SnapshotReader head(bytes.substr(4, 4), 0);
  STRATA_ASSIGN_OR_RETURN(uint64_t version, head.U(4));
  if (version != kSnapshotVersion) {
    return util::DataLossError(
        fmt::format("cache snapshot: version {} is not {}", version, kSnapshotVersion));
  }
  std::vector<CacheSnapshotRecord> out;
  size_t pos = 8;
  for (size_t n = 1; pos < bytes.size(); ++n) {
    if (bytes.size() - pos < 5) {
      return util::DataLossError(fmt::format("cache snapshot: record {} has no header", n));
    }
    const auto kind = static_cast<uint8_t>(bytes[pos]);
    SnapshotReader len(bytes.substr(pos + 1, 4), n);
    STRATA_ASSIGN_OR_RETURN(uint64_t size, len.U(4));
    pos += 5;
    if (bytes.size() - pos < size) {
      return util::DataLossError(fmt::format("cache snapshot: record {} is cut short", n));
    }
    SnapshotReader r(bytes.substr(pos, size), n);
    pos += size;
    CacheSnapshotRecord rec;
    rec.kind = static_cast<CacheSnapshotRecord::Kind>(kind);
    switch (rec.kind) {
      case CacheSnapshotRecord::Kind::kL1:
      case CacheSnapshotRecord::Kind::kL3: {
        STRATA_ASSIGN_OR_RETURN(rec.key, r.Str());
        STRATA_ASSIGN_OR_RETURN(rec.hash, r.U(8));
        STRATA_ASSIGN_OR_RETURN(rec.text, r.Str());
        STRATA_ASSIGN_OR_RETURN(uint64_t ttl, r.U(8));
        if (static_cast<int64_t>(ttl) >= 0) rec.ttl_ms = static_cast<int64_t>(ttl);
        STRATA_ASSIGN_OR_RETURN(rec.value, r.Str());
        break;
      }
      case CacheSnapshotRecord::Kind::kSemantic: {
        STRATA_ASSIGN_OR_RETURN(rec.value, r.Str());
        break;
      }
      case CacheSnapshotRecord::Kind::kL2: {
        STRATA_ASSIGN_OR_RETURN(rec.model, r.Str());
        STRATA_ASSIGN_OR_RETURN(rec.fingerprint, r.U(8));
        STRATA_ASSIGN_OR_RETURN(rec.cache_namespace, r.U(8));
        STRATA_ASSIGN_OR_RETURN(uint64_t count, r.U(4));
        if (count > size / 4) {
          return util::DataLossError(
              fmt::format("cache snapshot: record {} claims {} tokens", n, count));
        }
        for (uint64_t i = 0; i < count; ++i) {
          STRATA_ASSIGN_OR_RETURN(uint64_t t, r.U(4));
          rec.tokens.push_back(static_cast<int32_t>(static_cast<uint32_t>(t)));
        }
        break;
      }
      default:
        continue;  // a later release's kind
    }
    if (!r.done()) {
      return util::DataLossError(fmt::format("cache snapshot: record {} has bytes left over", n));
    }
    out.push_back(std::move(rec));
  }
  return out;
}

}  // namespace strata::gateway
