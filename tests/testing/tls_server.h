// testing/tls_server.h — a real TLS peer on loopback for tests of https
// clients: a throwaway PKI made at test time (a CA and the server
// certificates it signs, with the names a test asks for) and a small
// HTTP/1.1 server over OpenSSL that presents one of them.
//
// The server (one thread per connection, blocking OpenSSL) answers
//   POST /echo        200, the request body back (kept alive)
//   GET  /hello       200 "hello over tls" (kept alive)
//   GET  /stream?n=K  200, K chunks of 1000 bytes (chunked; blocks while the
//                     client does not read)
//   GET  /silent      never answers
//   GET  /bye         200 "bye", then close_notify and a TCP close, without
//                     saying Connection: close
// and counts the TCP connections it accepted and the SNI it was sent.
//
// Needs OpenSSL (link OpenSSL::SSL OpenSSL::Crypto). The server ignores
// SIGPIPE for the process: OpenSSL writes with write(2), and a client that
// went away must not end the test binary.
#pragma once

#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace strata::testing {

struct TlsFree {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
  void operator()(X509* p) const { X509_free(p); }
  void operator()(SSL_CTX* p) const { SSL_CTX_free(p); }
};

// A key and its certificate.
struct TlsIdentity {
  std::unique_ptr<EVP_PKEY, TlsFree> key;
  std::unique_ptr<X509, TlsFree> cert;
  bool ok() const { return key && cert; }
};

