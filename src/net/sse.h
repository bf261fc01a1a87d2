// net/sse.h — Server-Sent Events: the frames a server writes and an
// incremental parser for the frames a client reads (the WHATWG "event
// stream" format: text/event-stream).
//
// Promise: SseFrame never lets data end an event early or start another: every
// line of `data` becomes its own "data:" line (a CR, LF or CRLF in the data is
// a line break, as the parser reads it), and CR/LF are dropped from the event
// name. SseParser accepts any bytes: lines end at CR, LF or CRLF; comments
// (":...") and unknown fields are skipped; "data" lines join with LF; a blank
// line dispatches the event; an event or line beyond the limit is an error
// (ResourceExhausted), never unbounded memory. Parsing what SseFrame wrote
// gives back the data with its line breaks as LF.
//
// Threading: SseFrame is a pure function; an SseParser is used by one thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "util/function_ref.h"
#include "util/status.h"

namespace strata::net {

// "event: NAME\n" (when `event` is not empty), "data: ...\n" per line, "\n".
std::string SseFrame(std::string_view data, std::string_view event = {});

struct SseEvent {
  std::string event = "message";  // the "event" field, "message" when absent
  std::string data;               // the "data" lines joined with LF
  std::string id;                 // the last "id" field seen
};

// An event as Feed hands it to a callback: the same fields as views, into
// the bytes fed (an event of one data line that came whole in them: no
// copy) or into the parser. Valid only during the callback.
struct SseEventView {
  std::string_view event = "message";
  std::string_view data;
  std::string_view id;
};

class SseParser {
 public:
  explicit SseParser(size_t max_event_bytes = 16u << 20) : max_event_bytes_(max_event_bytes) {}
  // Parses the next bytes of the stream and appends every complete event
  // to *out. After an error the parser must not be used again.
  util::Status Feed(std::string_view bytes, std::vector<SseEvent>* out);
  // The same, handing each complete event to `on_event` as it is read. A
  // non-OK status from `on_event` stops the parse and is returned (the
  // parser must not be used again).
  using OnEvent = util::FunctionRef<util::Status(const SseEventView&)>;
  util::Status Feed(std::string_view bytes, OnEvent on_event);
  // Bytes buffered in an unfinished line or event.
  size_t pending_bytes() const { return line_.size() + (has_data_ ? data_.size() : 0); }

 private:
  // One line; `in_bytes`: it lies in the bytes being fed (not in line_).
  util::Status Line(std::string_view line, bool in_bytes, OnEvent on_event);

  const size_t max_event_bytes_;
  std::string line_;       // the current line, without its terminator
  bool after_cr_ = false;  // the last byte was CR (a following LF belongs to it)
  bool has_data_ = false;
  // The data so far: a view into the bytes being fed (one data line read
  // whole in them; copied into data_buffer_ before Feed returns) or into
  // data_buffer_.
  std::string_view data_;
  std::string data_buffer_;
  std::string event_;
  std::string last_id_;
};

}  // namespace strata::net
