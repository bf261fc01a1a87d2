// cli/tar_gz.h — reading one member of a .tar.gz archive (datasets under ../shared).
//
// Promise: Gunzip inflates gzip data (every concatenated member; bytes after
// the last member that start no new one are ignored, as gzip(1) does) and
// TarMember finds a regular file in a POSIX ustar / GNU tar stream by the
// end of its name. Both work on bytes already in memory and check every
// length against the input; damaged input is an InvalidArgument, never a
// crash. `what` (usually the path) prefixes every message.
//
// Threading: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "util/status.h"

namespace strata::cli {

util::StatusOr<std::string> Gunzip(std::string_view gz, std::string_view what);

// The content of the first regular file whose name ends with `name_suffix`.
util::StatusOr<std::string> TarMember(std::string_view tar, std::string_view name_suffix,
                                      std::string_view what);

}  // namespace strata::cli
