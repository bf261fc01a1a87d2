// testing/strata_process.h — the strata binary as a child process, for
// tests that drive it from outside: spawn it with its output in a log file,
// wait for it to exit, read the port it listens on from its log, and wait
// until `strata serve` says it is ready.
//
// The binary is $STRATA_BIN (ctest sets it), else build/release/strata.
// Every wait has a deadline; nothing here kills a process it did not start.
//
// Threading: plain functions; a test calls them from its own thread.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace strata::testing {

// The binary under test.
inline std::string StrataBin() {
  const char* bin = std::getenv("STRATA_BIN");
  return bin ? bin : "build/release/strata";
}

// The whole file at `path` ("" when it cannot be read).
inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs the binary with `args`, stdout and stderr to `log` (truncated);
// returns the pid.
inline pid_t Spawn(const std::vector<std::string>& args, const std::string& log) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    FILE* out = std::freopen(log.c_str(), "w", stdout);
    (void)out;
    ::dup2(STDOUT_FILENO, STDERR_FILENO);
    // Nothing else of the test's: a listening socket the child inherited
    // would keep the test's port taken after the test closed it.
    ::close_range(STDERR_FILENO + 1, ~0U, 0);
    const std::string bin = StrataBin();
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  return pid;
}

// Waits for `pid` up to `timeout`: its exit status (128 + the signal when a
// signal ended it), or -1 if it is still running.
inline int WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (std::chrono::steady_clock::now() >= end) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Writes a random-weight model with `strata mkmodel --dims DIMS EXTRA` to
// DIR/demo.gguf (its log in DIR/mkmodel.log), waiting up to two minutes:
// the model's path, or "" when mkmodel failed (the log says why).
inline std::string MakeDemoModel(const std::string& dir, const std::string& dims,
                                 const std::vector<std::string>& extra = {}) {
  const std::string model = dir + "/demo.gguf";
  std::vector<std::string> args = {"mkmodel", "--dims", dims};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"-o", model, "--log-level", "error"});
  const pid_t pid = Spawn(args, dir + "/mkmodel.log");
  return WaitExit(pid, std::chrono::seconds(120)) == 0 ? model : "";
}

// A test suite's scratch directory (NAME_PID under the system's temporary
// directory) holding a demo model written by MakeDemoModel with `dims`;
// removed, with everything in it, when this goes. `model` is "" when
// mkmodel failed (MkmodelLog says why).
struct DemoModelDir {
  DemoModelDir(const std::string& name, const std::string& dims)
      : dir(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir);
    model = MakeDemoModel(dir.string(), dims);
  }
  ~DemoModelDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  DemoModelDir(const DemoModelDir&) = delete;
  DemoModelDir& operator=(const DemoModelDir&) = delete;
  std::string MkmodelLog() const { return ReadAll((dir / "mkmodel.log").string()); }

  const std::filesystem::path dir;
  std::string model;
};

// SIGKILL and reap; a no-op for pid <= 0.
inline void Kill(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  WaitExit(pid, std::chrono::seconds(10));
}

// The port of "listening on http://HOST:PORT" in a server's log, or -1.
inline int ListeningPort(const std::string& log) {
  const std::string mark = "listening on http://";
  const size_t at = log.find(mark);
  if (at == std::string::npos) return -1;
  const size_t space = log.find(' ', at + mark.size());
  const size_t colon = log.rfind(':', space);
  if (space == std::string::npos || colon == std::string::npos || colon < at) return -1;
  return std::atoi(log.substr(colon + 1, space - colon - 1).c_str());
}

// Waits until the `strata serve` process `pid`, logging to `log`, says
// "ready in" and names its port: the port, or -1 when it exited or
// `timeout` passed first.
inline int WaitReady(pid_t pid, const std::string& log,
                     std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    const std::string text = ReadAll(log);
    if (text.find("ready in") != std::string::npos) {
      if (const int port = ListeningPort(text); port > 0) return port;
    }
    if (WaitExit(pid, std::chrono::milliseconds(0)) >= 0) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

}  // namespace strata::testing
