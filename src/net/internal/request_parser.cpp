#include "net/internal/request_parser.h"

#include <fmt/format.h>

#include <algorithm>

namespace strata::net::internal {
namespace {

std::string_view View(boost::beast::string_view s) { return {s.data(), s.size()}; }

}  // namespace

RequestParser::RequestParser(const HttpLimits& limits) : limits_(limits) {
  header_limit(static_cast<std::uint32_t>(limits.max_header_bytes));
  // Body sizes are checked here (Feed) and by the decoder, not by Beast, so
  // that an announced size is refused only after the handler has seen the
  // head (a request without a key gets 401, whatever its size).
  body_limit(boost::none);
}

void RequestParser::Fail(int status, util::Status why, error_code& ec) {
  failure_status_ = status;
  failure_ = std::move(why);
  ec = http::error::bad_value;
}

void RequestParser::NoteError(const error_code& ec) {
  if (failure_status_ != 0) return;
  if (ec == http::error::header_limit) {
    failure_status_ = 431;
    failure_ = util::InvalidArgumentError(
        fmt::format("the request headers exceed the limit of {} bytes", limits_.max_header_bytes));
  } else if (ec == http::error::body_limit) {
    failure_status_ = 413;
    failure_ = util::InvalidArgumentError(
        fmt::format("the request body exceeds the limit of {} bytes", limits_.max_body_bytes));
  } else if (ec == http::error::bad_version) {
    failure_status_ = 505;
    failure_ = util::InvalidArgumentError("only HTTP/1.0 and HTTP/1.1 are served");
  } else {
    failure_status_ = 400;
    failure_ = util::InvalidArgumentError(fmt::format("malformed HTTP request: {}", ec.message()));
  }
}

void RequestParser::on_request_impl(http::verb, boost::beast::string_view method_str,
                                    boost::beast::string_view target, int version, error_code& ec) {
  const size_t line = method_str.size() + target.size() + 10;  // "M T HTTP/1.1"
  if (line > limits_.max_request_line_bytes) {
    return Fail(
        414,
        util::InvalidArgumentError(fmt::format("the request line exceeds the limit of {} bytes",
                                               limits_.max_request_line_bytes)),
        ec);
  }
  if (version != 10 && version != 11) {
    return Fail(505, util::InvalidArgumentError("only HTTP/1.0 and HTTP/1.1 are served"), ec);
  }
  head_.method = std::string(View(method_str));
  head_.target = std::string(View(target));
  head_.version = version;
}

void RequestParser::on_response_impl(int, boost::beast::string_view, int, error_code& ec) {
  ec = http::error::bad_method;  // a request parser never sees a status line
}

void RequestParser::on_field_impl(http::field, boost::beast::string_view name_string,
                                  boost::beast::string_view value, error_code& ec) {
  if (++n_fields_ > limits_.max_header_fields) {
    return Fail(431,
                util::InvalidArgumentError(fmt::format("the request has more than {} header fields",
                                                       limits_.max_header_fields)),
                ec);
  }
  head_.headers.Add(std::string(View(name_string)), std::string(View(value)));
}

void RequestParser::on_header_impl(error_code& ec) {
  if (head_.version == 11 && !head_.headers.Has("Host")) {
    return Fail(400, util::InvalidArgumentError("an HTTP/1.1 request must have a Host header"), ec);
  }
  if (const auto te = head_.headers.Get("Transfer-Encoding")) {
    if (!EqualsIgnoreCase(*te, "chunked")) {
      return Fail(501,
                  util::UnimplementedError(fmt::format(
                      "Transfer-Encoding '{}' is not supported (only chunked)", te->substr(0, 64))),
                  ec);
    }
  }
  const std::string_view connection = head_.headers.GetOr("Connection");
  head_.keep_alive =
      head_.version == 11 ? !HasToken(connection, "close") : HasToken(connection, "keep-alive");
  DecodeLimits dl;
  dl.max_bytes = limits_.max_body_bytes;
  dl.max_ratio = limits_.max_inflate_ratio;
  dl.ratio_floor_bytes = std::min<size_t>(dl.ratio_floor_bytes, limits_.max_body_bytes);
  auto decoder = NewBodyDecoder(head_.headers.GetOr("Content-Encoding"), dl);
  if (!decoder.ok()) {
    return Fail(decoder.status().code() == util::StatusCode::kUnimplemented ? 415 : 400,
                decoder.status(), ec);
  }
  decoder_ = std::move(decoder).value();
}

void RequestParser::on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) {}

util::Status RequestParser::CheckAnnouncedLength() const {
  const boost::optional<std::uint64_t> length = content_length();
  if (length && *length > limits_.max_body_bytes) {
    return util::InvalidArgumentError(
        fmt::format("the request body ({} bytes) exceeds the limit of {} bytes", *length,
                    limits_.max_body_bytes));
  }
  return util::OkStatus();
}

std::size_t RequestParser::Feed(boost::beast::string_view bytes, error_code& ec) {
  // The encoded bytes: a little above the decoded limit at most (stored
  // blocks of incompressible data).
  raw_bytes_ += bytes.size();
  if (raw_bytes_ > limits_.max_body_bytes + (64u << 10)) {
    Fail(413,
         util::InvalidArgumentError(
             fmt::format("the request body exceeds the limit of {} bytes", limits_.max_body_bytes)),
         ec);
    return bytes.size();
  }
  util::Status st = decoder_->Decode(View(bytes), &body_);
  if (!st.ok()) {
    // The status is chosen before `st` is moved into the call.
    const int status = st.code() == util::StatusCode::kResourceExhausted ? 413 : 400;
    Fail(status, std::move(st), ec);
  }
  return bytes.size();
}

std::size_t RequestParser::on_body_impl(boost::beast::string_view body, error_code& ec) {
  return Feed(body, ec);
}

void RequestParser::on_chunk_header_impl(std::uint64_t, boost::beast::string_view, error_code&) {}

std::size_t RequestParser::on_chunk_body_impl(std::uint64_t, boost::beast::string_view body,
                                              error_code& ec) {
  return Feed(body, ec);
}

void RequestParser::on_finish_impl(error_code& ec) {
  if (decoder_ == nullptr) return;
  util::Status st = decoder_->Finish(&body_);
  if (!st.ok()) Fail(400, std::move(st), ec);
}

}  // namespace strata::net::internal
