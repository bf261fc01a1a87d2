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
  return Feed(bytes, [out](const SseEventView& e) {
    SseEvent& copy = out->emplace_back();
    if (e.event != copy.event) copy.event.assign(e.event);
    copy.data.assign(e.data);
    copy.id.assign(e.id);
    return util::OkStatus();
  });
}

util::Status SseParser::Feed(std::string_view bytes, OnEvent on_event) {
  // Line by line: a run up to the next CR or LF is taken at once (a line
  // that lies whole in `bytes` is not even copied). The limit is checked as
  // each run joins what is pending, where checking it byte by byte would
  // first fail.
  util::Status status;
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
      status = util::ResourceExhaustedError(
          fmt::format("an event-stream event exceeds {} bytes", max_event_bytes_));
      break;
    }
    if (end == bytes.size()) {
      line_.append(run);  // the line goes on in the next bytes
      break;
    }
    if (line_.empty()) {
      status = Line(run, /*in_bytes=*/true, on_event);
    } else {
      line_.append(run);
      status = Line(line_, /*in_bytes=*/false, on_event);
      line_.clear();
    }
    if (!status.ok()) break;
    after_cr_ = bytes[end] == '\r';
    i = end + 1;
  }
  // An event still open keeps its data past these bytes.
  if (has_data_ && data_.data() != data_buffer_.data()) {
    data_buffer_.assign(data_);
    data_ = data_buffer_;
  }
  return status;
}

util::Status SseParser::Line(std::string_view line, bool in_bytes, OnEvent on_event) {
  if (line.empty()) {
    util::Status status;
    if (has_data_)
      status = on_event(SseEventView{
          .event = event_.empty() ? "message" : event_, .data = data_, .id = last_id_});
    data_ = {};
    event_.clear();
    has_data_ = false;
    return status;
  }
  if (line.front() == ':') return util::OkStatus();  // a comment (keep-alive)
  const size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? std::string_view() : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  if (field == "data") {
    if (!has_data_ && in_bytes) {
      data_ = value;  // the common case: one data line, read in place
    } else {
      // Joined in the buffer (data_ may be a view of it, or of the bytes).
      if (!has_data_) {
        data_buffer_.clear();
      } else if (data_.data() != data_buffer_.data()) {
        data_buffer_.assign(data_);
      }
      if (has_data_) data_buffer_.push_back('\n');
      data_buffer_.append(value);
      data_ = data_buffer_;
    }
    has_data_ = true;
  } else if (field == "event") {
    event_ = std::string(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) last_id_ = std::string(value);
  }
  // "retry" and unknown fields: ignored.
  return util::OkStatus();
}

}  // namespace strata::net
