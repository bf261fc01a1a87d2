#include "cli/tar_gz.h"

#include <zlib.h>

#include <fmt/format.h>

namespace strata::cli {
namespace {

constexpr size_t kBlock = 512;

// A NUL- or space-terminated octal field, as tar writes sizes.
bool ParseOctal(std::string_view field, uint64_t& out) {
  out = 0;
  size_t i = 0;
  while (i < field.size() && field[i] == ' ') ++i;
  bool any = false;
  for (; i < field.size() && field[i] >= '0' && field[i] <= '7'; ++i) {
    if (out > (UINT64_MAX >> 3)) return false;
    out = out * 8 + static_cast<uint64_t>(field[i] - '0');
    any = true;
  }
  for (; i < field.size(); ++i) {
    if (field[i] != ' ' && field[i] != '\0') return false;
  }
  return any;
}

std::string_view CString(std::string_view field) {
  const size_t nul = field.find('\0');
  return nul == std::string_view::npos ? field : field.substr(0, nul);
}

}  // namespace

util::StatusOr<std::string> Gunzip(std::string_view gz, std::string_view what) {
  if (gz.size() > UINT32_MAX) {
    return util::InvalidArgumentError(fmt::format("{}: over 4 GiB of gzip data", what));
  }
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    return util::InternalError(fmt::format("{}: zlib inflateInit2 failed", what));
  }
  std::string out;
  char buf[1 << 16];
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  zs.avail_in = static_cast<uInt>(gz.size());
  int rc = Z_OK;
  bool truncated = false;
  while (true) {
    zs.next_out = reinterpret_cast<Bytef*>(buf);
    zs.avail_out = sizeof(buf);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buf, sizeof(buf) - zs.avail_out);
    if (rc == Z_STREAM_END) {
      // Another gzip member may follow; anything else after a member is
      // ignored, as gzip(1) does with trailing padding.
      if (zs.avail_in < 2 || zs.next_in[0] != 0x1f || zs.next_in[1] != 0x8b) break;
      if (inflateReset(&zs) != Z_OK) break;
      continue;
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) break;
    if (zs.avail_in == 0 && zs.avail_out != 0) {  // all input used, stream not finished
      truncated = true;
      break;
    }
  }
  const std::string zmsg = zs.msg ? zs.msg : "";
  inflateEnd(&zs);
  if (truncated) {
    return util::InvalidArgumentError(fmt::format(
        "{}: not valid gzip data (it ends early, after {} bytes inflated)", what, out.size()));
  }
  if (rc != Z_STREAM_END) {
    return util::InvalidArgumentError(fmt::format("{}: not valid gzip data (zlib error {}{}{})",
                                                  what, rc, zmsg.empty() ? "" : ": ", zmsg));
  }
  return out;
}

util::StatusOr<std::string> TarMember(std::string_view tar, std::string_view name_suffix,
                                      std::string_view what) {
  size_t pos = 0;
  std::string long_name;  // from a GNU 'L' record, applies to the next header
  while (pos + kBlock <= tar.size()) {
    const std::string_view h = tar.substr(pos, kBlock);
    if (h.find_first_not_of('\0') == std::string_view::npos) break;  // end of archive
    uint64_t size = 0;
    if (!ParseOctal(h.substr(124, 12), size)) {
      return util::InvalidArgumentError(
          fmt::format("{}: tar header at byte {} has no valid size field", what, pos));
    }
    const char type = h[156];
    const size_t data = pos + kBlock;
    if (size > tar.size() - data) {
      return util::InvalidArgumentError(
          fmt::format("{}: tar member at byte {} claims {} bytes, only {} remain", what, pos, size,
                      tar.size() - data));
    }
    std::string name;
    if (!long_name.empty()) {
      name = std::move(long_name);
      long_name.clear();
    } else {
      const std::string_view prefix =
          h.substr(257, 6).starts_with("ustar") ? CString(h.substr(345, 155)) : std::string_view();
      name = prefix.empty() ? std::string(CString(h.substr(0, 100)))
                            : std::string(prefix) + "/" + std::string(CString(h.substr(0, 100)));
    }
    if (type == 'L') {
      long_name = std::string(CString(tar.substr(data, size)));
    } else if ((type == '0' || type == '\0') && std::string_view(name).ends_with(name_suffix)) {
      return std::string(tar.substr(data, size));
    }
    pos = data + (size + kBlock - 1) / kBlock * kBlock;
  }
  return util::NotFoundError(
      fmt::format("{}: no file ending in '{}' in the tar archive", what, name_suffix));
}

}  // namespace strata::cli
