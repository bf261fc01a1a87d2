// net/internal/request_parser.h — one HTTP/1.1 request read against the
// limits (private to net/).
//
// Promise: built on Beast's incremental parser. Feed it bytes with put();
// the head is available once is_header_done(), the decoded body once
// is_done(). Every limit of HttpLimits that concerns one request is checked
// as the bytes arrive (the request line, header bytes and fields, the body
// after Content-Encoding, the decompression ratio), and a failure says which
// HTTP status answers it (failure_status()) and why (failure()).
//
// Threading: one parser per request, used by one thread.
#pragma once

#include <memory>
#include <string>

#include "net/http_server.h"
#include "net/internal/asio.h"
#include "net/internal/body_decoder.h"
#include "util/status.h"

namespace strata::net::internal {

class RequestParser final : public http::basic_parser<true> {
 public:
  explicit RequestParser(const HttpLimits& limits);

  RequestHead& head() { return head_; }
  std::string& body() { return body_; }
  // Bytes of header fields seen so far (with the request line).
  // After put() fails: the HTTP status to answer with and the reason.
  int failure_status() const { return failure_status_; }
  const util::Status& failure() const { return failure_; }
  // Maps a put() error to failure_status()/failure() when a callback did not
  // set them already (Beast's own errors: header or body limit, bad syntax).
  void NoteError(const error_code& ec);
  // After the head: a Content-Length beyond the body limit (413).
  util::Status CheckAnnouncedLength() const;

 private:
  void Fail(int status, util::Status why, error_code& ec);
  void on_request_impl(http::verb method, boost::beast::string_view method_str,
                       boost::beast::string_view target, int version, error_code& ec) override;
  void on_response_impl(int, boost::beast::string_view, int, error_code& ec) override;
  void on_field_impl(http::field name, boost::beast::string_view name_string,
                     boost::beast::string_view value, error_code& ec) override;
  void on_header_impl(error_code& ec) override;
  void on_body_init_impl(const boost::optional<std::uint64_t>& content_length,
                         error_code& ec) override;
  std::size_t on_body_impl(boost::beast::string_view body, error_code& ec) override;
  void on_chunk_header_impl(std::uint64_t size, boost::beast::string_view extensions,
                            error_code& ec) override;
  std::size_t on_chunk_body_impl(std::uint64_t remain, boost::beast::string_view body,
                                 error_code& ec) override;
  void on_finish_impl(error_code& ec) override;
  std::size_t Feed(boost::beast::string_view bytes, error_code& ec);

  const HttpLimits& limits_;
  RequestHead head_;
  std::string body_;
  std::unique_ptr<BodyDecoder> decoder_;
  int32_t n_fields_ = 0;
  size_t raw_bytes_ = 0;  // body bytes as received, before decoding
  int failure_status_ = 0;
  util::Status failure_;
};

}  // namespace strata::net::internal