// A P-256 key and a certificate for it valid from an hour ago for a day:
// a CA (`issuer` null: self-signed) or a server certificate signed by
// `issuer` with the subjectAltName `san` ("IP:127.0.0.1,DNS:localhost").
// Not ok() when OpenSSL refused a step.
inline TlsIdentity MakeTlsIdentity(const std::string& cn, const TlsIdentity* issuer,
                                   const std::string& san = "", long serial = 1) {
  TlsIdentity id;
  id.key.reset(EVP_PKEY_Q_keygen(nullptr, nullptr, "EC", "P-256"));
  id.cert.reset(X509_new());
  if (!id.ok()) return {};
  X509* x = id.cert.get();
  const bool ca = issuer == nullptr;
  X509* signer = ca ? x : issuer->cert.get();
  bool good = X509_set_version(x, 2) == 1 &&
              ASN1_INTEGER_set(X509_get_serialNumber(x), serial) == 1 &&
              X509_gmtime_adj(X509_getm_notBefore(x), -3600) != nullptr &&
              X509_gmtime_adj(X509_getm_notAfter(x), 24 * 3600) != nullptr &&
              X509_set_pubkey(x, id.key.get()) == 1 &&
              X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                                         reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1,
                                         0) == 1 &&
              X509_set_issuer_name(x, X509_get_subject_name(signer)) == 1;
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, signer, x, nullptr, nullptr, 0);
  auto add = [&](int nid, const std::string& value) {
    X509_EXTENSION* e = X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str());
    good = good && e != nullptr && X509_add_ext(x, e, -1) == 1;
    X509_EXTENSION_free(e);
  };
  add(NID_basic_constraints, ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
  add(NID_key_usage, ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature");
  add(NID_subject_key_identifier, "hash");
  if (!ca) {
    add(NID_authority_key_identifier, "keyid:always");
    add(NID_ext_key_usage, "serverAuth");
    if (!san.empty()) add(NID_subject_alt_name, san);
  }
  good = good && X509_sign(x, ca ? id.key.get() : issuer->key.get(), EVP_sha256()) > 0;
  if (!good) return {};
  return id;
}

// Writes `cert` as PEM to `path`; false on failure.
inline bool WritePem(const X509* cert, const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  const bool ok = PEM_write_X509(f, cert) == 1;
  return std::fclose(f) == 0 && ok;
}

class TlsServer {
 public:
  // Listens on 127.0.0.1 (an ephemeral port) presenting `id`; port() is 0
  // when that failed.
  explicit TlsServer(const TlsIdentity& id) {
    std::signal(SIGPIPE, SIG_IGN);
    ctx_.reset(SSL_CTX_new(TLS_server_method()));
    if (!ctx_ || SSL_CTX_use_certificate(ctx_.get(), id.cert.get()) != 1 ||
        SSL_CTX_use_PrivateKey(ctx_.get(), id.key.get()) != 1) {
      return;
    }
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        ::listen(listen_fd_, 16) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { AcceptLoop(); });
  }
  ~TlsServer() {
    // Unblocks accept(2) and every connection's read or write.
    if (listen_fd_ >= 0) ::shutdown(listen_fd_, SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
      threads = std::move(threads_);
    }
    for (auto& t : threads) t.join();
    if (listen_fd_ >= 0) ::close(listen_fd_);
  }
  TlsServer(const TlsServer&) = delete;
  TlsServer& operator=(const TlsServer&) = delete;

  int port() const { return port_; }
  int accepted() const { return accepted_.load(); }
  // The server name (SNI) of the last handshake; "" when none was sent.
  std::string last_sni() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_sni_;
  }

 private:
  void AcceptLoop() {
    while (true) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;  // shut down
      accepted_.fetch_add(1);
      std::lock_guard<std::mutex> lock(mu_);
      fds_.insert(fd);
      threads_.emplace_back([this, fd] { Serve(fd); });
    }
  }

  void Serve(int fd) {
    SSL* ssl = SSL_new(ctx_.get());
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) == 1) {
      const char* sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
      {
        std::lock_guard<std::mutex> lock(mu_);
        last_sni_ = sni ? sni : "";
      }
      Exchanges(ssl);
    }
    SSL_free(ssl);
    ERR_clear_error();
    std::lock_guard<std::mutex> lock(mu_);
    fds_.erase(fd);
    ::close(fd);
  }

  static bool WriteAll(SSL* ssl, const std::string& s) {
    return s.empty() || SSL_write(ssl, s.data(), static_cast<int>(s.size())) > 0;
  }

  // Requests one after another until the client goes away.
  static void Exchanges(SSL* ssl) {
    std::string in;
    char buf[16384];
    while (true) {
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        const int n = SSL_read(ssl, buf, sizeof(buf));
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      const std::string head = in.substr(0, end);
      in.erase(0, end + 4);
      size_t length = 0;
      constexpr std::string_view kLength = "Content-Length: ";  // as strata's client writes it
      if (const size_t at = head.find(kLength); at != std::string::npos) {
        length = std::stoul(head.substr(at + kLength.size()));
      }
      while (in.size() < length) {
        const int n = SSL_read(ssl, buf, sizeof(buf));
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      const std::string body = in.substr(0, length);
      in.erase(0, length);
      const size_t sp = head.find(' ');
      const std::string target = head.substr(sp + 1, head.find(' ', sp + 1) - sp - 1);
      auto respond = [&](const std::string& b) {
        return WriteAll(
            ssl, "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(b.size()) + "\r\n\r\n" + b);
      };
      if (target == "/echo") {
        if (!respond(body)) return;
      } else if (target == "/hello") {
        if (!respond("hello over tls")) return;
      } else if (target.rfind("/stream?n=", 0) == 0) {
        const int n = std::stoi(target.substr(10));
        if (!WriteAll(ssl, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")) return;
        for (int i = 0; i < n; ++i) {
          if (!WriteAll(ssl,
                        "3e8\r\n" + std::string(1000, static_cast<char>('a' + i % 26)) + "\r\n")) {
            return;
          }
        }
        if (!WriteAll(ssl, "0\r\n\r\n")) return;
      } else if (target == "/silent") {
        while (SSL_read(ssl, buf, sizeof(buf)) > 0) {
        }
        return;
      } else if (target == "/bye") {
        respond("bye");
        SSL_shutdown(ssl);
        return;
      } else {
        if (!WriteAll(ssl, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")) return;
      }
    }
  }

  std::unique_ptr<SSL_CTX, TlsFree> ctx_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<int> accepted_{0};
  std::thread acceptor_;
  mutable std::mutex mu_;
  std::set<int> fds_;                 // guarded by mu_: open connections
  std::vector<std::thread> threads_;  // guarded by mu_
  std::string last_sni_;              // guarded by mu_
};

}  // namespace strata::testing
