// net/internal/client_stream.h — one connection of the HTTP client to an
// upstream: a TCP socket, or TLS over one (private to net/).
//
// The client's state machine (connect, send, read, pool, retry) is written
// once against ClientStream; TLS adds only the handshake. Verification is
// OpenSSL's: NewTlsContext sets the trust store (the system's, plus an
// optional PEM bundle) and TLS 1.2 as the minimum; StartTls asks for the
// peer's certificate to match the URL's host (a DNS name or an IP address)
// and sends the name as SNI.
//
// Threading: thread-compatible; a stream is used on its loop's thread only.
// The TLS context is shared by every loop of a client and is not changed
// after NewTlsContext (OpenSSL allows SSL_new from several threads then).
#pragma once

#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>

#include <memory>
#include <string>
#include <utility>

#include "net/internal/asio.h"
#include "util/status.h"

namespace strata::net::internal {

namespace ssl = boost::asio::ssl;

// The client side of TLS: verify_peer against the system trust store and
// `ca_file` ("" = the system's only) when `verify`, else no verification at
// all. InvalidArgument naming `ca_file` when it cannot be loaded.
util::StatusOr<std::unique_ptr<ssl::context>> NewTlsContext(const std::string& ca_file,
                                                            bool verify);

class ClientStream {
 public:
  explicit ClientStream(asio::io_context& ctx) : plain_(ctx) {}
  ClientStream(ClientStream&&) = default;
  ClientStream& operator=(ClientStream&&) = default;

  // The TCP socket underneath (to connect, set options, peek, close).
  tcp::socket& socket() { return tls_ ? tls_->next_layer() : plain_; }
  bool tls() const { return tls_ != nullptr; }

  // Puts TLS over the connected socket, to be completed by AsyncHandshake:
  // SNI = `host` unless it is an IP address, and, when `verify`, the
  // certificate must be for `host`. Unavailable when OpenSSL refuses.
  util::Status StartTls(ssl::context& ctx, const std::string& host, bool verify);

  // Precondition: StartTls succeeded.
  template <typename Handler>
  void AsyncHandshake(Handler&& handler) {
    tls_->async_handshake(ssl::stream_base::client, std::forward<Handler>(handler));
  }
  // Why a handshake ended with `ec`: OpenSSL's reason, and the certificate's
  // problem when verification failed ("certificate verify failed (SSL
  // routines): unable to get local issuer certificate").
  std::string HandshakeError(const error_code& ec) const;

  // All of `buffer`, then handler(error_code, size_t).
  template <typename Handler>
  void AsyncWrite(asio::const_buffer buffer, Handler&& handler) {
    if (tls_) {
      asio::async_write(*tls_, buffer, std::forward<Handler>(handler));
    } else {
      asio::async_write(plain_, buffer, std::forward<Handler>(handler));
    }
  }
  // Some bytes into `buffer`, then handler(error_code, size_t). The end of
  // the stream is asio::error::eof for both kinds: a TLS peer that closes
  // without close_notify ends it too (the HTTP framing, not TLS, says
  // whether the response was whole).
  template <typename Handler>
  void AsyncReadSome(asio::mutable_buffer buffer, Handler&& handler) {
    if (tls_) {
      tls_->async_read_some(buffer,
                            [h = std::forward<Handler>(handler)](error_code ec, size_t n) mutable {
                              if (ec == ssl::error::stream_truncated) ec = asio::error::eof;
                              h(ec, n);
                            });
    } else {
      plain_.async_read_some(buffer, std::forward<Handler>(handler));
    }
  }

  // Closes the socket (no close_notify: the peer sees the TCP close);
  // pending operations complete with operation_aborted.
  void Close() {
    error_code ec;
    socket().close(ec);
  }

 private:
  tcp::socket plain_;                              // moved into tls_ by StartTls
  std::unique_ptr<ssl::stream<tcp::socket>> tls_;  // null for http://
};

}  // namespace strata::net::internal
