// testing/raw_http.h — a loopback TCP client that sends exactly the bytes a
// test gives it and reads HTTP/1.1 responses back, for tests of what a
// careless or hostile client does (partial headers, half-closes, pipelining,
// resets) that a real HTTP client library would never send.
//
// Every read has a deadline (the default, 10 s, only bounds a broken test).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace strata::testing {

// A whole HTTP/1.1 request with a JSON body (Host, Content-Type and
// Content-Length set); `headers` are more "Name: value\r\n" lines.
inline std::string HttpRequest(const std::string& method, const std::string& path,
                               const std::string& body, const std::string& headers = "") {
  return method + " " + path + " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" +
         headers + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

struct RawResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;                                          // de-chunked
  std::string Header(std::string_view name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return "";
  }
};

class RawClient {
 public:
  // Connects to 127.0.0.1:port (or [::1]:port).
  explicit RawClient(int port, bool ipv6 = false) {
    fd_ = ::socket(ipv6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
    if (ipv6) {
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      a.sin6_addr = in6addr_loopback;
      connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    }
  }
  ~RawClient() { Close(); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  bool connected() const { return connected_; }

  bool Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // No more bytes from this side (the server may still answer).
  void ShutdownWrite() { ::shutdown(fd_, SHUT_WR); }
  // Closes with a reset (SO_LINGER 0), as a crashed client would.
  void Reset() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    Close();
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Shrinks the receive buffer so that a client that stops reading stops
  // the server's writes soon.
  void SetReceiveBuffer(int bytes) {
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes));
  }

  // Reads until `buffered` holds `needle` (true), the peer closes or the
  // deadline passes (false).
  bool ReadUntil(std::string_view needle,
                 std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (buffered_.find(needle) == std::string::npos) {
      if (!ReadSome(deadline)) return false;
    }
    return true;
  }
  // True when the peer closed (EOF or reset) before the deadline; bytes
  // read meanwhile stay in buffered().
  bool WaitClosed(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      const int r = ReadOnce(deadline);
      if (r == 0) return true;
      if (r < 0) return false;
    }
  }

  // The next whole response (skipping 1xx interim responses unless
  // `keep_interim`), or nullopt on close or timeout.
  std::optional<RawResponse> ReadResponse(
      std::chrono::milliseconds timeout = std::chrono::seconds(10), bool keep_interim = false) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      size_t head_end;
      while ((head_end = buffered_.find("\r\n\r\n")) == std::string::npos) {
        if (!ReadSome(deadline)) return std::nullopt;
      }
      RawResponse r;
      const std::string head = buffered_.substr(0, head_end);
      buffered_.erase(0, head_end + 4);
      size_t line_end = head.find("\r\n");
      const std::string status_line = head.substr(0, line_end);
      if (status_line.size() < 12) return std::nullopt;
      r.status = std::atoi(status_line.c_str() + 9);
      while (line_end != std::string::npos) {
        const size_t start = line_end + 2;
        line_end = head.find("\r\n", start);
        const std::string line = head.substr(start, line_end - start);
        const size_t colon = line.find(':');
        if (colon == std::string::npos) continue;
        std::string name = line.substr(0, colon);
        for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        size_t v = colon + 1;
        while (v < line.size() && line[v] == ' ') ++v;
        r.headers.emplace_back(name, line.substr(v));
      }
      if (r.status < 200 && !keep_interim) continue;
      if (r.status < 200 || r.status == 204 || r.status == 304 || head_only_) return r;
      if (r.Header("transfer-encoding") == "chunked") {
        while (true) {
          size_t eol;
          while ((eol = buffered_.find("\r\n")) == std::string::npos) {
            if (!ReadSome(deadline)) return std::nullopt;
          }
          const size_t size = std::stoul(buffered_.substr(0, eol), nullptr, 16);
          while (buffered_.size() < eol + 2 + size + 2) {
            if (!ReadSome(deadline)) return std::nullopt;
          }
          r.body += buffered_.substr(eol + 2, size);
          buffered_.erase(0, eol + 2 + size + 2);
          if (size == 0) break;
        }
      } else if (const std::string cl = r.Header("content-length"); !cl.empty()) {
        const size_t n = std::stoul(cl);
        while (buffered_.size() < n) {
          if (!ReadSome(deadline)) return std::nullopt;
        }
        r.body = buffered_.substr(0, n);
        buffered_.erase(0, n);
      } else {
        while (ReadSome(deadline)) {
        }
        r.body = std::move(buffered_);
        buffered_.clear();
      }
      return r;
    }
  }
  // The next response is to a HEAD request: it has no body.
  void ExpectHeadResponse(bool v) { head_only_ = v; }

  const std::string& buffered() const { return buffered_; }
  int fd() const { return fd_; }

 private:
  // 1: read bytes; 0: closed; -1: deadline.
  int ReadOnce(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return -1;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return -1;
    char buf[16384];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return 0;
    buffered_.append(buf, static_cast<size_t>(n));
    return 1;
  }
  bool ReadSome(std::chrono::steady_clock::time_point deadline) { return ReadOnce(deadline) == 1; }

  int fd_ = -1;
  bool connected_ = false;
  bool head_only_ = false;
  std::string buffered_;
};

}  // namespace strata::testing
