// loadgen's HttpSession against a raw loopback server that closes every
// connection after one response without saying so (as llama-server does after
// a streamed answer): the next request must go out again on a new connection,
// and a request the server really dropped must still count as failed.
#include "loadgen/http_session.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace strata::loadgen {
namespace {

// Serves `connections` connections one after the other, one request each.
// answer == false: reads the request and closes without a byte in reply.
class OneShotServer {
 public:
  // `header`: an extra response header line ("Name: value"), or empty.
  OneShotServer(int connections, bool answer, std::string header = "") {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd_, 8) != 0) {
      return;
    }
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, connections, answer, header] {
      for (int i = 0; i < connections; ++i) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        if (ReadRequest(c)) {
          requests_.fetch_add(1);
          if (answer) {
            const std::string body =
                "data: {\"choices\":[{\"index\":0,\"text\":\"hi\",\"finish_reason\":null}]}\n\n"
                "data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n"
                "data: [DONE]\n\n";
            const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n" +
                                     (header.empty() ? "" : header + "\r\n") +
                                     "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
            const std::string all = head + body;
            (void)!::send(c, all.data(), all.size(), MSG_NOSIGNAL);
          }
        }
        ::close(c);
      }
    });
  }
  ~OneShotServer() {
    ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    if (fd_ >= 0) ::close(fd_);
  }
  int port() const { return port_; }
  int requests() const { return requests_.load(); }

 private:
  // Reads headers and a Content-Length body; false if the peer went away first.
  static bool ReadRequest(int c) {
    std::string in;
    char buf[4096];
    size_t need = std::string::npos;
    while (need == std::string::npos || in.size() < need) {
      const ssize_t n = ::recv(c, buf, sizeof buf, 0);
      if (n <= 0) return false;
      in.append(buf, static_cast<size_t>(n));
      const size_t end = in.find("\r\n\r\n");
      if (need == std::string::npos && end != std::string::npos) {
        size_t length = 0;
        const size_t at = in.find("Content-Length: ");
        if (at != std::string::npos && at < end) length = std::stoul(in.substr(at + 16));
        need = end + 4 + length;
      }
    }
    return true;
  }

  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> requests_{0};
};

SessionOptions Options(int port) {
  SessionOptions o;
  o.base_url = "http://127.0.0.1:" + std::to_string(port);
  o.path = "/v1/completions";
  o.timeout_s = 10;
  return o;
}

TEST(HttpSession, ResendsOnANewConnectionWhenTheKeptAliveOneWasClosed) {
  OneShotServer server(3, /*answer=*/true);
  ASSERT_GT(server.port(), 0);
  std::atomic<bool> stop{false};
  HttpSession session(Options(server.port()), std::chrono::steady_clock::now(), stop);
  for (int i = 0; i < 3; ++i) {
    RequestSample base;
    base.index = i;
    const RequestSample s = session.Send(R"({"prompt":"x","stream":true})", base);
    EXPECT_EQ(s.outcome, Outcome::kOk) << i << ": " << s.error_kind << " " << s.error_message;
    EXPECT_EQ(s.http_status, 200) << i;
  }
  EXPECT_EQ(server.requests(), 3);  // each request reached the server exactly once
}

TEST(HttpSession, ARequestTheServerDroppedStillFails) {
  OneShotServer server(2, /*answer=*/false);
  ASSERT_GT(server.port(), 0);
  std::atomic<bool> stop{false};
  HttpSession session(Options(server.port()), std::chrono::steady_clock::now(), stop);
  const RequestSample s = session.Send(R"({"prompt":"x","stream":true})", RequestSample{});
  EXPECT_EQ(s.outcome, Outcome::kFailed);
  EXPECT_EQ(s.error_kind, "dropped");
  EXPECT_EQ(server.requests(), 1);  // a fresh connection is not retried
}

TEST(HttpSession, RecordsTheXStrataCacheHeader) {
  OneShotServer marked(1, /*answer=*/true, "x-strata-cache: l3");
  ASSERT_GT(marked.port(), 0);
  std::atomic<bool> stop{false};
  HttpSession a(Options(marked.port()), std::chrono::steady_clock::now(), stop);
  const RequestSample s = a.Send(R"({"prompt":"x","stream":true})", RequestSample{});
  EXPECT_EQ(s.outcome, Outcome::kOk) << s.error_kind << " " << s.error_message;
  EXPECT_EQ(s.cache, "l3");

  OneShotServer plain(1, /*answer=*/true);
  ASSERT_GT(plain.port(), 0);
  HttpSession b(Options(plain.port()), std::chrono::steady_clock::now(), stop);
  const RequestSample t = b.Send(R"({"prompt":"x","stream":true})", RequestSample{});
  EXPECT_EQ(t.outcome, Outcome::kOk);
  EXPECT_EQ(t.cache, "");
}

}  // namespace
}  // namespace strata::loadgen
