#include "loadgen/recorder.h"

#include <fmt/format.h>

#include <algorithm>

namespace strata::loadgen {

std::optional<double> RequestSample::TtftS() const {
  if (first_token_s < 0) return std::nullopt;
  return first_token_s - sent_s;
}

std::optional<double> RequestSample::TpotS() const {
  const int64_t tokens = OutputTokens();
  if (first_token_s < 0 || last_token_s < 0 || tokens < 2) return std::nullopt;
  return (last_token_s - first_token_s) / static_cast<double>(tokens - 1);
}

std::string_view OutcomeName(Outcome outcome) {
  switch (outcome) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kInterrupted:
      return "interrupted";
  }
  return "unknown";
}

void StreamRecorder::OnStatus(int http_status) { s_.http_status = http_status; }

void StreamRecorder::OnCacheHeader(std::string_view value) { s_.cache = std::string(value); }

void StreamRecorder::OnBytes(std::string_view bytes, double now_s) {
  if (s_.http_status != 200) {
    const size_t room = kMaxErrorBody - std::min(kMaxErrorBody, error_body_.size());
    error_body_.append(bytes.substr(0, room));
    return;
  }
  for (const SseEvent& e : parser_.Feed(bytes)) {
    const StreamFrame f = InterpretEvent(e);
    switch (f.kind) {
      case StreamFrame::Kind::kChunk:
        if (!f.content.empty()) {
          if (s_.first_token_s < 0) s_.first_token_s = now_s;
          s_.last_token_s = now_s;
          ++s_.content_chunks;
        }
        if (f.finished && !finished_) {
          finished_ = true;
          s_.finish_reason = f.finish_reason;
        }
        if (f.prompt_tokens) s_.prompt_tokens = *f.prompt_tokens;
        if (f.completion_tokens) s_.completion_tokens = *f.completion_tokens;
        break;
      case StreamFrame::Kind::kDone:
        done_ = true;
        break;
      case StreamFrame::Kind::kError:
        if (stream_error_.empty()) stream_error_ = f.error.empty() ? "(no message)" : f.error;
        break;
      case StreamFrame::Kind::kMalformed:
        if (malformed_.empty()) malformed_ = f.error;
        break;
      case StreamFrame::Kind::kIgnored:
        break;
    }
  }
}

RequestSample StreamRecorder::Finish(double end_s, TransportEnd end,
                                     std::string_view transport_message) {
  s_.end_s = end_s;
  auto fail = [&](std::string kind, std::string message) {
    s_.outcome = Outcome::kFailed;
    s_.error_kind = std::move(kind);
    s_.error_message = std::move(message);
    return s_;
  };
  if (end == TransportEnd::kInterrupted) {
    s_.outcome = Outcome::kInterrupted;
    s_.error_kind = "interrupted";
    return s_;
  }
  // The server's own verdict comes first: it explains a transport failure that follows.
  if (s_.http_status != 0 && s_.http_status != 200) {
    return fail(fmt::format("http_{}", s_.http_status), ErrorMessageFromBody(error_body_));
  }
  if (!stream_error_.empty()) return fail("stream_error", stream_error_);
  switch (end) {
    case TransportEnd::kComplete:
      break;
    case TransportEnd::kTimeout:
      return fail("timeout", std::string(transport_message));
    case TransportEnd::kConnect:
      return fail("connect", std::string(transport_message));
    case TransportEnd::kDropped:
      return fail("dropped", std::string(transport_message));
    case TransportEnd::kOther:
      return fail("transport", std::string(transport_message));
    case TransportEnd::kInterrupted:
      break;  // handled above
  }
  if (s_.http_status == 0) return fail("transport", "no HTTP response");
  if (!malformed_.empty()) return fail("bad_response", malformed_);
  if (!done_ && !finished_) {
    return fail("incomplete_stream", parser_.HasPartial()
                                         ? "the body ended inside an event"
                                         : "the body ended without [DONE] or a finish_reason");
  }
  s_.outcome = Outcome::kOk;
  return s_;
}

}  // namespace strata::loadgen
