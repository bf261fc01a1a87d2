#include "obs/internal/audit_format.h"

#include <ctime>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace strata::obs::audit {
namespace {

using Json = nlohmann::json;

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

util::Status Bad(std::string what) { return util::InvalidArgumentError(std::move(what)); }

// The field `key` of `j` as a string; InvalidArgument when missing or not one.
util::StatusOr<std::string> StringField(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) {
    return Bad(fmt::format("field '{}' is missing or not a string", key));
  }
  return it->get<std::string>();
}

util::StatusOr<uint64_t> UintField(const Json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) {
    return Bad(fmt::format("field '{}' is missing or not an unsigned integer", key));
  }
  return it->get<uint64_t>();
}

}  // namespace

std::string FormatTime(std::chrono::system_clock::time_point t) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  int64_t secs = ms / 1000;
  int64_t milli = ms % 1000;
  if (milli < 0) {
    milli += 1000;
    secs -= 1;
  }
  const std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, milli);
}

std::string RotatedPath(const std::string& path, uint64_t index) {
  return fmt::format("{}.{:0{}}", path, index, kIndexDigits);
}

std::string LineStart(uint64_t seq, std::string_view type, std::string_view time) {
  return fmt::format(R"({{"v":{},"seq":{},"type":"{}","time":"{}")", kFormatVersion, seq, type,
                     time);
}

std::string FinishLine(std::string& line, std::string_view prev, const Signer* signer) {
  line += ",\"prev\":\"";
  line += prev;
  line += '"';
  if (signer != nullptr) {
    const std::string sig = signer->Sign(line);
    line += kSigKey;
    line += Hex(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(sig.data()), sig.size()));
    line += '"';
  }
  const Sha256Digest d = Sha256(line);
  std::string hash = Hex(d);
  line += kHashKey;
  line += hash;
  line += kLineEnd;
  line += '\n';
  return hash;
}

util::StatusOr<ParsedLine> ParseLine(std::string_view line) {
  if (line.size() > kMaxLineBytes) {
    return Bad(fmt::format("the line has {} bytes, more than a record may ({})", line.size(),
                           kMaxLineBytes));
  }
  // The tail: ,"hash":"<64 hex>"}
  const size_t tail = kHashKey.size() + kHashHexChars + kLineEnd.size();
  if (line.size() < tail + 2 || line.front() != '{' ||
      line.substr(line.size() - kLineEnd.size()) != kLineEnd ||
      line.substr(line.size() - tail, kHashKey.size()) != kHashKey) {
    return Bad("the line does not end with the record's hash field");
  }
  ParsedLine p;
  const std::string_view hashed = line.substr(0, line.size() - tail);
  p.hash = std::string(line.substr(line.size() - tail + kHashKey.size(), kHashHexChars));
  if (!IsLowerHex(p.hash)) return Bad("the hash field is not 64 lower-case hex digits");
  p.computed_hash = Hex(Sha256(hashed));
  const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad("the line is not a JSON object");
  STRATA_ASSIGN_OR_RETURN(uint64_t version, UintField(j, "v"));
  if (version != static_cast<uint64_t>(kFormatVersion)) {
    return Bad(fmt::format("format version {} is not {}", version, kFormatVersion));
  }
  STRATA_ASSIGN_OR_RETURN(p.seq, UintField(j, "seq"));
  STRATA_ASSIGN_OR_RETURN(p.type, StringField(j, "type"));
  STRATA_ASSIGN_OR_RETURN(p.time, StringField(j, "time"));
  STRATA_ASSIGN_OR_RETURN(p.prev, StringField(j, "prev"));
  if (p.prev.size() != kHashHexChars || !IsLowerHex(p.prev)) {
    return Bad("the prev field is not 64 lower-case hex digits");
  }
  if (p.type == kTypeOpen) {
    STRATA_ASSIGN_OR_RETURN(p.file_index, UintField(j, "file"));
    STRATA_ASSIGN_OR_RETURN(p.reason, StringField(j, "reason"));
    STRATA_ASSIGN_OR_RETURN(p.lost, UintField(j, "lost"));
    auto key = j.find("checkpoint_key");
    if (key == j.end() || !(key->is_string() || key->is_null())) {
      return Bad("field 'checkpoint_key' is missing or not a string or null");
    }
    if (key->is_string()) p.signing_key = key->get<std::string>();
  } else if (p.type == kTypeCheckpoint) {
    STRATA_ASSIGN_OR_RETURN(p.alg, StringField(j, "alg"));
    STRATA_ASSIGN_OR_RETURN(p.key_id, StringField(j, "key_id"));
    STRATA_ASSIGN_OR_RETURN(std::string sig_hex, StringField(j, "sig"));
    auto sig = Unhex(sig_hex);
    if (!sig) return Bad("the sig field is not hex");
    p.sig = std::move(*sig);
    // The signed bytes: everything before the last ,"sig":" (a JSON string
    // cannot hold an unescaped quote, so that is the field itself).
    const size_t at = hashed.rfind(kSigKey);
    if (at == std::string_view::npos) return Bad("the sig field is not where a checkpoint has it");
    p.signed_part = std::string(hashed.substr(0, at));
    if (hashed.substr(at + kSigKey.size()) != sig_hex + "\"") {
      return Bad("the sig field is not the last before the hash");
    }
  } else if (p.type == kTypeDropped) {
    STRATA_ASSIGN_OR_RETURN(p.dropped, UintField(j, "count"));
    STRATA_ASSIGN_OR_RETURN(p.dropped_reason, StringField(j, "reason"));
  } else if (p.type == kTypeRequest) {
    STRATA_ASSIGN_OR_RETURN(p.request_id, StringField(j, "id"));
  } else if (p.type != kTypeClose) {
    return Bad(fmt::format("record type '{}' is unknown", p.type.substr(0, 40)));
  }
  return p;
}

}  // namespace strata::obs::audit
