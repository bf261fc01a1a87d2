#include "net/sse.h"

#include <cstring>

#include <fmt/format.h>

namespace strata::net {

std::string SseFrame(std::string_view data, std::string_view event) {
  std::string out;
  out.reserve(data.size() + event.size() + 16);
  if (!event.empty()) {
    out += "event: ";
    for (char c : event) {
      if (c != '\r' && c != '\n') out.push_back(c);
    }
    out += '\n';
  }
  size_t start = 0;
  while (true) {
    size_t end = start;
    while (end < data.size() && data[end] != '\r' && data[end] != '\n') ++end;
    out += "data: ";
    out.append(data.substr(start, end - start));
    out += '\n';
    if (end == data.size()) break;
    // CRLF is one break; CR and LF alone are one each.
    start = end + (data[end] == '\r' && end + 1 < data.size() && data[end + 1] == '\n' ? 2 : 1);
    if (start == data.size()) {
      out += "data: \n";  // a trailing break: the data ends with an empty line
      break;
    }
  }
  out += '\n';
  return out;
}

util::Status SseParser::Feed(std::string_view bytes, std::vector<SseEvent>* out) {
  // Line by line: a run up to the next CR or LF is taken at once (a line
  // that lies whole in `bytes` is not even copied). The limit is checked as
  // each run joins what is pending, where checking it byte by byte would
  // first fail.
  size_t i = 0;
  while (i < bytes.size()) {
    if (after_cr_) {
      after_cr_ = false;
      if (bytes[i] == '\n') {  // the LF of a CRLF
        ++i;
        continue;
      }
    }
    // The next LF, then a CR before it (streams end lines with LF).
    const char* from = bytes.data() + i;
    const size_t left = bytes.size() - i;
    const void* lf = std::memchr(from, '\n', left);
    size_t end = lf != nullptr ? static_cast<size_t>(static_cast<const char*>(lf) - from) : left;
    if (const void* cr = std::memchr(from, '\r', end); cr != nullptr) {
      end = static_cast<size_t>(static_cast<const char*>(cr) - from);
    }
    end += i;
    const std::string_view run = bytes.substr(i, end - i);
    if (!run.empty() && pending_bytes() + run.size() > max_event_bytes_) {
      return util::ResourceExhaustedError(
          fmt::format("an event-stream event exceeds {} bytes", max_event_bytes_));
    }
    if (end == bytes.size()) {
      line_.append(run);  // the line goes on in the next bytes
      break;
    }
    if (line_.empty()) {
      Line(run, out);
    } else {
      line_.append(run);
      Line(line_, out);
      line_.clear();
    }
    after_cr_ = bytes[end] == '\r';
    i = end + 1;
  }
  return util::OkStatus();
}

void SseParser::Line(std::string_view line, std::vector<SseEvent>* out) {
  if (line.empty()) {
    if (has_data_) {
      SseEvent e;
      if (!event_.empty()) e.event = event_;
      e.data = std::move(data_);
      e.id = last_id_;
      out->push_back(std::move(e));
    }
    data_.clear();
    event_.clear();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // a comment (keep-alive)
  const size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (has_data_) data_.push_back('\n');
    data_.append(value);
    has_data_ = true;
  } else if (field == "event") {
    event_ = std::string(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) last_id_ = std::string(value);
  }
  // "retry" and unknown fields: ignored.
}

}  // namespace strata::net
