#include "net/internal/client_stream.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <exception>

namespace strata::net::internal {
namespace {

// OpenSSL's reason for the last error on this thread's queue (and clears it).
std::string LastOpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

}  // namespace

util::StatusOr<std::unique_ptr<ssl::context>> NewTlsContext(const std::string& ca_file,
                                                            bool verify) {
  std::unique_ptr<ssl::context> ctx;
  try {
    // Asio throws only when OpenSSL cannot make a context (out of memory).
    ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
  } catch (const std::exception& e) {
    return util::InternalError(fmt::format("cannot create a TLS context: {}", e.what()));
  }
  SSL_CTX* native = ctx->native_handle();
  if (SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION) != 1) {
    return util::InternalError(
        fmt::format("cannot require TLS 1.2 at least: {}", LastOpenSslError()));
  }
  error_code ec;
  ctx->set_options(ssl::context::default_workarounds | ssl::context::no_compression, ec);
  if (verify) {
    ctx->set_verify_mode(ssl::verify_peer, ec);
    // A missing system store is not an error here: the handshake then fails
    // with "unable to get local issuer certificate", naming the cause.
    ctx->set_default_verify_paths(ec);
    ERR_clear_error();
  } else {
    ctx->set_verify_mode(ssl::verify_none, ec);
  }
  if (!ca_file.empty()) {
    ctx->load_verify_file(ca_file, ec);
    if (ec) {
      ERR_clear_error();
      return util::InvalidArgumentError(
          fmt::format("ca_file '{}': cannot load PEM certificates: {}", ca_file, ec.message()));
    }
  }
  return ctx;
}

util::Status ClientStream::StartTls(ssl::context& ctx, const std::string& host, bool verify) {
  try {
    // Asio throws only when OpenSSL cannot make the connection's state.
    tls_ = std::make_unique<ssl::stream<tcp::socket>>(std::move(plain_), ctx);
  } catch (const std::exception& e) {
    return util::UnavailableError(fmt::format("cannot start TLS with {}: {}", host, e.what()));
  }
  SSL* ssl = tls_->native_handle();
  error_code ec;
  asio::ip::make_address(host, ec);
  const bool ip_literal = !ec;
  // SNI carries DNS names only (RFC 6066 §3).
  if (!ip_literal && SSL_set_tlsext_host_name(ssl, host.c_str()) != 1) {
    return util::UnavailableError(
        fmt::format("cannot send '{}' as the TLS server name: {}", host, LastOpenSslError()));
  }
  if (!verify) return util::OkStatus();
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
  const int set = ip_literal ? X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str())
                             : X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
  if (set != 1) {
    return util::UnavailableError(fmt::format(
        "cannot check the certificate of '{}' against its name: {}", host, LastOpenSslError()));
  }
  return util::OkStatus();
}

std::string ClientStream::HandshakeError(const error_code& ec) const {
  std::string why = ec.message();
  if (tls_) {
    const long result = SSL_get_verify_result(tls_->native_handle());
    if (result != X509_V_OK) {
      why += ": ";
      why += X509_verify_cert_error_string(result);
    }
  }
  ERR_clear_error();
  return why;
}

}  // namespace strata::net::internal
