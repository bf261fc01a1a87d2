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

#include "util/status.h"

namespace strata::net {

// "event: NAME\n" (when `event` is not empty), "data: ...\n" per line, "\n".
std::string SseFrame(std::string_view data, std::string_view event = {});

struct SseEvent {
  std::string event = "message";  // the "event" field, "message" when absent
  std::string data;               // the "data" lines joined with LF
  std::string id;                 // the last "id" field seen
};

class SseParser {
 public:
  explicit SseParser(size_t max_event_bytes = 16u << 20) : max_event_bytes_(max_event_bytes) {}
  // Parses the next bytes of the stream and appends every complete event
  // to *out. After an error the parser must not be used again.
  util::Status Feed(std::string_view bytes, std::vector<SseEvent>* out);
  // Bytes buffered in an unfinished line or event.
  size_t pending_bytes() const { return line_.size() + data_.size(); }

 private:
  void Line(std::string_view line, std::vector<SseEvent>* out);

  const size_t max_event_bytes_;
  std::string line_;       // the current line, without its terminator
  bool after_cr_ = false;  // the last byte was CR (a following LF belongs to it)
  bool has_data_ = false;
  std::string data_;
  std::string event_;
  std::string last_id_;
};

}  // namespace strata::net
