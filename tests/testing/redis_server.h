// tests/testing/redis_server.h — a real redis-server on a free loopback port,
// started and killed by the test (no persistence: --save '' --appendonly no).
//
// Usage:
//   auto redis = testing::RedisServer::Start();
//   if (!redis) GTEST_SKIP() << testing::RedisServer::kMissing;
//   ... redis->port() ...
//   redis->Kill();          // Redis goes away mid-test
//   redis->Restart();       // and comes back on the same port
//
// Threading: used by the test thread only.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace strata::testing {

class RedisServer {
 public:
  static constexpr const char* kMissing =
      "redis-server is not installed (Debian: apt-get install redis-server; scripts/lib.sh "
      "installs it): the shared-tier tests need a real Redis";

  // nullptr when no redis-server binary is found or it does not start.
  // A free port can be taken by another test between its probe and the
  // server's bind (ctest runs tests in parallel): then a fresh one is tried.
  static std::unique_ptr<RedisServer> Start() {
    const std::optional<std::string> bin = FindBinary();
    if (!bin) return nullptr;
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto s = std::unique_ptr<RedisServer>(new RedisServer(*bin, FreePort()));
      if (s->port_ > 0 && s->Launch()) return s;
    }
    return nullptr;
  }
  ~RedisServer() { Kill(); }

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  bool running() const { return pid_ > 0; }

  // SIGKILL: connections drop at once, as in a crash.
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // Starts again on the same port (empty: nothing was persisted).
  bool Restart() {
    Kill();
    return Launch();
  }

 private:
  RedisServer(std::string bin, int port) : bin_(std::move(bin)), port_(port) {}

  static std::optional<std::string> FindBinary() {
    std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
    path += ":/usr/bin:/usr/sbin:/usr/local/bin";
    std::stringstream ss(path);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      if (dir.empty()) continue;
      const std::string candidate = dir + "/redis-server";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return std::nullopt;
  }

  static int FreePort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int port = -1;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
    ::close(fd);
    return port;
  }

  // True once the server answers PING.
  bool Answers() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port_));
    bool ok = false;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      const char ping[] = "PING\r\n";
      char buf[16] = {};
      ok = ::send(fd, ping, sizeof ping - 1, 0) == static_cast<ssize_t>(sizeof ping - 1) &&
           ::recv(fd, buf, sizeof buf - 1, 0) > 0 && std::string(buf).rfind("+PONG", 0) == 0;
    }
    ::close(fd);
    return ok;
  }

  bool Launch() {
    const std::string port = std::to_string(port_);
    const pid_t pid = ::fork();
    if (pid < 0) return false;
    if (pid == 0) {
      // Child (async-signal-safe calls only): quiet, no persistence, loopback only.
      const int null_fd = ::open("/dev/null", O_WRONLY);
      if (null_fd >= 0) {
        ::dup2(null_fd, 1);
        ::dup2(null_fd, 2);
      }
      ::execl(bin_.c_str(), "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--save",
              "", "--appendonly", "no", "--daemonize", "no", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    pid_ = pid;
    // Waiting for another process to start listening: poll with a deadline
    // (this is readiness, not a timing assertion).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (Answers()) return true;
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {  // exited (port taken?)
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Kill();
    return false;
  }

  const std::string bin_;
  const int port_;
  pid_t pid_ = -1;
};

}  // namespace strata::testing
