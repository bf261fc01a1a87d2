// tests/testing/redis_server.h — a real redis-server on a free loopback port,
// started and killed by the test. By default without persistence (--save ''
// --appendonly no); `extra` arguments go after those and win (for example
// {"--appendonly", "yes", "--appendfsync", "always"}, or {"--replicaof",
// "127.0.0.1", "6380"}). Its files go to a scratch directory of its own,
// removed with it.
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
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace strata::testing {

class RedisServer {
 public:
  static constexpr const char* kMissing =
      "redis-server is not installed (Debian: apt-get install redis-server; scripts/lib.sh "
      "installs it): the shared-tier tests need a real Redis";

  // nullptr when no redis-server binary is found or it does not start.
  // A free port can be taken by another test between its probe and the
  // server's bind (ctest runs tests in parallel): then a fresh one is tried.
  static std::unique_ptr<RedisServer> Start(std::vector<std::string> extra = {}) {
    const std::optional<std::string> bin = FindBinary();
    if (!bin) return nullptr;
    for (int attempt = 0; attempt < 5; ++attempt) {
      auto s = std::unique_ptr<RedisServer>(new RedisServer(*bin, FreePort(), extra));
      if (s->port_ > 0 && s->Launch()) return s;
    }
    return nullptr;
  }
  ~RedisServer() {
    Kill();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

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
  // Starts again on the same port, on the same files (with --appendonly yes
  // it comes back with what it had; without, empty).
  bool Restart() {
    Kill();
    return Launch();
  }

 private:
  RedisServer(std::string bin, int port, std::vector<std::string> extra)
      : bin_(std::move(bin)), port_(port), extra_(std::move(extra)) {
    dir_ = std::filesystem::temp_directory_path() /
           ("strata_redis_" + std::to_string(::getpid()) + "_" + std::to_string(port));
    std::error_code ec;
    std::filesystem::create_directories(dir_, ec);
  }

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
    // The argument vector is built before fork: the child only execs.
    std::vector<std::string> args = {
        "redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1", "--save",     "",
        "--appendonly", "no",     "--daemonize",         "no",     "--dir",     dir_.string()};
    args.insert(args.end(), extra_.begin(), extra_.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) return false;
    if (pid == 0) {
      // Child (async-signal-safe calls only): quiet, loopback only.
      const int null_fd = ::open("/dev/null", O_WRONLY);
      if (null_fd >= 0) {
        ::dup2(null_fd, 1);
        ::dup2(null_fd, 2);
      }
      ::execv(bin_.c_str(), argv.data());
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
  const std::vector<std::string> extra_;
  std::filesystem::path dir_;
  pid_t pid_ = -1;
};

}  // namespace strata::testing
