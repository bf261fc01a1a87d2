// util/utf8.h — UTF-8 validity for streamed text.
//
// Promise: SplitCompleteUtf8 turns arbitrary bytes into the longest prefix of
// complete, valid UTF-8 (invalid sequences replaced by U+FFFD) and the tail
// that may still become a valid character once more bytes arrive. Streams of
// model output pass through it, so a client never sees a broken character and
// JSON encoders never see invalid UTF-8.
//
// Threading: pure functions.
#pragma once

#include <string>
#include <string_view>

namespace strata::util {

struct Utf8Split {
  std::string complete;  // valid UTF-8
  std::string tail;      // at most 3 bytes: the start of an unfinished character
};

Utf8Split SplitCompleteUtf8(std::string_view bytes);

// Replaces every invalid sequence (including an unfinished one at the end) by U+FFFD.
std::string SanitizeUtf8(std::string_view bytes);

bool IsValidUtf8(std::string_view bytes);

// Length in bytes of the UTF-8 sequence that `lead` starts, by its high bits
// (1 for ASCII and for stray continuation bytes).
inline size_t Utf8SequenceLength(unsigned char lead) {
  static constexpr unsigned char kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

// Appends `s` as a JSON string exactly as nlohmann's dump writes one
// (ensure_ascii off: only '"', '\\' and control characters are escaped,
// those below 0x20 as \b \f \n \r \t or \u00xx). False, with `out`
// unchanged, when `s` is not valid UTF-8.
bool AppendJsonString(std::string& out, std::string_view s);

// Scans for the hot paths that read and write JSON text, 8 bytes at a time:
// the index of the first byte at or after `from` that is not ASCII (>= 0x80)
// / that a JSON string cannot hold as it is ('"', '\\' or a control
// character, < 0x20); s.size() when there is none.
size_t FindNonAscii(std::string_view s, size_t from);
size_t FindJsonSpecial(std::string_view s, size_t from);

}  // namespace strata::util
